"""Storage resource: the local folder or S3 prefix under which every asset writes its partitions.

The root and the S3 endpoint come from the YAML config (`storage.root`, `s3.*`); credentials never do:
boto3 reads them from the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or an
instance role), in this process and in every worker process or Ray task alike.
"""

from __future__ import annotations

from dagster import ConfigurableResource

from resources.settings import SluiceSettings
from sluice.io.storage import Store, open_store


class StorageResource(ConfigurableResource):
    settings: SluiceSettings

    def store(self) -> Store:
        config = self.settings.config
        return open_store(config.storage.root, config.s3)

    def source_store(self, source_name: str) -> Store:
        config = self.settings.config
        return open_store(config.source(source_name).location, config.s3)
