"""A signed partition's rows in one key range: what a shuffle task (`sluice.dedup.shuffle`) or an index
build task (`sluice.dedup.index.build_run`) reads instead of the whole partition.

- Band rows (band, hash, doc) in a band-hash range: from each part's `dedup_bands` sidecar, only the row
  groups whose hash range meets it (they never straddle two `dedup.band_ranges` ranges); a part without a
  sidecar (signed before they existed) from its signature file's `bands` column.
- Exact rows (key, lo, doc, doc_id: the text hash's halves) whose high half lies in a range: from each
  part's `dedup_hashes` sidecar, its range's row groups; else from its signature file (`doc`, `doc_id`,
  `text_hash` columns).

Both go part by part: a reader holds one part's rows beside the range's.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from sluice.dedup.schemas import (
    BANDS,
    BANDS_SCHEMA,
    HASHES,
    HASHES_SCHEMA,
    SIGNATURES,
    absent,
    hash_halves,
    parquet_file,
)
from sluice.dedup.signatures import signature_band_rows
from sluice.io.layout import PartitionRef, groups_between, partition_prefix, read_parquet_file, side_prefix
from sluice.io.storage import StorageError, Store

_BAND_FRAME = {"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64}
EXACT_FRAME = {"key": pl.UInt64, "lo": pl.UInt64, "doc": pl.Int64, "doc_id": pl.String}


def _between(column: str, low: int, high: int) -> pl.Expr:
    return pl.col(column).is_between(pl.lit(low, pl.UInt64), pl.lit(high, pl.UInt64))


def _sidecar_rows(store: Store, key: str, low: int, high: int, schema: pa.Schema = BANDS_SCHEMA) -> pl.DataFrame | None:
    """Rows of a sidecar sorted by its first column (a uint64 hash) with it in [low, high] (only the row
    groups that can hold them are read); None when it does not exist."""
    try:
        with parquet_file(store, key) as parquet:
            groups = groups_between(parquet.metadata, low, high)
            table = parquet.read_row_groups(groups) if groups else schema.empty_table()
    except (FileNotFoundError, StorageError) as error:
        absent(store, key, error)
        return None
    frame: pl.DataFrame = pl.from_arrow(table)  # type: ignore[assignment]
    return frame.filter(_between(schema.names[0], low, high))


def _signature_rows(store: Store, key: str, low: int, high: int) -> pl.DataFrame:
    """The same rows from a signatures part file (partitions signed before band sidecars existed)."""
    signatures: pl.DataFrame = pl.from_arrow(read_parquet_file(store, key, columns=["doc", "bands"]))  # type: ignore[assignment]
    return signature_band_rows(signatures).filter(_between("hash", low, high))


def band_rows_between(store: Store, ref: PartitionRef, manifest: dict[str, Any], low: int, high: int) -> pl.DataFrame:
    """(band, hash, doc) rows of a signed partition (`manifest`: its signatures manifest) with a band hash
    in [low, high], sorted by (band, hash, doc)."""
    sidecars = {entry["key"] for entry in manifest.get("side_files", []) if entry.get("prefix") == side_prefix(BANDS, ref)}
    frames = [pl.DataFrame(schema=_BAND_FRAME)]
    for part, entry in enumerate(manifest["files"]):
        name = f"bands-{part:05d}.parquet"
        rows = _sidecar_rows(store, f"{side_prefix(BANDS, ref)}/{name}", low, high) if name in sidecars else None
        rows = rows.select("band", "hash", "doc") if rows is not None else None
        if rows is None:
            rows = _signature_rows(store, f"{partition_prefix(SIGNATURES, ref)}/{entry['key']}", low, high)
        frames.append(rows)
    return pl.concat(frames).sort("band", "hash", "doc")


def exact_rows_between(store: Store, ref: PartitionRef, manifest: dict[str, Any], low: int, high: int) -> pl.DataFrame:
    """(key, lo, doc, doc_id) of a signed partition's documents whose text hash's high half is in [low, high]."""
    sidecars = {entry["key"] for entry in manifest.get("side_files", []) if entry.get("prefix") == side_prefix(HASHES, ref)}
    frames = [pl.DataFrame(schema=EXACT_FRAME)]
    for part, entry in enumerate(manifest["files"]):
        name = f"hashes-{part:05d}.parquet"
        rows = _sidecar_rows(store, f"{side_prefix(HASHES, ref)}/{name}", low, high, HASHES_SCHEMA) if name in sidecars else None
        if rows is not None:
            frames.append(rows)
            continue
        table = read_parquet_file(store, f"{partition_prefix(SIGNATURES, ref)}/{entry['key']}", columns=["doc", "doc_id", "text_hash"])
        hi, lo = hash_halves(table.column("text_hash"))
        frame = pl.DataFrame({"key": hi, "lo": lo, "doc": table.column("doc"), "doc_id": table.column("doc_id")}, schema=EXACT_FRAME)
        frames.append(frame.filter(_between("key", low, high)))
    return pl.concat(frames)
