"""The samples an export writes: the training loader's order and packing, plus each segment's document id.

Row r of an export is the r-th sample the training loader yields at world size 1 in epoch 0 with the
export's seed (`sluice.loader.order.GlobalOrder`), packed by the loader's own code (`pack_arrays`):
`input_ids` and `labels` of `sequence_length` tokens, and the sample's segments (pieces of one document).
Samples are produced in blocks of about `PACK_TOKENS` tokens, so memory does not grow with the mix.

Document ids come from the shards' `.docs.parquet` files through `DocIdTable`: one pass writes every id of
the mix's shards into two local scratch files (UTF-8 bytes back to back, and uint64 end offsets), read
through memory maps (clean file pages the kernel can drop, not heap), so a lookup is two array gathers
whatever the order the loader visits documents in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.export.errors import ExportError
from sluice.io.layout import read_parquet_file
from sluice.io.storage import Store
from sluice.loader import PACK_TOKENS, GlobalOrder, MixedTokens, pack_arrays
from sluice.loader.packing import reads_of


class DocIdTable:
    """Every document id of a mix's shards, looked up by (shard, doc) (see the module docstring)."""

    def __init__(self, store: Store, shards: list[dict[str, Any]], folder: str, scratch: str | None = None) -> None:
        self.base = np.zeros(len(shards) + 1, np.int64)  # shard s's documents are global ids base[s] .. base[s+1]
        data_path, ends_path = os.path.join(folder, "doc_ids.bin"), os.path.join(folder, "doc_ids.ends")
        written = 0
        with open(data_path, "wb") as data, open(ends_path, "wb") as ends:
            ends.write(np.zeros(1, "<u8").tobytes())
            for number, shard in enumerate(shards):
                key = f"{shard['prefix']}/{shard['name']}.docs.parquet"
                column = read_parquet_file(store, key, columns=["doc_id"], scratch=scratch).column("doc_id")
                column = column.cast(pa.large_string()).combine_chunks()
                if len(column) != int(shard["documents"]) or column.null_count:
                    raise ExportError(f"{store.uri(key)}: {len(column)} document ids ({column.null_count} null) for {shard['documents']} documents")
                offsets = np.frombuffer(column.buffers()[1], np.int64, count=len(column) + 1, offset=column.offset * 8)
                body = column.buffers()[2]
                if body is not None and offsets[-1] > offsets[0]:
                    data.write(memoryview(body)[int(offsets[0]) : int(offsets[-1])])
                ends.write((offsets[1:] - offsets[0] + written).astype("<u8").tobytes())
                written += int(offsets[-1] - offsets[0])
                self.base[number + 1] = self.base[number] + len(column)
        self.ends = np.memmap(ends_path, "<u8", "r")
        self.data = np.memmap(data_path, np.uint8, "r") if written else np.zeros(0, np.uint8)

    def lookup(self, shard: np.ndarray, doc: np.ndarray) -> pa.StringArray:
        """The ids of documents (shard[i], doc[i]), as one Arrow string array (vectorized gathers)."""
        number = self.base[np.asarray(shard, np.int64)] + np.asarray(doc, np.int64)
        starts = self.ends[number].astype(np.int64)
        lengths = self.ends[number + 1].astype(np.int64) - starts
        offsets = np.zeros(len(number) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] >= 1 << 31:
            raise ExportError("the document ids of one block exceed 2 GiB")
        positions = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
        body = self.data[positions]
        return pa.StringArray.from_buffers(len(number), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(body))


@dataclass
class Block:
    """Consecutive export rows: per sample its row number, mix sample id, tokens, and segments.

    Sample i's `cu_seqlens` are cu_values[cu_offsets[i] : cu_offsets[i+1]] (0, segment starts, L) and its
    document ids doc_ids[doc_offsets[i] : doc_offsets[i+1]], one per segment (doc_offsets = cu_offsets - i).
    """

    rows: np.ndarray  # int64 [n]
    sample_ids: np.ndarray  # int64 [n]
    input_ids: np.ndarray  # int32 [n, L]
    labels: np.ndarray  # int32 [n, L]
    cu_offsets: np.ndarray  # int64 [n + 1]
    cu_values: np.ndarray  # int32
    doc_ids: pa.StringArray  # one per segment

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def doc_offsets(self) -> np.ndarray:
        return self.cu_offsets - np.arange(len(self.cu_offsets), dtype=np.int64)

    def slice(self, begin: int, end: int) -> Block:
        cu, docs = self.cu_offsets, self.doc_offsets
        return Block(
            self.rows[begin:end], self.sample_ids[begin:end], self.input_ids[begin:end], self.labels[begin:end],
            cu[begin : end + 1] - cu[begin], self.cu_values[cu[begin] : cu[end]], self.doc_ids.slice(docs[begin], docs[end] - docs[begin]),
        )

    def doc_id_bytes(self) -> np.ndarray:
        """UTF-8 bytes of each sample's document ids, summed (int64 [n])."""
        ends = np.frombuffer(self.doc_ids.buffers()[1], np.int32, count=len(self.doc_ids) + 1, offset=self.doc_ids.offset * 4).astype(np.int64)
        docs = self.doc_offsets
        return ends[docs[1:]] - ends[docs[:-1]]


def repeated_documents(rows: np.ndarray, shard: np.ndarray, doc: np.ndarray) -> int:
    """Segments whose document already has a segment in the same sample (copies sharing a sequence)."""
    if len(rows) < 2:
        return 0
    order = np.lexsort((doc, shard, rows))
    keys = np.stack([rows[order], shard[order].astype(np.int64), doc[order].astype(np.int64)])
    return int(np.all(keys[:, 1:] == keys[:, :-1], axis=0).sum())


def iter_blocks(
    data: MixedTokens, seed: int, doc_ids: DocIdTable, mask_document_boundaries: bool, on_repeat: Callable[[int], None] | None = None,
) -> Iterator[Block]:
    """The split's samples in the loader's epoch-0 order, `PACK_TOKENS` tokens per block."""
    length = data.sequence_length
    total = len(data)
    order = GlobalOrder(total, seed)
    per_block = max(1, PACK_TOKENS // length)
    shards = data.shards()
    upcoming = None
    for begin in range(0, total, per_block):
        count = min(per_block, total - begin)
        ids = upcoming if upcoming is not None else order.samples(begin, count)[0]
        if shards.remote:  # fetch this block's shards and start on the next block's (the loader's cache plan)
            after = begin + count
            upcoming = order.samples(after, min(per_block, total - after))[0] if after < total else np.zeros(0, np.int64)
            shards.plan(reads_of(data, ids) + reads_of(data, upcoming))
        packed = pack_arrays(data, ids, mask_document_boundaries)
        starts, records = packed["segment_starts"], packed["segment_records"]
        row = starts // length
        counts = np.bincount(row, minlength=count)
        cu_offsets = np.zeros(count + 1, np.int64)
        np.cumsum(counts + 1, out=cu_offsets[1:])
        cu_values = np.full(int(cu_offsets[-1]), length, np.int32)  # each sample's last entry is L
        inner = np.ones(len(cu_values), bool)
        inner[cu_offsets[1:] - 1] = False
        cu_values[inner] = starts - row * length
        shard, doc = records["shard"].astype(np.int64), records["doc"].astype(np.int64)
        if on_repeat is not None:
            on_repeat(repeated_documents(row, shard, doc))
        yield Block(
            rows=np.arange(begin, begin + count, dtype=np.int64),
            sample_ids=np.asarray(ids, np.int64),
            input_ids=packed["input_ids"].astype(np.int32),
            labels=packed["labels"].astype(np.int32),
            cu_offsets=cu_offsets,
            cu_values=cu_values,
            doc_ids=doc_ids.lookup(shard, doc),
        )
