"""The sluice code location: the assets and their checks, the settings they are built from, the purpose jobs
(export, batch trace, whatif report), the snapshot sensor, declarative automation and the daily mix schedule.

Every materialization is a run of Dagster's asset job, whatever starts it (`sluice materialize`, a UI
backfill, the sensor, automation, the schedule): Dagster batches each stage's partitions into runs by the
assets' backfill policies (data_assets/batch.py) and runs a run's steps in its own process
(`in_process_executor`; parallelism lives inside the steps: the process pool or Ray).
"""

from __future__ import annotations

import os

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    in_process_executor,
)

from data_assets.blocklist import blocklist, blocklist_matches
from data_assets.cleaned import cleaned_documents
from data_assets.decontamination import decontamination
from data_assets.deduped import dedup_clusters, dedup_index, dedup_signatures, deduped_documents
from data_assets.export import export_job
from data_assets.mixed import mixed_dataset
from data_assets.perplexity_model import perplexity_model
from data_assets.quality_model import quality_model
from data_assets.raw import raw_documents
from data_assets.report import quality_report, source_views
from data_assets.schedules import daily_mix_rebuild
from data_assets.sensors import new_snapshot_sensor
from data_assets.settings import CONFIG
from data_assets.tokenized import tokenized_shards
from data_assets.tokenizer import tokenizer
from data_assets.trace import trace_batch_job
from data_assets.versions import SETTINGS_ASSETS
from data_assets.whatif import whatif_report
from resources import (
    ComputeResource,
    SluiceSettings,
    StorageResource,
    TokenizerResource,
    TrainingLoaderResource,
)
from resources.run_tags import PURPOSE_TAG
from sluice.config import SluiceConfig


# The optional models are in the graph only when the config can feed them (quality_model: a positive source
# and another source; perplexity_model: a reference source); a config that needs one it cannot feed fails at
# load (sluice.config).
def unavailable_assets(config: SluiceConfig) -> set[str]:
    """The optional assets a config cannot feed (not in its graph, never planned)."""
    reasons = {"quality_model": config.quality_model_unavailable(), "perplexity_model": config.perplexity_model_unavailable()}
    return {name for name, reason in reasons.items() if reason}


MODELS = [model for model in (quality_model, perplexity_model) if model.key.to_user_string() not in unavailable_assets(CONFIG)]
ASSETS = [
    raw_documents, *MODELS, cleaned_documents, dedup_signatures, dedup_index, dedup_clusters, deduped_documents,
    decontamination, blocklist, blocklist_matches, tokenizer, tokenized_shards, mixed_dataset, quality_report,
]

# Declarative automation of every asset (data_assets/automation.py), started with the daemon. Its requests
# are asset backfills, batched as every other backfill.
sluice_automation = AutomationConditionSensorDefinition(
    "sluice_automation",
    target=AssetSelection.all(),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=int(os.environ.get("SLUICE_AUTOMATION_INTERVAL_S", "30")),
    run_tags={PURPOSE_TAG: "automation"},
    description="Declarative automation of every asset: new partitions, changed code versions or settings, updated inputs "
    "(data_assets/automation.py).",
)


def build_resources(config_path: str = "", **compute_overrides) -> dict[str, object]:
    """The resources of the code location: the config at `config_path`, or (empty) the one the environment
    names when a run reads it (resources/settings.py)."""
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
    assets=[*ASSETS, *SETTINGS_ASSETS, *source_views],  # the per-source views: external assets the quality report records
    jobs=[export_job, trace_batch_job, whatif_report],
    sensors=[new_snapshot_sensor, sluice_automation],
    schedules=[daily_mix_rebuild],
    resources=build_resources(),
    executor=in_process_executor,
)
