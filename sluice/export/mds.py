"""MosaicML Streaming (MDS) export: `shard.NNNNN.mds` files and the `index.json` that `StreamingDataset` reads.

Columns and their MDS encodings (MDS orders columns by name):

    cu_seqlens  ndarray:int32      variable: 1 byte (ndim << 2 | shape dtype code), the shape, the values
    doc_ids     json               variable: UTF-8 JSON list of the segments' document ids
    input_ids   ndarray:int32:L    fixed: L little-endian int32
    labels      ndarray:int32:L    fixed
    sample_id   int64              fixed: 8 bytes

An encoded sample is the uint32 sizes of its variable columns, then every column's bytes, in column order.
A shard file is: uint32 sample count n, n + 1 uint32 offsets (from the start of the file) of each sample
and of the end, the shard's writer configuration as JSON (sorted keys), then the samples; offsets are
32-bit, so a shard stays under 4 GiB. `index.json` is {"version": 2, "shards": [per shard: that
configuration plus samples, raw_data {basename, bytes, hashes}, zip_data null]}. No compression (a reader
maps shards directly); the export manifest holds each shard's SHA-256.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import numpy as np

from sluice.export.samples import Block
from sluice.export.shard_writer import ShardWriter

INDEX = "index.json"
MAX_SHARD_BYTES = (1 << 32) - 1
_SHAPE_DTYPES = ((1 << 8, 0, "<u1"), (1 << 16, 1, "<u2"), (1 << 32, 2, "<u4"))


def columns(sequence_length: int) -> dict[str, str]:
    return {
        "cu_seqlens": "ndarray:int32",
        "doc_ids": "json",
        "input_ids": f"ndarray:int32:{sequence_length}",
        "labels": f"ndarray:int32:{sequence_length}",
        "sample_id": "int64",
    }


def shard_config(sequence_length: int, size_limit: int) -> dict[str, Any]:
    """What MDS records of a shard's writer (also in each index.json entry)."""
    encodings = columns(sequence_length)
    names = sorted(encodings)
    sizes = {"input_ids": 4 * sequence_length, "labels": 4 * sequence_length, "sample_id": 8}
    return {
        "version": 2,
        "format": "mds",
        "compression": None,
        "hashes": [],
        "size_limit": size_limit,
        "column_names": names,
        "column_encodings": [encodings[name] for name in names],
        "column_sizes": [sizes.get(name) for name in names],
    }


def _vector(values: np.ndarray) -> bytes:
    """A 1-d int32 array in MDS's dynamic-shape ndarray encoding."""
    size = len(values)
    code, dtype = next((code, dtype) for limit, code, dtype in _SHAPE_DTYPES if size < limit)
    return bytes([(1 << 2) | code]) + np.array([size], dtype).tobytes() + values.astype("<i4", copy=False).tobytes()


class MDSShards(ShardWriter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.shard_bytes > MAX_SHARD_BYTES:
            raise ValueError(f"an MDS shard must stay under 4 GiB (32-bit offsets); shard_bytes is {self.shard_bytes}")
        length = int(self.info["sequence_length"])
        self.config = shard_config(length, self.shard_bytes)
        self.config_bytes = json.dumps(self.config, sort_keys=True).encode("utf-8")
        self.shard_overhead = 4 + 4 + len(self.config_bytes)  # count, the end offset, the configuration
        self.body = None
        self.sizes: list[int] = []

    def shard_name(self, number: int) -> str:
        return f"shard.{number:05d}.mds"

    def prepare(self, block: Block) -> tuple[np.ndarray, list[bytes]]:
        doc_ids = block.doc_ids.to_pylist()
        cu, docs = block.cu_offsets.tolist(), block.doc_offsets.tolist()
        items = []
        for i, sample_id in enumerate(block.sample_ids.tolist()):
            cu_seqlens = _vector(block.cu_values[cu[i] : cu[i + 1]])
            ids = json.dumps(doc_ids[docs[i] : docs[i + 1]]).encode("utf-8")
            items.append(
                b"".join(
                    (np.array([len(cu_seqlens), len(ids)], "<u4").tobytes(), cu_seqlens, ids, block.input_ids[i].astype("<i4", copy=False).tobytes(),
                     block.labels[i].astype("<i4", copy=False).tobytes(), np.array([sample_id], "<i8").tobytes())
                )
            )
        return np.array([4 + len(item) for item in items], np.int64), items  # + its 4-byte offset

    def open(self, path: str) -> None:
        self.body = open(path + ".body", "wb")  # noqa: SIM115 - open until finish()
        self.sizes = []

    def write(self, block: Block, items: list[bytes]) -> None:
        for item in items:
            self.body.write(item)
            self.sizes.append(len(item))

    def finish(self) -> None:
        self.body.close()
        count = len(self.sizes)
        offsets = np.zeros(count + 1, np.int64)
        np.cumsum(self.sizes, out=offsets[1:])
        offsets += 4 + 4 * (count + 1) + len(self.config_bytes)
        with open(self.path, "wb") as out, open(self.body.name, "rb") as body:
            out.write(np.array([count], "<u4").tobytes() + offsets.astype("<u4").tobytes() + self.config_bytes)
            shutil.copyfileobj(body, out, 1 << 20)
        os.remove(self.body.name)
        self.body = None

    def index(self) -> bytes:
        """index.json for the published shards."""
        shards = [
            {**self.config, "samples": entry["rows"], "raw_data": {"basename": entry["key"], "bytes": entry["bytes"], "hashes": {}}, "zip_data": None}
            for entry in self.entries
        ]
        return json.dumps({"version": 2, "shards": shards}, sort_keys=True).encode("utf-8")
