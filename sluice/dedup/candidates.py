"""Candidate pairs (documents sharing an LSH bucket) and their verification by exact Jaccard similarity.

**Pairs** (`candidate_pairs`): in each (band, hash) bucket, every member is paired with the bucket's first
`anchors` members before it in the global order (NeMo Curator's anchors: linear in the bucket's size,
where all pairs would be quadratic). Anchors are prefix-stable: a bucket's first members never change
when later documents join it, so the pairs of a partition's documents are the same whether the earlier
partitions were deduplicated one by one or in one batch. Without verification (`anchors` 0, datatrove's
rule) each member is linked to the bucket's first member.

**Verification** (`ExactJaccardFilter`): a pair is linked only if the Jaccard similarity of the two
documents' shingle-hash sets reaches the bound. The sets come from the `dedup_shingles` sidecars written
at signing (only the row groups holding the candidates; the cleaned texts where a partition has none),
and all pairs are compared in one vectorized pass (`pair_jaccard`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from sluice.config import DedupSettings, S3Settings
from sluice.dedup.minhash import MinHasher
from sluice.dedup.schemas import (
    CLEANED,
    ROW_BITS,
    SHINGLE_ROW_GROUP,
    SHINGLES,
    absent,
    parquet_file,
    prefix_of,
)
from sluice.io.layout import read_manifest, read_parquet_file
from sluice.io.storage import StorageError, Store, StoreSpec

# Shingles looked up per block of pairs in `pair_jaccard` (bounds its temporary arrays to ~3 MB).
_JACCARD_BLOCK = 1 << 16
# Characters of candidate texts shingled at once when verifying (the tokenizer's arrays grow with it:
# ~50 bytes per character, as `sluice.dedup.minhash._BATCH_CHARS`).
_SHINGLE_BATCH_CHARS = 1 << 18
# Candidate pairs per verification task, and distinct documents (whose shingle sets a task holds at once):
# tasks run one after another in process, so this bounds verification's memory whatever the candidates
# (dedup_scaling.py's 16x input, VmHWM: 541-555 MB without it, 509 with 1,024 documents, 453-476 with 256,
# for 12-16 % more CPU; 1x: 384-390 MB).
VERIFY_PAIRS_PER_TASK = 1 << 15
VERIFY_DOCUMENTS_PER_TASK = 1 << 8
PAIRS_SCHEMA = {"u": pl.Int64, "v": pl.Int64}


def verify_slices(u: np.ndarray, v: np.ndarray, pairs: int | None = None, documents: int | None = None) -> list[tuple[int, int]]:
    """Cut pairs (u[i], v[i]: document ids; best sorted, so a task's documents are few) into consecutive
    (start, stop) slices of at most `pairs` pairs and `documents` distinct documents (at least one pair)."""
    pairs, documents = pairs or VERIFY_PAIRS_PER_TASK, documents or VERIFY_DOCUMENTS_PER_TASK
    slices, start, seen = [], 0, set()
    for i, (a, b) in enumerate(zip(u.tolist(), v.tolist(), strict=True)):
        new = (a not in seen) + (b not in seen and b != a)
        if i > start and (i - start >= pairs or len(seen) + new > documents):
            slices.append((start, i))
            start, seen = i, set()
        seen.update((a, b))
    return [*slices, (start, len(u))] if len(u) else []


def candidate_pairs(members: pl.DataFrame, first_new: int, anchors: int) -> pl.DataFrame:
    """(u, v) node pairs to link or verify, u < v, v a node of the current partition (node >= first_new).

    members: band, hash, node: the current partition's rows and, for each of its buckets, the earlier
    members (at least the first `max(anchors, 1)` of each bucket). anchors 0: each member with its bucket's
    first member; anchors K: each member with each of the bucket's first K members before it."""
    # A bucket of one member pairs nothing: dropped first, most buckets are (the joins then hold the shared ones).
    members = members.select("band", "hash", "node").unique()
    members = members.filter(pl.struct("band", "hash").is_duplicated())
    if not anchors:
        first = members.group_by("band", "hash").agg(pl.col("node").min().alias("u"))
        pairs = members.join(first, on=["band", "hash"]).filter((pl.col("node") >= first_new) & (pl.col("node") != pl.col("u"))).select("u", v="node")
    else:
        heads = members.filter(pl.col("node").rank("ordinal").over("band", "hash") <= anchors).select("band", "hash", u="node")
        current = members.filter(pl.col("node") >= first_new).select("band", "hash", v="node")
        pairs = heads.join(current, on=["band", "hash"]).filter(pl.col("u") < pl.col("v")).select("u", "v")
    return pairs.unique().sort("u", "v").cast(PAIRS_SCHEMA)


def first_members(rows: pl.DataFrame, count: int) -> pl.DataFrame:
    """The first `count` rows of each (band, hash) bucket in the global order (snapshot, source, doc)."""
    return rows.sort("band", "hash", "snapshot", "source", "doc").group_by("band", "hash", maintain_order=True).head(count)


def shingle_sets(texts: list[str], settings: DedupSettings) -> list[np.ndarray]:
    """Each document's set of shingle hashes (sorted unique uint32; the MinHash input)."""
    hashes, counts = MinHasher.from_settings(settings).shingle_hashes(texts)
    return [np.unique(chunk) for chunk in np.split(hashes, np.cumsum(counts)[:-1])] if len(texts) else []


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    if not len(a) and not len(b):
        return 1.0
    common = len(np.intersect1d(a, b, assume_unique=True))
    return common / (len(a) + len(b) - common)


def set_keys(first_document: int, hashes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sorted unique `document << 32 | hash` keys of a batch of documents' shingle hashes."""
    documents = np.repeat(np.arange(first_document, first_document + len(counts), dtype=np.uint64), counts)
    keys = np.sort((documents << np.uint64(32)) | hashes.astype(np.uint64))
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys


@dataclass(frozen=True)
class ShingleSets:
    """The shingle-hash sets of many documents as one sorted array of `document << 32 | hash` keys."""

    keys: np.ndarray  # uint64, sorted: document index, then hash
    offsets: np.ndarray  # int64, len(documents) + 1: document i's keys are keys[offsets[i]:offsets[i + 1]]

    @classmethod
    def of(cls, texts: list[str], settings: DedupSettings) -> ShingleSets:
        hasher = MinHasher.from_settings(settings)
        blocks: list[np.ndarray] = [np.empty(0, np.uint64)]
        start = 0
        while start < len(texts):  # batches of ~_SHINGLE_BATCH_CHARS: the tokenizer's arrays stay bounded
            stop, chars = start + 1, len(texts[start])
            while stop < len(texts) and chars + len(texts[stop]) <= _SHINGLE_BATCH_CHARS:
                chars += len(texts[stop])
                stop += 1
            blocks.append(set_keys(start, *hasher.shingle_hashes(texts[start:stop])))
            start = stop
        return cls.from_keys(np.concatenate(blocks), len(texts))

    @classmethod
    def from_keys(cls, keys: np.ndarray, documents: int) -> ShingleSets:
        """From sorted unique keys (blocks of `set_keys` in document order)."""
        offsets = np.searchsorted(keys >> np.uint64(32), np.arange(documents + 1, dtype=np.uint64)).astype(np.int64)
        return cls(keys, offsets)

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)


def pair_jaccard(sets: ShingleSets, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Jaccard similarity of the shingle sets of documents a[i] and b[i], for all pairs at once.

    Every shingle of the smaller set of a pair is looked up in the other document's keys with one
    `searchsorted` over all pairs (blockwise): O(sum of the smaller sets x log), no Python per pair."""
    sizes = sets.sizes()
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    swap = sizes[a] > sizes[b]
    small, large = np.where(swap, b, a), np.where(swap, a, b)
    common = np.zeros(len(a), dtype=np.int64)
    lengths = sizes[small]
    ends = np.cumsum(lengths)
    start = 0
    while start < len(a):
        stop = max(start + 1, int(np.searchsorted(ends, ends[start] - lengths[start] + _JACCARD_BLOCK, side="right")))
        block_lengths = lengths[start:stop]
        total = int(block_lengths.sum())
        if total:
            pair = np.repeat(np.arange(start, stop), block_lengths)
            within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(block_lengths) - block_lengths, block_lengths)
            hashes = sets.keys[sets.offsets[small[pair]] + within] & np.uint64(0xFFFFFFFF)
            query = (large[pair].astype(np.uint64) << np.uint64(32)) | hashes
            found = sets.keys[np.minimum(np.searchsorted(sets.keys, query), len(sets.keys) - 1)] == query
            common[start:stop] = np.bincount(pair - start, weights=found, minlength=stop - start).astype(np.int64)
        start = stop
    union = sizes[a] + sizes[b] - common
    return np.where(union > 0, common / np.maximum(union, 1), 1.0)


def read_texts(store: Store, documents: pl.DataFrame) -> list[str]:
    """Texts of (partition, doc) rows from the cleaned partitions, in the rows' order; reads only the part
    files that hold them, one at a time."""
    located = documents.with_row_index("position").with_columns(part=pl.col("doc") // (1 << ROW_BITS), row=pl.col("doc") % (1 << ROW_BITS))
    texts: list[str | None] = [None] * documents.height
    for (partition, part), group in located.group_by(["partition", "part"], maintain_order=True):
        prefix = prefix_of(CLEANED, partition)
        manifest = read_manifest(store, prefix)
        if manifest is None:
            raise FileNotFoundError(f"{store.uri(prefix)} has no manifest: its texts are needed to verify near duplicates")
        column = read_parquet_file(store, f"{prefix}/{manifest['files'][part]['key']}", columns=["text"]).column("text")
        for position, text in zip(group["position"].to_list(), column.take(group["row"].to_arrow()).to_pylist(), strict=True):
            texts[position] = text
    return texts  # type: ignore[return-value]


def read_shingle_rows(store: Store, key: str, docs: list[int]) -> pa.Table | None:
    """Rows of a shingle sidecar for `docs` (None when it does not exist): a sidecar holds every document of
    its part in order, in row groups of SHINGLE_ROW_GROUP, so only the row groups holding them are read."""
    rows = np.asarray(docs, dtype=np.int64) & ((1 << ROW_BITS) - 1)
    groups = np.unique(rows // SHINGLE_ROW_GROUP).tolist()
    try:
        with parquet_file(store, key) as parquet:
            if groups and groups[-1] >= parquet.num_row_groups:
                return None
            table = parquet.read_row_groups(groups)
            group_rows = [parquet.metadata.row_group(g).num_rows for g in groups]
    except (FileNotFoundError, StorageError) as error:
        absent(store, key, error)  # raises unless the sidecar does not exist
        return None
    first_rows = np.asarray(groups, dtype=np.int64) * SHINGLE_ROW_GROUP  # part row of each read group's first row
    group_of_row = np.searchsorted(first_rows, rows, side="right") - 1
    read_offsets = np.concatenate([[0], np.cumsum(group_rows)])[:-1]
    positions = read_offsets[group_of_row] + rows - first_rows[group_of_row]
    if len(positions) and positions.max() >= table.num_rows:
        return None
    return table.take(pa.array(positions))


def read_shingle_sets(store: Store, documents: pl.DataFrame, settings: DedupSettings) -> tuple[ShingleSets, int]:
    """ShingleSets of (partition, doc) rows sorted by (partition, doc), document i = row i, and how many
    documents were shingled from their texts (a partition without sidecars). Each (partition, part)'s
    sets are held as read (uint32 hashes) until the one key array is filled: ~12 bytes per shingle at the
    peak, not the several 8-byte copies that concatenating per-part key arrays takes."""
    located = documents.with_row_index("index").with_columns(part=pl.col("doc") // (1 << ROW_BITS))
    groups: list[tuple[int, np.ndarray, np.ndarray]] = []  # (first index, uint32 hashes, sizes) per part, in index order
    from_texts = 0
    for (partition, part), group in located.group_by(["partition", "part"], maintain_order=True):
        key = f"{prefix_of(SHINGLES, partition)}/shingles-{part:05d}.parquet"
        table = read_shingle_rows(store, key, group["doc"].to_list())
        first = int(group["index"][0])
        if table is not None and table.column("doc").to_pylist() == group["doc"].to_list():
            column = table.column("shingles").combine_chunks()
            groups.append((first, column.flatten().to_numpy(), pc.list_value_length(column).to_numpy().astype(np.int64)))
            continue
        sets = ShingleSets.of(read_texts(store, group.select("partition", "doc")), settings)
        from_texts += group.height
        groups.append((first, (sets.keys & np.uint64(0xFFFFFFFF)).astype(np.uint32), sets.sizes()))
    sizes = np.concatenate([np.zeros(0, np.int64), *(group_sizes for _, _, group_sizes in groups)])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    keys = np.empty(int(offsets[-1]), np.uint64)
    for first, hashes, group_sizes in groups:  # each group's documents are consecutive indexes from `first`
        at = int(offsets[first])
        keys[at : at + len(hashes)] = hashes
        keys[at : at + len(hashes)] |= np.repeat(np.arange(first, first + len(group_sizes), dtype=np.uint64) << np.uint64(32), group_sizes)
    return ShingleSets(keys, offsets), from_texts


class ExactJaccardFilter:
    """Links a candidate pair (u_partition, u_doc, v_partition, v_doc) only if the Jaccard similarity of the
    two documents' shingle sets (32-bit shingle hashes, so exact up to hash collisions) reaches `min_jaccard`."""

    def __init__(self, store: Store, settings: DedupSettings, min_jaccard: float) -> None:
        self.store = store
        self.settings = settings
        self.min_jaccard = min_jaccard
        self.shingled_from_texts = 0

    def __call__(self, pairs: pl.DataFrame) -> np.ndarray:
        wanted = (
            pl.concat([pairs.select(partition="u_partition", doc="u_doc"), pairs.select(partition="v_partition", doc="v_doc")])
            .unique()
            .sort("partition", "doc")
            .with_row_index("index")
        )
        sets, from_texts = read_shingle_sets(self.store, wanted.select("partition", "doc"), self.settings)
        self.shingled_from_texts += from_texts
        located = (
            pairs.with_row_index("pair")
            .join(wanted.rename({"partition": "u_partition", "doc": "u_doc", "index": "a"}), on=["u_partition", "u_doc"])
            .join(wanted.rename({"partition": "v_partition", "doc": "v_doc", "index": "b"}), on=["v_partition", "v_doc"])
            .sort("pair")
        )
        return pair_jaccard(sets, located["a"].to_numpy(), located["b"].to_numpy()) >= self.min_jaccard


@dataclass(frozen=True)
class VerifyTask:
    """Candidate pairs to check on their shingle sets (`verify_pairs`)."""

    root_url: str
    pairs: pa.Table  # u_partition, u_doc, v_partition, v_doc
    settings: DedupSettings
    min_jaccard: float
    s3: S3Settings = field(default_factory=S3Settings)


def verify_pairs(task: VerifyTask) -> np.ndarray:
    """Which pairs reach `min_jaccard`: a boolean per pair, in order."""
    store = StoreSpec(task.root_url, task.s3).open()
    return ExactJaccardFilter(store, task.settings, task.min_jaccard)(pl.from_arrow(task.pairs))  # type: ignore[arg-type]
