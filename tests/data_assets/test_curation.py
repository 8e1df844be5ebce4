"""perplexity_model and the new cleaning steps through Dagster on the bundled sample: per-language KenLM
models versioned by content hash, cleaned documents scored and bucketed, code-heavy pages routed to the
cleaned_code side dataset published by the partition's manifest, and the metadata of every new step."""

from __future__ import annotations

import json

import polars as pl
import pytest
from dagster import materialize

from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import SNAPSHOTS, multi_key
from sluice.clean.steps.perplexity import default_lmplz_path

pytestmark = pytest.mark.skipif(not default_lmplz_path().is_file() and not __import__("os").environ.get("CI"), reason="lmplz not built")


def run(instance, config: str, selection: list[str], partition_key=None):
    return materialize(ASSETS, selection=selection, partition_key=partition_key, instance=instance, resources=build_resources(config))


def metadata(result, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: getattr(v, "value", v) for k, v in event.event_specific_data.materialization.metadata.items()}


def test_perplexity_model_code_routing_and_new_columns(make_config, dagster_instance, tmp_path):
    config = make_config(
        perplexity_model={"reference_source": "reference", "order": 3, "min_documents": 2},
        cleaning={
            "min_chars": 200,
            "perplexity": {"enabled": True},
            "code_share": {"route_above": 0.3},
            "languages": {"ja": {"toxicity": {"enabled": False}}},
        },
        compute={"backend": "local", "max_workers": 1},
    )
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01"])
    for source in ("web", "reference"):
        run(dagster_instance, config, ["raw_documents"], multi_key(source, "2026-01"))
    trained = run(dagster_instance, config, ["perplexity_model"])
    meta = metadata(trained, "perplexity_model")
    manifest = json.loads((tmp_path / "data" / "perplexity_model" / "_manifest.json").read_text())
    assert meta["sha256"] == manifest["sha256"] and meta["languages"] == len(manifest["models"]) >= 1
    [event] = trained.get_asset_materialization_events()
    assert event.event_specific_data.materialization.tags["dagster/data_version"] == manifest["sha256"]
    for code, model in manifest["models"].items():
        assert (tmp_path / "data" / "perplexity_model" / model["key"]).is_file()
        assert model["key"] == f"lang={code}/model-{model['sha256'][:16]}.arpa"
        assert model["cutoffs"][0] <= model["cutoffs"][1]
    assert metadata(run(dagster_instance, config, ["perplexity_model"]), "perplexity_model")["sha256"] == meta["sha256"]

    cleaned = metadata(run(dagster_instance, config, ["cleaned_documents"], multi_key("web", "2026-01")), "cleaned_documents")
    assert cleaned["perplexity_model_sha256"] == meta["sha256"]
    partition = tmp_path / "data" / "cleaned_documents" / "source=web" / "snapshot=2026-01"
    kept = pl.read_parquet(sorted(partition.glob("part-*.parquet")))
    scored = kept.filter(pl.col("language").is_in(list(manifest["models"])))
    assert scored["perplexity"].null_count() == 0 and set(scored["perplexity_bucket"]) <= {"head", "middle", "tail"}
    assert kept.filter(~pl.col("language").is_in(list(manifest["models"])))["perplexity"].null_count() == kept.height - scored.height
    assert sum(cleaned.get(f"perplexity_bucket/{b}", 0) for b in ("head", "middle", "tail")) == scored.height
    assert kept["code_share"].null_count() == 0 and kept["code_share"].max() <= 0.3
    assert kept.filter(pl.col("language") == "ja")["toxic_terms"].null_count() == kept.filter(pl.col("language") == "ja").height
    # Routed pages: in the side dataset, published by the manifest, with the same schema, PII-checked.
    part_manifest = json.loads((partition / "_manifest.json").read_text())
    routed_entries = [e for e in part_manifest["side_files"] if e.get("prefix") == "cleaned_code/source=web/snapshot=2026-01"]
    code_rows = sum(e["rows"] for e in routed_entries)
    assert code_rows == cleaned.get("routed/cleaned_code", 0) == part_manifest["routed"].get("cleaned_code", 0)
    if code_rows:
        code = pl.read_parquet(sorted((tmp_path / "data" / "cleaned_code" / "source=web" / "snapshot=2026-01").glob("part-*.parquet")))
        assert code.height == code_rows and code["code_share"].min() > 0.3 and code.schema == kept.schema
    assert cleaned["documents_in"] == cleaned["documents_out"] + sum(v for k, v in cleaned.items() if k.startswith("drop/")) + code_rows
