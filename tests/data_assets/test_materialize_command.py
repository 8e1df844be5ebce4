"""`sluice materialize`, run as users run it (a subprocess with SLUICE_CONFIG and DAGSTER_HOME), on a tiny crawl
of three sources: `web` (sample pages plus a page whose code listing holds dotted leaders, the 79-character
`....…....+++++` tokens that stalled a partition for 800 s), `reference` (the sample manuals) and
`poisoned` (one empty file of two: its raw partition fails the blocking quarantine check).

What must hold: the command (which hands the work to Dagster: one asset backfill, executed by a daemon it
starts) exits non-zero and names the poisoned partition and why; the failure stops what depends on it the
way a Dagster backfill does (the other partitions of the failed step are materialized, nothing downstream of
the failure runs); once the bad file is gone the next command runs only what is missing and completes; the
dotted-leader page is judged by the quality filters like any page (no step timeout); every run belongs to
the command's backfill with its tags. A one-source config skips the optional quality model with its
reason; a config that needs the quality model and cannot feed it fails at load, before any run.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from data_assets.cli import register_snapshots
from data_assets.raw import QUARANTINE_CHECK
from tests.conftest import PROJECT_ROOT, SAMPLE, base_config, write_config
from tests.support.graph import config_env, graph_instance, materialize_graph
from tests.support.results import check_partition_statuses, latest_check_target

SNAPSHOT = "2026-01"
LEADER = "." * 79 + "+++++"
LEADERS = "\n".join([LEADER, "....…....+++++", "." * 40 + "+++++", "e is 65537 (0x010001)"])
PROSE = [
    "The certificate authority signs the keys of every server that takes part in the private network.",
    "Each administrator generates a key pair on the machine itself, so the private key never travels.",
    "The command below prints a row of dots while it searches for the two large prime numbers it needs.",
    "Once the key exists, a signing request is sent to the authority, which returns the signed certificate.",
    "Keep the private key readable by root only, and renew the certificate before the date it expires.",
    "The same steps apply to the clients, which need their own certificates to prove who they are.",
]
DOTTED_URL = "https://example.org/handbook/sect.x509-cert.html"


def dotted_leader_page() -> bytes:
    body = "".join(f"<p>{sentence}</p>" for sentence in PROSE[:3])
    body += f"<pre>$ openssl genrsa -out server.key 2048\nGenerating RSA private key, 2048 bit long modulus\n{LEADERS}</pre>"
    body += "".join(f"<p>{sentence}</p>" for sentence in PROSE[3:])
    html = f"<html><head><title>Creating certificates</title></head><body><article><h1>Creating certificates</h1>{body}</article></body></html>"
    http = (
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + html
    ).encode()
    record = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        f"WARC-Target-URI: {DOTTED_URL}\r\nWARC-Date: 2026-01-15T00:00:00Z\r\n"
        "WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-00000000d07e>\r\n"
        f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(http)}\r\n\r\n"
    ).encode() + http + b"\r\n\r\n"
    return gzip.compress(record, mtime=0)


def tiny_crawl(root: Path) -> dict[str, Path]:
    web = root / "web" / SNAPSHOT
    web.mkdir(parents=True)
    shutil.copy(SAMPLE / "web" / SNAPSHOT / "handbook-en-US.warc.gz", web)
    (web / "x509.warc.gz").write_bytes(dotted_leader_page())
    reference = root / "reference" / SNAPSHOT
    reference.mkdir(parents=True)
    shutil.copy(SAMPLE / "reference" / SNAPSHOT / "debian-reference.jsonl.gz", reference)
    poisoned = root / "poisoned" / SNAPSHOT
    poisoned.mkdir(parents=True)
    (poisoned / "a-empty.jsonl").write_bytes(b"")
    (poisoned / "b-good.jsonl").write_bytes(b'{"id": "1", "text": "one line of text that is far too short to keep"}\n')
    return {"web": root / "web", "reference": root / "reference", "zz-poisoned": root / "poisoned"}


def crawl_config(folder: Path, sources: list[dict], **overrides) -> str:
    raw = base_config(str(folder / "data"))
    raw["sources"] = sources
    raw["compute"] = {"backend": "local", "max_workers": 2}
    raw["tokenizer"] = {**raw["tokenizer"], "train_sources": [], "vocab_size": 1024}
    raw["mixes"]["default"].update({"weights": {"web": 0.7, "reference": 0.3}, "token_budget": 40_000})
    raw.update(overrides)
    return write_config(folder / "sluice.yaml", raw)


def sluice(command: str, config: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLUICE_CONFIG": config, "DAGSTER_HOME": str(home), "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "data_assets.cli", command], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=1800
    )


def run_lines(stdout: str) -> list[tuple[str, str]]:
    """(what the run materialized, how it ended) for each run the command reported as it ended."""
    found = []
    for line in stdout.splitlines():
        match = re.match(r"\s+(ok|FAILED|canceled)\s+(.+?)  \d+\.\d s", line)
        if match:
            found.append((match.group(2), match.group(1)))
    return found


SOURCES = ("web", "reference", "zz-poisoned")


def source_snapshot_partitions(sources):
    """The source x snapshot partitions of this crawl's config (this process's data_assets holds the default
    config's sources)."""
    from dagster import DynamicPartitionsDefinition, MultiPartitionsDefinition, StaticPartitionsDefinition

    from data_assets.partitions import SNAPSHOT_DIMENSION, SNAPSHOTS

    return MultiPartitionsDefinition({"source": StaticPartitionsDefinition(list(sources)), SNAPSHOT_DIMENSION: DynamicPartitionsDefinition(name=SNAPSHOTS)})


def check_statuses(home: Path, asset: str, check: str, partitions_def) -> dict[str, str]:
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        return check_partition_statuses(instance, asset, check, partitions_def)


def materialized(home: Path, asset: str) -> set[str]:
    from dagster import AssetKey, DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        return set(instance.get_materialized_partitions(AssetKey(asset)))


@pytest.fixture(scope="module")
def poisoned_run(tmp_path_factory):
    """`sluice materialize` on the poisoned crawl, then again once the bad file is removed."""
    folder = tmp_path_factory.mktemp("materialize")
    locations = tiny_crawl(folder / "crawl")
    config = crawl_config(
        folder,
        [
            {"name": "web", "location": str(locations["web"]), "format": "warc"},
            {"name": "reference", "location": str(locations["reference"]), "format": "jsonl", "options": {"url_field": "url", "date_field": "date"}},
            {"name": "zz-poisoned", "location": str(locations["zz-poisoned"]), "format": "jsonl"},
        ],
    )
    first = sluice("materialize", config, folder / "home")
    (folder / "first.txt").write_text(first.stdout + "\n--- stderr ---\n" + first.stderr)  # for a human reading a failure
    state = {asset: materialized(folder / "home", asset) for asset in ("raw_documents", "cleaned_documents", "blocklist", "mixed_dataset")}
    state["quarantine_check"] = check_statuses(folder / "home", "raw_documents", QUARANTINE_CHECK, source_snapshot_partitions(SOURCES))
    (locations["zz-poisoned"] / SNAPSHOT / "a-empty.jsonl").unlink()  # the fix: the unreadable file goes
    second = sluice("materialize", config, folder / "home")
    (folder / "second.txt").write_text(second.stdout + "\n--- stderr ---\n" + second.stderr)
    return folder, first, state, second


def test_exits_non_zero_naming_the_poisoned_partition_and_why(poisoned_run):
    _, done, _, _ = poisoned_run
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failed = done.stderr.split("FAILED:", 1)[1]
    assert "raw_documents zz-poisoned/2026-01: blocking check quarantined_file_share_below_bound failed: 1 of 2 files unreadable" in failed
    assert "1 of 3 partitions failed" in failed  # one line names the partition, the check and the numbers
    assert "Traceback" not in done.stdout + done.stderr
    # The summary shows what the failed partition read (1 document, 1 empty file quarantined), not zeros.
    assert re.search(r"^  zz-poisoned/2026-01 \(failed\) +1 +1 ", done.stdout, re.MULTILINE), done.stdout[-3000:]
    assert (
        "  failed partition zz-poisoned/2026-01: raw_documents blocking check quarantined_file_share_below_bound failed: 1 of 2 files unreadable"
        in done.stdout
    )


def test_a_failure_stops_what_depends_on_it_as_a_dagster_backfill_does(poisoned_run):
    """The other partitions of the failed step are materialized; what reads the failed partition (and, in
    its run, what followed the failed step) is not; the blocklist, which reads nothing, is."""
    _, done, state, _ = poisoned_run
    assert state["raw_documents"] == {"web|2026-01", "reference|2026-01"}
    assert state["cleaned_documents"] == set() and state["mixed_dataset"] == set()
    assert state["blocklist"] == set() or state["blocklist"] is not None
    ended = dict(run_lines(done.stdout))
    assert ended.get("blocklist") == "ok"
    stages = done.stdout.split("Stages (wall time", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"  raw_documents +\d+\.\d s +2 / 1 / 0", stages), stages


def test_after_the_fix_the_next_command_runs_only_what_is_missing(poisoned_run):
    folder, _, _, second = poisoned_run
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    plan = second.stdout.split("To run:", 1)[1].split("Submitted", 1)[0]
    assert "raw_documents: 1 (missing 1)" in plan  # web and reference were materialized by the failed run
    ended = run_lines(second.stdout)
    assert ended and all(status == "ok" for _, status in ended), ended
    assert any(folder.joinpath("data", "mixed_dataset").rglob("_manifest.json"))
    stages = second.stdout.split("Stages (wall time", 1)[1].split("\n\n", 1)[0]
    for asset in ("raw_documents", "quality_model", "cleaned_documents", "deduped_documents", "tokenizer", "tokenized_shards", "mixed_dataset"):
        assert f"  {asset} " in stages


def test_the_checks_partitions_view_shows_each_partitions_result_and_its_target(poisoned_run):
    """What the UI's Checks -> Partitions view and a check's history read back from the instance (Dagster's own
    AssetCheckState and check execution records, not sluice's): after the failed command, the blocking
    quarantine check Passed on web and reference and Failed on the poisoned partition; after the second, every
    partitioned check of every stage is Passed or Failed (none Missing) on every materialized partition, its
    latest evaluation naming that partition's latest materialization (same storage id) as its target."""
    from dagster import AssetKey, DagsterInstance, StaticPartitionsDefinition

    from data_assets.definitions import ASSETS
    from data_assets.partitions import mix_partitions

    folder, _, state, _ = poisoned_run
    assert state["quarantine_check"] == {"web|2026-01": "SUCCEEDED", "reference|2026-01": "SUCCEEDED", "zz-poisoned|2026-01": "FAILED"}
    checked = []
    with DagsterInstance.from_config(str(folder / "home")) as instance:
        for assets_def in ASSETS:
            for spec in getattr(assets_def, "check_specs", ()):
                if spec.partitions_def is None:
                    continue
                asset = spec.asset_key.to_user_string()
                partitions_def = StaticPartitionsDefinition(["default"]) if spec.partitions_def is mix_partitions else source_snapshot_partitions(SOURCES)
                statuses = check_partition_statuses(instance, asset, spec.name, partitions_def)
                partitions = set(instance.get_materialized_partitions(AssetKey(asset)))
                assert partitions and set(statuses) == partitions, (asset, spec.name, statuses, partitions)
                for partition in sorted(partitions):
                    status, target, latest = latest_check_target(instance, asset, spec.name, partition)
                    assert statuses[partition] == status in ("SUCCEEDED", "FAILED"), (asset, spec.name, partition, status)
                    assert target is not None and target == latest, (asset, spec.name, partition, target, latest)
                checked.append((asset, spec.name))
    assert {asset for asset, _ in checked} == {"raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards", "mixed_dataset"}, checked


def test_the_dotted_leader_page_is_judged_by_the_filters_not_the_budget(poisoned_run):
    folder, _, _, _ = poisoned_run
    cleaned = folder / "data" / "cleaned_documents" / "source=web" / f"snapshot={SNAPSHOT}"
    kept = pl.concat([pl.read_parquet(p) for p in sorted(cleaned.glob("part-*.parquet"))])
    dropped_folder = folder / "data" / "cleaned_dropped" / "source=web" / f"snapshot={SNAPSHOT}"
    dropped = pl.concat([pl.read_parquet(p) for p in sorted(dropped_folder.glob("dropped-*.parquet"))])
    page = kept.filter(pl.col("url") == DOTTED_URL)
    if page.height:
        assert "Creating certificates" in page["text"][0]
    else:
        [row] = dropped.filter(pl.col("url") == DOTTED_URL).to_dicts()
        assert not row["reason"].startswith(("step_timeout", "step_crashed")), row
        assert row["step"] in ("gopher_quality", "gopher_repetition", "c4", "fineweb_quality", "length_after_filters"), row
    assert dropped.filter(pl.col("reason").str.starts_with("step_")).height == 0


def test_every_run_belongs_to_the_commands_backfill_with_its_tags(poisoned_run):
    from dagster import DagsterInstance, RunsFilter

    folder, first, _, second = poisoned_run
    with DagsterInstance.from_config(str(folder / "home")) as instance:
        backfills = instance.get_backfills()
        runs = instance.get_runs()
    assert len(backfills) == 2 and all(backfill.tags["sluice/purpose"] == "materialize" for backfill in backfills)
    assert {run.tags["dagster/backfill"] for run in runs} == {backfill.backfill_id for backfill in backfills}
    assert all(run.tags["sluice/purpose"] == "materialize" for run in runs)
    assert len(runs) == len(run_lines(first.stdout)) + len(run_lines(second.stdout))
    partitioned = [run for run in runs if "dagster/asset_partition_range_start" in run.tags]
    assert partitioned and all("sluice/snapshot" in run.tags and "sluice/source" in run.tags or "sluice/mix" in run.tags for run in partitioned)
    del RunsFilter


def test_one_source_skips_the_quality_model_with_its_reason(tmp_path):
    from data_assets.cli import plan_work
    from data_assets.definitions import build_resources

    raw = base_config(str(tmp_path / "data"))
    raw["sources"] = [source for source in raw["sources"] if source["name"] == "web"]
    raw["quality_model"] = {"positive_source": "web"}
    raw.pop("perplexity_model", None)
    raw["tokenizer"] = {**raw["tokenizer"], "train_sources": [], "vocab_size": 1024}
    raw["cleaning"].pop("per_source", None)
    raw["mixes"]["default"].update({"weights": {"web": 1.0}, "token_budget": 20_000})
    config = write_config(tmp_path / "sluice.yaml", raw)
    lines: list[str] = []
    with graph_instance(tmp_path / "home") as instance:
        with config_env(config):
            register_snapshots(instance, build_resources(config), log=lines.append)
            plan = plan_work(instance, build_resources(config), log=lines.append)
        report = materialize_graph(instance, config)
    reason = "it needs two classes, and 'web' (quality_model.positive_source) is the only source"
    assert f"Skipped (optional, this config cannot feed it): quality_model: {reason}" in lines
    assert "Skipped (optional, this config cannot feed it): perplexity_model: perplexity_model.reference_source is not set" in lines
    assert not {"quality_model", "perplexity_model"} & set(plan.reasons)
    assert report["failed"] == [] and report["status"].value == "COMPLETED_SUCCESS"
    assert {key[0] for key in report["partitions"]} == {"web"}
    assert report["mixes"]["default"]["tokens"] == 20_000


def test_a_config_that_cannot_feed_what_it_asks_for_fails_at_load(tmp_path):
    raw = base_config(str(tmp_path / "data"))
    raw["sources"] = [source for source in raw["sources"] if source["name"] == "web"]
    raw["quality_model"] = {"positive_source": "web"}
    raw.pop("perplexity_model", None)
    raw["tokenizer"] = {**raw["tokenizer"], "train_sources": []}
    raw["cleaning"] = {**{k: v for k, v in raw["cleaning"].items() if k != "per_source"}, "quality_threshold": 0.5}
    raw["mixes"]["default"]["weights"] = {"web": 1.0}
    config = tmp_path / "sluice.yaml"
    config.write_text(yaml.safe_dump(raw))
    done = sluice("materialize", str(config), tmp_path / "home")
    assert done.returncode == 2
    assert "cleaning.quality_threshold: set (sources ['web']) but the quality model cannot be trained" in done.stderr
    assert "needs two classes" in done.stderr
    assert not (tmp_path / "data").exists()  # no work was done
