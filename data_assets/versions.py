"""What makes a stage's output out of date, declared to Dagster: code versions and versioned settings.

Dagster calls an asset partition stale when its asset's code version differs from the one its latest
materialization recorded, or when a dependency has a newer data version than the one it read (the UI's
"stale" badges, `sluice materialize`'s "what needs running", see data_assets/freshness.py). Two
declarations feed that:

- `CODE_VERSIONS[asset]`: the stage's algorithm version (`STAGE_VERSIONS`: raise it when a change makes
  the stage write different bytes), plus a digest of the config sections every partition of it reads
  (dedup, tokenizer, model settings; eval sets and the blocklist by content). Read when the code location
  loads: a changed section makes every partition of the asset stale.
- Inputs that differ by partition are observable source assets, so that only the partitions they govern
  go stale: `crawl` (the input files of a source x snapshot folder: their names), `source_settings` (a
  source's location, format and options) and `cleaning_settings` (its effective cleaning settings, with
  the URL blocklist file's content), partitioned by source; `mix_settings`, partitioned by mix. Their data
  version is a digest, recorded as an observation when it changes (`observe`: `sluice materialize`
  observes every partition, the snapshot sensor new crawl folders and the settings; or the UI's Observe).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dagster import (
    AssetDep,
    AssetKey,
    AssetObservation,
    BetaWarning,
    DataVersion,
    DataVersionsByPartition,
    MetadataValue,
    MultiToSingleDimensionPartitionMapping,
    StaticPartitionsDefinition,
    observable_source_asset,
)

from data_assets.batch import in_group
from data_assets.partitions import partition_key, ref_of, source_snapshot_partitions
from data_assets.settings import CONFIG
from resources import SluiceSettings
from sluice.blocklist import load_configured
from sluice.config import SluiceConfig
from sluice.dedup.decontaminate import eval_sets_digest, eval_specs
from sluice.ingest.raw import list_snapshot_files
from sluice.io.layout import PartitionRef

# The version of each stage's algorithm: raise it when a change makes the stage write different bytes
# for the same inputs and settings (CHANGELOG.md says why).
STAGE_VERSIONS = {
    "raw_documents": "2", "quality_model": "3", "perplexity_model": "3", "cleaned_documents": "3",
    "dedup_signatures": "2", "dedup_index": "1", "dedup_clusters": "1", "deduped_documents": "1",
    "decontamination": "1", "blocklist": "1", "blocklist_matches": "1", "tokenizer": "1",
    "tokenized_shards": "1", "mixed_dataset": "1", "quality_report": "1",
}

CRAWL = "crawl"
SOURCE_SETTINGS = "source_settings"
CLEANING_SETTINGS = "cleaning_settings"
MIX_SETTINGS = "mix_settings"
DATA_VERSION_TAG = "dagster/data_version"
SETTINGS_METADATA = "settings"  # a settings observation's settings (settings_values)


def digest(value: Any) -> str:
    """16 hex digits of SHA-256 over `value` as canonical JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_digest(path: str | None) -> str | None:
    """The content digest of a local file the config names (None when unset; "unreadable" when it cannot
    be read: the stage then fails naming it)."""
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "unreadable"


def blocklist_digest(config: SluiceConfig) -> str:
    """The training blocklist's content hash."""
    try:
        return load_configured(config.blocklist).sha256[:16]
    except (OSError, ValueError):  # unreadable or invalid now: the run fails naming the line
        return "unreadable"


def eval_sets_version(config: SluiceConfig) -> str:
    """The evaluation sets' content hash (with each spec's n-gram and text field)."""
    try:
        return eval_sets_digest(eval_specs(config.mixes), config.s3)[:16]
    except (OSError, ValueError):  # unreadable now: the run fails with the file named
        return "unreadable"


def _global_sections(config: SluiceConfig) -> dict[str, Any]:
    """The config every partition of an asset reads, by asset (per-partition settings are observed instead)."""
    dedup = config.dedup.model_dump(mode="json")
    tokenizer = {**config.tokenizer.model_dump(mode="json"), "file": file_digest(config.tokenizer.path)}
    return {
        "quality_model": config.quality_model.model_dump(mode="json"),
        "perplexity_model": config.perplexity_model.model_dump(mode="json"),
        "dedup_signatures": dedup, "dedup_index": dedup, "dedup_clusters": dedup, "deduped_documents": dedup,
        "decontamination": eval_sets_version(config),
        "blocklist": blocklist_digest(config), "blocklist_matches": blocklist_digest(config),
        "tokenizer": tokenizer, "tokenized_shards": {"max_shard_tokens": config.tokenizer.max_shard_tokens},
    }


def code_versions(config: SluiceConfig) -> dict[str, str]:
    sections = _global_sections(config)
    return {
        asset: version if asset not in sections else f"{version}-{digest(sections[asset])}"
        for asset, version in STAGE_VERSIONS.items()
    }


CODE_VERSIONS = code_versions(CONFIG)


def settings_values(config: SluiceConfig) -> dict[str, dict[str, Any]]:
    """Each settings asset's partitions' settings, as their data version digests them (and their observation
    records them, so a stale cause can name the setting that changed: `changed_settings`)."""
    return {
        SOURCE_SETTINGS: {source.name: source.model_dump(mode="json") for source in config.sources},
        CLEANING_SETTINGS: {
            name: {"cleaning": config.cleaning.for_source(name).model_dump(mode="json"),
                   "url_blocklist": file_digest(config.cleaning.for_source(name).url_blocklist)}
            for name in config.source_names
        },
        MIX_SETTINGS: {name: mix.model_dump(mode="json") for name, mix in config.mixes.items()},
    }


def settings_versions(config: SluiceConfig) -> dict[str, dict[str, str]]:
    """The data version of every partition of each settings asset."""
    return {key: {partition: digest(value) for partition, value in values.items()} for key, values in settings_values(config).items()}


def crawl_version(config: SluiceConfig, source: str, snapshot: str) -> str:
    """A digest of the input file names of one source x snapshot folder (crawl files are written once: a
    file that appears or disappears changes it; an empty or missing folder is an empty partition)."""
    spec = config.source(source)
    return digest(list_snapshot_files(spec.location.rstrip("/") + "/" + snapshot, spec.format, config.s3))


def settings_dep(key: str) -> AssetDep:
    """A source x snapshot stage's dependency on a per-source settings asset (its source's partition).
    Dagster 1.13 marks the mapping beta; that warning is silenced here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=BetaWarning)
        return AssetDep(key, partition_mapping=MultiToSingleDimensionPartitionMapping(partition_dimension_name="source"))


def observable(**kwargs: Any) -> Callable[..., Any]:
    """`observable_source_asset` (Dagster 1.13 marks it beta; that warning is silenced here only)."""

    def decorate(fn: Callable[..., Any]) -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=BetaWarning)
            return observable_source_asset(**kwargs)(fn)

    return decorate


def _observer(key: str, description: str) -> Callable[..., Any]:
    partitions = StaticPartitionsDefinition(sorted(CONFIG.mixes)) if key == MIX_SETTINGS else StaticPartitionsDefinition(CONFIG.source_names)

    @observable(name=key, partitions_def=partitions, **in_group("settings"), description=description)
    def observe(settings: SluiceSettings) -> DataVersionsByPartition:
        versions = settings_versions(settings.config)[key]
        return DataVersionsByPartition({name: DataVersion(version) for name, version in versions.items()})

    return observe


source_settings = _observer(SOURCE_SETTINGS, "Per source: its location, format and options (a digest is the data version). raw_documents reads it.")
cleaning_settings = _observer(CLEANING_SETTINGS, "Per source: the effective cleaning settings and the URL blocklist's content. cleaned_documents reads it.")
mix_settings = _observer(MIX_SETTINGS, "Per mix: weights, budget, sequence length, seed, validation share, eval sets. mixed_dataset reads it.")


@observable(
    name=CRAWL,
    partitions_def=source_snapshot_partitions,
    **in_group("crawl"),
    description="The crawl files of each source x snapshot folder (a digest of their names is the data version): what raw_documents reads.",
)
def crawl(context: Any, settings: SluiceSettings) -> DataVersionsByPartition:
    config = settings.config
    refs = [ref_of(key) for key in source_snapshot_partitions.get_partition_keys(dynamic_partitions_store=context.instance)]
    return DataVersionsByPartition(
        {partition_key(ref): DataVersion(crawl_version(config, ref.source, ref.snapshot)) for ref in refs if ref.source in config.source_names}
    )


SETTINGS_ASSETS = [crawl, source_settings, cleaning_settings, mix_settings]


def recorded_versions(instance: Any, key: str) -> dict[str, str]:
    """The data version the instance last recorded for each observed partition of a source asset (one query)."""
    from dagster import DagsterEventType

    tags = instance.event_log_storage.get_latest_tags_by_partition(AssetKey(key), DagsterEventType.ASSET_OBSERVATION, [DATA_VERSION_TAG])
    return {partition: values[DATA_VERSION_TAG] for partition, values in tags.items() if DATA_VERSION_TAG in values}


def current_versions(config: SluiceConfig, crawl_partitions: Iterable[PartitionRef] = ()) -> dict[str, dict[str, str]]:
    """The data versions of the settings assets' partitions and of the given crawl partitions."""
    return {
        **settings_versions(config),
        CRAWL: {partition_key(ref): crawl_version(config, ref.source, ref.snapshot) for ref in crawl_partitions},
    }


def observations(instance: Any, versions: dict[str, dict[str, str]], settings: dict[str, dict[str, Any]] | None = None) -> list[AssetObservation]:
    """An observation for each partition whose version differs from the recorded one (none when nothing
    changed, so observing again adds no history); a settings partition's carries its `settings` (from
    `settings_values`) as metadata."""
    found = []
    for key, by_partition in versions.items():
        recorded = recorded_versions(instance, key)
        for partition, version in sorted(by_partition.items()):
            if recorded.get(partition) != version:
                value = (settings or {}).get(key, {}).get(partition)
                metadata = {SETTINGS_METADATA: MetadataValue.json(value)} if value is not None else None
                found.append(AssetObservation(asset_key=key, partition=partition, tags={DATA_VERSION_TAG: version}, metadata=metadata))
    return found


def changed_settings(instance: Any, asset: str, partition: str, before_storage_id: int | None) -> list[str]:
    """The settings (dotted keys, e.g. `cleaning.min_chars`) in which the latest observation of a settings
    asset's partition differs from the latest one before `before_storage_id` (what a materialization then
    read); [] when either does not record its settings."""
    from dagster import AssetRecordsFilter

    def settings_at(before: int | None) -> Any:
        records = instance.fetch_observations(AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition], before_storage_id=before), limit=1).records
        value = records[0].asset_observation.metadata.get(SETTINGS_METADATA) if records else None
        return getattr(value, "data", None)

    latest, earlier = settings_at(None), settings_at(before_storage_id)
    if latest is None or earlier is None:
        return []
    old, new = _flatten(earlier), _flatten(latest)
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in value.items():
        flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def observe(instance: Any, config: SluiceConfig, crawl_partitions: Iterable[PartitionRef] = ()) -> list[str]:
    """Record the changed versions on the instance; returns `asset partition` of each."""
    found = observations(instance, current_versions(config, crawl_partitions), settings_values(config))
    for observation in found:
        instance.report_runless_asset_event(observation)
    return [f"{o.asset_key.to_user_string()} {o.partition}" for o in found]
