"""TrainingLoaderResource under torch.distributed: two gloo processes take their rank and world size from
the process group and split each global batch without overlap."""

from __future__ import annotations

import json
import os

import torch.distributed as dist
import torch.multiprocessing as mp

from sluice.io.storage import open_store
from tests.conftest import base_config, write_config
from tests.support.mix_fixture import build_test_mix


def _rank_main(rank: int, world_size: int, init_file: str, config: str, out_dir: str) -> None:
    from resources import TrainingLoaderResource

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        loader = TrainingLoaderResource.from_config_file(config, mix="test", batch_size=3).loader()
        batches = [batch["sample_ids"].tolist() for _, batch in zip(range(4), loader, strict=False)]
        gathered: list = [None] * world_size
        dist.all_gather_object(gathered, batches)  # the collective proves both joined the same group
        result = {"rank": loader.rank, "world_size": loader.world_size, "batches": batches, "state": loader.state_dict()}
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as handle:
            json.dump(result, handle)
    finally:
        dist.destroy_process_group()


def test_ranks_come_from_the_process_group(tmp_path):
    root = str(tmp_path / "store")
    build_test_mix(open_store(root), sequence_length=64)
    raw = base_config(root)
    raw["mixes"] = {"test": {"weights": {"web": 0.6, "reference": 0.4}, "token_budget": 40_000, "sequence_length": 64, "seed": 11}}
    config = write_config(tmp_path / "sluice.yaml", raw)
    mp.spawn(_rank_main, args=(2, str(tmp_path / "pg-init"), config, str(tmp_path)), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["world_size"]) for r in results] == [(0, 2), (1, 2)]
    assert results[0]["state"] == results[1]["state"] and results[0]["state"]["position"] == 4 * 3 * 2
    for step in range(4):
        assert not set(results[0]["batches"][step]) & set(results[1]["batches"][step])
