"""The sluice YAML config as a Dagster resource: every stage reads its settings from here."""

from __future__ import annotations

import os
from pathlib import Path

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from resources.run_tags import run_labels
from sluice.config import CONFIG_ENV_VAR, DEFAULT_CONFIG_NAME, SluiceConfig, load_config

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def resolve_config_path() -> str:
    """`$SLUICE_CONFIG`; else `sluice.yaml` in the working directory, else the one at the project root."""
    if os.environ.get(CONFIG_ENV_VAR):
        return str(Path(os.environ[CONFIG_ENV_VAR]).expanduser().resolve())
    local = Path.cwd() / DEFAULT_CONFIG_NAME
    return str(local if local.is_file() else PROJECT_ROOT / DEFAULT_CONFIG_NAME)


class SluiceSettings(ConfigurableResource):
    """Loads and validates the YAML config file: `config_path`, or when it is empty (the code location's
    own resource) the file `resolve_config_path()` names where the config is read, so a run reads the
    config of the environment it runs in (the daemon's, the command's).

    Every run of the code location uses it, so it is also where a starting run gets its `sluice/*` tags
    (resources/run_tags.py): whatever started the run, the runs list can be filtered by source, snapshot,
    mix and purpose."""

    config_path: str = ""

    _config: SluiceConfig | None = PrivateAttr(default=None)

    @property
    def path(self) -> str:
        return self.config_path or resolve_config_path()

    @property
    def config(self) -> SluiceConfig:
        if self._config is None:
            self._config = load_config(self.path)
        return self._config

    def setup_for_execution(self, context: InitResourceContext) -> None:
        run, instance = context.run, context.instance
        if run is None or instance is None:
            return
        labels = run_labels(run.tags)
        if labels:
            instance.add_run_tags(run.run_id, labels)
