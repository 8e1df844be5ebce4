"""`sluice whatif` and the `whatif_report` job, the Dagster-facing sides of sluice.whatif.engine, on the sample
cleaned with attributes (tests/sluice/whatif/test_engine.py's fixture)."""

from __future__ import annotations

import html
import json

import polars as pl

from sluice.clean.attributes import ATTRIBUTES_DATASET
from tests.sluice.whatif.test_engine import _changed, sample  # noqa: F401 - the module-scoped fixture


def test_the_command_prints_the_flips_and_writes_summary_and_flips(sample, tmp_path, monkeypatch, capsys):  # noqa: F811 - the imported fixture
    import yaml

    from data_assets.cli import main
    from sluice.config import CONFIG_ENV_VAR

    raw, root, _ = sample
    current, other = tmp_path / "current.yaml", tmp_path / "other.yaml"
    current.write_text(yaml.safe_dump(raw))
    other.write_text(yaml.safe_dump(_changed(raw, c4__min_num_sentences=12)))
    monkeypatch.setenv(CONFIG_ENV_VAR, str(current))
    assert main(["whatif", "--config", str(other), "--out", str(tmp_path / "out"), "--samples", "1"]) == 0
    printed = capsys.readouterr().out
    flips = pl.read_parquet(tmp_path / "out" / "flips.parquet")
    assert flips.columns[:7] == ["doc_id", "source", "snapshot", "language", "before", "after", "rule"]
    assert flips.height > 0 and set(flips["rule"]) == {"too_few_sentences"} and set(flips["after"]) == {"dropped"}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["flipped_documents"] == flips.height
    assert "kept->dropped" in printed and "too_few_sentences" in printed and flips["doc_id"].sort()[0] in printed
    # The report: the deciding statistic beside both thresholds, and the start of the text cleaning wrote.
    assert (tmp_path / "out" / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "out" / "index.html").read_text()
    first = flips.sort("doc_id").row(0, named=True)
    sentences = pl.read_parquet(sorted(root.glob(f"{ATTRIBUTES_DATASET}/source={first['source']}/snapshot=*/*.parquet")))
    value = sentences.filter(pl.col("doc_id") == first["doc_id"])["c4.sentences"][0]
    assert f"<mark>c4.sentences = {value:.4g}</mark> (threshold &gt;= 5 → &gt;= 12)" in page
    text = pl.read_parquet(sorted(root.glob(f"cleaned_documents/source={first['source']}/snapshot=*/part-*.parquet"))).filter(pl.col("doc_id") == first["doc_id"])["text"][0]
    assert html.escape(text[:80]) in page


def test_the_whatif_report_job_publishes_the_report_as_a_materialization(sample, tmp_path):  # noqa: F811 - the imported fixture
    """`whatif_report` (the UI's Launchpad) runs the same comparison and records the report on the
    `whatif_report` asset with its counts."""
    import yaml

    from data_assets.whatif import whatif_report
    from resources import SluiceSettings

    raw, root, _ = sample
    current, other = tmp_path / "current.yaml", tmp_path / "other.yaml"
    current.write_text(yaml.safe_dump(raw))
    other.write_text(yaml.safe_dump(_changed(raw, c4__min_num_sentences=12)))
    result = whatif_report.execute_in_process(
        run_config={"ops": {"whatif": {"config": {"other_config": str(other), "out": str(tmp_path / "report")}}}},
        resources={"settings": SluiceSettings(config_path=str(current))},
    )
    assert result.success
    (materialization,) = result.asset_materializations_for_node("whatif")
    assert materialization.asset_key.path == ["whatif_report"]
    flips = pl.read_parquet(tmp_path / "report" / "flips.parquet")
    assert materialization.metadata["flipped_documents"].value == flips.height > 0
    assert materialization.metadata["kept_before"].value - materialization.metadata["kept_after"].value == flips.height
    assert (tmp_path / "report" / "index.html").is_file()


def test_partitions_cleaned_before_the_attributes_existed_are_named_and_a_missing_config_is_an_error(sample, tmp_path, monkeypatch, capsys):  # noqa: F811 - the imported fixture
    import shutil

    import yaml

    from data_assets.cli import main
    from sluice.config import CONFIG_ENV_VAR, SluiceConfig
    from sluice.io.layout import read_manifest, write_manifest
    from sluice.io.storage import open_store
    from sluice.whatif.engine import what_if

    raw, root, _ = sample
    copy = tmp_path / "data"
    shutil.copytree(root / "cleaned_documents", copy / "cleaned_documents")
    shutil.copytree(root / ATTRIBUTES_DATASET, copy / ATTRIBUTES_DATASET)
    store = open_store(str(copy), SluiceConfig.model_validate(raw).s3)
    prefix = "cleaned_documents/source=web/snapshot=2026-01"
    manifest = read_manifest(store, prefix)
    write_manifest(store, prefix, {**manifest, "side_files": [e for e in manifest["side_files"] if not e["prefix"].startswith(ATTRIBUTES_DATASET)]})
    config = SluiceConfig.model_validate({**raw, "storage": {"root": str(copy)}})
    result = what_if(config, config, str(tmp_path / "scratch"))
    assert {"source": "*", "partitions": ["web/2026-01"], "changes": ["no cleaned_attributes: re-materialize cleaned_documents there"]} in result.unanswered
    current = tmp_path / "current.yaml"
    current.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv(CONFIG_ENV_VAR, str(current))
    assert main(["whatif", "--config", str(tmp_path / "absent.yaml")]) == 2
    assert "--config" in capsys.readouterr().err
