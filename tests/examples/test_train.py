"""examples/train.py: a run stopped at a checkpoint and resumed ends with exactly the model of an uninterrupted run."""

from __future__ import annotations

import importlib.util

import torch

from sluice.io.storage import open_store
from tests.conftest import PROJECT_ROOT, base_config, write_config
from tests.support.mix_fixture import build_test_mix


def load_example():
    spec = importlib.util.spec_from_file_location("train_example", PROJECT_ROOT / "examples" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_resumed_training_equals_the_uninterrupted_run(tmp_path, capsys):
    root = str(tmp_path / "store")
    build_test_mix(open_store(root), sequence_length=64)
    raw = base_config(root)
    raw["mixes"] = {"test": {"weights": {"web": 0.6, "reference": 0.4}, "token_budget": 40_000, "sequence_length": 64, "seed": 11}}
    config = write_config(tmp_path / "sluice.yaml", raw)
    train = load_example()
    common = ["--config", config, "--mix", "test", "--batch-size", "4", "--device", "cpu", "--save-every", "100"]
    torch.set_num_threads(1)
    train.main([*common, "--steps", "8", "--checkpoint", str(tmp_path / "straight.pt")])
    train.main([*common, "--steps", "3", "--checkpoint", str(tmp_path / "resumed.pt")])
    train.main([*common, "--steps", "8", "--checkpoint", str(tmp_path / "resumed.pt")])
    assert "resumed at step 3" in capsys.readouterr().out
    straight = torch.load(tmp_path / "straight.pt")
    resumed = torch.load(tmp_path / "resumed.pt")
    assert straight["loader"] == resumed["loader"] and resumed["step"] == 8
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name


def _reduce_on_rank(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        train = load_example()
        loss, tokens = train.across_ranks(torch.tensor(float(rank + 1)), 10 * (rank + 1))
        torch.save({"loss": loss, "tokens": tokens}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_loss_is_averaged_and_tokens_summed_over_ranks(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_reduce_on_rank, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        assert result == {"loss": 1.5, "tokens": 30}  # losses 1 and 2, tokens 10 and 20, seen alike by every rank


def test_progress_lines_name_the_mean_loss_and_tokens_per_second(tmp_path, capsys):
    root = str(tmp_path / "store")
    build_test_mix(open_store(root), sequence_length=64)
    raw = base_config(root)
    raw["mixes"] = {"test": {"weights": {"web": 0.6, "reference": 0.4}, "token_budget": 40_000, "sequence_length": 64, "seed": 11}}
    config = write_config(tmp_path / "sluice.yaml", raw)
    torch.set_num_threads(1)
    load_example().main(["--config", config, "--mix", "test", "--batch-size", "4", "--device", "cpu", "--steps", "5"])
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step 5:")]
    assert "(mean over ranks)" in line and " tokens/s (all ranks)" in line
    assert float(line.split("), ", 1)[1].split(" tokens/s")[0].replace(",", "")) > 0
