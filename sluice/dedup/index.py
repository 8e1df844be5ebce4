"""The global dedup index: the exact hash and the LSH band keys of every indexed document, kept or removed.

Layout under `dedup_index/minhash=<digest of the MinHash settings and shard count>/`:

- `_manifest.json`: `partitions` (key -> digest of its signatures, documents), `runs` (each: `level`,
  `members`, `digest`, per table one file), `deltas` (key -> its file per table), `shards`, `fanout`,
  `max_deltas`, `format`.
- `table=exact/`: `key` uint64 (high 64 bits of the 128-bit text hash), `lo` uint64 (low 64 bits),
  `part` uint64 (the partition: `partition_id` of its key), `doc` int64, `doc_id`; sorted by (key, lo, part, doc).
- `table=bands/`: `key` uint64 (LSH band hash), `band` uint8, `part`, `doc`; sorted by (key, band, part, doc).
  Fixed-width columns only (but doc_id): reading, sorting and writing runs never touches a string per row.
  - `run-<digest>.parquet`: the rows of a run's member partitions. The key space is cut into `shards` hash
    ranges (the key's top log2(shards) bits); a run's row groups never straddle two ranges, so a probe
    reads only the row groups of the ranges its keys hit, and a merge holds one range in memory at a time.
  - `delta-<digest>.parquet`: one partition's rows.
  - `<run or delta>.keys`: the file's `key` column as raw little-endian uint64, in row order (a local probe
    binary-searches it memory-mapped instead of reading the key column).
  - `<run or delta>.rows`: the file's other fixed-width columns (`ROW_FIELDS`: exact `lo`, `part`, `doc`;
    bands `band`, `part`, `doc`) as packed little-endian records, in row order: a local probe that needs no
    `doc_id` gathers its matching rows from it memory-mapped and never opens the Parquet file (whose footer
    alone, row groups x columns, grows with the run: 9 MB and 0.15 s to parse at 10^8 band rows). Runs
    written before it existed have none and are read from Parquet.

**Canonical leveled layout.** With the N indexed partitions in the global order, T = max_deltas and F =
fanout: the last N mod T partitions are deltas; the others form b = N div T batches of T, and with b = sum
d_i F^i (base-F digits), level i is one run of d_i F^i batches (highest level first, on the earliest
partitions). The layout is a function of the set of indexed partitions (and their signatures) alone, not of
the order of insertion, so runs launched concurrently leave the same bytes as sequential ones.

**Cost per new partition.** A run is rewritten only when its digit changes: a partition's rows are
rewritten at most F - 1 times per level, and there are log_F(N / T) levels, so the amortized merge work per
new partition grows as log(history), not as history (a two-level base + deltas layout rewrites the whole
base every T partitions: O(N / T) per partition). A merge is one executor task per changed run and table.

**Probes** read the manifest, then per table every run and the deltas of partitions ordered before the
probing one: at most 1 + 2 x (levels + T) files, levels = log_F(N / T) (3 at N = 1,000 with F = T = 8; 5 at
N = 100,000). On a local store a probe finds its matches by binary search in each file's memory-mapped key
file (one more open per file; pages touched grow as probe keys x log rows, not as the index), then gathers
the matching rows from its memory-mapped `.rows` file where it needs no `doc_id` (the Parquet file is not
opened), else reads the other columns of the row groups holding matches only. On S3 (no `.rows` file read) a
probe makes ranged GETs, a constant number per file (`_read_run_ranged`): the footer (its size is in the
manifest), then only the row groups whose key range holds a probe key: their rows of the key file and the
other columns of the groups holding matches, or the groups whole where the key column is most of their bytes
(bands); of the columns asked for only. A probe of a few keys (a trace, a small partition) reads a few row
groups; a partition's band probe, thousands of random keys, hits every row group of a run at today's sizes
(a group holds 4,096 rows), so its bytes still grow with the index: with a constant number of requests per
run, a sorted run of N random keys cannot be probed for k random keys in fewer than ~8 x N bytes unless N /
k exceeds the bytes a request is worth (MB), and a request per row group hit would make requests grow with
the partition instead. Rows of partitions ordered at or after the probing partition are ignored, so a
partition's probe result never depends on what was indexed later or concurrently. A partition indexed out of
order (before already indexed ones) shifts the runs after it: they are rebuilt.

**Writes** must not run concurrently (two writers would each publish a manifest without the other's
partition): the `dedup_index` asset runs them under a Dagster concurrency pool of limit 1. A writer
publishes by writing the manifest (one PUT / rename) and then deletes the files it no longer references; a
reader that finds a referenced file gone re-reads the manifest and retries. An index of format 1 (a base
cut into shard files + deltas) is re-laid out by the first insert.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from sluice.config import DedupSettings, S3Settings
from sluice.dedup.ranges import band_rows_between, exact_rows_between
from sluice.dedup.runs import (  # noqa: F401 (re-exported)
    FOOTER_READ,
    HOLE,
    MAX_RANGES,
    ROW_FIELDS,
    RangedFile,
    coalesce,
    footer_size,
    read_run,
)
from sluice.dedup.schemas import (  # noqa: F401 (shard_of, shard_bounds re-exported)
    INDEX,
    SIGNATURES,
    absent,
    hash_halves,
    identity_digest,
    minhash_identity,
    order_of,
    parquet_file,
    shard_bounds,
    shard_of,
)
from sluice.dedup.signatures import signatures_digest
from sluice.io.layout import (
    MANIFEST,
    PARQUET_OPTIONS,
    PartitionRef,
    groups_between,
    partition_prefix,
    read_manifest,
    sha256_file,
)
from sluice.io.storage import StorageError, Store, StoreSpec, is_s3, local_temp_dir
from sluice.runtime.compute import Executor

FORMAT = 2
TABLES = ("exact", "bands")
SCHEMAS = {
    "exact": pa.schema(
        [
            pa.field("key", pa.uint64(), nullable=False),
            pa.field("lo", pa.uint64(), nullable=False),
            pa.field("part", pa.uint64(), nullable=False),
            pa.field("doc", pa.int64(), nullable=False),
            pa.field("doc_id", pa.string(), nullable=False),
        ]
    ),
    "bands": pa.schema(
        [
            pa.field("key", pa.uint64(), nullable=False),
            pa.field("band", pa.uint8(), nullable=False),
            pa.field("part", pa.uint64(), nullable=False),
            pa.field("doc", pa.int64(), nullable=False),
        ]
    ),
}
SORT = {"exact": ["key", "lo", "part", "doc"], "bands": ["key", "band", "part", "doc"]}
MATCH = {"exact": ["key", "lo"], "bands": ["key", "band"]}
# Run files: row groups of at most ROW_GROUP rows (a probe reads whole row groups only where a key matches:
# small groups keep those reads small, more groups a larger footer); dictionary encoding for the partition
# id only (keys are random hashes, document ids unique).
ROW_GROUP = 1 << 12
WRITE = {
    "use_dictionary": ["part"],
    # Hashes do not compress; stored raw, a probe's read of the key column is a copy (5x faster than zstd).
    "compression": {"key": "none", "lo": "none", "band": "zstd", "part": "zstd", "doc": "zstd", "doc_id": "zstd"},
    "compression_level": {"band": 3, "part": 3, "doc": 3, "doc_id": 3},
}


def partition_id(key: str) -> int:
    """A partition's id in index rows: 64 bits of xxh3 of its key (`source/snapshot`)."""
    return xxhash.xxh3_64_intdigest(key.encode())


def partition_table(keys: Iterable[str]) -> pl.DataFrame:
    """(part, partition, snapshot, source) of these partition keys: what index rows' `part` stands for."""
    keys = sorted(set(keys))
    orders = [order_of(key) for key in keys]
    return pl.DataFrame(
        {"part": [partition_id(key) for key in keys], "partition": keys, "snapshot": [o[0] for o in orders], "source": [o[1] for o in orders]},
        schema={"part": pl.UInt64, "partition": pl.String, "snapshot": pl.String, "source": pl.String},
    )
READ_ATTEMPTS = 3


def _before(key: str, ref: PartitionRef | None) -> bool:
    """Whether partition `key` counts in a probe by `ref`: ordered before it (None: every partition)."""
    return ref is None or order_of(key) < ref.sort_key()


class IndexIncomplete(RuntimeError):
    """Partitions ordered before the one being deduplicated are not in the index yet."""


def empty(table: str) -> pl.DataFrame:
    return pl.from_arrow(SCHEMAS[table].empty_table())  # type: ignore[return-value]


def partition_rows(signatures: pl.DataFrame, ref: PartitionRef) -> dict[str, pl.DataFrame]:
    """The index rows of one partition from its signatures (doc, doc_id, text_hash, bands), sorted."""
    hi, lo = hash_halves(signatures["text_hash"].to_arrow())
    exact = pl.DataFrame(
        {"key": hi, "lo": lo, "part": partition_id(ref.key), "doc": signatures["doc"], "doc_id": signatures["doc_id"]},
        schema={"key": pl.UInt64, "lo": pl.UInt64, "part": pl.UInt64, "doc": pl.Int64, "doc_id": pl.String},
    )
    with_words = signatures.filter(pl.col("bands").is_not_null())
    bands = empty("bands")
    if with_words.height:
        matrix = with_words["bands"].to_numpy()
        matrix = np.stack(matrix) if matrix.dtype == object else matrix
        count = matrix.shape[1]
        bands = pl.DataFrame(
            {
                "key": matrix.reshape(-1).astype(np.uint64),
                "band": np.tile(np.arange(count, dtype=np.uint8), with_words.height),
                "part": partition_id(ref.key),
                "doc": np.repeat(with_words["doc"].to_numpy(), count),
            },
            schema={"key": pl.UInt64, "band": pl.UInt8, "part": pl.UInt64, "doc": pl.Int64},
        )
    return {"exact": exact.sort(SORT["exact"]), "bands": bands.sort(SORT["bands"])}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Source:
    """Rows of a run or delta file (relative to the index folder): all, or those of some partitions."""

    key: str
    parts: tuple[int, ...] | None  # partition ids to keep (None: every row)


@dataclass(frozen=True)
class BuildTask:
    """Write one table's run (or delta) file from sources (`build_run`)."""

    root_url: str
    prefix: str  # the index folder
    table: str
    shards: int
    sources: tuple[Source, ...]
    joining: pa.Table  # rows of partitions indexed now (in memory already)
    output: str  # relative to prefix
    s3: S3Settings = field(default_factory=S3Settings)
    signed: tuple[Signed, ...] = ()  # partitions indexed now whose rows are read from their signatures, a range at a time


@dataclass(frozen=True)
class Signed:
    """A partition indexed now, read from its signatures (`sluice.dedup.ranges`) by the build task itself."""

    ref: PartitionRef
    digest: str  # of its signatures manifest (`signatures_digest`): the build refuses another signing

    def manifest(self, store: Store) -> dict[str, Any]:
        prefix = partition_prefix(SIGNATURES, self.ref)
        manifest = read_manifest(store, prefix)
        if manifest is None or signatures_digest(manifest) != self.digest:
            raise StorageError(f"{store.uri(prefix)} changed while {self.ref.key} was being indexed; index it again")
        return manifest

    def rows(self, store: Store, manifest: dict[str, Any], table: str, low: int, high: int) -> pl.DataFrame:
        """Its index rows of `table` with a key in [low, high] (SCHEMAS[table] columns)."""
        part = pl.lit(partition_id(self.ref.key), pl.UInt64).alias("part")
        if table == "exact":
            return exact_rows_between(store, self.ref, manifest, low, high).select("key", "lo", part, "doc", "doc_id")
        return band_rows_between(store, self.ref, manifest, low, high).select(pl.col("hash").alias("key"), "band", part, "doc")


def _range_rows(parquet: pq.ParquetFile, low: int, high: int) -> pa.Table | None:
    """The rows of a sorted run whose key is in [low, high] (row groups outside the range not read)."""
    groups = groups_between(parquet.metadata, low, high)
    if not groups:
        return None
    table = parquet.read_row_groups(groups)
    keys = table.column("key")
    return table.filter(pc.and_(pc.greater_equal(keys, pa.scalar(low, pa.uint64())), pc.less_equal(keys, pa.scalar(high, pa.uint64()))))


def build_run(task: BuildTask) -> dict[str, Any] | None:
    """Merge the sources and joining rows into one sorted file, one hash range at a time (memory: one
    range's rows); None when there is no row."""
    store = StoreSpec(task.root_url, task.s3).open()
    joining = pl.from_arrow(task.joining)
    shard = pl.Series(shard_of(joining["key"].to_numpy(), task.shards)) if joining.height else pl.Series([], dtype=pl.Int64)  # type: ignore[index]
    options = {**PARQUET_OPTIONS, **WRITE}
    rows = 0
    with contextlib.ExitStack() as stack:
        sources = [(stack.enter_context(parquet_file(store, f"{task.prefix}/{source.key}")), source.parts) for source in task.sources]
        scratch = local_temp_dir()
        stack.callback(shutil.rmtree, scratch, True)
        path = os.path.join(scratch, "run.parquet")
        writer = stack.enter_context(pq.ParquetWriter(path, SCHEMAS[task.table], **options))
        keys_path = os.path.join(scratch, "run.keys")
        keys_out = stack.enter_context(open(keys_path, "wb"))
        rows_path = os.path.join(scratch, "run.rows")
        rows_out = stack.enter_context(open(rows_path, "wb"))
        signed = [(source, source.manifest(store)) for source in task.signed]
        for number in range(task.shards):
            low, high = shard_bounds(number, task.shards)
            frames = [empty(task.table), joining.filter(shard == number)]  # type: ignore[arg-type]
            frames += [source.rows(store, manifest, task.table, low, high) for source, manifest in signed]
            for parquet, parts in sources:
                table = _range_rows(parquet, low, high)
                if table is not None:
                    frame = pl.from_arrow(table)
                    frames.append(frame if parts is None else frame.filter(pl.col("part").is_in(parts)))  # type: ignore[union-attr]
            merged = pl.concat(frames).sort(SORT[task.table])  # type: ignore[arg-type]
            if merged.height:
                writer.write_table(merged.to_arrow().cast(SCHEMAS[task.table]), row_group_size=ROW_GROUP)
                keys_out.write(merged["key"].to_numpy().astype("<u8").tobytes())
                records = np.empty(merged.height, ROW_FIELDS[task.table])
                for name in records.dtype.names:
                    records[name] = merged[name].to_numpy()
                rows_out.write(records.tobytes())
                rows += merged.height
        writer.close()
        keys_out.close()
        rows_out.close()
        if not rows:
            return None
        keys_key = task.output.removesuffix(".parquet") + ".keys"
        keys = {"key": keys_key, "bytes": os.path.getsize(keys_path), "sha256": sha256_file(keys_path)}
        rows_key = task.output.removesuffix(".parquet") + ".rows"
        rows_entry = {"key": rows_key, "bytes": os.path.getsize(rows_path), "sha256": sha256_file(rows_path)}
        entry = {
            "key": task.output, "rows": rows, "bytes": os.path.getsize(path), "footer": footer_size(path), "sha256": sha256_file(path),
            "keys": keys, "row_file": rows_entry,
        }
        store.put_file(keys_path, f"{task.prefix}/{keys_key}")
        store.put_file(rows_path, f"{task.prefix}/{rows_key}")
        store.put_file(path, f"{task.prefix}/{task.output}")
    return entry


@dataclass(frozen=True)
class IndexEntry:
    """A partition to index: its rows (a function: read only when needed) and the digest identifying them.
    `from_signatures`: the build tasks read its rows from its published signatures (`digest` is their
    `signatures_digest`), one hash range at a time, and `rows` is not called: no process holds them all."""

    ref: PartitionRef
    digest: str
    rows: Callable[[], dict[str, pl.DataFrame]] | None
    documents: int
    from_signatures: bool = False


class DedupIndex:
    """The global index of one MinHash configuration in a store (see the module docstring)."""

    def __init__(self, store: Store, settings: DedupSettings, s3: S3Settings | None = None) -> None:
        self.store = store
        self.settings = settings
        self.s3 = s3 or S3Settings()
        # Another shard count is another index (its files are cut differently).
        self.prefix = f"{INDEX}/minhash={identity_digest({**minhash_identity(settings), 'shards': settings.index_shards})}"

    # --- reading -----------------------------------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        key = f"{self.prefix}/{MANIFEST}"
        try:
            return json.loads(self.store.read_bytes(key))
        except (FileNotFoundError, StorageError) as error:
            absent(self.store, key, error)
        return {"format": FORMAT, "minhash": minhash_identity(self.settings), **self._shape(), "partitions": {}, "runs": [], "deltas": {}}

    def _shape(self) -> dict[str, int]:
        return {"shards": self.settings.index_shards, "fanout": self.settings.index_fanout, "max_deltas": self.settings.index_max_deltas}

    def missing(self, expected: Iterable[PartitionRef], manifest: dict[str, Any] | None = None) -> list[str]:
        """Keys of the `expected` partitions that are not indexed."""
        indexed = (manifest or self.manifest())["partitions"]
        return sorted((ref.key for ref in expected if ref.key not in indexed), key=order_of)

    def probe(
        self, table: str, keys: pl.DataFrame, ref: PartitionRef | None, manifest: dict[str, Any] | None = None, executor: Executor | None = None,
        columns: list[str] | None = None,
    ) -> pl.DataFrame:
        """Every indexed row of `table` matching `keys` (columns MATCH[table]) of a partition ordered before `ref`
        (None: of every indexed partition, as a trace asks), with that partition's key, snapshot and source,
        in the order of (MATCH[table], the global order). `columns`: the index columns wanted (MATCH[table],
        `part` and `doc` always come; None: all); without `doc_id`, a local probe reads no Parquet file."""
        if columns is not None:
            columns = list(dict.fromkeys([*MATCH[table], "part", "doc", *columns]))
        for attempt in range(READ_ATTEMPTS):
            current = manifest if manifest is not None and attempt == 0 else self.manifest()
            try:
                return self._probe(table, keys, ref, current, executor, columns)
            except (FileNotFoundError, StorageError):
                if attempt == READ_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def runs(self, table: str, keys: np.ndarray, ref: PartitionRef | None, manifest: dict[str, Any]) -> list[dict[str, Any]]:
        """The file entries (`key` relative to the index folder, `keys` its key file) a probe of these keys
        (uint64) by `ref` must read."""
        return [files[table] for files, members in _runs_of(manifest) if files.get(table) and _before(members[0], ref)]

    def _probe(
        self, table: str, keys: pl.DataFrame, ref: PartitionRef | None, manifest: dict[str, Any], executor: Executor | None, columns: list[str] | None = None,
    ) -> pl.DataFrame:
        keys = keys.select(MATCH[table]).unique().sort(MATCH[table])
        probe_keys = np.unique(keys["key"].to_numpy())
        runs = self.runs(table, probe_keys, ref, manifest)
        names = partition_table(key for key in manifest["partitions"] if _before(key, ref))
        none = empty(table).select(columns or SCHEMAS[table].names)
        if not runs or not len(probe_keys) or not names.height:
            return none.join(names, on="part")
        parts = tuple(names["part"].to_list())
        side = lambda run, name: f"{self.prefix}/{run[name]['key']}" if name in run else None  # noqa: E731
        tasks = [
            ProbeTask(
                self.store.uri(), f"{self.prefix}/{run['key']}", table, keys.to_arrow(), parts, self.s3, side(run, "keys"), run.get("bytes"),
                run.get("footer"), side(run, "row_file"), None if columns is None else tuple(columns),
            )
            for run in runs
        ]
        big = executor is not None and len(probe_keys) >= PROBE_INLINE_BELOW_KEYS
        if big and executor is not None:
            results = executor.map(probe_run, tasks)
        elif is_s3(self.store.url) and len(tasks) > 1:  # the runs' ranged GETs in flight together
            with ThreadPoolExecutor(min(PROBE_THREADS, len(tasks))) as pool:
                results = list(pool.map(lambda task: probe_run(task, self.store), tasks))
        else:
            results = [probe_run(task, self.store) for task in tasks]
        rows = pl.concat([none, *(pl.from_arrow(result) for result in results)])  # type: ignore[misc]
        return rows.join(names, on="part").sort([*MATCH[table], "snapshot", "source", "doc"])

    def first_copies(self, text_hashes: pa.Array | pa.ChunkedArray, ref: PartitionRef, manifest: dict[str, Any] | None = None, executor: Executor | None = None) -> pl.DataFrame:
        """For each of these text hashes indexed by a partition before `ref`: its first document in the
        global order (key, lo, part, doc, doc_id, partition, snapshot, source)."""
        hi, lo = hash_halves(text_hashes)
        return self.first_copies_of(pl.DataFrame({"key": hi, "lo": lo}, schema={"key": pl.UInt64, "lo": pl.UInt64}), ref, manifest, executor)

    def first_copies_of(self, keys: pl.DataFrame, ref: PartitionRef, manifest: dict[str, Any] | None = None, executor: Executor | None = None) -> pl.DataFrame:
        """`first_copies` of text hashes given as their halves (columns key, lo)."""
        rows = self.probe("exact", keys, ref, manifest, executor)
        return rows.group_by("key", "lo", maintain_order=True).first()

    # --- writing (under the dedup_index pool) ------------------------------------------------------

    def insert(
        self, ref: PartitionRef, digest: str, rows: Callable[[], dict[str, pl.DataFrame]], documents: int, executor: Executor | None = None,
        manifest: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Index one partition (its rows from `rows()`, identified by `digest`); a partition already indexed
        with the same digest is left as is. Returns {"changed", "compacted" (a leveled run was rewritten),
        "deltas", "rewritten_rows" (index rows written: the delta and merged runs)}."""
        return self.insert_many([IndexEntry(ref, digest, rows, documents)], executor, manifest)

    def insert_many(self, entries: list[IndexEntry], executor: Executor | None = None, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
        """Index several partitions at once (one layout change). `manifest`: the current one, if read."""
        executor = executor or Executor()
        old = manifest if manifest is not None else self.manifest()
        entries = [e for e in entries if old["partitions"].get(e.ref.key, {}).get("digest") != e.digest]
        same_shape = old.get("format") == FORMAT and all(old.get(k) == v for k, v in self._shape().items())
        if not entries and same_shape:
            self._sweep(old)  # what a writer killed after publishing left behind
            return {"changed": False, "compacted": False, "deltas": len(old["deltas"]), "rewritten_rows": 0}
        partitions = {**old["partitions"], **{e.ref.key: {"digest": e.digest, "documents": e.documents} for e in entries}}
        new = self._layout(partitions)
        reusable = {_digest([run["digest"], "run"]): run["files"] for run in old.get("runs", [])} if old.get("format") == FORMAT else {}
        reusable.update({_digest([d["digest"], key]): d["files"] for key, d in old["deltas"].items()} if old.get("format") == FORMAT else {})
        builds: list[tuple[dict[str, Any], list[str]]] = []  # (the run or delta to fill, its members) to write
        for run in new["runs"]:
            run["files"] = reusable.get(_digest([run["digest"], "run"]))
            builds += [] if run["files"] is not None else [(run, run["members"])]
        for key, delta in new["deltas"].items():
            delta["files"] = reusable.get(_digest([delta["digest"], key]))
            builds += [] if delta["files"] is not None else [(delta, [key])]
        tasks = self._build_tasks(old, entries, builds)
        results = executor.map(build_run, [task for _, task in tasks]) if tasks else []
        for target, _ in builds:
            target["files"] = {}
        for (target, task), result in zip(tasks, results, strict=True):
            target["files"][task.table] = result
        self._publish(new)
        rewritten = sum(result["rows"] for result in results if result is not None)
        return {"changed": True, "compacted": any("level" in target for target, _ in builds), "deltas": len(new["deltas"]), "rewritten_rows": rewritten}

    def _layout(self, partitions: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The canonical leveled layout of these partitions (files filled in by `insert_many`)."""
        shards, fanout, limit = self.settings.index_shards, self.settings.index_fanout, self.settings.index_max_deltas
        ordered = sorted(partitions, key=order_of)
        batches = len(ordered) // limit
        digits = []
        while batches:
            digits.append(batches % fanout)
            batches //= fanout
        runs, start = [], 0
        for level in reversed(range(len(digits))):
            size = digits[level] * fanout**level * limit
            if size:
                members = ordered[start : start + size]
                digest = _digest([shards, [(key, partitions[key]["digest"]) for key in members]])
                runs.append({"level": level, "members": members, "digest": digest, "files": None})
                start += size
        return {
            "format": FORMAT,
            "minhash": minhash_identity(self.settings),
            **self._shape(),
            "partitions": dict(sorted(partitions.items())),
            "runs": runs,
            "deltas": {key: {"digest": partitions[key]["digest"], "files": None} for key in ordered[start:]},
        }

    def _build_tasks(self, old: dict[str, Any], entries: list[IndexEntry], builds: list[tuple[dict[str, Any], list[str]]]) -> list[tuple[dict[str, Any], BuildTask]]:
        """One task per table and run (or delta) to write: its members' rows from the new entries, or from
        the files of `old` that hold them (whole files where every partition of the file is wanted)."""
        new_rows = {e.ref.key: e for e in entries}
        cache: dict[str, dict[str, pl.DataFrame]] = {}
        locations = {table: _locations(old, table) for table in TABLES}
        tasks = []
        for target, members in builds:
            name = f"run-{target['digest'][:24]}" if "level" in target else f"delta-{_digest([members[0], target['digest']])[:24]}"
            for table in TABLES:
                wanted: dict[str, set[str]] = {}
                holders: dict[str, list[str]] = {}
                for key in members:
                    if key in new_rows:
                        continue
                    for file_key, holding in locations[table].get(key, []):
                        wanted.setdefault(file_key, set()).add(key)
                        holders[file_key] = holding
                sources = tuple(
                    Source(file_key, None if set(holders[file_key]) == keys else tuple(sorted(partition_id(key) for key in keys)))
                    for file_key, keys in sorted(wanted.items())
                )
                joining_keys = [key for key in members if key in new_rows and not new_rows[key].from_signatures]
                for key in joining_keys:
                    if key not in cache:
                        cache[key] = new_rows[key].rows()  # type: ignore[misc]
                joining = pl.concat([empty(table), *(cache[key][table] for key in joining_keys)])
                signed = tuple(Signed(new_rows[key].ref, new_rows[key].digest) for key in members if key in new_rows and new_rows[key].from_signatures)
                output = f"table={table}/{name}.parquet"
                task = BuildTask(
                    self.store.uri(), self.prefix, table, self.settings.index_shards, sources, joining.to_arrow().cast(SCHEMAS[table]), output, self.s3, signed,
                )
                tasks.append((target, task))
        return tasks

    def _publish(self, manifest: dict[str, Any]) -> None:
        body = json.dumps(manifest, indent=1, sort_keys=True).encode()
        self.store.write_bytes(f"{self.prefix}/{MANIFEST}", body)
        if self.store.read_bytes(f"{self.prefix}/{MANIFEST}") != body:  # only without the pool (see the module docstring)
            raise StorageError(f"{self.store.uri(self.prefix)}: another writer replaced the index manifest; run dedup_index under its concurrency pool")
        self._sweep(manifest)

    def _sweep(self, manifest: dict[str, Any]) -> None:
        """Delete the files of the index folder `manifest` does not reference (replaced runs and what killed
        writers left)."""
        referenced = {MANIFEST}
        for table in TABLES:
            referenced.update(files[table]["key"] for files, _ in _runs_of(manifest) if files.get(table))
            for side in ("keys", "row_file"):
                referenced.update(files[table][side]["key"] for files, _ in _runs_of(manifest) if files.get(table) and side in files[table])
        self.store.remove_stale_temp(self.prefix)
        stale = [key for key in self.store.list_files(self.prefix) if key[len(self.prefix) + 1 :] not in referenced]
        self.store.delete(stale)


def _runs_of(manifest: dict[str, Any]) -> list[tuple[dict[str, Any], list[str]]]:
    """(files per table, member partitions) of every run and delta of a manifest, in the global order of
    their first member (format 1: each base shard file as a run of the base members)."""
    if manifest.get("format", 1) == 1:
        members = manifest["base"]["members"]
        count = max((len(files) for files in manifest["base"]["files"].values()), default=0)
        runs = [({t: (files[i] if i < len(files) else None) for t, files in manifest["base"]["files"].items()}, members) for i in range(count)]
    else:
        runs = [(run["files"], run["members"]) for run in manifest["runs"]]
    deltas = sorted(((d["files"], [key]) for key, d in manifest["deltas"].items()), key=lambda item: order_of(item[1][0]))
    return runs + deltas


def _locations(manifest: dict[str, Any], table: str) -> dict[str, list[tuple[str, list[str]]]]:
    """Partition key -> the files of `table` holding its rows, each with every partition that file holds."""
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for files, members in _runs_of(manifest):
        if files.get(table):
            for key in members:
                out.setdefault(key, []).append((files[table]["key"], members))
    return out


# Probes with at least this many distinct keys read their runs in executor tasks; smaller ones in process.
PROBE_INLINE_BELOW_KEYS = 1 << 20
PROBE_THREADS = 8  # S3: runs probed at once by smaller probes (threads: their time is waiting for GETs)


@dataclass(frozen=True)
class ProbeTask:
    root_url: str
    key: str  # the run file
    table: str
    keys: pa.Table  # MATCH[table] columns, sorted
    parts: tuple[int, ...]  # ids of the partitions whose rows count (those before the probing one)
    s3: S3Settings = field(default_factory=S3Settings)
    keys_file: str | None = None  # the run's key file (format 1 runs have none)
    size: int | None = None  # the run file's bytes, if known
    footer: int | None = None  # its footer's bytes, if known
    rows_file: str | None = None  # the run's `.rows` file (runs written before it have none)
    columns: tuple[str, ...] | None = None  # the columns wanted (None: all)


def probe_run(task: ProbeTask, store: Store | None = None) -> pa.Table:
    """The rows of one run file matching the probe keys, of the partitions `task.parts`."""
    store = store or StoreSpec(task.root_url, task.s3).open()
    keys = pl.from_arrow(task.keys)
    columns = list(task.columns) if task.columns is not None else SCHEMAS[task.table].names  # named: a `.rows` gather needs them
    rows = read_run(store, task.key, keys["key"].to_numpy(), task.keys_file, task.size, task.footer, task.rows_file, task.table, columns)  # type: ignore[index]
    return rows.join(keys, on=MATCH[task.table], how="semi").filter(pl.col("part").is_in(task.parts)).to_arrow()  # type: ignore[arg-type]
