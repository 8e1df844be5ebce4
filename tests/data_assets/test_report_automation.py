"""Declarative automation of the quality report, evaluated tick by tick with Dagster's own evaluator on the code
location's asset graph: the report is redrawn at most hourly, and only when a stage it reads has new data; it
records each source view's partition once per change."""

from __future__ import annotations

from datetime import UTC, datetime

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetSelection,
    DagsterInstance,
    Definitions,
    evaluate_automation_conditions,
)

from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import SNAPSHOTS, multi_key

BLOCKLIST = AssetKey("blocklist")
REPORT = AssetKey("quality_report")


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 11, 24, hour, minute, tzinfo=UTC)


class Ticks:
    """Successive evaluations of `keys`' conditions, carrying the cursor as the sensor does."""

    def __init__(self, defs: Definitions, instance: DagsterInstance, *keys: AssetKey) -> None:
        self.defs, self.instance, self.keys, self.cursor = defs, instance, keys, None

    def requested(self, when: datetime, defs: Definitions | None = None) -> set[str]:
        result = evaluate_automation_conditions(
            defs=defs or self.defs, instance=self.instance, asset_selection=AssetSelection.assets(*self.keys), evaluation_time=when, cursor=self.cursor,
        )
        self.cursor = result.cursor
        return {key.to_user_string() for key in self.keys if result.get_num_requested(key)}


def test_quality_report_runs_hourly_and_only_after_new_data():
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01"])
    ticks = Ticks(Definitions(assets=ASSETS, resources=build_resources()), instance, REPORT)
    assert ticks.requested(at(10, 30)) == set()  # never drawn, but no hourly tick yet
    assert ticks.requested(at(11, 5)) == {"quality_report"}
    instance.report_runless_asset_event(AssetMaterialization(REPORT))
    assert ticks.requested(at(11, 10)) == set()
    assert ticks.requested(at(12, 5)) == set()  # an hour passed, nothing new upstream

    instance.report_runless_asset_event(AssetMaterialization(AssetKey("cleaned_documents"), partition=multi_key("web", "2026-01")))
    assert ticks.requested(at(12, 10)) == {"quality_report"}  # new data, and the 12:00 tick passed since the last run
    assert ticks.requested(at(12, 15)) == set()
    instance.report_runless_asset_event(AssetMaterialization(REPORT))
    assert ticks.requested(at(12, 20)) == set()
    instance.report_runless_asset_event(AssetMaterialization(AssetKey("tokenized_shards"), partition=multi_key("web", "2026-01")))
    assert ticks.requested(at(12, 30)) == set()  # new data, but it already ran this hour
    assert ticks.requested(at(13, 1)) == {"quality_report"}


def test_report_records_each_source_view_partition_once_per_change(tmp_path):
    """quality_report materializes `quality_of_<source>` for each (source, snapshot) whose figures
    changed since the last report: all of them the first time, none on a re-run over the same manifests, and
    only the changed partition after one stage re-published it."""
    from dagster import materialize

    from data_assets.report import quality_report, source_views
    from sluice.io.layout import PartitionRef
    from sluice.io.storage import open_store
    from tests.conftest import base_config, write_config
    from tests.sluice.test_report import publish

    root = tmp_path / "data"
    store = open_store(str(root))
    publish(store, PartitionRef("web", "2026-01"), 10, 7, 6, 600, 1, {})
    publish(store, PartitionRef("web", "2026-02"), 12, 9, 5, 500, 0, {"web/2026-01": 3})
    publish(store, PartitionRef("reference", "2026-01"), 5, 5, 5, 900, 0, {})
    resources = build_resources(write_config(tmp_path / "sluice.yaml", base_config(str(root))))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01", "2026-02"])

    def recorded() -> set[str]:
        result = materialize([quality_report, *source_views], selection=[quality_report.key], resources=resources, instance=instance)
        events = result.get_asset_materialization_events()
        return {f"{e.asset_key.path[-1].removeprefix('quality_of_')}/{e.partition}" for e in events if e.asset_key != quality_report.key}

    assert recorded() == {"web/2026-01", "web/2026-02", "reference/2026-01"}
    assert recorded() == set()
    publish(store, PartitionRef("web", "2026-02"), 12, 9, 4, 400, 1, {"web/2026-01": 3})
    assert recorded() == {"web/2026-02"}
    latest = instance.get_latest_materialization_event(AssetKey("quality_of_web")).asset_materialization
    assert latest.partition == "2026-02" and latest.metadata["tokens"].value == 400
