"""Dedup's shuffle: the band-hash range is the unit of work and of storage (as datatrove's MinHash stages:
signatures -> buckets -> clusters, each a set of tasks over files).

1. **Map** (at signing, `sluice.dedup.signatures.band_sidecar`): each cleaned part's band rows (hash, band, doc) go to its
   `dedup_bands/bands-NNNNN.parquet`, sorted by hash, cut into `dedup.band_ranges` hash ranges (the hash's
   top bits, as the index's shards) whose row groups never straddle two ranges.
2. **Reduce per range** (`range_pairs`, one executor task per range): the range's band rows of every part
   (only the row groups of the range are read), the index probed for them (earlier partitions' first
   bucket members), and `candidate_pairs` over that range's buckets. A bucket (band, hash) lies in one
   range, so the ranges' pairs together are exactly the whole partition's. The task writes its pairs to
   `pairs-RRRRR.parquet` in the partition's `dedup_clusters` folder (deleted when the clusters are
   published), cut again into `band_ranges` pair buckets by the pair's later document (`pair_bucket`).
3. **Pair buckets** (`bucket_pairs`): a pair whose documents share buckets in several ranges is in several
   range files, always in the same pair bucket; one bucket's pairs of every range file, made unique, are
   verified as before (`verify_pairs` tasks) and written as edges. So the run process holds one pair
   bucket at a time, never the partition's band rows. The edge files (`both_ways`) and the exact links
   (`part_bucket`) are bucketed files too (`write_bucketed` / `read_buckets`), for the components
   (`sluice.dedup.stars`) and the clusters writer.

Memory of a range task: its range's band rows, probe results and members, about documents x bands /
band_ranges rows (~17 bytes each stored, a few copies at the peak while sorting and joining).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from sluice.config import DedupSettings, S3Settings
from sluice.dedup.candidates import candidate_pairs, first_members
from sluice.dedup.index import DedupIndex, shard_bounds
from sluice.dedup.minhash import _fmix64
from sluice.dedup.ranges import band_rows_between, exact_rows_between
from sluice.dedup.schemas import (
    CLUSTERS,
    ROW_BITS,
    SHINGLE_ROW_GROUP,
    SIGNATURES,
    PartitionOrdinals,
    parquet_file,
)
from sluice.io.layout import (
    PartitionRef,
    groups_between,
    partition_prefix,
    read_manifest,
    write_parquet_groups,
)
from sluice.io.storage import Store, StoreSpec

PAIRS_ROW_GROUP = 1 << 16
_ROW_GROUP_SHIFT = np.int64(SHINGLE_ROW_GROUP.bit_length() - 1)
PAIRS_FILE_SCHEMA = pa.schema([pa.field("bucket", pa.int32(), nullable=False), pa.field("u", pa.int64(), nullable=False), pa.field("v", pa.int64(), nullable=False)])


REMOVED_DOCS_SCHEMA = pa.schema([pa.field("bucket", pa.int32(), nullable=False), pa.field("doc", pa.int64(), nullable=False)])
EXACT_LINKS_SCHEMA = pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),  # the doc's part range (`part_bucket`)
        pa.field("doc", pa.int64(), nullable=False),
        pa.field("of_partition", pa.string(), nullable=False),
        pa.field("of_doc", pa.int64(), nullable=False),
        pa.field("of_id", pa.string(), nullable=False),
    ]
)


def node_bucket(nodes: np.ndarray, buckets: int) -> np.ndarray:
    """The node-hash bucket of each node."""
    return (_fmix64(np.asarray(nodes, np.int64).astype(np.uint64)) % np.uint64(buckets)).astype(np.int32)


def part_bucket(docs: np.ndarray, parts: int, buckets: int) -> np.ndarray:
    """The part range of each doc of a partition of `parts` parts: contiguous runs of parts, in order."""
    part = np.asarray(docs, np.int64) >> np.int64(ROW_BITS)
    return (part * buckets // max(parts, 1)).astype(np.int32)


def by_first(u: np.ndarray, v: np.ndarray, buckets: int) -> pa.Table:
    """Edges stored under their first node (PAIRS_FILE_SCHEMA rows: bucket of u, u, v)."""
    u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
    return pa.table({"bucket": node_bucket(u, buckets), "u": u, "v": v}, schema=PAIRS_FILE_SCHEMA)


def both_ways(u: np.ndarray, v: np.ndarray, buckets: int) -> pa.Table:
    """Edges stored under both nodes (PAIRS_FILE_SCHEMA rows: bucket of the first node, node, neighbour)."""
    return by_first(np.concatenate([u, v]), np.concatenate([v, u]), buckets)


def exact_links(docs: pl.DataFrame, first: pl.DataFrame, ref: PartitionRef) -> pl.DataFrame:
    """(doc, of_partition, of_doc, of_id): each document (`docs`: key, lo, doc, doc_id) whose text hash
    occurs before it (in an earlier partition: `first`, the index's first copies; or earlier in this
    partition) and that first copy. All copies of a hash lie in one range: a range's links are final."""
    earlier = first.select("key", "lo", of_partition="partition", of_doc="doc", of_id="doc_id")
    here = docs.group_by("key", "lo").agg(pl.col("doc").min().alias("of_doc"), pl.col("doc_id").sort_by("doc").first().alias("of_id"))
    linked = docs.join(earlier, on=["key", "lo"], how="left")
    within = linked.filter(pl.col("of_doc").is_null()).drop("of_partition", "of_doc", "of_id").join(here, on=["key", "lo"])
    within = within.filter(pl.col("of_doc") != pl.col("doc")).with_columns(of_partition=pl.lit(ref.key))
    columns = ["doc", "of_partition", "of_doc", "of_id"]
    return pl.concat([linked.filter(pl.col("of_doc").is_not_null()).select(columns), within.select(columns)]).sort("doc")


def exact_key(ref: PartitionRef, number: int) -> str:
    return f"{partition_prefix(CLUSTERS, ref)}/exact-{number:05d}.parquet"


def exact_edges_key(ref: PartitionRef, number: int) -> str:
    return f"{partition_prefix(CLUSTERS, ref)}/exact-edges-{number:05d}.parquet"


def _range_exact(store: Store, task: RangeTask, manifest: dict[str, Any], low: int, high: int) -> dict[str, Any]:
    """Write the range's exact links twice: cut by the doc's part range (EXACT_LINKS_SCHEMA, for the
    clusters writer) and as graph edges stored under both nodes (for the components). Returns {"exact",
    "exact_edges": the keys (None without links), "exact_rows": links}."""
    docs = exact_rows_between(store, task.ref, manifest, low, high)
    first = DedupIndex(store, task.settings, task.s3).first_copies_of(docs.select("key", "lo"), task.ref)
    links = exact_links(docs, first, task.ref)
    if not links.height:
        return {"exact": None, "exact_edges": None, "exact_rows": 0}
    ranges = task.settings.band_ranges
    links = links.with_columns(bucket=pl.Series(part_bucket(links["doc"].to_numpy(), len(manifest["files"]), ranges), dtype=pl.Int32))
    write_bucketed(store, exact_key(task.ref, task.number), links.select(EXACT_LINKS_SCHEMA.names).to_arrow().cast(EXACT_LINKS_SCHEMA))
    ordinals = PartitionOrdinals(list(task.partitions))
    here = ordinals.ordinal[task.ref.key] << PartitionOrdinals.SHIFT
    of = ordinals.nodes(links, partition="of_partition", doc="of_doc", name="of_node")["of_node"].to_numpy()
    write_bucketed(store, exact_edges_key(task.ref, task.number), both_ways(links["doc"].to_numpy() + here, of, ranges))
    return {"exact": exact_key(task.ref, task.number), "exact_edges": exact_edges_key(task.ref, task.number), "exact_rows": links.height}


@dataclass(frozen=True)
class KeptCheckTask:
    """The no-duplicates check of one text-hash range of a deduplicated partition (`kept_duplicates_in_range`)."""

    root_url: str
    ref: PartitionRef
    number: int
    settings: DedupSettings
    removed_keys: tuple[str, ...]  # the removed positions, cut by text-hash range (sluice.dedup.partition.dedup_part)
    s3: S3Settings = field(default_factory=S3Settings)

    @property
    def label(self) -> str:
        return f"{self.ref.key} hash range {self.number}"


def kept_duplicates_in_range(task: KeptCheckTask) -> tuple[int, dict[str, int]]:
    """(kept documents of the range whose text hash another kept one has, {earlier partition: the range's
    distinct kept hashes the index holds there}); both empty when dedup is right."""
    store = StoreSpec(task.root_url, task.s3).open()
    manifest = read_manifest(store, partition_prefix(SIGNATURES, task.ref))
    if manifest is None:
        raise FileNotFoundError(f"{store.uri(partition_prefix(SIGNATURES, task.ref))} has no manifest: materialize dedup_signatures for {task.ref.key} first")
    rows = exact_rows_between(store, task.ref, manifest, *shard_bounds(task.number, task.settings.band_ranges))
    removed = read_buckets(store, list(task.removed_keys), task.number, REMOVED_DOCS_SCHEMA)["doc"]
    kept = rows.filter(~pl.col("doc").is_in(removed.implode()))
    unique = kept.select("key", "lo").unique()
    first = DedupIndex(store, task.settings, task.s3).first_copies_of(unique, task.ref)
    return kept.height - unique.height, dict(first["partition"].value_counts().iter_rows())


def pair_bucket(v: np.ndarray, buckets: int) -> np.ndarray:
    """The pair bucket of pairs by their later node: a hash of v's shingle row group (the pairs of one
    sidecar row group stay together, so verification reads each row group as often as before)."""
    groups = (np.asarray(v, np.int64) >> _ROW_GROUP_SHIFT).astype(np.uint64)
    return (_fmix64(groups) % np.uint64(buckets)).astype(np.int32)


@dataclass(frozen=True)
class RangeTask:
    """Candidate pairs of one band-hash range of a partition (`range_pairs`)."""

    root_url: str
    ref: PartitionRef
    number: int  # the range
    settings: DedupSettings
    partitions: tuple[str, ...]  # the node ordinals' partitions (PartitionOrdinals)
    s3: S3Settings = field(default_factory=S3Settings)

    @property
    def label(self) -> str:
        return f"{self.ref.key} band range {self.number}"


def pairs_key(ref: PartitionRef, number: int) -> str:
    return f"{partition_prefix(CLUSTERS, ref)}/pairs-{number:05d}.parquet"


def range_pairs(task: RangeTask) -> dict[str, Any]:
    """One range's reduce: its exact links to its exact files (`_range_exact`) and (fuzzy dedup) its
    candidate pairs (u, v nodes) to its pairs file, cut by pair bucket. Returns `_range_exact`'s keys and
    {"key": the pairs file (None when empty), "pairs": pairs written, "band_rows": the range's band rows here}."""
    store = StoreSpec(task.root_url, task.s3).open()
    manifest = read_manifest(store, partition_prefix(SIGNATURES, task.ref))
    if manifest is None:
        raise FileNotFoundError(f"{store.uri(partition_prefix(SIGNATURES, task.ref))} has no manifest: materialize dedup_signatures for {task.ref.key} first")
    low, high = shard_bounds(task.number, task.settings.band_ranges)
    exact = _range_exact(store, task, manifest, low, high)
    pairs = _range_pairs(store, task, manifest, low, high) if task.settings.fuzzy else {"key": None, "pairs": 0, "band_rows": 0}
    return {**exact, **pairs}


def _range_pairs(store: Store, task: RangeTask, manifest: dict[str, Any], low: int, high: int) -> dict[str, Any]:
    settings, ranges = task.settings, task.settings.band_ranges
    current = band_rows_between(store, task.ref, manifest, low, high).with_columns(partition=pl.lit(task.ref.key))
    earlier = DedupIndex(store, settings, task.s3).probe("bands", current.select("band", key="hash"), task.ref).rename({"key": "hash"})
    verified = settings.verify_min_jaccard is not None
    earlier = first_members(earlier, max(settings.verify_anchors if verified else 1, 1)).select("band", "hash", "partition", "doc")
    ordinals = PartitionOrdinals(list(task.partitions))
    members = ordinals.nodes(pl.concat([current.select("band", "hash", "partition", "doc"), earlier]))
    pairs = candidate_pairs(members, ordinals.ordinal[task.ref.key] << PartitionOrdinals.SHIFT, settings.verify_anchors if verified else 0)
    if not pairs.height:
        return {"key": None, "pairs": 0, "band_rows": current.height}
    bucket = pair_bucket(pairs["v"].to_numpy(), ranges)
    table = pairs.with_columns(bucket=pl.Series(bucket, dtype=pl.Int32)).sort("bucket", "v", "u").select("bucket", "u", "v").to_arrow().cast(PAIRS_FILE_SCHEMA)
    key = write_bucketed(store, pairs_key(task.ref, task.number), table)
    return {"key": key, "pairs": pairs.height, "band_rows": current.height}


def read_buckets(store: Store, keys: list[str], bucket: int, schema: pa.Schema) -> pl.DataFrame:
    """The rows of one bucket of bucketed files (`write_bucketed`: the row groups whose first column, the
    bucket, has that minimum), every column of `schema`."""
    frames = [pl.from_arrow(schema.empty_table())]
    for key in keys:
        with parquet_file(store, key) as parquet:
            groups = groups_between(parquet.metadata, bucket, bucket)  # one bucket a group (write_bucketed)
            if groups:
                frames.append(pl.from_arrow(parquet.read_row_groups(groups, columns=schema.names)))
    return pl.concat(frames)  # type: ignore[arg-type]


def bucket_pairs(store: Store, keys: list[str], bucket: int) -> pl.DataFrame:
    """(u, v) pairs of one pair bucket from every range's pairs file, unique, sorted by (u, v)."""
    return read_buckets(store, keys, bucket, PAIRS_FILE_SCHEMA).select("u", "v").unique().sort("u", "v")


def write_bucketed(store: Store, key: str, table: pa.Table) -> str:
    """Write `table` (first column `bucket`) sorted by bucket, each bucket starting a row group (so that
    `read_buckets` reads one bucket's rows only); returns the key."""
    table = table.take(pc.sort_indices(table, [("bucket", "ascending")]))
    cuts = np.flatnonzero(np.diff(table.column("bucket").to_numpy())) + 1
    edges = [0, *cuts.tolist(), table.num_rows]
    write_parquet_groups(store, key, [table.slice(a, b - a) for a, b in zip(edges, edges[1:], strict=False)], table.schema, PAIRS_ROW_GROUP)
    return key
