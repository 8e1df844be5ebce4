"""Parquet export: `part-NNNNN.parquet` files of one row per sample (zstd), the export's metadata in the schema."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sluice.export.samples import Block
from sluice.export.shard_writer import ShardWriter

ROW_GROUP_BYTES = 32 << 20  # uncompressed sample bytes per row group


def schema(info: dict[str, Any]) -> pa.Schema:
    """The rows' schema; its metadata key `sluice` holds the export's description (`info`) as JSON."""
    fields = [
        pa.field("sample_id", pa.int64(), nullable=False),
        pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("labels", pa.list_(pa.int32()), nullable=False),
        pa.field("cu_seqlens", pa.list_(pa.int32()), nullable=False),
        pa.field("doc_ids", pa.list_(pa.string()), nullable=False),
    ]
    return pa.schema(fields, metadata={"sluice": json.dumps(info, sort_keys=True)})


def block_table(block: Block, table_schema: pa.Schema) -> pa.Table:
    length = block.input_ids.shape[1]
    rows = np.arange(len(block) + 1, dtype=np.int32) * length
    offsets = pa.array(rows)
    return pa.Table.from_arrays(
        [
            pa.array(block.sample_ids),
            pa.ListArray.from_arrays(offsets, pa.array(block.input_ids.reshape(-1))),
            pa.ListArray.from_arrays(offsets, pa.array(block.labels.reshape(-1))),
            pa.ListArray.from_arrays(pa.array(block.cu_offsets.astype(np.int32)), pa.array(block.cu_values)),
            pa.ListArray.from_arrays(pa.array(block.doc_offsets.astype(np.int32)), block.doc_ids),
        ],
        schema=table_schema,
    )


class ParquetShards(ShardWriter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema = schema(self.info)
        self.writer: pq.ParquetWriter | None = None
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0

    def shard_name(self, number: int) -> str:
        return f"part-{number:05d}.parquet"

    def prepare(self, block: Block) -> tuple[np.ndarray, None]:
        # 8 (sample_id) + 2 x 4L (tokens) + 4 per cu_seqlens entry + 4 per id offset + the ids' bytes
        segments = np.diff(block.doc_offsets)
        length = block.input_ids.shape[1]
        return 8 + 8 * length + 4 * (segments + 1) + 4 * segments + block.doc_id_bytes(), None

    def open(self, path: str) -> None:
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd", compression_level=3, write_statistics=["sample_id"])

    def write(self, block: Block, items: None) -> None:
        self.pending.append(block_table(block, self.schema))
        self.pending_bytes += int(self.prepare(block)[0].sum())
        if self.pending_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            table = pa.concat_tables(self.pending)
            self.writer.write_table(table, row_group_size=table.num_rows)
        self.pending, self.pending_bytes = [], 0

    def finish(self) -> None:
        self._flush()
        self.writer.close()
        self.writer = None
