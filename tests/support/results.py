"""What an in-process `materialize(...)` result recorded, as plain values."""

from __future__ import annotations

from typing import Any


def metadata_of(result: Any) -> dict[str, dict[str, Any]]:
    """asset name -> metadata values (plain Python) of the materializations in a run result."""
    out: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        out[materialization.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    return out


def checks_of(result: Any) -> list[tuple[str, str, bool]]:
    """(asset, check, passed) of every check evaluation in a run result."""
    return [(event.asset_key.to_user_string(), event.check_name, event.passed) for event in result.get_asset_check_evaluations()]


def check_partition_statuses(instance: Any, asset: str, check: str, partitions_def: Any) -> dict[str, str]:
    """Partition key -> status of a partitioned check of `asset`, as the UI's Checks -> Partitions view reads it:
    Dagster's own `AssetCheckState` from the instance's event log (SUCCEEDED, FAILED, IN_PROGRESS, SKIPPED,
    EXECUTION_FAILED; a partition absent from the mapping is what the UI shows as Missing)."""
    from dagster import AssetCheckKey, AssetKey
    from dagster._core.definitions.partitions.context import partition_loading_context

    key = AssetCheckKey(AssetKey(asset), check)
    with partition_loading_context(dynamic_partitions_store=instance):
        state = instance.event_log_storage.get_asset_check_state([(key, partitions_def)])[key]
        return {
            partition: status.value
            for status, subset in state.subsets.items()
            for partition in (subset.subset_value.get_partition_keys() if not subset.is_empty else ())
        }


def latest_check_target(instance: Any, asset: str, check: str, partition: str) -> tuple[str, int | None, int | None]:
    """(status, target materialization storage id, latest materialization storage id) of the latest evaluation
    of a check on one partition: what the check's history in the UI names as its target, and the partition's
    latest materialization (Dagster's own records)."""
    from dagster import AssetCheckKey, AssetKey, AssetRecordsFilter
    from dagster._core.event_api import PartitionKeyFilter

    key = AssetCheckKey(AssetKey(asset), check)
    [record] = instance.event_log_storage.get_asset_check_execution_history(key, limit=1, partition_filter=PartitionKeyFilter(key=partition))
    target = record.evaluation.target_materialization_data if record.evaluation is not None else None
    latest = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition]), limit=1).records
    return record.status.value, target.storage_id if target else None, latest[0].storage_id if latest else None
