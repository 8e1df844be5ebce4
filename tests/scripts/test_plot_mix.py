"""scripts/plot_mix.py renders a PNG from a built mix's manifest."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.sluice.mix.test_mix import mix_settings, write_partition

pytest.importorskip("matplotlib")
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "plot_mix.py"


def test_plot_is_a_png_of_the_mix(tmp_path):
    from sluice.io.storage import open_store
    from sluice.mix import build_mix

    store = open_store(str(tmp_path / "data"))
    write_partition(store, "web", "s1", [(f"w{i}", "en", 50) for i in range(200)])
    write_partition(store, "ref", "s1", [(f"r{i}", "en", 60) for i in range(100)])
    manifest = build_mix(store, "m", mix_settings(weights={"web": 0.6, "ref": 0.4}, token_budget=8000, validation_share=0.1))
    spec = importlib.util.spec_from_file_location("plot_mix", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "mix.png"
    module.plot_manifest(manifest, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
