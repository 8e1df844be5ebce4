"""The stream order of a split: copies sorted by key (an external sort), copies of one document kept apart.

`KeyedBuckets` is the external sort: emitted ranges are scattered into files by key range (keys are uniform
in [0, 1), so each file holds about `BUCKET_ROWS` = 2^19 ranges) and read back one file at a time, sorted.
`write_split` then walks the buckets in order, makes sure no two copies of one document fall in the same
sample (a sample is stream tokens [s*L, s*L + L]; a copy that would share one with another copy of its
document is swapped with a range half a bucket away, and the check counts what is left), and writes the index
(`sluice.mix.index`) and the Parquet view of the ranges, gathering the values the mix's checks use.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sluice.mix.index import MixIndexWriter
from sluice.mix.plan import ComponentPlan, validation_keys

EMIT = np.dtype(
    [
        ("key", "<f8"),
        ("doc_hash", "<u8"),
        ("start", "<u8"),
        ("shard", "<u4"),
        ("doc", "<u4"),
        ("length", "<u4"),
        ("component", "<u2"),
        ("copy", "<u2"),
    ]
)
BUCKET_ROWS = 1 << 19
SEPARATION_ROUNDS = 8
RANGES_SCHEMA = pa.schema(
    [
        ("split", pa.dictionary(pa.int8(), pa.string())),
        ("offset", pa.int64()),
        ("shard", pa.int32()),
        ("doc", pa.int64()),
        ("start", pa.int64()),
        ("length", pa.int64()),
        ("component", pa.dictionary(pa.int16(), pa.string())),
        ("copy", pa.int16()),
    ]
)


def document_ids(records: np.ndarray) -> np.ndarray:
    """One uint64 per document: shard << 32 | document index in the shard."""
    return (records["shard"].astype(np.uint64) << np.uint64(32)) | records["doc"].astype(np.uint64)


def emit_copies(plans: list[ComponentPlan], spill: np.ndarray) -> np.ndarray:
    """The stream ranges of a chunk of training documents: each document's copies with their keys."""
    component = spill["component"].astype(np.int64)
    full = np.array([plan.full_epochs for plan in plans], np.int64)[component]
    extra = np.zeros(len(spill), bool)
    cut = np.zeros(len(spill), bool)
    cut_length = np.zeros(len(spill), np.int64)
    for index, plan in enumerate(plans):
        if plan.boundary_bin < 0:
            continue
        mine = np.flatnonzero(component == index)
        u, shard, doc = spill["u"][mine], spill["shard"][mine], spill["doc"][mine]
        extra[mine] = plan.in_fraction(u, shard, doc)
        cut[mine] = plan.is_cut(u, shard, doc)
        cut_length[mine] = plan.cut_length
    copies = full + extra
    source = np.repeat(np.arange(len(spill)), copies)
    copy = np.arange(len(source)) - np.repeat(np.cumsum(copies) - copies, copies)
    records = spill[source]
    out = np.empty(len(source), EMIT)
    for name in ("doc_hash", "start", "shard", "doc", "length", "component"):
        out[name] = records[name]
    out["copy"] = copy
    trimmed = cut[source] & (copy == full[source])  # the fractional-epoch copy of the cut document
    out["length"][trimmed] = cut_length[source][trimmed]
    # Copy e of a document with draw u goes to stream key (e + u / 2^64) / E (see sluice.mix.plan).
    epochs = np.array([plan.epochs or 1.0 for plan in plans], np.float64)
    out["key"] = (copy + records["u"].astype(np.float64) / float(1 << 64)) / epochs[records["component"].astype(np.int64)]
    return out


def emit_validation(spill: np.ndarray, seed: int) -> np.ndarray:
    """Validation ranges: every held-out document once, in a seeded order."""
    out = np.empty(len(spill), EMIT)
    for name in ("doc_hash", "start", "shard", "doc", "length", "component"):
        out[name] = spill[name]
    out["copy"] = 0
    out["key"] = validation_keys(spill["doc_hash"], seed)
    return out


class KeyedBuckets:
    """External sort by key in [0, 1): records scattered into files by key range, each read back sorted."""

    def __init__(self, folder: str, name: str, expected_rows: int) -> None:
        self.count = max(1, -(-expected_rows // BUCKET_ROWS))
        self.paths = [os.path.join(folder, f"{name}-{bucket:06d}.bucket") for bucket in range(self.count)]
        self.rows = 0

    def add(self, records: np.ndarray) -> None:
        bucket = np.clip((records["key"] * self.count).astype(np.int64), 0, self.count - 1)
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(self.count + 1))
        for index in np.flatnonzero(np.diff(bounds)).tolist():
            with open(self.paths[index], "ab") as handle:
                handle.write(records[order[bounds[index] : bounds[index + 1]]].tobytes())
        self.rows += len(records)

    def __iter__(self) -> Iterator[np.ndarray]:
        for path in self.paths:
            if not os.path.exists(path):
                continue
            records = np.fromfile(path, EMIT)
            os.remove(path)
            yield records[np.lexsort((records["copy"], records["doc"], records["shard"], records["key"]))]


def _sample_span(offsets: np.ndarray, lengths: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """First and last sample touching each range (sample s holds tokens s*L .. s*L + L)."""
    return np.maximum((offsets - 1) // length, 0), (offsets + lengths - 1) // length


def clashes(ids: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, length: int) -> np.ndarray:
    """Positions of ranges that share a sample with an earlier range of the same document."""
    first, last = _sample_span(offsets, lengths, length)
    order = np.lexsort((offsets, ids))
    same = ids[order][1:] == ids[order][:-1]
    overlap = first[order][1:] <= last[order][:-1]
    return np.sort(order[1:][same & overlap])


def separate_copies(context: np.ndarray, movable: np.ndarray, start: int, length: int) -> tuple[np.ndarray, int]:
    """Reorder `movable` (ranges about to be written from stream position `start`, after the already written
    `context` ranges) so that no two copies of a document share a sample; returns it and the clashes left."""
    if not len(movable):
        return movable, 0
    context_ids = document_ids(context)
    context_offsets = start - np.cumsum(context["length"][::-1].astype(np.int64))[::-1]
    remaining = 0
    for round_number in range(SEPARATION_ROUNDS + 1):
        lengths = movable["length"].astype(np.int64)
        offsets = np.concatenate([context_offsets, start + np.cumsum(lengths) - lengths])
        ids = np.concatenate([context_ids, document_ids(movable)])
        bad = clashes(ids, offsets, np.concatenate([context["length"].astype(np.int64), lengths]), length) - len(context)
        bad = bad[bad >= 0]
        remaining = len(bad)
        if not remaining or round_number == SEPARATION_ROUNDS:
            break
        count = len(movable)
        permutation = np.arange(count)
        for position in bad.tolist():  # only the clashing ranges (rare): swap each half the bucket away
            partner = (position + count // 2 + round_number) % count
            permutation[position], permutation[partner] = permutation[partner], permutation[position]
        movable = movable[permutation]
    return movable, remaining


@dataclass
class SplitStats:
    """Values gathered while a split is written: what the mix's checks compare."""

    components: int
    ranges: int = 0
    tokens: int = 0
    doc_hash_min: int | None = None
    doc_hash_max: int | None = None
    flagged_in_index: int = 0
    blocked_in_index: int = 0
    copies_in_one_sample: int = 0
    component_tokens: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.component_tokens = np.zeros(self.components, np.int64)

    def add(self, records: np.ndarray, flagged: np.ndarray, blocked: np.ndarray | None = None) -> None:
        if not len(records):
            return
        self.ranges += len(records)
        self.tokens += int(records["length"].sum(dtype=np.int64))
        self.component_tokens += np.bincount(records["component"], weights=records["length"], minlength=self.components).astype(np.int64)
        low, high = int(records["doc_hash"].min()), int(records["doc_hash"].max())
        self.doc_hash_min = low if self.doc_hash_min is None else min(self.doc_hash_min, low)
        self.doc_hash_max = high if self.doc_hash_max is None else max(self.doc_hash_max, high)
        if len(flagged):
            self.flagged_in_index += int(np.isin(document_ids(records), flagged).sum())
        if blocked is not None and len(blocked):
            self.blocked_in_index += int(np.isin(document_ids(records), blocked).sum())


def write_split(
    buckets: KeyedBuckets,
    split: str,
    index_path: str,
    parquet_path: str,
    tokens: int,
    sequence_length: int,
    component_names: list[str],
    flagged: np.ndarray,
    separate: bool,
    blocked: np.ndarray | None = None,
) -> SplitStats:
    """Write one split's index and Parquet ranges from its sorted buckets (one bucket in memory at a time)."""
    stats = SplitStats(len(component_names))
    writer = MixIndexWriter(index_path, buckets.rows, tokens, sequence_length)
    split_dictionary = pa.array([split], pa.string())
    component_dictionary = pa.array(component_names, pa.string())
    context = np.zeros(0, EMIT)
    try:
        with pq.ParquetWriter(parquet_path, RANGES_SCHEMA, compression="zstd", compression_level=3) as parquet:
            for records in buckets:
                if separate:
                    records, left = separate_copies(context, records, writer.written_tokens, sequence_length)
                    stats.copies_in_one_sample += left
                offsets = writer.append(records["shard"], records["start"], records["doc"], records["length"], records["component"], records["copy"])
                stats.add(records, flagged, blocked)
                parquet.write_table(_ranges_table(records, offsets, split_dictionary, component_dictionary), row_group_size=BUCKET_ROWS)
                if separate:
                    joined = np.concatenate([context, records])
                    ends = writer.written_tokens - np.cumsum(joined["length"][::-1].astype(np.int64))[::-1] + joined["length"]
                    open_sample = max((writer.written_tokens - 1) // sequence_length, 0)
                    context = joined[(ends - 1) // sequence_length >= open_sample]  # ranges the next one can share a sample with
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return stats


def _ranges_table(records: np.ndarray, offsets: np.ndarray, split: pa.Array, components: pa.Array) -> pa.Table:
    count = len(records)
    return pa.table(
        {
            "split": pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, np.int8)), split),
            "offset": offsets.astype(np.int64),
            "shard": records["shard"].astype(np.int32),
            "doc": records["doc"].astype(np.int64),
            "start": records["start"].astype(np.int64),
            "length": records["length"].astype(np.int64),
            "component": pa.DictionaryArray.from_arrays(pa.array(records["component"].astype(np.int16)), components),
            "copy": records["copy"].astype(np.int16),
        },
        schema=RANGES_SCHEMA,
    )
