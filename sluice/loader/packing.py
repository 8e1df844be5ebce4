"""Batches of samples with their document boundaries, built on the CPU from the mix index.

    input_ids, labels   int64 [B, L]; labels = -100 where the label crosses a document boundary if
                        `mask_document_boundaries` (the first token of a document is not predicted from
                        the previous document)
    position_ids        int64 [B, L], restarting at 0 at every document start (and at each sample start)
    cu_seqlens          int32 [segments + 1], cumulative segment lengths over the flattened [B * L]
                        tokens, for variable-length attention (flash_attn_varlen_func and the like)
    max_seqlen          int, the longest segment

A segment is the piece of one index record (one document) inside one sample's inputs; `segment_records`
(the records of the input segments, aligned with cu_seqlens) carries each segment's document identity
(shard, doc, component, copy).

With provenance on (`TrainingLoader(provenance=True)`), a batch also carries

    provenance          int64 [segments, 5], row i describing segment i (tokens cu_seqlens[i] ..
                        cu_seqlens[i+1] of the flattened inputs), columns `PROVENANCE_COLUMNS`:
                        record      index of the segment's record in the mix index (`sluice.mix.index`)
                        shard       shard id in the mix manifest's `shards`
                        doc         document index in that shard (its .idx / .docs.parquet row)
                        token_begin, token_end   the segment's tokens inside the document: doc tokens
                                    [token_begin, token_end) (the document's EOS is its last token)
    positions           int64 [B], the stream positions of the batch's samples (`sluice.loader.order`)

which is enough to name every document and token span of the batch offline (`sluice trace`). Each window's
last token (the last label) is not part of any input segment; it belongs to the next segment's document.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from sluice.loader.data import MixedTokens

IGNORE_INDEX = -100  # the label value torch's cross_entropy ignores
PROVENANCE_COLUMNS = ("record", "shard", "doc", "token_begin", "token_end")
# Tokens packed per call: batches are built this many at a time, then cut apart (per-call numpy costs are
# amortized over more batches; 2^18 int64 tokens x 3 fields is 6 MiB of host memory per call).
PACK_TOKENS = 1 << 18
_ARANGES: dict[tuple[int, str], np.ndarray] = {}


def _arange(size: int, dtype: type) -> np.ndarray:
    """A cached, read-only np.arange(size) (batches have one shape, so this is built once)."""
    key = (size, np.dtype(dtype).str)
    values = _ARANGES.get(key)
    if values is None:
        values = _ARANGES[key] = np.arange(size, dtype=dtype)
        values.flags.writeable = False
    return values


def window_segments(data: MixedTokens, ids: np.ndarray) -> dict[str, np.ndarray]:
    """The segments of the samples' windows (L + 1 tokens each) from one index probe per sample, reading no
    tokens: records covering each window, their counts, the first record's index (and each record's, where
    the index read computed it: `indices`, else None), and per segment its row, [seg_begin, seg_end) inside
    the window and `in_doc`, where it starts inside its document (a record's first token is its document's)."""
    length = data.sequence_length
    records, counts, first, indices = data.index().sample_records_indexed(ids)
    row = np.repeat(np.arange(len(ids)), counts)
    row_begin = ids[row] * length
    offsets = records["offset"].astype(np.int64)
    seg_begin = np.maximum(offsets - row_begin, 0)
    seg_end = np.minimum(offsets + records["length"].astype(np.int64) - row_begin, length + 1)
    in_doc = row_begin + seg_begin - offsets
    return {"records": records, "counts": counts, "first": first, "indices": indices, "row": row, "seg_begin": seg_begin, "seg_end": seg_end, "in_doc": in_doc}


def locate_segments(data: MixedTokens, sample_ids: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
    """What `pack_arrays(..., provenance=True)` says about the samples' input segments (`segment_starts`,
    `segment_records`, `provenance`), from the index alone: no token is read (what a trace needs)."""
    where = window_segments(data, np.asarray(sample_ids, dtype=np.int64))
    inputs = input_segments(where, data.sequence_length)
    return {
        "segment_starts": inputs["starts"],
        "segment_records": inputs["records"],
        "provenance": segment_provenance(where, inputs),
    }


def input_segments(where: dict[str, np.ndarray], length: int) -> dict[str, np.ndarray]:
    """The segments of `window_segments` that lie in the inputs (a window without its last token): which they
    are (`mask`), their rows, starts inside the row (`begin`) and over the flattened [rows * length] inputs
    (`starts`), sizes and records."""
    mask = where["seg_begin"] < length
    row, begin = where["row"][mask], where["seg_begin"][mask]
    return {
        "mask": mask, "row": row, "begin": begin, "starts": row * length + begin,
        "sizes": np.minimum(where["seg_end"][mask], length) - begin, "records": where["records"][mask],
    }


def window_spans(data: MixedTokens, ids: np.ndarray) -> dict[str, np.ndarray]:
    """`window_segments` plus each segment's span in its shard: `shard`, `source` (its first token there) and
    `size` (tokens). The spans, in order, tile the windows."""
    where = window_segments(data, ids)
    records = where["records"]
    source = records["start"].astype(np.int64) + where["in_doc"]  # token offset inside the shard
    return {**where, "shard": records["shard"].astype(np.int64), "source": source, "size": where["seg_end"] - where["seg_begin"]}


def reads_of(data: MixedTokens, sample_ids: Sequence[int] | np.ndarray) -> list:
    """What the remote provider's `plan` takes for the given samples, in read order: their spans (shard,
    first token, tokens) for the `SpanCache` (those `read_windows` reads), their shard ids for the
    `ShardCache`."""
    return reads_by_batch(data, [np.asarray(sample_ids, np.int64)])[0]


def reads_by_batch(data: MixedTokens, batches: Sequence[np.ndarray]) -> list[list]:
    """`reads_of` of several batches from one index lookup (on S3 the index's GETs of all their samples go
    out together instead of a batch's at a time), split back per batch."""
    if not batches:
        return []
    ids = np.concatenate([np.asarray(batch, np.int64) for batch in batches])
    if getattr(data.shards(), "spans", False):
        spans = window_spans(data, ids)
        reads, counts = list(zip(*(spans[name].tolist() for name in ("shard", "source", "size")), strict=True)), spans["counts"]
    else:
        records, counts = data.index().sample_records(ids)
        reads = records["shard"].astype(np.int64).tolist()
    ends = np.concatenate([[0], np.cumsum(counts)])[np.cumsum([len(batch) for batch in batches])].tolist()
    return [reads[begin:end] for begin, end in zip([0, *ends[:-1]], ends, strict=True)]


def read_windows(data: MixedTokens, ids: np.ndarray) -> dict[str, np.ndarray]:
    """The token windows (L + 1 tokens each) of the given samples, and their segments.

    One probe of the index per sample gives the records covering its window; the segments (pieces of one
    record inside one window) are computed with a few numpy calls and read from the shards with one pread
    each, straight into the window buffer (the segments tile the windows in order), or, for a mix read
    through memory maps, copied by one concatenate of their slices, or, on S3 (`SpanCache`), copied from
    the ranged GETs of just those spans.
    """
    width = data.sequence_length + 1
    count = len(ids)
    where = window_spans(data, ids)
    source, sizes = where["source"], where["size"]
    window = np.empty(count * width, dtype=data.token_dtype)  # token dtype: the reads move 2 (or 4) bytes a token
    view = memoryview(window).cast("B")
    item = window.itemsize
    shard_ids = where["shard"].tolist()
    provider = data.shards()
    if getattr(provider, "spans", False):
        provider.read_spans(shard_ids, source.tolist(), sizes.tolist(), view)
        return {**where, "window": window.reshape(count, width)}
    # Each shard once per call, in read order (the references keep files open even if the cache evicts one).
    files = {shard: None for shard in shard_ids}
    get = provider.get
    for shard in files:
        files[shard] = get(shard)
    if data.mapped:  # small mixes: slices of the memory maps, one concatenate fills every window
        pieces = [files[shard].array[a:b] for shard, a, b in zip(shard_ids, source.tolist(), (source + sizes).tolist(), strict=True)]
        if sum(map(len, pieces)) != len(window):
            for shard, start, size in zip(shard_ids, source.tolist(), sizes.tolist(), strict=True):
                files[shard].read_into(memoryview(np.empty(size, window.dtype)).cast("B"), start, size)
        if pieces:
            np.concatenate(pieces, out=window)
        return {**where, "window": window.reshape(count, width)}
    fds = [files[shard].fd for shard in shard_ids]
    ends = np.cumsum(sizes) * item
    read = 0
    preadv = os.preadv
    for fd, begin, end, at in zip(fds, (ends - sizes * item).tolist(), ends.tolist(), (source * item).tolist(), strict=True):
        read += preadv(fd, [view[begin:end]], at)
    if read != len(view):  # a shard shorter than the mix says: name it
        for shard, start, size in zip(shard_ids, source.tolist(), sizes.tolist(), strict=True):
            files[shard].read_into(memoryview(np.empty(size, window.dtype)).cast("B"), start, size)
    return {**where, "window": window.reshape(count, width)}


def pack_arrays(
    data: MixedTokens, sample_ids: Sequence[int] | np.ndarray, mask_document_boundaries: bool, out: np.ndarray | None = None,
    provenance: bool = False,
) -> dict[str, np.ndarray]:
    """Rows of samples with their document-boundary fields, as numpy arrays (see the module docstring).

    `out`, an int64 array [3, rows, length], receives input_ids, labels and position_ids (one buffer, so a
    DataLoader worker sends one tensor per group of batches). `provenance` adds the `provenance` array.
    """
    length = data.sequence_length
    ids = np.asarray(sample_ids, dtype=np.int64)
    count = len(ids)
    read = read_windows(data, ids)
    window, row, seg_begin = read["window"], read["row"], read["seg_begin"]
    # A document starts at every segment start except each window's first (that one starts the sample).
    new_doc = seg_begin > 0
    doc_row, doc_at = row[new_doc], seg_begin[new_doc]
    # Segments of the inputs: position ids count up from 0 inside each, and cu_seqlens lists their starts.
    segments = input_segments(read, length)
    begin_in, input_sizes = segments["begin"], segments["sizes"]
    if out is None:
        out = np.empty((3, count, length), dtype=np.int64)
    inputs, labels, positions = out[0], out[1], out[2]
    # Position ids are j minus the start of j's document inside the row: computed in 16 bits (a third of
    # the memory traffic of int64; positions are < length), then widened once.
    narrow = np.uint16 if length <= 1 << 16 else np.int64
    document_start = np.repeat(begin_in.astype(narrow), input_sizes).reshape(count, length)
    np.copyto(positions, np.subtract(_arange(length, narrow), document_start, out=document_start))
    np.copyto(labels, window[:, 1:])
    np.copyto(inputs, window[:, :-1])
    if mask_document_boundaries:
        labels[doc_row, doc_at - 1] = IGNORE_INDEX  # label j is token j + 1, the first of another document
    packed = {
        "input_ids": inputs,
        "labels": labels,
        "position_ids": positions,
        "segment_starts": segments["starts"],
        "segment_sizes": input_sizes,
        "segment_records": segments["records"],
    }
    if provenance:
        packed["provenance"] = segment_provenance(read, segments)
    return packed


def segment_provenance(where: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The `provenance` rows (PROVENANCE_COLUMNS) of the input segments (`input_segments`) of a
    `window_segments` result, from what reading and packing computed already: each segment's start inside
    its document (`in_doc`) and, on a memory-mapped index, each record's index. A few whole-array numpy
    calls per packed group; no per-sample Python object."""
    mask, records = inputs["mask"], inputs["records"]
    out = np.empty((len(records), len(PROVENANCE_COLUMNS)), dtype=np.int64)
    indices = where["indices"]
    if indices is not None:
        out[:, 0] = indices[mask]
    else:  # a sample's records are consecutive: record k of sample i is first[i] + k
        counts = where["counts"]
        np.add((where["first"] - (np.cumsum(counts) - counts))[inputs["row"]], np.flatnonzero(mask), out=out[:, 0])
    out[:, 1] = records["shard"]
    out[:, 2] = records["doc"]
    out[:, 3] = where["in_doc"][mask]
    np.add(out[:, 3], inputs["sizes"], out=out[:, 4])
    return out


def pack_samples(data: MixedTokens, sample_ids: Sequence[int] | np.ndarray, mask_document_boundaries: bool = False, provenance: bool = False) -> dict[str, Any]:
    """One batch of samples with document-boundary fields for variable-length attention (all on the CPU)."""
    return split_packed(pack_arrays(data, sample_ids, mask_document_boundaries, provenance=provenance), 1)[0]


def split_packed(packed: dict[str, np.ndarray], pieces: int) -> list[dict[str, Any]]:
    """Cut packed rows into `pieces` batches of equal size, each with its own cu_seqlens / max_seqlen."""
    rows, length = packed["input_ids"].shape
    size = rows // pieces
    starts, sizes = packed["segment_starts"], packed["segment_sizes"]
    # Every row begins a segment, so segments never straddle two pieces: piece p owns segments
    # edges[p]..edges[p+1]-1, and its cu_seqlens are their starts relative to the piece, then its token count.
    edges = np.searchsorted(starts, np.arange(pieces + 1, dtype=np.int64) * size * length)
    relative = starts - np.repeat(np.arange(pieces, dtype=np.int64) * size * length, np.diff(edges))
    bounds = np.insert(relative, edges[1:], size * length).astype(np.int32)  # piece p: bounds[edges[p]+p : edges[p+1]+p+1]
    nonempty = edges[:-1] < edges[1:]
    max_seqlen = np.zeros(pieces, dtype=np.int64)
    if nonempty.any():
        max_seqlen[nonempty] = np.maximum.reduceat(sizes, edges[:-1][nonempty])
    inputs, labels, positions = packed["input_ids"], packed["labels"], packed["position_ids"]
    provenance = packed.get("provenance")
    out = []
    for piece, (a, b, longest) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist(), max_seqlen.tolist(), strict=True)):
        rows_slice = slice(piece * size, (piece + 1) * size)
        out.append(
            {
                # (numpy slices wrapped by from_numpy cost less than slicing tensors)
                "input_ids": torch.from_numpy(inputs[rows_slice]),
                "labels": torch.from_numpy(labels[rows_slice]),
                "position_ids": torch.from_numpy(positions[rows_slice]),
                "cu_seqlens": torch.from_numpy(bounds[a + piece : b + piece + 1]),
                "max_seqlen": longest,
            }
        )
        if provenance is not None:
            out[-1]["provenance"] = torch.from_numpy(provenance[a:b])
    return out
