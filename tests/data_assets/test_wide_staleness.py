"""Staleness through dependencies on every partition (data_assets/freshness.WideDependencies), on an instance
holding a synthetic history (runless materializations with data versions and Dagster's provenance tags):
below 100 partitions it agrees with Dagster's own resolver (the oracle), filtered by dedup's order for an
EARLIER edge; at 110 partitions, where Dagster's resolver no longer follows the edge, it still finds exactly
the partitions ordered at or after a re-materialized one whose data version changed."""

from __future__ import annotations

import pytest
from dagster import AssetKey, AssetMaterialization, DagsterInstance
from dagster._core.definitions.data_version import (
    CODE_VERSION_TAG,
    DATA_VERSION_TAG,
    SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
)
from dagster._core.definitions.partitions.context import partition_loading_context

from data_assets.definitions import defs
from data_assets.freshness import Planner
from data_assets.partitions import SNAPSHOTS, multi_key, source_snapshot_partitions
from data_assets.staleness import LatestEvents, WideDependencies, dedup_order

INDEX, CLUSTERS, SIGNATURES = AssetKey("dedup_index"), AssetKey("dedup_clusters"), AssetKey("dedup_signatures")
TOKENIZED, MIX = AssetKey("tokenized_shards"), AssetKey("mixed_dataset")
GRAPH = defs.resolve_asset_graph()
parse = source_snapshot_partitions.get_partition_key_from_str


def _report(instance: DagsterInstance, key: AssetKey, partition: str | None, version: str, inputs: dict[AssetKey, str] | None = None) -> None:
    tags = {DATA_VERSION_TAG: version, CODE_VERSION_TAG: GRAPH.get(key).code_version or ""}
    for dependency, dependency_version in (inputs or {}).items():
        pointer = instance.fetch_materializations(dependency, limit=1).records[0].storage_id
        tags[get_input_data_version_tag(dependency)] = dependency_version
        tags[get_input_event_pointer_tag(dependency)] = str(pointer)
    instance.report_runless_asset_event(AssetMaterialization(asset_key=key, partition=partition, tags=tags))


def _history(instance: DagsterInstance, count: int) -> list[str]:
    """`count` snapshots of source web, signed, indexed and clustered in order; the mix built on their shards."""
    snapshots = [f"{2000 + i // 12}-{i % 12 + 1:02d}" for i in range(count)]
    instance.add_dynamic_partitions(SNAPSHOTS, snapshots)
    partitions = sorted((str(multi_key("web", snapshot)) for snapshot in snapshots), key=lambda p: dedup_order(parse(p)))
    for partition in partitions:
        _report(instance, SIGNATURES, partition, "s1")
        _report(instance, INDEX, partition, "i1")
        _report(instance, TOKENIZED, partition, "t1")
    for partition in partitions:
        _report(instance, CLUSTERS, partition, "c1", {INDEX: "i1", SIGNATURES: "s1"})
    _report(instance, MIX, "default", "m1", {TOKENIZED: "t1"})
    return partitions


def _stale(instance: DagsterInstance, partitions: list[str]) -> set[str]:
    wide = WideDependencies(LatestEvents(instance, GRAPH))
    return {p for p in partitions if wide.cause(CLUSTERS, parse(p), INDEX, True, parse)}


def _dagster_stale(instance: DagsterInstance, partitions: list[str]) -> set[str]:
    """Dagster's resolver: dedup_clusters partitions with a stale cause through dedup_index, counted only from
    index partitions ordered at or before them (the EARLIER rule the planner applies to Dagster's causes)."""
    resolver = Planner(defs, instance).resolver
    stale = set()
    with partition_loading_context(dynamic_partitions_store=instance):
        causes = {partition: list(resolver.get_stale_causes(CLUSTERS, partition)) for partition in partitions}
    for partition in partitions:
        for cause in causes[partition]:
            dependency = cause.dependency
            if dependency and dependency.asset_key == INDEX and dedup_order(parse(dependency.partition_key)) <= dedup_order(parse(partition)):
                stale.add(partition)
    return stale


@pytest.mark.parametrize("count", [40, 110])
def test_a_changed_earlier_partition_makes_exactly_the_later_ones_stale(count: int) -> None:
    with DagsterInstance.ephemeral() as instance:
        partitions = _history(instance, count)
        assert _stale(instance, partitions) == set()
        changed = partitions[count // 3]
        _report(instance, INDEX, changed, "i1")  # re-materialized, same data version: nothing is stale
        assert _stale(instance, partitions) == set()
        _report(instance, INDEX, changed, "i2")
        expected = set(partitions[count // 3:])
        assert _stale(instance, partitions) == expected
        if count < SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD:
            assert _dagster_stale(instance, partitions) == expected  # the oracle agrees where it applies
        else:
            assert _dagster_stale(instance, partitions) == set()  # why WideDependencies exists
        # Re-clustered after the change, a partition is no longer stale.
        _report(instance, CLUSTERS, changed, "c2", {INDEX: "i2", SIGNATURES: "s1"})
        assert _stale(instance, partitions) == expected - {changed}


def test_a_new_partition_ordered_before_clustered_ones_makes_them_stale() -> None:
    with DagsterInstance.ephemeral() as instance:
        partitions = _history(instance, 105)
        instance.add_dynamic_partitions(SNAPSHOTS, ["1999-06"])
        early = str(multi_key("web", "1999-06"))
        _report(instance, INDEX, early, "i1")
        assert _stale(instance, partitions) == set(partitions)


def test_a_mix_reading_every_partition_is_stale_when_one_changes() -> None:
    with DagsterInstance.ephemeral() as instance:
        partitions = _history(instance, 110)
        wide = WideDependencies(LatestEvents(instance, GRAPH))
        assert wide.cause(MIX, "default", TOKENIZED, False, parse) is None
        _report(instance, TOKENIZED, partitions[-1], "t2")
        assert WideDependencies(LatestEvents(instance, GRAPH)).cause(MIX, "default", TOKENIZED, False, parse) == "tokenized_shards updated"
