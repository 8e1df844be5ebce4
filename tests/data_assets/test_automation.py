"""Declarative automation of the stages (data_assets/automation.py), evaluated tick by tick with Dagster's own
evaluator (`evaluate_automation_conditions`) on the code location's asset graph, the instance's records
standing in for what runs did: what a newly registered snapshot, a changed setting, a changed code version
and an up-to-date instance make it request."""

from __future__ import annotations

from datetime import UTC, datetime

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    AssetSelection,
    DagsterInstance,
    Definitions,
    evaluate_automation_conditions,
)

from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import SNAPSHOTS, multi_key
from data_assets.versions import (
    CLEANING_SETTINGS,
    CRAWL,
    DATA_VERSION_TAG,
    MIX_SETTINGS,
    SETTINGS_ASSETS,
    SOURCE_SETTINGS,
)

SOURCES = ("reference", "web")
PER_PARTITION = (
    "raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents",
    "decontamination", "blocklist_matches", "tokenized_shards",
)
UNPARTITIONED = ("quality_model", "perplexity_model", "blocklist", "tokenizer")


def at(minute: int) -> datetime:
    return datetime(2026, 11, 27, 10, minute, tzinfo=UTC)


class Ticks:
    """Successive evaluations of every asset's condition, carrying the cursor as the automation sensor does."""

    def __init__(self, instance: DagsterInstance, defs: Definitions | None = None) -> None:
        self.instance, self.cursor = instance, None
        self.defs = defs or Definitions(assets=[*ASSETS, *SETTINGS_ASSETS], resources=build_resources())

    def requested(self, minute: int, defs: Definitions | None = None) -> dict[str, set[str]]:
        result = evaluate_automation_conditions(
            defs=defs or self.defs, instance=self.instance, asset_selection=AssetSelection.all() - AssetSelection.assets("quality_report"),
            evaluation_time=at(minute), cursor=self.cursor,
        )
        self.cursor = result.cursor
        found: dict[str, set[str]] = {}
        for pair in result._requested_asset_partitions:  # noqa: SLF001 - the evaluator's requested (asset, partition) pairs
            found.setdefault(pair.asset_key.to_user_string(), set()).add(str(pair.partition_key) if pair.partition_key else "-")
        return found


def materialize_records(instance: DagsterInstance, requested: dict[str, set[str]]) -> None:
    """Record what runs of the requested partitions would (a materialization each, in graph order)."""
    for asset in [*UNPARTITIONED[:3], *PER_PARTITION[:8], "tokenizer", "tokenized_shards", "mixed_dataset"]:
        for partition in sorted(requested.get(asset, ())):
            instance.report_runless_asset_event(AssetMaterialization(asset, partition=None if partition == "-" else partition))


def register(instance: DagsterInstance, snapshots: list[str]) -> None:
    """What the snapshot sensor records for new snapshots: the partitions and their crawl versions."""
    instance.add_dynamic_partitions(SNAPSHOTS, snapshots)
    for snapshot in snapshots:
        for source in SOURCES:
            instance.report_runless_asset_event(AssetObservation(CRAWL, partition=str(multi_key(source, snapshot)), tags={DATA_VERSION_TAG: "1"}))


def up_to_date(instance: DagsterInstance, snapshots: list[str]) -> None:
    for key, partitions in ((SOURCE_SETTINGS, SOURCES), (CLEANING_SETTINGS, SOURCES), (MIX_SETTINGS, ("default",))):
        for partition in partitions:
            instance.report_runless_asset_event(AssetObservation(key, partition=partition, tags={DATA_VERSION_TAG: "a"}))
    register(instance, snapshots)
    everything = {asset: {str(multi_key(s, n)) for n in snapshots for s in SOURCES} for asset in PER_PARTITION}
    everything.update({asset: {"-"} for asset in UNPARTITIONED})
    everything["mixed_dataset"] = {"default"}
    materialize_records(instance, everything)


def run_ticks(ticks: Ticks, instance: DagsterInstance, start: int = 1, limit: int = 12) -> dict[str, set[str]]:
    """Tick, record what the requested runs would materialize, and tick again until nothing is requested;
    returns everything requested (automation advances a wave per tick where a stage reads every partition of
    the one before)."""
    union: dict[str, set[str]] = {}
    for minute in range(start, start + limit):
        requested = ticks.requested(minute)
        if not requested:
            return union
        for asset, partitions in requested.items():
            assert not partitions & union.get(asset, set()), f"{asset} requested twice: {partitions}"
            union.setdefault(asset, set()).update(partitions)
        materialize_records(instance, requested)
    raise AssertionError(f"automation still requesting after {limit} ticks: {union}")


def test_a_registered_snapshot_is_built_whole_and_nothing_of_the_earlier_ones():
    instance = DagsterInstance.ephemeral()
    up_to_date(instance, ["2026-01"])
    ticks = Ticks(instance)
    assert ticks.requested(0) == {}  # an up-to-date instance: nothing, on the first evaluation too
    register(instance, ["2026-02"])
    requested = run_ticks(ticks, instance)
    new = {str(multi_key(source, "2026-02")) for source in SOURCES}
    for asset in PER_PARTITION:
        assert requested[asset] == new, asset  # the new partitions' chain, each asset partition once
    assert requested["mixed_dataset"] == {"default"}
    assert not set(UNPARTITIONED) & set(requested)  # models and tokenizer are built once (GATE)


def test_a_changed_cleaning_setting_requests_that_sources_partitions_and_what_follows():
    instance = DagsterInstance.ephemeral()
    up_to_date(instance, ["2026-01", "2026-02"])
    ticks = Ticks(instance)
    assert ticks.requested(0) == {}
    instance.report_runless_asset_event(AssetObservation(CLEANING_SETTINGS, partition="web", tags={DATA_VERSION_TAG: "b"}))
    requested = run_ticks(ticks, instance)
    web = {str(multi_key("web", snapshot)) for snapshot in ("2026-01", "2026-02")}
    for asset in PER_PARTITION[1:]:
        assert requested[asset] == web, asset
    assert "raw_documents" not in requested and not set(UNPARTITIONED) & set(requested)
    assert requested["mixed_dataset"] == {"default"}
    # Automation does not follow dedup's order: reference/2026-02 comes after web/2026-01, whose index
    # changed, yet only `sluice materialize` re-runs its clusters (data_assets/freshness.py).
    assert str(multi_key("reference", "2026-02")) not in requested["dedup_clusters"]


def test_a_changed_code_version_requests_every_partition_of_that_asset():
    instance = DagsterInstance.ephemeral()
    up_to_date(instance, ["2026-01"])
    ticks = Ticks(instance)
    assert ticks.requested(0) == {}
    changed = Definitions(
        assets=[
            asset.map_asset_specs(lambda spec: spec.replace_attributes(code_version="2-changed")) if AssetKey("blocklist") in getattr(asset, "keys", ()) else asset
            for asset in [*ASSETS, *SETTINGS_ASSETS]
        ],
        resources=build_resources(),
    )
    ticks.defs = changed
    requested = run_ticks(ticks, instance)
    assert requested["blocklist"] == {"-"}
    assert requested["blocklist_matches"] == {str(multi_key(source, "2026-01")) for source in SOURCES}
    assert requested["mixed_dataset"] == {"default"}
    assert "cleaned_documents" not in requested


def test_the_blocklist_is_published_on_a_fresh_instance():
    """Nothing is requested on the first evaluation; the blocklist, which reads nothing, is built once a
    ten-minute tick finds it missing; the models and the tokenizer wait for data to build from."""
    ticks = Ticks(DagsterInstance.ephemeral())
    assert ticks.requested(1) == {}
    assert ticks.requested(9) == {}
    assert ticks.requested(11) == {"blocklist": {"-"}}
    assert ticks.requested(12) == {}
