"""Stream a built mix (`sluice.mix`) into PyTorch: exact global shuffle, exact/elastic resume, packed batches.

    from sluice.loader import MixedTokens, TrainingLoader
    data = MixedTokens(store, "default")                    # one split of a mix; nothing of its size is loaded
    loader = TrainingLoader(data, batch_size=8, seed=1, rank=r, world_size=w, num_workers=2)
    loader.load_state_dict(state)                           # optional: resume (any world size / worker count)
    for batch in loader: ...                                # input_ids, labels, position_ids, cu_seqlens, ...

The package, in reading order:
    data.py          `MixedTokens`: a split's manifest, index (`sluice.mix.index`, read with pread, fetched into
                     the local cache from S3) and token reads; opened lazily in every process
    order.py         the global order: per-epoch Feistel permutations, positions -> samples, rank slices
    cache.py         shard access: local files in place; on S3 ranged GETs of the samples' token spans, planned
                     ahead (`SpanCache`), or whole shards through a byte-limited prefetching cache
    packing.py       samples -> batches with document boundaries (position_ids, cu_seqlens, masked labels)
    torch_loader.py  the IterableDataset, DataLoader workers, `TrainingLoader` (state, devices, stall metric)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Names are imported on first use (PEP 562): the code location imports `sluice.loader.skip` for the blocklist,
# and must not pay for torch (about 1 s per process) in every Dagster run and step process.
_MODULE_OF = {
    "MAX_OPEN_SHARDS": "cache", "CacheStats": "cache", "LocalShards": "cache", "ShardCache": "cache",
    "ShardFile": "cache", "ShardRef": "cache", "SpanCache": "cache", "SpanStats": "cache",
    "MixedTokens": "data", "default_cache_dir": "data",
    "GlobalOrder": "order", "RankPlan": "order",
    "IGNORE_INDEX": "packing", "PACK_TOKENS": "packing", "pack_arrays": "packing", "pack_samples": "packing",
    "read_windows": "packing", "split_packed": "packing",
    "STATE_VERSION": "state", "LoaderState": "state", "skip_plan": "state", "LoaderStats": "torch_loader", "RankBatches": "torch_loader",
    "TrainingLoader": "torch_loader", "in_order": "torch_loader", "unpack_group": "torch_loader",
}

if TYPE_CHECKING:
    from sluice.loader.cache import (
        MAX_OPEN_SHARDS,
        CacheStats,
        LocalShards,
        ShardCache,
        ShardFile,
        ShardRef,
        SpanCache,
        SpanStats,
    )
    from sluice.loader.data import MixedTokens, default_cache_dir
    from sluice.loader.order import GlobalOrder, RankPlan
    from sluice.loader.packing import (
        IGNORE_INDEX,
        PACK_TOKENS,
        pack_arrays,
        pack_samples,
        read_windows,
        split_packed,
    )
    from sluice.loader.state import STATE_VERSION, LoaderState, skip_plan
    from sluice.loader.torch_loader import (
        LoaderStats,
        RankBatches,
        TrainingLoader,
        in_order,
        unpack_group,
    )


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'sluice.loader' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sluice.loader.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])


__all__ = [
    "IGNORE_INDEX",
    "MAX_OPEN_SHARDS",
    "PACK_TOKENS",
    "STATE_VERSION",
    "CacheStats",
    "GlobalOrder",
    "LoaderState",
    "LoaderStats",
    "LocalShards",
    "MixedTokens",
    "RankBatches",
    "RankPlan",
    "ShardCache",
    "ShardFile",
    "ShardRef",
    "SpanCache",
    "SpanStats",
    "TrainingLoader",
    "default_cache_dir",
    "in_order",
    "pack_arrays",
    "pack_samples",
    "read_windows",
    "skip_plan",
    "split_packed",
    "unpack_group",
]
