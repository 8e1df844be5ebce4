"""The planner's stale causes read in bulk (data_assets/staleness.DirectCauses) against Dagster's own resolver
(the oracle, one asset partition at a time), for every asset partition of a synthetic history of the sample's
graph (2 sources x 4 snapshots, the events a run leaves: data versions, code versions, provenance) after each
kind of change: none, an input re-materialized with another and with the same data version, an observed
setting changed, an unpartitioned input rebuilt, an asset's code version changed."""

from __future__ import annotations

import pytest
from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    AssetRecordsFilter,
    DagsterInstance,
    Definitions,
)
from dagster._core.definitions.data_version import CODE_VERSION_TAG, DATA_VERSION_TAG
from dagster._core.definitions.partitions.context import partition_loading_context

from benchmarks.dagster_scale import snapshot_names, write_history
from data_assets.definitions import ASSETS, build_resources, defs
from data_assets.freshness import Planner
from data_assets.partitions import multi_key
from data_assets.versions import SETTINGS_ASSETS


def _compare(definitions: Definitions, instance: DagsterInstance) -> dict[tuple[str, str | None], str]:
    """Every materialized asset partition's cause, asserting bulk == Dagster's; returns the stale ones."""
    planner = Planner(definitions, instance)
    graph = planner.graph
    stale = {}
    with partition_loading_context(dynamic_partitions_store=instance):
        for key in graph.toposorted_asset_keys:
            node = graph.get(key)
            if not node.is_materializable:
                continue
            for parsed in planner._partitions(key):  # the planner's own listing (MultiPartitionKey objects)
                partition = None if parsed is None else str(parsed)
                bulk, oracle = planner.direct.cause(key, parsed), planner._resolver_cause(key, parsed)
                assert bulk == oracle, (key.to_user_string(), partition, bulk, oracle)
                if bulk:
                    stale[(key.to_user_string(), partition)] = bulk
    return stale


def _event(instance: DagsterInstance, key: str, partition: str | None, version: str, observe: bool = False) -> None:
    """Another event of the partition, with the inputs (provenance) its previous one recorded, as a re-run
    with unchanged inputs records them."""
    asset = AssetKey(key)
    fetch = instance.fetch_observations if observe else instance.fetch_materializations
    previous = fetch(AssetRecordsFilter(asset_key=asset, asset_partitions=[partition] if partition else None), limit=1).records
    tags = dict(previous[0].event_log_entry.tags or {}) if previous else {}
    tags.update({DATA_VERSION_TAG: version, CODE_VERSION_TAG: defs.resolve_asset_graph().get(asset).code_version or ""})
    kind = AssetObservation if observe else AssetMaterialization
    instance.report_runless_asset_event(kind(asset_key=asset, partition=partition, tags=tags))


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as instance:
        write_history(instance, defs, snapshot_names(4))
        yield instance


def test_a_consistent_history_has_nothing_stale(instance):
    assert _compare(defs, instance) == {}


def test_a_rematerialized_input_counts_only_with_another_data_version(instance):
    partition = str(multi_key("web", snapshot_names(4)[1]))
    _event(instance, "raw_documents", partition, "raw_documents-v1")  # same data version
    assert _compare(defs, instance) == {}
    _event(instance, "raw_documents", partition, "raw_documents-v2")
    assert _compare(defs, instance) == {("cleaned_documents", partition): "raw_documents updated"}


def test_an_observed_setting_and_an_unpartitioned_input(instance):
    _event(instance, "cleaning_settings", "web", "changed", observe=True)
    _event(instance, "tokenizer", None, "tokenizer-v2")
    stale = _compare(defs, instance)
    web = {str(multi_key("web", snapshot)) for snapshot in snapshot_names(4)}
    assert {p for (asset, p), why in stale.items() if asset == "cleaned_documents" and why == "cleaning_settings changed"} == web
    assert {p for (asset, p), why in stale.items() if asset == "tokenized_shards" and why == "tokenizer updated"} == web | {
        str(multi_key("reference", snapshot)) for snapshot in snapshot_names(4)
    }


def test_a_changed_code_version(instance):
    changed = Definitions(
        assets=[
            asset.map_asset_specs(lambda spec: spec.replace_attributes(code_version="changed")) if AssetKey("decontamination") in getattr(asset, "keys", ()) else asset
            for asset in [*ASSETS, *SETTINGS_ASSETS]
        ],
        resources=build_resources(),
    )
    stale = _compare(changed, instance)
    assert set(stale.values()) == {"code version changed"} and {asset for asset, _ in stale} == {"decontamination"}
    assert len(stale) == 8
