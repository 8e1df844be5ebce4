"""What the config tests share: a project config with a given `cleaning:` section, written and loaded."""

from __future__ import annotations

import yaml

from sluice.config import SluiceConfig, load_config
from tests.conftest import base_config


def load(tmp_path, cleaning: dict) -> SluiceConfig:
    """The sample config with `cleaning` as its cleaning section, loaded from a file under `tmp_path`."""
    raw = base_config(str(tmp_path / "data"))
    raw["cleaning"] = cleaning
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)
