"""Exact deduplication, global across all source x snapshot partitions.

Rule (deterministic, independent of the order in which partitions were materialized):
partitions are totally ordered by (snapshot, source); inside a partition documents keep their order
(part file, then row). A document is kept only if no document with the same `text_hash` (see
`sluice.clean.normalize_for_hash`) comes before it in that order. So partition P is deduplicated
against the *cleaned* output of every partition ordered before P, plus itself; the result depends on
which earlier partitions exist, which is recorded in P's manifest (`deduplicated_against`). When an
earlier partition lands late, the later partitions must be re-materialized; the `deduped_documents`
check `dedup_against_all_earlier_partitions` reports exactly that.

Memory holds the current partition's hashes only; earlier partitions are streamed file by file,
reading two columns, and matched with Arrow's `is_in` (no dict of every document).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.config import S3Settings
from sluice.layout import PartitionRef, partition_prefix, read_manifest, read_parquet_file, write_parquet
from sluice.storage import Store

REMOVED_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("snapshot", pa.string(), nullable=False),
        pa.field("text_hash", pa.string(), nullable=False),
        pa.field("duplicate_of", pa.string(), nullable=False),  # the kept (first) document's id
        pa.field("duplicate_of_partition", pa.string(), nullable=False),  # source/snapshot of that document
    ]
)

CLEANED = "cleaned_documents"


@dataclass
class DedupResult:
    files: list[dict[str, Any]]
    removed_entry: dict[str, Any]
    documents_in: int
    documents_out: int
    removed_within_partition: int
    removed_against: dict[str, int] = field(default_factory=dict)  # earlier partition -> removed count
    deduplicated_against: list[str] = field(default_factory=list)


def earlier_partitions(store: Store, ref: PartitionRef) -> list[PartitionRef]:
    from sluice.layout import list_partitions

    return [other for other in list_partitions(store, CLEANED) if other.sort_key() < ref.sort_key()]


def deduplicate_partition(store: Store, ref: PartitionRef, output_prefix: str, s3: S3Settings | None = None) -> DedupResult:
    cleaned_prefix = partition_prefix(CLEANED, ref)
    manifest = read_manifest(store, cleaned_prefix)
    if manifest is None:
        raise FileNotFoundError(f"{store.uri(cleaned_prefix)} has no manifest: materialize cleaned_documents for {ref.key} first")
    parts = [entry["key"] for entry in manifest["files"]]
    # Only ids and hashes are held for the whole partition; texts are streamed part by part below.
    tables = [read_parquet_file(store, f"{cleaned_prefix}/{key}", columns=["doc_id", "text_hash"]) for key in parts]
    documents_in = sum(t.num_rows for t in tables)

    # Hashes of this partition, in document order; first occurrence wins inside the partition.
    all_hashes = pa.concat_arrays([t.column("text_hash").combine_chunks() for t in tables]) if tables else pa.array([], pa.string())
    all_ids = pa.concat_arrays([t.column("doc_id").combine_chunks() for t in tables]) if tables else pa.array([], pa.string())
    unique_hashes = pc.unique(all_hashes)

    # Which hashes occur in earlier partitions, and the first document that holds each.
    first_earlier: dict[str, tuple[str, str]] = {}
    removed_against: dict[str, int] = {}
    earlier = earlier_partitions(store, ref)
    for other in earlier:
        other_prefix = partition_prefix(CLEANED, other)
        other_manifest = read_manifest(store, other_prefix)
        if other_manifest is None:
            continue
        for entry in other_manifest["files"]:
            table = read_parquet_file(store, f"{other_prefix}/{entry['key']}", columns=["doc_id", "text_hash"])
            mask = pc.is_in(table.column("text_hash"), value_set=unique_hashes)
            matches = table.filter(mask)
            for doc_id, digest in zip(matches.column("doc_id").to_pylist(), matches.column("text_hash").to_pylist(), strict=True):
                first_earlier.setdefault(digest, (doc_id, other.key))  # matches only: bounded by this partition

    seen_here: dict[str, str] = {}
    removed_rows: list[dict[str, Any]] = []
    keep_masks: list[list[bool]] = []
    index = 0
    removed_within = 0
    for table in tables:
        mask = []
        for digest in table.column("text_hash").to_pylist():
            doc_id = all_ids[index].as_py()
            index += 1
            if digest in first_earlier:
                keeper_id, keeper_partition = first_earlier[digest]
                removed_against[keeper_partition] = removed_against.get(keeper_partition, 0) + 1
            elif digest in seen_here:
                keeper_id, keeper_partition = seen_here[digest], ref.key
                removed_within += 1
            else:
                seen_here[digest] = doc_id
                mask.append(True)
                continue
            mask.append(False)
            removed_rows.append(
                {
                    "doc_id": doc_id,
                    "source": ref.source,
                    "snapshot": ref.snapshot,
                    "text_hash": digest,
                    "duplicate_of": keeper_id,
                    "duplicate_of_partition": keeper_partition,
                }
            )
        keep_masks.append(mask)

    files = []
    documents_out = 0
    for part_index, (key, mask) in enumerate(zip(parts, keep_masks, strict=True)):
        table = read_parquet_file(store, f"{cleaned_prefix}/{key}")
        kept = table.filter(pa.array(mask, pa.bool_())) if table.num_rows else table
        documents_out += kept.num_rows
        files.append(write_parquet(store, f"{output_prefix}/part-{part_index:05d}.parquet", kept))
    removed_entry = write_parquet(store, f"{output_prefix}/removed.parquet", pa.Table.from_pylist(removed_rows, schema=REMOVED_SCHEMA))
    return DedupResult(
        files=files,
        removed_entry=removed_entry,
        documents_in=documents_in,
        documents_out=documents_out,
        removed_within_partition=removed_within,
        removed_against=removed_against,
        deduplicated_against=[other.key for other in earlier],
    )
