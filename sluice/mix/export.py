"""Read a built mix's token stream in order, and export it as Parquet rows of `sequence_length` token ids."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sluice.layout import _remove_tree, read_manifest
from sluice.mix.build import mix_prefix
from sluice.mix.plan import MixError
from sluice.mixindex import MixIndex
from sluice.storage import Store, local_temp_dir


def split_index(store: Store, manifest: dict[str, Any], split: str, file_reader: Callable[[str], str]) -> MixIndex:
    """The index of one split of a built mix (`file_reader(key)` gives a local path, fetching if remote)."""
    splits = manifest.get("splits", {})
    if split not in splits:
        raise MixError(f"mix {manifest['mix']!r} has no split {split!r}; splits are {sorted(splits)}")
    key = splits[split]["index"]
    return MixIndex(file_reader(key), name=store.uri(key))


def iter_split_tokens(store: Store, manifest: dict[str, Any], split: str, file_reader: Callable[[str], str]) -> Iterator[np.ndarray]:
    """The token stream of one split of a built mix, range by range (sequential, memory-mapped shards)."""
    index = split_index(store, manifest, split, file_reader)
    dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
    tokens: dict[int, np.ndarray] = {}
    try:
        for records in index.iter_chunks():
            for shard_id, start, length in zip(records["shard"].tolist(), records["start"].tolist(), records["length"].tolist(), strict=True):
                if shard_id not in tokens:
                    shard = manifest["shards"][shard_id]
                    tokens[shard_id] = np.memmap(file_reader(f"{shard['prefix']}/{shard['name']}.bin"), dtype=dtype, mode="r")
                yield tokens[shard_id][start : start + length]
    finally:
        index.close()


def export_sequences(
    store: Store,
    mix_name: str,
    split: str,
    destination: Store,
    key: str,
    file_reader: Callable[[str], str],
    rows_per_group: int = 1024,
) -> dict[str, Any]:
    """Write one split of a mix as Parquet rows of `sequence_length` token ids (`input_ids`, list<int32>).

    Row i is the split's token stream [i*L, (i+1)*L); the tail shorter than L is left out (and counted).
    Readable by any Parquet reader, e.g. `datasets.load_dataset("parquet", data_files=...)`.
    """
    manifest = read_manifest(store, mix_prefix(mix_name))
    if manifest is None:
        raise MixError(f"{store.uri(mix_prefix(mix_name))} has no manifest: materialize mixed_dataset[{mix_name}] first")
    length = int(manifest["sequence_length"])
    schema = pa.schema([("input_ids", pa.list_(pa.int32()))])
    scratch = local_temp_dir()
    path = os.path.join(scratch, "export.parquet")
    rows = 0
    try:
        with pq.ParquetWriter(path, schema, compression="zstd") as writer:
            # One row group's tokens are gathered in a fixed buffer (each token copied once).
            group_tokens = length * rows_per_group
            buffer = np.empty(group_tokens, np.int32)
            filled = 0
            for piece in iter_split_tokens(store, manifest, split, file_reader):
                offset = 0
                while offset < len(piece):
                    take = min(group_tokens - filled, len(piece) - offset)
                    buffer[filled : filled + take] = piece[offset : offset + take]
                    filled += take
                    offset += take
                    if filled == group_tokens:
                        writer.write_table(_sequence_table(buffer.copy(), length, schema))
                        rows += rows_per_group
                        filled = 0
            full = filled // length * length
            if full:
                writer.write_table(_sequence_table(buffer[:full].copy(), length, schema))
                rows += full // length
            leftover = filled - full
        destination.put_file(path, key)
    finally:
        _remove_tree(scratch)
    return {"uri": destination.uri(key), "rows": rows, "sequence_length": length, "tokens_left_out": int(leftover)}


def _sequence_table(tokens: np.ndarray, length: int, schema: pa.Schema) -> pa.Table:
    offsets = np.arange(0, len(tokens) + 1, length, dtype=np.int32)
    return pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))}, schema=schema)
