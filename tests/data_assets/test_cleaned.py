"""cleaned_documents through Dagster: PII is redacted and counted, the blocking no-PII check stops the run
when PII is left (redaction off for a source), per-source drop-rate bounds warn, the dropped side output
holds every dropped document with its reason."""

from __future__ import annotations

import json

import polars as pl
from dagster import AssetKey, materialize

from data_assets.cleaned import DROP_RATE_CHECK, NO_PII_CHECK
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import SNAPSHOTS, multi_key, source_snapshot_partitions
from tests.conftest import SAMPLE
from tests.support.results import check_partition_statuses, latest_check_target

SNAPSHOT = "2026-01"
SENTENCES = [
    "The river runs past the old mill and the town that grew around it over the centuries.",
    "People came to the market with bread, cheese and wool to trade with their neighbours.",
    "In winter the water froze and the children skated to the far bank and back again.",
    "Nobody remembers who built the mill, but everyone agrees that it has always been there.",
    "The miller kept a small garden of herbs behind the wheel house for his wife and children.",
    "Travellers often stopped to rest in the shade before they walked on toward the hills.",
]


def write_source(folder, documents: list[str]) -> None:
    path = folder / SNAPSHOT
    path.mkdir(parents=True)
    with open(path / "docs.jsonl", "w", encoding="utf-8") as out:
        for index, text in enumerate(documents):
            out.write(json.dumps({"id": f"d{index}", "text": text, "url": f"https://example.org/{index}"}) + "\n")


def documents() -> list[str]:
    with_pii = " ".join(SENTENCES) + " Write to the miller at miller@example.org or call +44 20 7946 0958 today."
    plain = "\n".join(SENTENCES[::-1])
    short = "Too short to keep."
    return [with_pii, plain, short]


def run(instance, config: str):
    return materialize(
        ASSETS,
        selection=["raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents"],
        partition_key=multi_key("reference", SNAPSHOT),
        instance=instance,
        resources=build_resources(config),
        raise_on_error=False,
    )


def setup(make_config, dagster_instance, tmp_path, cleaning: dict):
    write_source(tmp_path / "reference", documents())
    sources = [
        {"name": "web", "location": str(SAMPLE / "web"), "format": "warc"},
        {"name": "reference", "location": str(tmp_path / "reference"), "format": "jsonl", "options": {"url_field": "url", "date_field": None}},
    ]
    config = make_config(sources=sources, cleaning=cleaning, compute={"backend": "local", "max_workers": 1})
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, [SNAPSHOT])
    return config


def checks(result) -> dict[str, object]:
    return {c.check_name: c for c in result.get_asset_check_evaluations() if c.asset_key.to_user_string() == "cleaned_documents"}


def cleaned_metadata(result) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "cleaned_documents"]
    return {k: getattr(v, "value", v) for k, v in event.event_specific_data.materialization.metadata.items()}


def test_pii_redacted_counted_and_checked(make_config, dagster_instance, tmp_path):
    config = setup(make_config, dagster_instance, tmp_path, {"min_chars": 100})
    result = run(dagster_instance, config)
    assert result.success
    meta = cleaned_metadata(result)
    assert meta["pii/email"] == 1 and meta["pii/phone"] == 1 and meta["pii_redactions"] == 2
    assert checks(result)[NO_PII_CHECK].passed
    partition = tmp_path / "data" / "cleaned_documents" / "source=reference" / f"snapshot={SNAPSHOT}"
    kept = pl.read_parquet(partition / "part-00000.parquet")
    texts = dict(zip(kept["url"], kept["text"], strict=True))
    first = texts["https://example.org/0"]
    assert "<EMAIL>" in first and "<PHONE>" in first and "miller@example.org" not in first
    assert dict(zip(kept["url"], kept["pii_redactions"], strict=True)) == {"https://example.org/0": 2, "https://example.org/1": 0}
    dropped = pl.read_parquet(tmp_path / "data" / "cleaned_dropped" / "source=reference" / f"snapshot={SNAPSHOT}" / "dropped-00000.parquet")
    assert dropped.select("url", "step", "reason").rows() == [("https://example.org/2", "length", "too_short")]


def test_pii_left_in_the_output_blocks_downstream(make_config, dagster_instance, tmp_path):
    config = setup(make_config, dagster_instance, tmp_path, {"min_chars": 100, "per_source": {"reference": {"pii": {"enabled": False}}}})
    result = run(dagster_instance, config)
    check = checks(result)[NO_PII_CHECK]
    assert not check.passed
    assert check.metadata["residual/email"].value == 1 and check.metadata["residual/phone"].value == 1
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {"raw_documents"}  # the partition failed its blocking check; deduped_documents never ran
    assert not result.success
    # What the UI's Checks -> Partitions view reads (Dagster's AssetCheckState): Failed, with no target, as the
    # output it judged was not recorded as a materialization.
    key = str(multi_key("reference", SNAPSHOT))
    assert check_partition_statuses(dagster_instance, "cleaned_documents", NO_PII_CHECK, source_snapshot_partitions) == {key: "FAILED"}
    assert latest_check_target(dagster_instance, "cleaned_documents", NO_PII_CHECK, key) == ("FAILED", None, None)


def test_drop_rate_bounds_per_source_warn(make_config, dagster_instance, tmp_path):
    config = setup(make_config, dagster_instance, tmp_path, {"min_chars": 100, "per_source": {"reference": {"drop_rate_bounds": [0.0, 0.2]}}})
    result = run(dagster_instance, config)
    check = checks(result)[DROP_RATE_CHECK]
    assert not check.passed and check.metadata["drop_rate"].value == 0.3333 and check.metadata["max"].value == 0.2  # 1/3 to 4 digits
    assert result.success  # a warning: deduped_documents still ran
    assert "deduped_documents" in {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    # The UI's Checks -> Partitions view (Dagster's AssetCheckState): the warning is Failed, the other check
    # Passed, each evaluation naming the partition's materialization as its target.
    key = str(multi_key("reference", SNAPSHOT))
    statuses = {name: check_partition_statuses(dagster_instance, "cleaned_documents", name, source_snapshot_partitions) for name in (DROP_RATE_CHECK, NO_PII_CHECK)}
    assert statuses == {DROP_RATE_CHECK: {key: "FAILED"}, NO_PII_CHECK: {key: "SUCCEEDED"}}
    [materialization] = dagster_instance.fetch_materializations(AssetKey("cleaned_documents"), limit=10).records
    for name, status in ((DROP_RATE_CHECK, "FAILED"), (NO_PII_CHECK, "SUCCEEDED")):
        assert latest_check_target(dagster_instance, "cleaned_documents", name, key) == (status, materialization.storage_id, materialization.storage_id)


def test_a_blocking_failure_after_a_passing_materialization_shows_failed(make_config, dagster_instance, tmp_path):
    """The partition passed no_pii_left once; redaction then switched off, the re-run fails the blocking check
    and records no materialization (its output replaced the partition's files): the earlier materialization
    stays the partition's latest, the failed evaluation names it as its target and the failed run as what it
    judged, so the Checks -> Partitions view shows Failed (not Missing, not the earlier Passed)."""
    config = setup(make_config, dagster_instance, tmp_path, {"min_chars": 100})
    assert run(dagster_instance, config).success
    key = str(multi_key("reference", SNAPSHOT))
    assert check_partition_statuses(dagster_instance, "cleaned_documents", NO_PII_CHECK, source_snapshot_partitions) == {key: "SUCCEEDED"}
    [first] = dagster_instance.fetch_materializations(AssetKey("cleaned_documents"), limit=10).records
    config = make_config(
        name="off.yaml",
        sources=[
            {"name": "web", "location": str(SAMPLE / "web"), "format": "warc"},
            {"name": "reference", "location": str(tmp_path / "reference"), "format": "jsonl", "options": {"url_field": "url", "date_field": None}},
        ],
        cleaning={"min_chars": 100, "per_source": {"reference": {"pii": {"enabled": False}}}},
        compute={"backend": "local", "max_workers": 1},
    )
    failed = run(dagster_instance, config)
    assert not failed.success
    [latest] = dagster_instance.fetch_materializations(AssetKey("cleaned_documents"), limit=10).records
    assert latest.storage_id == first.storage_id  # the failed run recorded no materialization
    assert latest_check_target(dagster_instance, "cleaned_documents", NO_PII_CHECK, key) == ("FAILED", first.storage_id, first.storage_id)
    assert check_partition_statuses(dagster_instance, "cleaned_documents", NO_PII_CHECK, source_snapshot_partitions) == {key: "FAILED"}
    # the other check of the same partition passed on the failed run's output: Passed, same target
    assert check_partition_statuses(dagster_instance, "cleaned_documents", DROP_RATE_CHECK, source_snapshot_partitions) == {key: "SUCCEEDED"}
    evaluation = checks(failed)[NO_PII_CHECK]
    assert evaluation.metadata["judged_run"].value == failed.run_id
    assert first.run_id != failed.run_id
