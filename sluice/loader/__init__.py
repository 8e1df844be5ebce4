"""Stream a built mix (`sluice.mix`) into PyTorch: exact global shuffle, exact/elastic resume, packed batches.

    from sluice.loader import MixedTokens, TrainingLoader
    data = MixedTokens(store, "default")                    # one split of a mix; nothing of its size is loaded
    loader = TrainingLoader(data, batch_size=8, seed=1, rank=r, world_size=w, num_workers=2)
    loader.load_state_dict(state)                           # optional: resume (any world size / worker count)
    for batch in loader: ...                                # input_ids, labels, position_ids, cu_seqlens, ...

The package, in reading order:
    data.py          `MixedTokens`: a split's manifest, index (`sluice.mixindex`, read with pread, fetched into
                     the local cache from S3) and token reads; opened lazily in every process
    order.py         the global order: per-epoch Feistel permutations, positions -> samples, rank slices
    cache.py         shard access: local files in place, S3 shards through a byte-limited prefetching cache
    packing.py       samples -> batches with document boundaries (position_ids, cu_seqlens, masked labels)
    torch_loader.py  the IterableDataset, DataLoader workers, `TrainingLoader` (state, devices, stall metric)
"""

from sluice.loader.cache import MAX_OPEN_SHARDS, CacheStats, LocalShards, ShardCache, ShardFile, ShardRef
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
from sluice.loader.torch_loader import (
    STATE_VERSION,
    LoaderStats,
    RankBatches,
    TrainingLoader,
    in_order,
    unpack_group,
)

__all__ = [
    "IGNORE_INDEX",
    "MAX_OPEN_SHARDS",
    "PACK_TOKENS",
    "STATE_VERSION",
    "CacheStats",
    "GlobalOrder",
    "LoaderStats",
    "LocalShards",
    "MixedTokens",
    "RankBatches",
    "RankPlan",
    "ShardCache",
    "ShardFile",
    "ShardRef",
    "TrainingLoader",
    "default_cache_dir",
    "in_order",
    "pack_arrays",
    "pack_samples",
    "read_windows",
    "split_packed",
    "unpack_group",
]
