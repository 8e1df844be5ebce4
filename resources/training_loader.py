"""Training-loader resource: stream a built mix onto a device as `[batch, seq_len]` torch batches.

Usable without Dagster running: `TrainingLoaderResource.from_config_file("sluice.yaml", mix="default")`
(see `examples/train.py`). Rank and world size come from `torch.distributed` when it is initialized,
else from the arguments.
"""

from __future__ import annotations

from collections.abc import Iterator

from dagster import ConfigurableResource

from resources.settings import SluiceSettings
from sluice.storage import open_store


class TrainingLoaderResource(ConfigurableResource):
    settings: SluiceSettings
    mix: str = "default"
    batch_size: int = 8
    device: str = "cpu"  # cpu | cuda | cuda:N
    num_workers: int = 0  # DataLoader worker processes
    seed: int | None = None  # None = the mix's seed
    cache_dir: str | None = None  # local copies of S3 shards

    @classmethod
    def from_config_file(cls, config_path: str, **kwargs) -> TrainingLoaderResource:
        return cls(settings=SluiceSettings(config_path=config_path), **kwargs)

    def dataset(self):
        from sluice.loader import MixedTokens

        config = self.settings.config
        if self.mix not in config.mixes:
            raise KeyError(f"mix {self.mix!r} is not in the config; mixes are {sorted(config.mixes)}")
        return MixedTokens(open_store(config.storage.root, config.s3), self.mix, cache_dir=self.cache_dir)

    def batches(self, rank: int | None = None, world_size: int | None = None, epoch: int = 0) -> Iterator[dict]:
        import torch.distributed as dist

        from sluice.loader import batches

        if rank is None or world_size is None:
            if dist.is_available() and dist.is_initialized():
                rank, world_size = dist.get_rank(), dist.get_world_size()
            else:
                rank, world_size = rank or 0, world_size or 1
        data = self.dataset()
        seed = self.seed if self.seed is not None else int(data.manifest["seed"])
        return batches(
            data,
            batch_size=self.batch_size,
            seed=seed,
            rank=rank,
            world_size=world_size,
            epoch=epoch,
            device=self.device,
            num_workers=self.num_workers,
        )
