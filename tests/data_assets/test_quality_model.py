"""quality_model as its own asset: trained on the sample (reference = positives, web = negatives), versioned by
its SHA-256, used by cleaned_documents with a threshold (score column, drops with reason); a threshold without
a model fails naming the asset."""

from __future__ import annotations

import json

import polars as pl
from dagster import materialize

from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import SNAPSHOTS, multi_key

SNAPSHOTS_IN_SAMPLE = ["2026-01", "2026-02"]


def run(instance, config: str, selection: list[str], partition_key=None, raise_on_error=True):
    return materialize(
        ASSETS, selection=selection, partition_key=partition_key, instance=instance,
        resources=build_resources(config), raise_on_error=raise_on_error,
    )


def metadata(result, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: getattr(v, "value", v) for k, v in event.event_specific_data.materialization.metadata.items()}


def cleaned_web(tmp_path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept, dropped) documents of cleaned_documents web/2026-01 as written."""
    partition = tmp_path / "data" / "cleaned_documents" / "source=web" / "snapshot=2026-01"
    kept = pl.concat([pl.read_parquet(p) for p in sorted(partition.glob("part-*.parquet"))])
    dropped_folder = tmp_path / "data" / "cleaned_dropped" / "source=web" / "snapshot=2026-01"
    dropped = pl.concat([pl.read_parquet(p) for p in sorted(dropped_folder.glob("dropped-*.parquet"))])
    return kept, dropped


def test_quality_model_trained_versioned_and_used_by_cleaning(make_config, dagster_instance, tmp_path):
    model = {"positive_source": "reference", "max_negatives": 40, "epochs": 10}
    compute = {"backend": "local", "max_workers": 1}
    # quality_threshold 0: every document reaching the model is scored and kept (score only).
    config = make_config(quality_model=model, cleaning={"min_chars": 200, "quality_threshold": 0.0}, compute=compute)
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, SNAPSHOTS_IN_SAMPLE)
    raw_counts = {}
    for snapshot in SNAPSHOTS_IN_SAMPLE:
        for source in ("web", "reference"):
            result = run(dagster_instance, config, ["raw_documents"], multi_key(source, snapshot))
            raw_counts[(source, snapshot)] = metadata(result, "raw_documents")["documents_out"]

    trained = run(dagster_instance, config, ["quality_model"])
    meta = metadata(trained, "quality_model")
    assert meta["positives"] == raw_counts[("reference", "2026-01")] + raw_counts[("reference", "2026-02")]
    assert meta["negatives"] == 40  # a sample of the web pages (more than 40 exist)
    assert 0.0 <= meta["held_out_accuracy"] <= 1.0
    [check] = trained.get_asset_check_evaluations()
    assert check.check_name == "held_out_accuracy_above_chance"
    [event] = trained.get_asset_materialization_events()
    assert event.event_specific_data.materialization.tags["dagster/data_version"] == meta["sha256"]
    # Same raw data and settings: the same model.
    again = metadata(run(dagster_instance, config, ["quality_model"]), "quality_model")
    assert again["sha256"] == meta["sha256"]

    cleaned_meta = metadata(run(dagster_instance, config, ["cleaned_documents"], multi_key("web", "2026-01")), "cleaned_documents")
    assert cleaned_meta["quality_model_sha256"] == meta["sha256"]
    assert any(key.startswith("funnel/") and key.endswith("_quality_model") for key in cleaned_meta)
    scored, _ = cleaned_web(tmp_path)
    assert scored.height == cleaned_meta["documents_out"] > 1 and scored["quality_score"].null_count() == 0
    # A threshold inside the scores (their median; the sample's model scores close to 0.5 whatever the
    # threshold) keeps exactly the documents scored at or above it, and drops the rest with their score.
    threshold = float(scored["quality_score"].median())
    split = make_config(name="split.yaml", quality_model=model, cleaning={"min_chars": 200, "quality_threshold": threshold}, compute=compute)
    cleaned_meta = metadata(run(dagster_instance, split, ["cleaned_documents"], multi_key("web", "2026-01")), "cleaned_documents")
    kept, dropped = cleaned_web(tmp_path)
    above = scored.filter(pl.col("quality_score") >= threshold)["doc_id"].to_list()
    assert sorted(kept["doc_id"].to_list()) == sorted(above) and 0 < kept.height < scored.height
    low = dropped.filter(pl.col("reason") == "low_quality_score")
    assert sorted(low["doc_id"].to_list()) == sorted(set(scored["doc_id"].to_list()) - set(above))
    assert low.height == cleaned_meta["drop/low_quality_score"]
    for detail in low["detail"].to_list():
        assert float(detail.split(" < ")[0]) < threshold
    manifest = json.loads((tmp_path / "data" / "quality_model" / "_manifest.json").read_text())
    assert manifest["sha256"] == meta["sha256"] and manifest["positive_source"] == "reference"


def test_threshold_without_a_model_fails_naming_the_asset(make_config, dagster_instance):
    config = make_config(cleaning={"quality_threshold": 0.5}, compute={"backend": "local", "max_workers": 1})
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01"])
    result = run(dagster_instance, config, ["raw_documents", "cleaned_documents"], multi_key("web", "2026-01"), raise_on_error=False)
    assert not result.success
    [failure] = result.get_step_failure_events()
    assert "materialize quality_model first" in failure.step_failure_data.error.to_string()
