"""The datasets deduplication reads and writes, their columns, and how documents are named and ordered.

Datasets (each its own folder, `<root>/<name>/source=<s>/snapshot=<n>/`, one schema per dataset):

- `dedup_signatures` (`part-NNNNN.parquet`, one per cleaned part): every document's `doc` position,
  `doc_id`, `text_hash` and LSH band hashes (`bands`, null when the document has no word).
- `dedup_shingles` (`shingles-NNNNN.parquet`, side dataset of `dedup_signatures`): every document's
  sorted shingle-hash set, in row groups of SHINGLE_ROW_GROUP documents (verification reads only the
  row groups holding its candidates).
- `dedup_bands` (`bands-NNNNN.parquet`, side dataset of `dedup_signatures`): every document's LSH band
  rows (hash, band, doc), sorted by hash, in row groups that never straddle two of `dedup.band_ranges`
  hash ranges (the shuffle's unit: a clustering task reads one range's row groups, `sluice.dedup.shuffle`).
- `dedup_hashes` (`hashes-NNNNN.parquet`, side dataset of `dedup_signatures`): every document's text hash
  as two uint64 halves (`key` high, `lo` low), `doc` and `doc_id`, sorted by key, row groups cut as
  `dedup_bands`'s (exact duplicates are found per range as near-duplicate candidates are).
- `dedup_index/minhash=<digest>/`: the global index (`sluice.dedup.index`), unpartitioned.
- `dedup_clusters` (`clusters.parquet`): per document of the partition, its decision (`kind`: null when
  kept) and its `parent`, the first document of its cluster as this partition saw it (itself when kept),
  sorted by doc.
- `deduped_documents` (`part-NNNNN.parquet`): the kept documents, cleaned schema.
- `deduped_removed` (`removed.parquet`, side dataset of `deduped_documents`): the removed documents.

A document is named by its partition (`source/snapshot`, `PartitionRef.key`) and `doc = part << ROW_BITS
| row` (cleaned part file, row). The global order is (snapshot, source, doc): `PartitionRef.sort_key()`
then `doc`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from sluice.config import DedupSettings
from sluice.io.layout import PartitionRef, partition_prefix
from sluice.io.storage import Store

CLEANED = "cleaned_documents"
SIGNATURES = "dedup_signatures"
SHINGLES = "dedup_shingles"
BANDS = "dedup_bands"
HASHES = "dedup_hashes"
INDEX = "dedup_index"
CLUSTERS = "dedup_clusters"
DEDUPED = "deduped_documents"
REMOVED = "deduped_removed"

ROW_BITS = 24  # doc = part << ROW_BITS | row
PART_BITS = 20  # a partition holds at most 2^20 - 1 cleaned parts (crawl files): doc < 2^44
SHINGLE_ROW_GROUP = 128
CLUSTERS_FILE = "clusters.parquet"
REMOVED_FILE = "removed.parquet"


def signatures_schema(bands: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("doc", pa.int64(), nullable=False),
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("text_hash", pa.string(), nullable=False),
            pa.field("bands", pa.list_(pa.uint64(), bands)),  # null: no word (never a near-duplicate candidate)
        ]
    )


BANDS_SCHEMA = pa.schema(
    [pa.field("hash", pa.uint64(), nullable=False), pa.field("band", pa.uint8(), nullable=False), pa.field("doc", pa.int64(), nullable=False)]
)

HASHES_SCHEMA = pa.schema(
    [
        pa.field("key", pa.uint64(), nullable=False),
        pa.field("lo", pa.uint64(), nullable=False),
        pa.field("doc", pa.int64(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
    ]
)

SHINGLES_SCHEMA = pa.schema([pa.field("doc", pa.int64(), nullable=False), pa.field("shingles", pa.large_list(pa.uint32()))])

CLUSTERS_SCHEMA = pa.schema(
    [
        pa.field("doc", pa.int64(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("kind", pa.string()),  # null: kept; exact | fuzzy
        pa.field("parent_partition", pa.string(), nullable=False),  # the cluster's first document as seen here
        pa.field("parent_doc", pa.int64(), nullable=False),
        pa.field("exact_of_partition", pa.string()),  # exact duplicates: the first copy of the text
        pa.field("exact_of_id", pa.string()),
        pa.field("cluster_size", pa.int64()),  # documents of the cluster this partition saw; null without fuzzy dedup
    ]
)

REMOVED_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("snapshot", pa.string(), nullable=False),
        pa.field("text_hash", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # exact | fuzzy
        pa.field("duplicate_of", pa.string(), nullable=False),  # exact: first copy; fuzzy: the cluster's kept document
        pa.field("duplicate_of_partition", pa.string(), nullable=False),  # source/snapshot of that document
        pa.field("cluster_id", pa.string(), nullable=False),  # doc_id of the cluster's kept document
        pa.field("cluster_size", pa.int64()),  # see CLUSTERS_SCHEMA; null without fuzzy dedup
    ]
)


def minhash_identity(settings: DedupSettings) -> dict[str, Any]:
    """The settings that make signatures comparable: an index or signature built with others is not reused."""
    return {
        "fuzzy": settings.fuzzy,
        "ngram_size": settings.ngram_size,
        "bands": settings.bands,
        "rows_per_band": settings.rows_per_band,
        "seed": settings.seed,
        "hash_function": settings.hash_function,
    }


def cluster_identity(settings: DedupSettings) -> dict[str, Any]:
    """The settings that decide clusters (what `dedup_clusters` was computed with)."""
    return {**minhash_identity(settings), "verify_min_jaccard": settings.verify_min_jaccard, "verify_anchors": settings.verify_anchors}


def identity_digest(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]


def ref_of(key: str) -> PartitionRef:
    source, snapshot = key.split("/", 1)
    return PartitionRef(source, snapshot)


def order_of(key: str) -> tuple[str, str]:
    """The global order of a partition key (`source/snapshot`): (snapshot, source)."""
    source, snapshot = key.split("/", 1)
    return (snapshot, source)


def prefix_of(dataset: str, key: str) -> str:
    return partition_prefix(dataset, ref_of(key))


def before(ref: PartitionRef) -> pl.Expr:
    """Rows of partitions ordered before `ref` (columns `snapshot`, `source`)."""
    return (pl.col("snapshot") < ref.snapshot) | ((pl.col("snapshot") == ref.snapshot) & (pl.col("source") < ref.source))


_HEX = np.zeros(256, dtype=np.uint64)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint64)
_HEX[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16, dtype=np.uint64)


def shard_of(keys: np.ndarray, shards: int) -> np.ndarray:
    """The hash range of each uint64 key: its top log2(shards) bits (`shards` a power of two)."""
    bits = shards.bit_length() - 1
    return (np.asarray(keys, np.uint64) >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(len(keys), np.int64)


def shard_bounds(shard: int, shards: int) -> tuple[int, int]:
    """The smallest and largest key of a hash range."""
    bits = shards.bit_length() - 1
    width = 1 << (64 - bits)
    return shard * width, (shard + 1) * width - 1


def hash_halves(text_hashes: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The 128-bit hex `text_hash` values (xxh3_128, 32 hex digits) as two uint64 arrays (high, low), vectorized."""
    array = text_hashes.combine_chunks() if isinstance(text_hashes, pa.ChunkedArray) else text_hashes
    array = array.cast(pa.large_string())
    if not len(array):
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    if not (np.diff(offsets) == 32).all():
        raise ValueError("text_hash values must be 32 hex digits (xxh3_128)")
    digits = _HEX[np.frombuffer(array.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]].reshape(-1, 32)]
    halves = []
    for start in (0, 16):
        value = np.zeros(len(array), dtype=np.uint64)
        for column in range(start, start + 16):
            value = (value << np.uint64(4)) | digits[:, column]
        halves.append(value)
    return halves[0], halves[1]


def doc_positions(part: int, rows: int) -> np.ndarray:
    return (np.int64(part) << ROW_BITS) | np.arange(rows, dtype=np.int64)


class PartitionOrdinals:
    """Integer node ids for documents of a few partitions, ordered as the global order: node = ordinal <<
    44 | doc (`SHIFT`), the ordinal being the partition's rank among the given keys (so the smallest node of a
    set is its first document). A signed 64-bit node leaves 19 bits for the ordinal (`MAX_PARTITIONS`)."""

    SHIFT = ROW_BITS + PART_BITS
    MAX_PARTITIONS = 1 << (63 - SHIFT)

    def __init__(self, keys: list[str]) -> None:
        self.keys = sorted(set(keys), key=order_of)
        if len(self.keys) > self.MAX_PARTITIONS:
            raise ValueError(f"{len(self.keys)} partitions in one dedup order; node ids hold at most {self.MAX_PARTITIONS}")
        self.ordinal = {key: index for index, key in enumerate(self.keys)}

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame({"partition": self.keys, "ordinal": list(range(len(self.keys)))}, schema={"partition": pl.String, "ordinal": pl.Int64})

    def nodes(self, frame: pl.DataFrame, partition: str = "partition", doc: str = "doc", name: str = "node") -> pl.DataFrame:
        """`frame` with a `name` column (joins the partition column to its ordinal)."""
        ordinals = self.frame().rename({"partition": partition, "ordinal": f"_{name}_ordinal"})
        out = frame.join(ordinals, on=partition, how="left")
        if out[f"_{name}_ordinal"].null_count():
            raise ValueError("a document names a partition missing from the ordinals")
        return out.with_columns((pl.col(f"_{name}_ordinal") * (1 << self.SHIFT) + pl.col(doc)).alias(name)).drop(f"_{name}_ordinal")

    def locate(self, nodes: np.ndarray) -> pl.DataFrame:
        """(partition, doc) of each node."""
        nodes = np.asarray(nodes, dtype=np.int64)
        names = pl.Series(self.keys, dtype=pl.String)
        return pl.DataFrame({"partition": names.gather(nodes >> self.SHIFT), "doc": nodes & ((1 << self.SHIFT) - 1)})


@contextmanager
def parquet_file(store: Store, key: str) -> Iterator[pq.ParquetFile]:
    """A Parquet file of the store, to read some row groups of: the file itself on a local store, one GET
    into memory on S3 (the dedup files read this way are index runs and per-partition sidecars)."""
    local = store.local_path(key)
    if local is not None:
        yield pq.ParquetFile(local)
        return
    yield pq.ParquetFile(pa.BufferReader(store.read_bytes(key)))


def absent(store: Store, key: str, error: Exception) -> bool:
    """After reading `key` failed with `error`: True when the key does not exist (the caller treats it as
    missing); otherwise `error` is raised again (also when the existence check itself fails, e.g. the
    store went away), so the message names the key that could not be read."""
    try:
        present = store.exists(key)
    except Exception:
        raise error from None
    if present:
        raise error
    return True
