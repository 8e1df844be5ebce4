"""The sluice code location: six partitioned assets (+ the tokenizer, quality and perplexity models), their checks, jobs (export_job too), sensor, schedule."""

from __future__ import annotations

from collections.abc import Callable

from dagster import Definitions

from data_assets.cleaned import cleaned_documents
from data_assets.decontamination import decontamination
from data_assets.deduped import deduped_documents
from data_assets.export import export_job
from data_assets.jobs import ingest_job, mix_job, tokenizer_job
from data_assets.mixed import mixed_dataset
from data_assets.perplexity_model import perplexity_model
from data_assets.quality_model import quality_model
from data_assets.raw import raw_documents
from data_assets.schedules import daily_mix_rebuild
from data_assets.sensors import new_snapshot_sensor
from data_assets.settings import CONFIG_PATH
from data_assets.tokenized import tokenized_shards
from data_assets.tokenizer import tokenizer
from resources import (
    ComputeResource,
    SluiceSettings,
    StorageResource,
    TokenizerResource,
    TrainingLoaderResource,
)
from sluice.config import SluiceConfig

ASSETS = [raw_documents, quality_model, perplexity_model, cleaned_documents, deduped_documents, decontamination, tokenizer, tokenized_shards, mixed_dataset]

# Optional assets, with why a config cannot feed them (None when it can): `sluice materialize` skips them
# with that reason instead of failing (a config that needs them and cannot feed them fails at load).
OPTIONAL_ASSETS: dict[str, Callable[[SluiceConfig], str | None]] = {
    "quality_model": SluiceConfig.quality_model_unavailable,
    "perplexity_model": SluiceConfig.perplexity_model_unavailable,
}


def build_resources(config_path: str = CONFIG_PATH, **compute_overrides) -> dict[str, object]:
    settings = SluiceSettings(config_path=config_path)
    storage = StorageResource(settings=settings)
    return {
        "settings": settings,
        "storage": storage,
        "compute": ComputeResource(settings=settings, **compute_overrides),
        "tokenizer_resource": TokenizerResource(storage=storage),
        "training_loader": TrainingLoaderResource(settings=settings),
    }


defs = Definitions(
    assets=ASSETS,
    jobs=[ingest_job, tokenizer_job, mix_job, export_job],
    sensors=[new_snapshot_sensor],
    schedules=[daily_mix_rebuild],
    resources=build_resources(),
)
