"""`sluice materialize`, run as users run it (a subprocess with SLUICE_CONFIG and DAGSTER_HOME), on a tiny crawl
of three sources: `web` (sample pages plus a page whose code listing holds dotted leaders, the 79-character
`....…....+++++` tokens that stalled a partition for 800 s), `reference` (the sample manuals) and
`poisoned` (one empty file of two: its raw partition fails the blocking quarantine check).

What must hold: the command exits non-zero and names the poisoned partition and why; only that partition's
downstream (its cleaned, deduped and tokenized partitions) is blocked; every other partition and the
whole-set consumers (quality model, tokenizer, mix) complete, the latter saying what they ran without; the
dotted-leader page is judged by the quality filters like any page (no step timeout); every run is in the
Dagster instance with the command's tags. A one-source config skips the optional quality model with its
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

from tests.conftest import PROJECT_ROOT, SAMPLE, base_config, write_config

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


def run_lines(stdout: str) -> dict[str, str]:
    """asset partition label -> what the command printed for it ("ok 2.1 s", "blocked (...)", ...)."""
    found = {}
    for line in stdout.splitlines():
        match = re.match(r"\s+\[\d+/\d+\] (.+?): (ok|failed|blocked|skipped)(.*)$", line)
        if match:
            found[match.group(1)] = match.group(2) + match.group(3)
    return found


@pytest.fixture(scope="module")
def poisoned_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("materialize")
    locations = tiny_crawl(folder / "crawl")
    config = crawl_config(
        folder,
        [
            {"name": "web", "location": str(locations["web"]), "format": "warc"},
            {"name": "reference", "location": str(locations["reference"]), "format": "jsonl", "options": {"url_field": "url", "date_field": "date"}},
            # Named to sort last in the global (snapshot, source) order: global dedup deduplicates every partition
            # against all earlier ones, so a failed partition also blocks the dedup of partitions after it
            # (data_assets.runner); here nothing of the other sources comes after it.
            {"name": "zz-poisoned", "location": str(locations["zz-poisoned"]), "format": "jsonl"},
        ],
    )
    done = sluice("materialize", config, folder / "home")
    (folder / "stdout.txt").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)  # for a human reading a failure
    return folder, done


def test_exits_non_zero_naming_the_poisoned_partition_and_why(poisoned_run):
    _, done = poisoned_run
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failed = done.stdout.split("FAILED:", 1)[1]
    assert "raw_documents zz-poisoned/2026-01: failed: blocking check quarantined_file_share_below_bound failed: 1 of 2 files unreadable" in failed
    downstream = (
        "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents", "decontamination", "blocklist_matches",
        "tokenized_shards",
    )
    for asset in downstream:
        assert f"{asset} zz-poisoned/2026-01: blocked: upstream" in failed
    assert failed.count(": failed:") == 1 and failed.count(": blocked:") == len(downstream), failed


def test_everything_else_completes(poisoned_run):
    folder, done = poisoned_run
    status = run_lines(done.stdout)
    for source in ("web", "reference"):
        for asset in ("raw_documents", "cleaned_documents", "dedup_clusters", "deduped_documents", "decontamination", "tokenized_shards"):
            assert status[f"{asset} {source}/2026-01"].startswith("ok"), (asset, source)
    for asset in ("quality_model", "perplexity_model", "tokenizer", "mixed_dataset default", "quality_report"):
        assert status[asset].startswith("ok"), status[asset]
    per_partition = (
        "raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents", "decontamination",
        "blocklist_matches", "tokenized_shards",
    )
    expected = {f"{asset} {source}/2026-01" for asset in per_partition for source in ("web", "reference", "zz-poisoned")}
    assert set(status) == expected | {"quality_model", "perplexity_model", "tokenizer", "blocklist", "mixed_dataset default", "quality_report"}
    assert "tokenizer ran without failed upstream partitions: deduped_documents zz-poisoned/2026-01" in done.stdout
    mix = folder / "data" / "mixed_dataset"
    assert any(mix.rglob("_manifest.json"))
    # Per-stage wall times are printed for every stage.
    stages = done.stdout.split("Stages (wall time", 1)[1].split("\n\n", 1)[0]
    for asset in ("raw_documents", "quality_model", "perplexity_model", "cleaned_documents", "deduped_documents", "tokenizer", "tokenized_shards", "mixed_dataset"):
        assert f"  {asset} " in stages


def test_the_dotted_leader_page_is_judged_by_the_filters_not_the_budget(poisoned_run):
    folder, _ = poisoned_run
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


def test_every_run_is_in_the_dagster_instance_with_its_tags(poisoned_run):
    from dagster import DagsterInstance, RunsFilter

    folder, done = poisoned_run
    ran = sum(1 for status in run_lines(done.stdout).values() if status.startswith(("ok", "failed")))
    with DagsterInstance.from_config(str(folder / "home")) as instance:
        runs = instance.get_runs(filters=RunsFilter(tags={"sluice/command": "materialize"}))
    assert len(runs) == ran
    assert {run.tags["sluice/asset"] for run in runs} >= {"raw_documents", "cleaned_documents", "mixed_dataset", "tokenizer"}
    assert len({run.tags["sluice/invocation"] for run in runs}) == 1


def test_one_source_skips_the_quality_model_with_its_reason(tmp_path, dagster_instance):
    from data_assets.cli import materialize_all, print_summary, register_snapshots
    from data_assets.definitions import build_resources

    raw = base_config(str(tmp_path / "data"))
    raw["sources"] = [source for source in raw["sources"] if source["name"] == "web"]
    raw["quality_model"] = {"positive_source": "web"}
    raw.pop("perplexity_model", None)
    raw["tokenizer"] = {**raw["tokenizer"], "train_sources": [], "vocab_size": 1024}
    raw["cleaning"].pop("per_source", None)
    raw["mixes"]["default"].update({"weights": {"web": 1.0}, "token_budget": 20_000})
    resources = build_resources(write_config(tmp_path / "sluice.yaml", raw))
    register_snapshots(dagster_instance, resources)
    lines: list[str] = []
    report = materialize_all(dagster_instance, resources, log=lines.append)
    print_summary(report, lines.append)
    assert report["failed"] == []
    reason = "it needs two classes, and 'web' (quality_model.positive_source) is the only source"
    assert f"  skipped quality_model: optional: {reason}" in lines  # in the summary
    assert "  skipped perplexity_model: optional: perplexity_model.reference_source is not set" in lines
    assert any(line.endswith(f"quality_model: skipped (optional: {reason})") for line in lines)  # as it happened
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
    assert "cleaning.quality_threshold is set (sources ['web']) but the quality model cannot be trained" in done.stderr
    assert "needs two classes" in done.stderr
    assert not (tmp_path / "data").exists()  # no work was done
