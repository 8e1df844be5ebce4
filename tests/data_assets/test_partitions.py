"""Empty source x snapshot pairs, a tokenizer.json given in config, and the daily mix schedule."""

from __future__ import annotations

import json
import shutil
from datetime import datetime

from dagster import DagsterInstance, RunRequest, SkipReason, build_schedule_context, materialize

from data_assets.definitions import ASSETS, build_resources, defs
from data_assets.partitions import multi_key
from data_assets.schedules import daily_mix_rebuild
from tests.conftest import SAMPLE
from tests.support.graph import graph_instance, materialize_graph

REPOSITORY = defs.get_repository_def()  # what the daemon evaluates the schedule in


def test_pair_without_data_materializes_empty_and_tokenizer_json_is_accepted(tmp_path, make_config):
    web = tmp_path / "crawl" / "web"
    reference = tmp_path / "crawl" / "reference"
    shutil.copytree(SAMPLE / "web" / "2026-02", web / "2026-02")
    reference.mkdir(parents=True)  # the reference source has no 2026-02 snapshot
    sources = [
        {"name": "web", "location": str(web), "format": "warc"},
        {"name": "reference", "location": str(reference), "format": "jsonl"},
    ]
    mixes = {"default": {"weights": {"web": 1.0}, "token_budget": 20_000, "sequence_length": 128, "seed": 3}}
    # No reference documents at all, so neither the quality model (its positives) nor the perplexity model
    # (its training text) can be trained: the optional assets are skipped.
    config = make_config(sources=sources, mixes=mixes, quality_model={"positive_source": None}, perplexity_model={"reference_source": None})
    with graph_instance(tmp_path / "home") as instance:
        report = materialize_graph(instance, config)
        # The daily schedule rebuilds only a mix that is missing or stale: nothing here.
        context = build_schedule_context(instance=instance, scheduled_execution_time=datetime(2026, 11, 21, 4, 0), repository_def=REPOSITORY)
        assert isinstance(daily_mix_rebuild(context), SkipReason)
    empty = report["partitions"][("reference", "2026-02")]
    assert empty["raw_documents"]["documents_out"] == 0 and empty["raw_documents"]["input_files"] == 0
    assert empty["cleaned_documents"]["documents_out"] == 0
    assert empty["deduped_documents"]["documents_out"] == 0
    assert empty["tokenized_shards"]["tokens"] == 0
    assert report["mixes"]["default"]["tokens"] == 20_000
    assert all(passed for _, _, passed in report["checks"])

    # The trained tokenizer.json, given as tokenizer.path, is used as is (same hash) by a new storage root.
    trained = tmp_path / "data" / "tokenizer" / "tokenizer.json"
    trained_hash = json.loads((tmp_path / "data" / "tokenizer" / "_manifest.json").read_text())["sha256"]
    given = tmp_path / "given-tokenizer.json"
    shutil.copy(trained, given)
    config2 = make_config(
        name="given.yaml",
        storage_root=str(tmp_path / "data2"),
        sources=sources,
        mixes=mixes,
        tokenizer={"path": str(given), "eos_token": "<|endoftext|>"},
    )
    result = materialize(ASSETS, selection=["tokenizer"], resources=build_resources(config2), instance=DagsterInstance.ephemeral())
    meta = result.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
    assert meta["sha256"].value == trained_hash
    assert meta["origin"].value == str(given)


def test_schedule_requests_a_missing_mix_as_a_backfill(dagster_instance):
    context = build_schedule_context(instance=dagster_instance, scheduled_execution_time=datetime(2026, 11, 21, 4, 0), repository_def=REPOSITORY)
    request = daily_mix_rebuild(context)
    assert isinstance(request, RunRequest) and request.requires_backfill_daemon()
    assert [(pair.asset_key.to_user_string(), pair.partition_key) for pair in request.asset_graph_subset.iterate_asset_partitions()] == [
        ("mixed_dataset", "default")
    ]
    assert request.tags["sluice/purpose"] == "daily-mix-rebuild"


def test_multi_key_orders_dimensions_by_name():
    assert str(multi_key("web", "2026-01")) == "web|2026-01"
