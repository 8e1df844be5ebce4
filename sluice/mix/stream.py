"""Read a built mix's token stream in stream order, range by range (the plain concatenation the index describes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from sluice.io.storage import Store
from sluice.mix.index import MixIndex
from sluice.mix.plan import MixError
from sluice.mix.shard_table import ShardTable
from sluice.tokens.shards import binary_folder


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
    table = ShardTable(store, manifest)
    try:
        for records in index.iter_chunks():
            for shard_id, start, length in zip(records["shard"].tolist(), records["start"].tolist(), records["length"].tolist(), strict=True):
                if shard_id not in tokens:
                    shard = table[shard_id]
                    tokens[shard_id] = np.memmap(file_reader(f"{binary_folder(shard, shard['prefix'])}/{shard['name']}.bin"), dtype=dtype, mode="r")
                yield tokens[shard_id][start : start + length]
    finally:
        index.close()
