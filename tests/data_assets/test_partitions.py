"""Empty source x snapshot pairs, a tokenizer.json given in config, and the daily mix schedule."""

from __future__ import annotations

import json
import shutil

from dagster import DagsterInstance, build_schedule_context, materialize

from data_assets.cli import materialize_all, register_snapshots
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import multi_key
from data_assets.schedules import daily_mix_rebuild
from tests.conftest import SAMPLE


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
    resources = build_resources(config)
    (tmp_path / "home").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "home")) as instance:
        register_snapshots(instance, resources)
        report = materialize_all(instance, resources, log=lambda _: None)
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


def test_schedule_requests_every_mix_once_per_day():
    context = build_schedule_context(scheduled_execution_time=__import__("datetime").datetime(2026, 11, 21, 4, 0))
    requests = list(daily_mix_rebuild(context))
    assert [r.partition_key for r in requests] == ["default"]
    assert [r.run_key for r in requests] == ["default/2026-11-21"]


def test_multi_key_orders_dimensions_by_name():
    assert str(multi_key("web", "2026-01")) == "2026-01|web"
