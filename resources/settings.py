"""The sluice YAML config as a Dagster resource: every stage reads its settings from here."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import PrivateAttr

from sluice.config import SluiceConfig, load_config


class SluiceSettings(ConfigurableResource):
    """Loads and validates the YAML config file (`$SLUICE_CONFIG`, else ./sluice.yaml)."""

    config_path: str

    _config: SluiceConfig | None = PrivateAttr(default=None)

    @property
    def config(self) -> SluiceConfig:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config
