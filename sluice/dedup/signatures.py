"""Signing: every document's text hash, LSH band hashes and shingle-hash set, one executor task per cleaned part.

`sign_partition` publishes the `dedup_signatures` dataset of a partition (`part-NNNNN.parquet`: doc,
doc_id, text_hash, bands) and its `dedup_shingles` side dataset (`shingles-NNNNN.parquet`: doc,
shingles), both from one shingling of the texts (`sluice.dedup.minhash`). A partition already signed from the
same cleaned files with the same MinHash settings is not signed again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from sluice.config import DedupSettings, S3Settings
from sluice.dedup.candidates import ShingleSets, set_keys
from sluice.dedup.minhash import MAX_HASH32, MinHasher
from sluice.dedup.schemas import (
    BANDS,
    BANDS_SCHEMA,
    CLEANED,
    HASHES,
    HASHES_SCHEMA,
    PART_BITS,
    ROW_BITS,
    SHINGLE_ROW_GROUP,
    SHINGLES,
    SHINGLES_SCHEMA,
    SIGNATURES,
    doc_positions,
    hash_halves,
    minhash_identity,
    shard_bounds,
    signatures_schema,
)
from sluice.io.layout import (
    PartitionRef,
    partition_prefix,
    read_manifest,
    read_parquet_file,
    required_manifest,
    side_prefix,
    write_manifest,
    write_parquet,
    write_parquet_groups,
)
from sluice.io.storage import Store, StoreSpec
from sluice.runtime.compute import Executor
from sluice.runtime.memory import releasing_memory
from sluice.runtime.tasks import (
    RecordedTask,
    TaskCounts,
    record_key,
    record_listing,
    records_prefix,
    run_recorded,
    task_digest,
)

BAND_ROW_GROUP = 1 << 16  # rows per row group of a band sidecar (a range of a 2,500-document part: ~2,200)
BAND_ROWS_SCHEMA = pa.schema([pa.field("band", pa.uint8(), nullable=False), pa.field("hash", pa.uint64(), nullable=False), pa.field("doc", pa.int64(), nullable=False)])


def band_hashes(texts: list[str], settings: DedupSettings, shingle_sink: Callable[[int, np.ndarray, np.ndarray], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """((documents, bands) uint64 band hashes, has-words mask). `shingle_sink`: see MinHasher.signatures."""
    if len(texts) >= 1 << ROW_BITS:
        raise ValueError(f"a cleaned part holds {len(texts)} documents; at most {(1 << ROW_BITS) - 1} are supported")
    hasher = MinHasher.from_settings(settings)
    signatures = hasher.signatures(texts, shingle_sink)
    has_words = (signatures != MAX_HASH32).any(axis=1) if len(texts) else np.zeros(0, dtype=bool)
    return hasher.band_hashes(signatures), has_words


def band_table(texts: list[str], part: int, settings: DedupSettings) -> pa.Table:
    """Band rows (band, hash, doc) of one part's documents with words, sorted by (band, hash, doc)."""
    bands, has_words = band_hashes(texts, settings)
    return band_rows(bands[has_words], doc_positions(part, len(texts))[has_words])


def band_rows(bands: np.ndarray, docs: np.ndarray) -> pa.Table:
    """(band, hash, doc) rows of documents' band hashes, sorted by (band, hash, doc)."""
    count = bands.shape[1] if bands.ndim == 2 else 0
    frame = pl.DataFrame(
        {"band": np.tile(np.arange(count, dtype=np.uint8), len(docs)), "hash": bands.reshape(-1), "doc": np.repeat(np.asarray(docs, np.int64), count)},
        schema={"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64},
    ).sort(["band", "hash", "doc"])
    return frame.to_arrow().cast(BAND_ROWS_SCHEMA)


def range_tables(table: pa.Table, ranges: int, column: str) -> list[pa.Table]:
    """A table sorted by the uint64 `column` cut at the `ranges` hash-range boundaries (empty ranges left out)."""
    keys = table.column(column).to_numpy()
    bounds = np.searchsorted(keys, np.array([shard_bounds(r, ranges)[0] for r in range(1, ranges)], np.uint64))
    edges = [0, *bounds.tolist(), table.num_rows]
    return [table.slice(start, stop - start) for start, stop in zip(edges, edges[1:], strict=False) if stop > start]


def band_sidecar(store: Store, ref: PartitionRef, part: int, bands: np.ndarray, docs: np.ndarray, ranges: int) -> dict[str, Any]:
    """Write one part's band rows (of its documents with words) as `dedup_bands/bands-NNNNN.parquet`;
    returns its manifest entry (with `prefix`)."""
    count = bands.shape[1] if bands.ndim == 2 else 0
    frame = pl.DataFrame(
        {"hash": bands.reshape(-1).astype(np.uint64), "band": np.tile(np.arange(count, dtype=np.uint8), len(docs)), "doc": np.repeat(np.asarray(docs, np.int64), count)},
        schema={"hash": pl.UInt64, "band": pl.UInt8, "doc": pl.Int64},
    ).sort("hash", "band", "doc")
    table = frame.to_arrow().cast(BANDS_SCHEMA)
    prefix = side_prefix(BANDS, ref)
    entry = write_parquet_groups(store, f"{prefix}/bands-{part:05d}.parquet", range_tables(table, ranges, "hash"), BANDS_SCHEMA, BAND_ROW_GROUP)
    return {**entry, "prefix": prefix}


def hash_sidecar(store: Store, ref: PartitionRef, part: int, table: pa.Table, ranges: int) -> dict[str, Any]:
    """Write one part's text hashes (key, lo, doc, doc_id; `table`: the part's doc_id and text_hash) as
    `dedup_hashes/hashes-NNNNN.parquet`, sorted by key, cut as the band sidecar; returns its entry."""
    hi, lo = hash_halves(table.column("text_hash"))
    frame = pl.DataFrame(
        {"key": hi, "lo": lo, "doc": doc_positions(part, table.num_rows), "doc_id": table.column("doc_id")},
        schema={"key": pl.UInt64, "lo": pl.UInt64, "doc": pl.Int64, "doc_id": pl.String},
    ).sort("key", "lo", "doc")
    prefix = side_prefix(HASHES, ref)
    rows = frame.to_arrow().cast(HASHES_SCHEMA)
    entry = write_parquet_groups(store, f"{prefix}/hashes-{part:05d}.parquet", range_tables(rows, ranges, "key"), HASHES_SCHEMA, BAND_ROW_GROUP, use_dictionary=False)
    return {**entry, "prefix": prefix}


def shingle_table(sets: ShingleSets, part: int) -> pa.Table:
    """Each document's shingle-hash set (sorted unique uint32, the MinHash input), by doc."""
    hashes = (sets.keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    shingles = pa.LargeListArray.from_arrays(pa.array(sets.offsets, pa.int64()), pa.array(hashes, pa.uint32()))
    return pa.Table.from_arrays([pa.array(doc_positions(part, len(sets.offsets) - 1), pa.int64()), shingles], schema=SHINGLES_SCHEMA)


@dataclass(frozen=True)
class SignatureTask:
    root_url: str  # storage root
    ref: PartitionRef
    cleaned_key: str  # part file, relative to the cleaned partition folder
    part: int
    settings: DedupSettings
    s3: S3Settings = field(default_factory=S3Settings)


def sign_part(task: SignatureTask) -> dict[str, Any]:
    """Sign one cleaned part; publish its `part-NNNNN.parquet` (and, with fuzzy dedup, its shingle and band
    sidecars; always its text-hash sidecar). Returns their manifest entries {"signatures", "hashes"; "shingles",
    "bands": ... or None}."""
    store = StoreSpec(task.root_url, task.s3).open()
    table = read_parquet_file(store, f"{partition_prefix(CLEANED, task.ref)}/{task.cleaned_key}", columns=["doc_id", "text_hash", "text"])
    settings = task.settings
    schema = signatures_schema(settings.bands)
    bands_column = pa.nulls(table.num_rows, schema.field("bands").type)
    shingles = band_file = None
    hashes = hash_sidecar(store, task.ref, task.part, table, settings.band_ranges)
    if settings.fuzzy:
        texts = table.column("text").to_pylist()
        blocks: list[np.ndarray] = [np.empty(0, np.uint64)]
        bands, has_words = band_hashes(texts, settings, lambda start, hashes, counts: blocks.append(set_keys(start, hashes, counts)))
        flat = pa.array(bands.reshape(-1), pa.uint64())
        bands_column = pa.FixedSizeListArray.from_arrays(flat, settings.bands, mask=pa.array(~has_words))
        band_file = band_sidecar(store, task.ref, task.part, bands[has_words], doc_positions(task.part, table.num_rows)[has_words], settings.band_ranges)
        sets = ShingleSets.from_keys(np.concatenate(blocks), len(texts))
        shingles = write_parquet(
            store, f"{side_prefix(SHINGLES, task.ref)}/shingles-{task.part:05d}.parquet", shingle_table(sets, task.part), row_group_size=SHINGLE_ROW_GROUP,
            use_dictionary=["doc"],  # shingle hashes are random: a dictionary of them only costs memory (~20 MB a 2 MB part)
        )
        shingles["prefix"] = side_prefix(SHINGLES, task.ref)
    signatures = pa.Table.from_arrays(
        [pa.array(doc_positions(task.part, table.num_rows), pa.int64()), table.column("doc_id"), table.column("text_hash"), bands_column], schema=schema
    )
    entry = write_parquet(store, f"{partition_prefix(SIGNATURES, task.ref)}/part-{task.part:05d}.parquet", signatures, row_group_size=4096)
    return {"signatures": entry, "shingles": shingles, "bands": band_file, "hashes": hashes}


def cleaned_digest(cleaned_manifest: dict[str, Any]) -> str:
    """Digest of a cleaned partition's published files (what signing read)."""
    files = [(entry["key"], entry["sha256"]) for entry in cleaned_manifest["files"]]
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()


def signatures_digest(manifest: dict[str, Any]) -> str:
    """Digest of a partition's published signatures (what the index holds of it)."""
    files = [(entry["key"], entry["sha256"]) for entry in manifest["files"]]
    return hashlib.sha256(json.dumps([files, manifest["minhash"]], sort_keys=True).encode()).hexdigest()


@dataclass
class SignResult:
    manifest: dict[str, Any]
    documents: int
    signed: bool  # False: an existing signing of the same cleaned files was kept
    origin: str  # "signed" | "unchanged"
    tasks: TaskCounts | None = None  # signing tasks run / reused from completion records (when signed)


@releasing_memory
def sign_partition(
    store: Store, ref: PartitionRef, settings: DedupSettings, executor: Executor | None = None, s3: S3Settings | None = None
) -> SignResult:
    """Sign every cleaned part of `ref` (one executor task per part) and publish the partition's
    `dedup_signatures` manifest (listing the shingle sidecars as side files)."""
    executor = executor or Executor()
    cleaned = required_manifest(store, CLEANED, ref)
    parts = [entry["key"] for entry in cleaned["files"]]
    if len(parts) >= 1 << PART_BITS:
        raise ValueError(f"{ref.key} has {len(parts)} cleaned parts; at most {(1 << PART_BITS) - 1} are supported")
    settings = settings.for_partition(sum(entry["rows"] for entry in cleaned["files"]))  # its band-hash ranges
    existing = current_signatures(store, ref, settings, cleaned)
    if existing is not None and has_range_sidecars(existing, ref, settings):
        return SignResult(existing, existing["documents"], signed=False, origin="unchanged")
    # Signed by an earlier version without the range sidecars: signed again (the signature files come out
    # the same bytes, so the index, keyed by their digest, is not rebuilt).
    # Each part's signing records its completion; a re-run after a kill reuses verified parts (sluice.runtime.tasks).
    s3 = s3 or S3Settings()
    outputs = (
        ("signatures", store.uri(partition_prefix(SIGNATURES, ref))), ("shingles", store.uri(side_prefix(SHINGLES, ref))), ("bands", store.uri(side_prefix(BANDS, ref))),
        ("hashes", store.uri(side_prefix(HASHES, ref))),
    )
    jobs = [
        RecordedTask(
            sign_part, task, f"{ref.key}/{task.cleaned_key}", task_digest(SIGNATURES, task, [entry["sha256"]]),
            store.uri(records_prefix(SIGNATURES, ref)), record_key(task.part), outputs, s3,
        )
        for task, entry in zip((SignatureTask(store.uri(), ref, key, part, settings, s3) for part, key in enumerate(parts)), cleaned["files"], strict=True)
    ]
    results = executor.map(run_recorded, jobs)
    files = [result["signatures"] for result in results]
    side_files = [result[name] for name in ("shingles", "bands", "hashes") for result in results if result[name] is not None]
    manifest = publish_signatures(
        store, ref, settings, cleaned, files, side_files, {"task_records": record_listing(SIGNATURES, ref, range(len(parts)))}
    )
    return SignResult(manifest, manifest["documents"], signed=True, origin="signed", tasks=TaskCounts.of(results))


def has_range_sidecars(manifest: dict[str, Any], ref: PartitionRef, settings: DedupSettings) -> bool:
    """Whether a signatures manifest lists every part's text-hash sidecar (and, with fuzzy dedup, band sidecar)."""
    prefixes = [side_prefix(HASHES, ref), *([side_prefix(BANDS, ref)] if settings.fuzzy else [])]
    listed = [entry.get("prefix") for entry in manifest.get("side_files", [])]
    return all(listed.count(prefix) == len(manifest["files"]) for prefix in prefixes)


def current_signatures(store: Store, ref: PartitionRef, settings: DedupSettings, cleaned: dict[str, Any]) -> dict[str, Any] | None:
    """`ref`'s published signatures manifest when it was signed from these cleaned files with these MinHash
    settings, else None."""
    existing = read_manifest(store, partition_prefix(SIGNATURES, ref))
    if existing is not None and existing.get("cleaned_digest") == cleaned_digest(cleaned) and existing.get("minhash") == minhash_identity(settings):
        return existing
    return None


def publish_signatures(
    store: Store, ref: PartitionRef, settings: DedupSettings, cleaned: dict[str, Any], files: list, side_files: list,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write `ref`'s `dedup_signatures` manifest over its written signature `files` and shingle `side_files`
    (the one place its format is written: signing, and the adoption of an older layout)."""
    documents = sum(entry["rows"] for entry in files)
    manifest = {
        "asset": SIGNATURES,
        "partition": {"source": ref.source, "snapshot": ref.snapshot},
        "minhash": minhash_identity(settings),
        "cleaned_digest": cleaned_digest(cleaned),
        "band_ranges": settings.ranges_for(documents),  # the sidecars' cut (readers take any cut: row-group statistics)
        **(extra or {}),
        "files": files,
        "side_files": side_files,
        "documents": documents,
    }
    write_manifest(store, partition_prefix(SIGNATURES, ref), manifest)
    return manifest


def read_signatures(store: Store, ref: PartitionRef, manifest: dict[str, Any] | None = None, columns: list[str] | None = None) -> pl.DataFrame:
    """A partition's signatures in doc order: doc, doc_id, text_hash, bands (list, null without words), or
    the `columns` named."""
    prefix = partition_prefix(SIGNATURES, ref)
    manifest = manifest or read_manifest(store, prefix)
    if manifest is None:
        raise FileNotFoundError(f"{store.uri(prefix)} has no manifest: materialize dedup_signatures for {ref.key} first")
    tables = [read_parquet_file(store, f"{prefix}/{entry['key']}", columns=columns) for entry in manifest["files"]]
    schema = signatures_schema(manifest["minhash"]["bands"])
    schema = pa.schema([schema.field(name) for name in columns]) if columns is not None else schema
    return pl.from_arrow(pa.concat_tables(tables) if tables else schema.empty_table())  # type: ignore[return-value]


def signature_band_rows(signatures: pl.DataFrame) -> pl.DataFrame:
    """(band, hash, doc) rows of the documents with words, sorted by (band, hash, doc)."""
    with_words = signatures.filter(pl.col("bands").is_not_null())
    if with_words.height == 0:
        return pl.DataFrame(schema={"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64})
    bands = np.stack(with_words["bands"].to_numpy()) if with_words.height else np.empty((0, 0), np.uint64)
    return pl.from_arrow(band_rows(bands.astype(np.uint64), with_words["doc"].to_numpy()))  # type: ignore[return-value]
