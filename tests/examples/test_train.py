"""examples/train.py: a run stopped at a checkpoint and resumed ends with exactly the model of an uninterrupted run."""

from __future__ import annotations

import importlib.util

import torch

from sluice.storage import open_store
from tests.conftest import PROJECT_ROOT, base_config, write_config
from tests.sluice.mix_fixture import build_test_mix


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
