"""Training-loader resource: stream a built mix onto a device as packed `[batch, seq_len]` torch batches.

Usable without Dagster running: `TrainingLoaderResource.from_config_file("sluice.yaml", mix="default")`
(see `examples/train.py`). Rank and world size come from `torch.distributed` when it is initialized,
else from the arguments. `loader()` returns a `sluice.loader.TrainingLoader`: iterate it for batches
(`input_ids`, `labels`, `position_ids`, `cu_seqlens`, `max_seqlen`, `sample_ids`, `epochs`), save its
`state_dict()` with the checkpoint and `load_state_dict()` it on restart (any world size / worker count),
read `stats` for the data-stall time.
"""

from __future__ import annotations

from collections.abc import Iterator

from dagster import ConfigurableResource

from resources.settings import SluiceSettings
from sluice.io.storage import open_store


def distributed_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world size): from torch.distributed when initialized and not given, else the arguments."""
    import torch.distributed as dist

    if (rank is None or world_size is None) and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return rank or 0, world_size or 1


class TrainingLoaderResource(ConfigurableResource):
    settings: SluiceSettings
    mix: str = "default"
    split: str = "train"  # a split of the mix (train | validation when the mix has one)
    batch_size: int = 8  # samples per rank per step
    device: str = "cpu"  # cpu | cuda | cuda:N
    num_workers: int = 0  # DataLoader worker processes (0 = one background thread)
    seed: int | None = None  # None = the mix's seed
    cache_dir: str | None = None  # local copies of the S3 mix index (and of whole shards with remote_reads=shards)
    cache_bytes: int = 8 << 30  # byte limit of the S3 read-ahead (spans in memory, or the shard cache), per rank
    # S3 only: spans = ranged GETs of just the samples' token spans (traffic = tokens served); shards = whole
    # shards through a local cache, SHA-256 checked (traffic grows with the shard size)
    remote_reads: str = "spans"
    block_size: int = 1  # >1 shuffles blocks of this many consecutive samples (fewer object-store reads)
    mask_document_boundaries: bool = False  # labels = -100 where the next token starts another document
    prefetch_batches: int = 4  # batches prepared ahead of the training step
    # auto: memory-map a local mix of at most mmap_max_bytes (index + shards), pread anything larger or remote
    # (flat RSS); mmap | pread force one (see sluice.loader.data)
    read_mode: str = "auto"
    mmap_max_bytes: int = 1 << 30
    # every batch also carries `provenance` (mix record, shard, doc, token span per packed segment, aligned with
    # cu_seqlens) and the samples' stream `positions`: what a loss-spike hook saves (sluice.trace.batch_provenance)
    provenance: bool = False

    @classmethod
    def from_config_file(cls, config_path: str, **kwargs) -> TrainingLoaderResource:
        return cls(settings=SluiceSettings(config_path=config_path), **kwargs)

    def dataset(self):
        from sluice.loader import MixedTokens

        config = self.settings.config
        if self.mix not in config.mixes:
            raise KeyError(f"mix {self.mix!r} is not in the config; mixes are {sorted(config.mixes)}")
        return MixedTokens(
            open_store(config.storage.root, config.s3), self.mix, cache_dir=self.cache_dir, split=self.split, cache_bytes=self.cache_bytes,
            read_mode=self.read_mode, mmap_max_bytes=self.mmap_max_bytes, remote_reads=self.remote_reads,
        )

    def loader(self, rank: int | None = None, world_size: int | None = None, num_epochs: int | None = None):
        """An endless (or `num_epochs`-long) resumable loader for this rank; see `sluice.loader.TrainingLoader`."""
        from sluice.loader import TrainingLoader

        rank, world_size = distributed_rank(rank, world_size)
        data = self.dataset()
        return TrainingLoader(
            data,
            batch_size=self.batch_size,
            seed=self.seed if self.seed is not None else int(data.manifest["seed"]),
            rank=rank,
            world_size=world_size,
            num_workers=self.num_workers,
            device=self.device,
            block_size=self.block_size,
            mask_document_boundaries=self.mask_document_boundaries,
            num_epochs=num_epochs,
            prefetch_batches=self.prefetch_batches,
            provenance=self.provenance,
        )

    def batches(self, rank: int | None = None, world_size: int | None = None, epoch: int = 0) -> Iterator[dict]:
        """The batches of one epoch for this rank (the last partial global batch of the epoch is dropped)."""
        loader = self.loader(rank, world_size, num_epochs=epoch + 1)
        loader.set_epoch(epoch)
        return iter(loader)
