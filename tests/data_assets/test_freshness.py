"""What needs running (data_assets/freshness.py), by Dagster's notions, on the materialized sample: nothing
after a complete run; a source's changed cleaning settings make exactly its partitions and what reads them
stale (in dedup's order, later partitions of other sources too; never the tokenizer or the models), and the
re-run equals a fresh run with the new settings byte for byte; a changed code version makes every partition
of that asset and what reads them stale; `force` selects everything."""

from __future__ import annotations

import shutil

import pytest
from dagster import AssetKey, Definitions

from data_assets.cli import plan_work
from data_assets.definitions import ASSETS, build_resources, defs
from data_assets.freshness import Planner
from data_assets.partitions import multi_key
from data_assets.versions import SETTINGS_ASSETS
from tests.conftest import base_config, tree_digest, write_config
from tests.support.graph import config_env, graph_instance, materialize_graph

PER_PARTITION = (
    "raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents",
    "decontamination", "blocklist_matches", "tokenized_shards",
)


def selected(plan) -> dict[str, set[str]]:
    return {key.to_user_string(): {str(partition) for partition in partitions} for key, partitions in plan.selected.items()}


@pytest.fixture(scope="module")
def graph(sample_graph, tmp_path_factory):
    """A copy of the session's sample graph (this module changes it)."""
    copy = sample_graph.copy(tmp_path_factory.mktemp("freshness"))
    with graph_instance(copy.home) as instance:
        yield copy.folder, copy.config, instance


def test_nothing_is_stale_after_a_complete_run_and_force_selects_everything(graph):
    _, config, instance = graph
    with config_env(config):
        assert plan_work(instance, build_resources(config), log=lambda _: None).count == 0
    forced = Planner(defs, instance).plan(force=True)
    assert set(selected(forced)) == {key.to_user_string() for key in defs.resolve_asset_graph().materializable_asset_keys}
    assert all(len(partitions) == 4 for asset, partitions in selected(forced).items() if asset in PER_PARTITION)


def test_a_changed_code_version_makes_that_assets_partitions_and_readers_stale(graph):
    _, _, instance = graph
    changed = Definitions(
        assets=[
            asset.map_asset_specs(lambda spec: spec.replace_attributes(code_version="2")) if AssetKey("decontamination") in getattr(asset, "keys", ()) else asset
            for asset in [*ASSETS, *SETTINGS_ASSETS]
        ],
        resources=build_resources(),
    )
    plan = Planner(changed, instance).plan()
    assert selected(plan) == {"decontamination": {str(multi_key(s, n)) for s in ("web", "reference") for n in ("2026-01", "2026-02")}, "mixed_dataset": {"default"}}
    assert plan.reasons["decontamination"] == {"code version changed": 4}


def test_changed_cleaning_settings_of_one_source_rerun_exactly_what_they_govern(graph, tmp_path):
    folder, config, instance = graph
    raw = base_config(str(folder / "data"))  # the copy's config: the sample's, its storage root
    raw["cleaning"]["per_source"]["web"] = {"min_chars": 250}
    changed = write_config(folder / "changed.yaml", raw)
    with config_env(changed):
        plan = plan_work(instance, build_resources(changed), log=lambda _: None)
    web = {str(multi_key("web", snapshot)) for snapshot in ("2026-01", "2026-02")}
    after_web = {*web, str(multi_key("reference", "2026-02"))}  # dedup order: (snapshot, source)
    assert selected(plan) == {
        "cleaned_documents": web, "dedup_signatures": web, "dedup_index": web,
        "dedup_clusters": after_web, "deduped_documents": after_web, "decontamination": after_web, "blocklist_matches": after_web,
        "tokenized_shards": after_web, "mixed_dataset": {"default"}, "quality_report": {"None"},
    }
    # The cause names the setting that changed (the settings observations record the settings).
    assert plan.reasons["cleaned_documents"] == {"cleaning_settings changed (cleaning.min_chars)": 2}
    assert plan.why() == "cleaning_settings changed (cleaning.min_chars)"

    report = materialize_graph(instance, changed)
    assert report["planned"] == plan.count and report["status"].value == "COMPLETED_SUCCESS"
    # The re-run says why it ran: its backfill and every run of it carry the cause (sluice/why).
    backfill = instance.get_backfill(report["backfill_id"])
    runs = [run for run in instance.get_runs() if run.tags.get("dagster/backfill") == backfill.backfill_id]
    assert runs and {run.tags.get("sluice/why") for run in runs} == {backfill.tags["sluice/why"]} == {plan.why()}
    with config_env(changed):
        assert plan_work(instance, build_resources(changed), log=lambda _: None).count == 0
    # A fresh run with the new settings, given the tokenizer the first run trained (the tokenizer is built
    # once: changed cleaning does not retrain it), writes the same bytes.
    shutil.copy(folder / "data" / "tokenizer" / "tokenizer.json", tmp_path / "tokenizer.json")
    raw["storage"] = {"root": str(tmp_path / "data")}
    raw["tokenizer"] = {**raw["tokenizer"], "path": str(tmp_path / "tokenizer.json")}
    fresh = write_config(tmp_path / "fresh.yaml", raw)
    with graph_instance(tmp_path / "home") as other:
        materialize_graph(other, fresh)
    incremental, once = tree_digest(str(folder / "data")), tree_digest(str(tmp_path / "data"))
    for tree in (incremental, once):
        tree.pop("tokenizer/_manifest.json")  # says where the tokenizer came from
    assert incremental == once
