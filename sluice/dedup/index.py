"""The global dedup index: the exact hash and the LSH band keys of every indexed document, kept or removed.

Layout under `dedup_index/minhash=<digest of the MinHash settings>/` (other settings, another index):

- `_manifest.json`: `partitions` (key -> digest of its signatures, documents), `base` (its member
  partitions and, per table, one file per shard), `deltas` (key -> its file per table), `shards`,
  `max_deltas`, `format`.
- `table=exact/`: `key` uint64 (high 64 bits of the 128-bit text hash), `lo` uint64 (low 64 bits),
  `part` uint64 (the partition: `partition_id` of its key), `doc` int64, `doc_id`; sorted by (key, lo, part, doc).
- `table=bands/`: `key` uint64 (LSH band hash), `band` uint8, `part`, `doc`; sorted by (key, band, part, doc).
  Fixed-width columns only (but doc_id): reading, sorting and writing runs never touches a string per row.
  - `base-<digest>-<shard>.parquet`: the base partitions' rows whose key falls in the shard (the key's top
    log2(shards) bits: hash-range sharding);
  - `delta-<digest>.parquet`: one partition's rows, all shards.

**Canonical two-level layout.** With the N indexed partitions in the global order and T = max_deltas, the
base holds the first N - N mod T of them and each of the others is a delta. The layout is a function of the
set of indexed partitions (and their signatures) alone, not of the order in which they were inserted, so
runs launched concurrently leave the same bytes as sequential ones. The base is rebuilt every T insertions
(one executor task per table and shard: a shard's base file and the joining partitions' rows in it, sorted).

**Probes** read the manifest, then per table the base files of the shards their keys fall in and the deltas
of partitions ordered before the probing one (row groups whose key range holds no probe key are skipped;
on S3 a file is one GET): at most 1 + 2 x (shards + T) storage requests, whatever the number of partitions.
Rows of partitions ordered at or after the probing partition are ignored, so a partition's probe result
never depends on what was indexed later or concurrently.

**Writes** must not run concurrently (two writers would each publish a manifest without the other's
partition): the `dedup_index` asset runs them under a Dagster concurrency pool of limit 1. A writer
publishes by writing the manifest (one PUT / rename) and then deletes the files it no longer references; a
reader that finds a referenced file gone re-reads the manifest and retries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import xxhash

from sluice.compute import Executor
from sluice.config import DedupSettings, S3Settings
from sluice.dedup.schemas import (
    INDEX,
    absent,
    hash_halves,
    identity_digest,
    minhash_identity,
    order_of,
    parquet_file,
)
from sluice.layout import MANIFEST, PartitionRef, write_parquet
from sluice.storage import StorageError, Store, StoreSpec

FORMAT = 1
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
# Run files: row groups of ROW_GROUP rows (a probe reads the key column of the row groups its keys can hit,
# and whole row groups only where a key matches: small groups keep those reads small); dictionary encoding
# for the partition id only (keys are random hashes, document ids unique).
ROW_GROUP = 1 << 14
WRITE = {
    "row_group_size": ROW_GROUP,
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


def shard_of(keys: np.ndarray, shards: int) -> np.ndarray:
    bits = shards.bit_length() - 1
    return (np.asarray(keys, np.uint64) >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(len(keys), np.int64)


def read_run(store: Store, key: str, probe_keys: np.ndarray | None = None) -> pl.DataFrame:
    """A run file's rows: all of them, or (with `probe_keys`,
    sorted uint64) exactly those whose key is a probe key. A probe reads the `key` column of the row groups
    whose key range holds a probe key, finds the matches by binary search, and reads the other columns of
    the row groups holding matches only. On a local store only those row groups are read; on S3 the file is
    one GET."""
    with parquet_file(store, key) as parquet:
        groups, sizes = [], []
        for group in range(parquet.num_row_groups):
            metadata = parquet.metadata.row_group(group)
            stats = metadata.column(0).statistics
            low, high = (int(stats.min), int(stats.max)) if stats is not None and stats.has_min_max else (0, (1 << 64) - 1)
            if probe_keys is not None:
                at = int(np.searchsorted(probe_keys, np.uint64(low)))
                if at >= len(probe_keys) or int(probe_keys[at]) > high:
                    continue
            groups.append(group)
            sizes.append(metadata.num_rows)
        if probe_keys is None or not groups:
            return pl.from_arrow(parquet.read_row_groups(groups) if groups else parquet.schema_arrow.empty_table())  # type: ignore[return-value]
        keys = parquet.read_row_groups(groups, columns=["key"]).column("key").to_numpy()
        first, last = np.searchsorted(keys, probe_keys, "left"), np.searchsorted(keys, probe_keys, "right")
        counts = last - first
        rows = np.repeat(first, counts) + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        if not len(rows):
            return pl.from_arrow(parquet.schema_arrow.empty_table())  # type: ignore[return-value]
        ends = np.cumsum(sizes)
        which = np.searchsorted(ends, rows, side="right")  # index into `groups` of each matching row
        needed = np.unique(which)
        table = parquet.read_row_groups([groups[i] for i in needed])
    offsets = np.zeros(len(groups), dtype=np.int64)  # first row of each needed group in `table`
    offsets[needed] = np.concatenate([[0], np.cumsum(np.asarray(sizes)[needed])[:-1]])
    positions = offsets[which] + rows - (ends[which] - np.asarray(sizes)[which])
    return pl.from_arrow(table.take(pa.array(positions)))  # type: ignore[return-value]


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class CompactTask:
    """Build one table's base file for one shard (`compact_shard`)."""

    root_url: str
    prefix: str  # the index folder
    table: str
    shard: int
    old_base: str | None  # the previous base file of this shard (relative to prefix)
    keep: tuple[str, ...] | None  # partitions of the old base to keep (None: all of them)
    joining: pa.Table  # the rows of the partitions joining the base that fall in this shard
    output: str  # relative to prefix
    s3: S3Settings = field(default_factory=S3Settings)


def compact_shard(task: CompactTask) -> dict[str, Any] | None:
    """Merge the kept rows of a shard's old base file with the joining rows; publish the sorted result
    (None when the shard is empty)."""
    store = StoreSpec(task.root_url, task.s3).open()
    frames = [empty(task.table), pl.from_arrow(task.joining)]
    if task.old_base is not None:
        rows = read_run(store, f"{task.prefix}/{task.old_base}")
        if task.keep is not None:
            rows = rows.filter(pl.col("part").is_in([partition_id(key) for key in task.keep]))
        frames.append(rows)
    rows = pl.concat(frames).sort(SORT[task.table])  # type: ignore[arg-type]
    if rows.height == 0:
        return None
    entry = write_parquet(store, f"{task.prefix}/{task.output}", rows.to_arrow().cast(SCHEMAS[task.table]), **WRITE)
    return {**entry, "key": task.output, "shard": task.shard}


@dataclass(frozen=True)
class IndexEntry:
    """A partition to index: its rows (a function: read only when needed) and the digest identifying them."""

    ref: PartitionRef
    digest: str
    rows: Callable[[], dict[str, pl.DataFrame]]
    documents: int


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
        return {
            "format": FORMAT, "minhash": minhash_identity(self.settings), "shards": self.settings.index_shards,
            "max_deltas": self.settings.index_max_deltas, "partitions": {}, "base": {"members": [], "files": {t: [] for t in TABLES}}, "deltas": {},
        }

    def missing(self, expected: Iterable[PartitionRef], manifest: dict[str, Any] | None = None) -> list[str]:
        """Keys of the `expected` partitions that are not indexed."""
        indexed = (manifest or self.manifest())["partitions"]
        return sorted((ref.key for ref in expected if ref.key not in indexed), key=order_of)

    def probe(
        self, table: str, keys: pl.DataFrame, ref: PartitionRef | None, manifest: dict[str, Any] | None = None, executor: Executor | None = None
    ) -> pl.DataFrame:
        """Every indexed row of `table` matching `keys` (columns MATCH[table]) of a partition ordered before `ref`
        (None: of every indexed partition, as a trace asks), with that partition's key, snapshot and source,
        in the order of (MATCH[table], the global order)."""
        for attempt in range(READ_ATTEMPTS):
            current = manifest if manifest is not None and attempt == 0 else self.manifest()
            try:
                return self._probe(table, keys, ref, current, executor)
            except (FileNotFoundError, StorageError):
                if attempt == READ_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def runs(self, table: str, keys: np.ndarray, ref: PartitionRef | None, manifest: dict[str, Any]) -> list[str]:
        """The files (relative to the index folder) a probe of these keys (uint64) by `ref` must read."""
        shards = set(shard_of(keys, manifest["shards"]).tolist())
        runs = [entry["key"] for entry in manifest["base"]["files"][table] if entry["shard"] in shards]
        for key, delta in sorted(manifest["deltas"].items(), key=lambda item: order_of(item[0])):
            if _before(key, ref) and delta["files"].get(table) is not None:
                runs.append(delta["files"][table]["key"])
        return runs

    def _probe(self, table: str, keys: pl.DataFrame, ref: PartitionRef | None, manifest: dict[str, Any], executor: Executor | None) -> pl.DataFrame:
        keys = keys.select(MATCH[table]).unique().sort(MATCH[table])
        probe_keys = np.unique(keys["key"].to_numpy())
        runs = self.runs(table, probe_keys, ref, manifest)
        names = partition_table(key for key in manifest["partitions"] if _before(key, ref))
        if not runs or not len(probe_keys) or not names.height:
            return empty(table).join(names, on="part")
        parts = tuple(names["part"].to_list())
        tasks = [ProbeTask(self.store.uri(), f"{self.prefix}/{run}", table, keys.to_arrow(), parts, self.s3) for run in runs]
        big = executor is not None and len(probe_keys) >= PROBE_INLINE_BELOW_KEYS
        results = executor.map(probe_run, tasks) if big and executor is not None else [probe_run(task, self.store) for task in tasks]
        rows = pl.concat([empty(table), *(pl.from_arrow(result) for result in results)])  # type: ignore[misc]
        return rows.join(names, on="part").sort([*MATCH[table], "snapshot", "source", "doc"])

    def first_copies(self, text_hashes: pa.Array | pa.ChunkedArray, ref: PartitionRef, manifest: dict[str, Any] | None = None, executor: Executor | None = None) -> pl.DataFrame:
        """For each of these text hashes indexed by a partition before `ref`: its first document in the
        global order (key, lo, part, doc, doc_id, partition, snapshot, source)."""
        hi, lo = hash_halves(text_hashes)
        keys = pl.DataFrame({"key": hi, "lo": lo}, schema={"key": pl.UInt64, "lo": pl.UInt64})
        rows = self.probe("exact", keys, ref, manifest, executor)
        return rows.group_by("key", "lo", maintain_order=True).first()

    # --- writing (under the dedup_index pool) ------------------------------------------------------

    def insert(
        self, ref: PartitionRef, digest: str, rows: Callable[[], dict[str, pl.DataFrame]], documents: int, executor: Executor | None = None,
        manifest: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Index one partition (its rows from `rows()`, identified by `digest`); a partition already indexed
        with the same digest is left as is. Returns {"changed", "compacted", "deltas"}."""
        return self.insert_many([IndexEntry(ref, digest, rows, documents)], executor, manifest)

    def insert_many(self, entries: list[IndexEntry], executor: Executor | None = None, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
        """Index several partitions at once (at most one base rebuild). `manifest`: the current one, if read."""
        executor = executor or Executor()
        old = manifest if manifest is not None else self.manifest()
        entries = [e for e in entries if old["partitions"].get(e.ref.key, {}).get("digest") != e.digest]
        if not entries and old["max_deltas"] == self.settings.index_max_deltas:
            self._sweep(old)  # what a writer killed after publishing left behind
            return {"changed": False, "compacted": False, "deltas": len(old["deltas"])}
        new_rows = {e.ref.key: e for e in entries}
        partitions = {**old["partitions"], **{e.ref.key: {"digest": e.digest, "documents": e.documents} for e in entries}}
        new = self._layout(partitions)
        old_base = set(old["base"]["members"]) - set(new_rows)  # rows still valid in the old base files

        def delta_files(key: str) -> dict[str, Any]:
            """A delta file of `key`: reused, or written from the new rows or from the old base."""
            delta = old["deltas"].get(key)
            if key not in new_rows and delta is not None and delta["digest"] == partitions[key]["digest"]:
                return delta["files"]
            rows = new_rows[key].rows() if key in new_rows else self._extract(old, key)
            return self._write_delta(key, partitions[key]["digest"], rows)

        for key in new["deltas"]:
            new["deltas"][key]["files"] = delta_files(key)
        compacted = new["base"]["digest"] != old["base"].get("digest")
        if compacted:
            # The rows of the partitions joining the base: from their delta files where they have one, else
            # from the new entries or the old base.
            joining = []
            for key in new["base"]["members"]:
                if key in old_base:
                    continue
                delta = old["deltas"].get(key)
                if key not in new_rows and delta is not None and delta["digest"] == partitions[key]["digest"]:
                    joining.append({t: read_run(self.store, f"{self.prefix}/{f['key']}") if f else empty(t) for t, f in delta["files"].items()})
                else:
                    joining.append(new_rows[key].rows() if key in new_rows else self._extract(old, key))
            rows = {table: pl.concat([empty(table), *(j[table] for j in joining)]) for table in TABLES}
            kept = old_base & set(new["base"]["members"])
            new["base"]["files"] = self._compact(old, new, None if kept == set(old["base"]["members"]) else kept, rows, executor)
        else:
            new["base"]["files"] = old["base"]["files"]
        self._publish(new)
        return {"changed": True, "compacted": compacted, "deltas": len(new["deltas"])}

    def _layout(self, partitions: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The canonical layout of these partitions (file entries filled in by `insert`)."""
        shards, limit = self.settings.index_shards, self.settings.index_max_deltas
        ordered = sorted(partitions, key=order_of)
        cut = len(ordered) - len(ordered) % limit
        members = ordered[:cut]
        base_digest = _digest([shards, [(key, partitions[key]["digest"]) for key in members]]) if members else None
        return {
            "format": FORMAT,
            "minhash": minhash_identity(self.settings),
            "shards": shards,
            "max_deltas": limit,
            "partitions": dict(sorted(partitions.items())),
            "base": {"members": members, "digest": base_digest, "files": {t: [] for t in TABLES}},
            "deltas": {key: {"digest": partitions[key]["digest"], "files": {}} for key in ordered[cut:]},
        }

    def _write_delta(self, key: str, digest: str, rows: dict[str, pl.DataFrame]) -> dict[str, Any]:
        name = _digest([key, digest])[:24]
        files: dict[str, Any] = {}
        for table in TABLES:
            frame = rows[table]
            if frame.height == 0:
                files[table] = None
                continue
            relative = f"table={table}/delta-{name}.parquet"
            entry = write_parquet(self.store, f"{self.prefix}/{relative}", frame.to_arrow().cast(SCHEMAS[table]), **WRITE)
            files[table] = {**entry, "key": relative}
        return files

    def _extract(self, manifest: dict[str, Any], key: str) -> dict[str, pl.DataFrame]:
        """One partition's rows out of the base files of `manifest` (it was a base member)."""
        part = partition_id(key)
        out = {}
        for table in TABLES:
            frames = [empty(table)]
            for entry in manifest["base"]["files"][table]:
                rows = read_run(self.store, f"{self.prefix}/{entry['key']}")
                frames.append(rows.filter(pl.col("part") == part))
            out[table] = pl.concat(frames).sort(SORT[table])
        return out

    def _compact(
        self, old: dict[str, Any], new: dict[str, Any], keep: set[str] | None, joining: dict[str, pl.DataFrame], executor: Executor
    ) -> dict[str, list[dict[str, Any]]]:
        """The new base files: per table and shard, the old base file's rows (of `keep`; None: all) plus the
        joining rows in the shard (one executor task each)."""
        tasks = []
        for table in TABLES:
            old_files = {entry["shard"]: entry["key"] for entry in old["base"]["files"][table]}
            rows = joining[table].with_columns(shard=pl.Series(shard_of(joining[table]["key"].to_numpy(), new["shards"])))
            by_shard = {shard: group.drop("shard") for (shard,), group in rows.partition_by("shard", as_dict=True).items()}
            for shard in range(new["shards"]):
                output = f"table={table}/base-{new['base']['digest'][:24]}-{shard:04d}.parquet"
                part = by_shard.get(shard, empty(table)).to_arrow().cast(SCHEMAS[table])
                old_base = old_files.get(shard) if keep is None or keep else None
                tasks.append(CompactTask(self.store.uri(), self.prefix, table, shard, old_base, None if keep is None else tuple(sorted(keep)), part, output, self.s3))
        files: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
        for task, entry in zip(tasks, executor.map(compact_shard, tasks), strict=True):
            if entry is not None:
                files[task.table].append(entry)
        return files

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
            referenced.update(entry["key"] for entry in manifest["base"]["files"][table])
            referenced.update(files[table]["key"] for files in (d["files"] for d in manifest["deltas"].values()) if files.get(table) is not None)
        self.store.remove_stale_temp(self.prefix)
        stale = [key for key in self.store.list_files(self.prefix) if key[len(self.prefix) + 1 :] not in referenced]
        self.store.delete(stale)


# Probes with at least this many distinct keys read their runs in executor tasks; smaller ones in process.
PROBE_INLINE_BELOW_KEYS = 1 << 20


@dataclass(frozen=True)
class ProbeTask:
    root_url: str
    key: str  # the run file
    table: str
    keys: pa.Table  # MATCH[table] columns, sorted
    parts: tuple[int, ...]  # ids of the partitions whose rows count (those before the probing one)
    s3: S3Settings = field(default_factory=S3Settings)


def probe_run(task: ProbeTask, store: Store | None = None) -> pa.Table:
    """The rows of one run file matching the probe keys, of the partitions `task.parts`."""
    store = store or StoreSpec(task.root_url, task.s3).open()
    keys = pl.from_arrow(task.keys)
    rows = read_run(store, task.key, keys["key"].to_numpy())  # type: ignore[index]
    return rows.join(keys, on=MATCH[task.table], how="semi").filter(pl.col("part").is_in(task.parts)).to_arrow()  # type: ignore[arg-type]
