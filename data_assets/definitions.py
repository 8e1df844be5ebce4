"""The sluice code location: the partitioned assets (+ the tokenizer, quality and perplexity models, the blocklist), their checks,
jobs (one per stage, per purpose, the batch trace), sensors, schedule."""

from __future__ import annotations

import os
from collections.abc import Callable

from dagster import AssetSelection, AutomationConditionSensorDefinition, DefaultSensorStatus, Definitions

from data_assets.blocklist import blocklist, blocklist_matches
from data_assets.cleaned import cleaned_documents
from data_assets.decontamination import decontamination
from data_assets.deduped import (
    CLUSTERS_ASSET,
    dedup_clusters,
    dedup_index,
    dedup_signatures,
    deduped_documents,
)
from data_assets.export import export_job
from data_assets.jobs import ingest_job, stage_jobs
from data_assets.mixed import mixed_dataset
from data_assets.perplexity_model import perplexity_model
from data_assets.quality_model import quality_model
from data_assets.raw import raw_documents
from data_assets.report import quality_report, source_views
from data_assets.schedules import daily_mix_rebuild
from data_assets.sensors import new_snapshot_sensor
from data_assets.settings import CONFIG_PATH
from data_assets.tokenized import tokenized_shards
from data_assets.tokenizer import tokenizer
from data_assets.trace import trace_batch_job
from resources import (
    ComputeResource,
    SluiceSettings,
    StorageResource,
    TokenizerResource,
    TrainingLoaderResource,
)
from sluice.config import SluiceConfig

ASSETS = [
    raw_documents, quality_model, perplexity_model, cleaned_documents, dedup_signatures, dedup_index, dedup_clusters, deduped_documents,
    decontamination, blocklist, blocklist_matches, tokenizer, tokenized_shards, mixed_dataset, quality_report,
]
# The purpose jobs (sensor, schedule, tracing, export) and one job per stage (what `sluice materialize` launches).
JOBS = [ingest_job, trace_batch_job, export_job, *stage_jobs(key.to_user_string() for asset in ASSETS for key in asset.keys)]

# Optional assets, with why a config cannot feed them (None when it can): `sluice materialize` skips them
# with that reason instead of failing (a config that needs them and cannot feed them fails at load).
OPTIONAL_ASSETS: dict[str, Callable[[SluiceConfig], str | None]] = {
    "quality_model": SluiceConfig.quality_model_unavailable,
    "perplexity_model": SluiceConfig.perplexity_model_unavailable,
}

# Runs the ordered tail of each new partition (its clusters once every partition is indexed, its deduped
# documents once every partition is clustered, then its decontamination flags and token shards) as soon as
# Dagster sees the gates open.
dedup_automation = AutomationConditionSensorDefinition(
    "dedup_automation",
    target=AssetSelection.assets(CLUSTERS_ASSET, "deduped_documents", "decontamination", "blocklist_matches", "tokenized_shards"),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=int(os.environ.get("SLUICE_AUTOMATION_INTERVAL_S", "30")),
    description="Declarative automation of dedup_clusters, deduped_documents, decontamination, blocklist_matches and tokenized_shards (see data_assets/deduped.py).",
)

# Publishes the blocklist when it is missing or its list changed, and redraws the quality report hourly when
# its stages have new data.
report_automation = AutomationConditionSensorDefinition(
    "report_automation",
    target=AssetSelection.assets("blocklist", "quality_report"),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=int(os.environ.get("SLUICE_AUTOMATION_INTERVAL_S", "30")),
    description="Declarative automation of blocklist (when missing or changed) and quality_report (hourly, on new data).",
)


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
    assets=[*ASSETS, *source_views],  # the per-source views: external assets the quality report records
    jobs=JOBS,
    sensors=[new_snapshot_sensor, dedup_automation, report_automation],
    schedules=[daily_mix_rebuild],
    resources=build_resources(),
)
