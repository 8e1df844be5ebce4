"""The config this code location is built from (partition keys need source and mix names at load time).

`$SLUICE_CONFIG` names the file; else `sluice.yaml` in the working directory, else the one at the
project root. Values read at run time (thresholds, locations, compute) come from the `settings`
resource, which points at the same file unless a run overrides it.
"""

from __future__ import annotations

import os
from pathlib import Path

from sluice.config import CONFIG_ENV_VAR, DEFAULT_CONFIG_NAME, SluiceConfig, load_config

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def config_path() -> str:
    if os.environ.get(CONFIG_ENV_VAR):
        return str(Path(os.environ[CONFIG_ENV_VAR]).expanduser().resolve())
    local = Path.cwd() / DEFAULT_CONFIG_NAME
    return str(local if local.is_file() else PROJECT_ROOT / DEFAULT_CONFIG_NAME)


CONFIG_PATH = config_path()
CONFIG: SluiceConfig = load_config(CONFIG_PATH)
