"""Stream a mix (`sluice.mix`) into PyTorch as `[batch, seq_len]` batches of `input_ids` / `labels`.

The mix index is a list of token ranges over memory-mapped shards; the token stream is those ranges
concatenated, and sample i is stream[i*L : i*L + L + 1] split into inputs and labels shifted by one.
Samples are visited in a seeded permutation per epoch and split across ranks (and DataLoader workers)
by stride, so ranks never overlap. Shards on S3 are downloaded once into a local cache folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from sluice.shards import ShardError, ShardView
from sluice.storage import Store


class MixedTokens:
    """Random access to the samples of one built mix."""

    def __init__(self, store: Store, mix: str, cache_dir: str | None = None) -> None:
        prefix = f"mixed_dataset/{mix}"
        manifest_key = f"{prefix}/_manifest.json"
        if not store.exists(manifest_key):
            raise FileNotFoundError(f"{store.uri(manifest_key)} does not exist: materialize mixed_dataset[{mix}] first")
        self.manifest: dict[str, Any] = json.loads(store.read_bytes(manifest_key))
        self.sequence_length = int(self.manifest["sequence_length"])
        cache = cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "sluice")
        os.makedirs(cache, exist_ok=True)
        ranges_path = store.local_path(f"{prefix}/ranges.parquet") or store.fetch(f"{prefix}/ranges.parquet", cache)
        ranges = pq.read_table(ranges_path)
        self.shard_ids = ranges.column("shard").to_numpy()
        self.starts = ranges.column("start").to_numpy()
        self.lengths = ranges.column("length").to_numpy()
        self.range_offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.total_tokens = int(self.range_offsets[-1])
        self.shards: list[np.ndarray] = []
        for shard in self.manifest["shards"]:
            bin_key = f"{shard['prefix']}/{shard['name']}.bin"
            idx_key = f"{shard['prefix']}/{shard['name']}.idx"
            try:
                bin_path = store.local_path(bin_key) or store.fetch(bin_key, cache)
                idx_path = store.local_path(idx_key) or store.fetch(idx_key, cache)
                view = ShardView.open(bin_path, idx_path, self.manifest["dtype"], name=store.uri(bin_key))
            except FileNotFoundError as error:
                raise ShardError(f"{store.uri(bin_key)}: missing ({error})") from error
            self.shards.append(view.tokens)

    def __len__(self) -> int:
        return max(0, (self.total_tokens - 1) // self.sequence_length)

    def tokens(self, begin: int, end: int) -> np.ndarray:
        """Tokens [begin, end) of the mix's token stream."""
        out = np.empty(end - begin, dtype=np.int64)
        first = int(np.searchsorted(self.range_offsets, begin, side="right")) - 1
        written = 0
        position = begin
        index = first
        while position < end:
            range_begin = self.range_offsets[index]
            within = position - range_begin
            take = min(int(self.lengths[index] - within), end - position)
            shard = self.shards[self.shard_ids[index]]
            start = int(self.starts[index] + within)
            out[written : written + take] = shard[start : start + take]
            written += take
            position += take
            index += 1
        return out

    def sample(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        length = self.sequence_length
        window = self.tokens(index * length, index * length + length + 1)
        return window[:-1], window[1:]


class MixSampleStream(IterableDataset):
    """Samples of a mix in a seeded per-epoch permutation, this rank's and this worker's share only."""

    def __init__(self, data: MixedTokens, seed: int, rank: int, world_size: int, epoch: int = 0) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.data = data
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = epoch

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.data))
        # Whole global batches go to ranks in turn; inside a rank, workers take turns too.
        mine = order[self.rank :: self.world_size][worker_id::workers]
        for index in mine:
            inputs, labels = self.data.sample(int(index))
            yield {"input_ids": torch.from_numpy(inputs), "labels": torch.from_numpy(labels)}


def batches(
    data: MixedTokens,
    batch_size: int,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    epoch: int = 0,
    device: str | torch.device = "cpu",
    num_workers: int = 0,
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield batches `{input_ids, labels}` of shape [batch_size, sequence_length] on `device`."""
    device = torch.device(device)
    stream = MixSampleStream(data, seed, rank, world_size, epoch)
    loader = DataLoader(stream, batch_size=batch_size, num_workers=num_workers, pin_memory=device.type == "cuda", drop_last=True)
    for batch in loader:
        yield {name: tensor.to(device, non_blocking=device.type == "cuda") for name, tensor in batch.items()}
