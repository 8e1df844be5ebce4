"""The config this code location is built from (partition keys need source and mix names at load time).

`$SLUICE_CONFIG` names the file; else `sluice.yaml` in the working directory, else the one at the
project root. Values read at run time (thresholds, locations, compute) come from the `settings`
resource, which points at the same file unless a run overrides it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from resources.settings import resolve_config_path
from sluice.config import ConfigError, SluiceConfig, load_config

PROJECT_ROOT = Path(__file__).resolve().parents[1]


config_path = resolve_config_path


DEBUG_ENV_VAR = "SLUICE_DEBUG"


def config_error_hook(previous: Callable[..., Any]) -> Callable[..., Any]:
    """A `sys.excepthook` that prints an uncaught ConfigError as its message alone (it names the file, each
    key and what is allowed), with no traceback; every other exception goes to `previous`."""

    def hook(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
        if isinstance(error, ConfigError):
            print(f"sluice: {error}\n(the config of the sluice code location; {DEBUG_ENV_VAR}=1 shows the traceback)", file=sys.stderr)
        else:
            previous(kind, error, traceback)

    return hook


def load_location_config(path: str) -> SluiceConfig:
    """The config the code location is built from. When it is invalid, the ConfigError propagates (the load
    fails) and, unless $SLUICE_DEBUG is set, it reaches people without Dagster's loader traceback:
    - a process that dies of it (`dagster asset materialize -m data_assets.definitions`, `dagster
      definitions validate`) prints the message alone;
    - a code server (`dagster dev`, `dagster-webserver -w workspace.yaml`, `dagster code-server start`)
      reports it to the UI with no stack frames: the UI shows Dagster's one-line "error occurred during the
      loading of Dagster definitions" and, as its cause, the ConfigError's message. That process serves
      only this failed load (a reload starts a new one), so dropping frames there hides nothing else."""
    try:
        return load_config(path)
    except ConfigError:
        if not os.environ.get(DEBUG_ENV_VAR):
            sys.excepthook = config_error_hook(sys.excepthook)
            if is_code_server(sys.argv):
                sys.tracebacklimit = 0  # read by the traceback module, which serializes the error for the UI
        raise


def is_code_server(argv: list[str]) -> bool:
    """Whether this process is a Dagster code server (`dagster api grpc`, `dagster code-server start`)."""
    arguments = argv[1:4]
    return arguments[:2] == ["api", "grpc"] or arguments[:2] == ["code-server", "start"]


CONFIG_PATH = config_path()
CONFIG: SluiceConfig = load_location_config(CONFIG_PATH)
