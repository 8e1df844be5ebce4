"""The whole asset graph with sources and storage on a real S3-compatible server (SeaweedFS on 127.0.0.1).

The sample crawl is uploaded to `s3://<bucket>/crawl/{web,reference}/<snapshot>/`, every asset writes
under `s3://<bucket>/out`, and credentials reach this process and the spawned worker processes only
through AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. The outputs must equal, byte for byte, those of the
same graph on local folders.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dagster import materialize

import sluice.io.storage
from benchmarks.s3_server import SeaweedS3, use_credentials
from data_assets.cli import register_snapshots
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import multi_key
from data_assets.summary import registered_refs
from sluice.config import load_config
from tests.conftest import PROJECT_ROOT, base_config, write_config
from tests.support.graph import graph_instance, materialize_graph

SAMPLE = PROJECT_ROOT / "sample_data"
EXPECTED_PARTITIONS = {("web", "2026-01"), ("web", "2026-02"), ("reference", "2026-01"), ("reference", "2026-02")}
ACCESS_DENIED_CODES = ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied")


def upload_tree(client, bucket: str, local_root: Path, prefix: str) -> list[str]:
    keys = []
    for path in sorted(p for p in local_root.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(local_root).as_posix()}"
        client.upload_file(str(path), bucket, key)
        keys.append(key)
    return keys


def list_keys(client, bucket: str, prefix: str) -> list[str]:
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return sorted(keys)


def s3_digest(client, bucket: str, prefix: str) -> dict[str, str]:
    """Relative key -> SHA-256 of every object under `prefix/` (the S3 twin of tree_digest)."""
    digests = {}
    for key in list_keys(client, bucket, prefix + "/"):
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        digests[key[len(prefix) + 1 :]] = hashlib.sha256(body).hexdigest()
    return digests


def s3_config(folder: Path, server: SeaweedS3, bucket: str, **extra: Any) -> str:
    raw = base_config(f"s3://{bucket}/out")
    for source in raw["sources"]:
        source["location"] = f"s3://{bucket}/crawl/{source['name']}"
    raw["s3"] = {"endpoint_url": server.endpoint_url}
    raw.update(extra)
    folder.mkdir(parents=True, exist_ok=True)
    return write_config(folder / "sluice-s3.yaml", raw)


def upload_sample(server: SeaweedS3, bucket: str) -> None:
    client = server.client()
    for source in ("web", "reference"):
        assert upload_tree(client, bucket, SAMPLE / source, f"crawl/{source}")


def run_whole_graph(config_path: str, home: Path) -> dict[str, Any]:
    with graph_instance(home) as instance:
        report = materialize_graph(instance, config_path)
        assert {(ref.source, ref.snapshot) for ref in registered_refs(instance, load_config(config_path))} == EXPECTED_PARTITIONS
        return report


@dataclass
class Runs:
    bucket: str
    s3_report: dict[str, Any]
    local_report: dict[str, Any]
    s3_tree: dict[str, str]
    local_tree: dict[str, str]
    s3_keys: list[str]


@pytest.fixture(scope="module")
def runs(s3_server, tmp_path_factory, sample_graph) -> Runs:
    """The whole graph once on S3 and once on local folders (default local pool of 2 spawned workers)."""
    folder = tmp_path_factory.mktemp("s3_graph")
    with pytest.MonkeyPatch.context() as monkeypatch:
        use_credentials(monkeypatch, s3_server.access_key, s3_server.secret_key)
        try:
            bucket = s3_server.create_bucket("sluice-graph")
            upload_sample(s3_server, bucket)
            s3_report = run_whole_graph(s3_config(folder, s3_server, bucket), folder / "home-s3")
            local_report, local_tree = sample_graph.report, sample_graph.digest  # the same graph on local folders
        finally:
            sluice.io.storage._CLIENTS.clear()
    client = s3_server.client()
    return Runs(
        bucket=bucket,
        s3_report=s3_report,
        local_report=local_report,
        s3_tree=s3_digest(client, bucket, "out"),
        local_tree=local_tree,
        s3_keys=list_keys(client, bucket, ""),
    )


def test_every_asset_and_check_passes_on_s3_and_locally(runs):
    for report in (runs.s3_report, runs.local_report):
        assert set(report["partitions"]) == EXPECTED_PARTITIONS
        for meta in report["partitions"].values():
            assert {"raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards"} <= set(meta)
            assert meta["raw_documents"]["documents_out"] > 0
        assert set(report["mixes"]) == {"default"}
        assert report["checks"], "no asset checks ran"
        assert [check for check in report["checks"] if not check[2]] == []
    assert sorted(runs.s3_report["checks"]) == sorted(runs.local_report["checks"])


def test_s3_outputs_equal_local_outputs_byte_for_byte(runs):
    assert len(runs.local_tree) > 40
    assert sorted(runs.s3_tree) == sorted(runs.local_tree)  # every file, same relative paths
    differing = sorted(key for key in runs.local_tree if runs.s3_tree[key] != runs.local_tree[key])
    # Completion records (sluice.runtime.tasks) name a crawl file by its store's identity (local: size + mtime; S3:
    # ETag), so raw ingest's differ between the stores; every published file is identical.
    assert [key for key in differing if not key.startswith("raw_documents_tasks/")] == []


def test_s3_run_wrote_only_under_the_storage_root_and_left_no_temp_objects(runs):
    outside = [key for key in runs.s3_keys if not key.startswith(("out/", "crawl/"))]
    assert outside == []
    assert [key for key in runs.s3_keys if "/.tmp-" in key or key.startswith(".tmp-")] == []
    crawl = [key for key in runs.s3_keys if key.startswith("crawl/")]
    expected = sorted(f"crawl/{p.relative_to(SAMPLE).as_posix()}" for source in ("web", "reference") for p in (SAMPLE / source).rglob("*") if p.is_file())
    assert crawl == expected  # the sources were read, never written


def test_s3_metadata_points_at_s3(runs):
    uri = runs.s3_report["partitions"][("web", "2026-01")]["raw_documents"]["dagster/uri"]
    assert str(uri) == f"s3://{runs.bucket}/out/raw_documents/source=web/snapshot=2026-01"
    same_counts = {
        key: (meta["raw_documents"]["documents_out"], meta["deduped_documents"]["documents_out"])
        for key, meta in runs.local_report["partitions"].items()
    }
    assert {
        key: (meta["raw_documents"]["documents_out"], meta["deduped_documents"]["documents_out"])
        for key, meta in runs.s3_report["partitions"].items()
    } == same_counts
    assert runs.s3_report["mixes"]["default"]["tokens"] == runs.local_report["mixes"]["default"]["tokens"]


def failure_text(result) -> str:
    """Every step failure's error, with its causes, as one string."""
    texts = []
    for event in result.get_step_failure_events():
        error = event.event_specific_data.error
        while error is not None:
            texts.append(error.message)
            error = error.cause
    return "\n".join(texts)


def test_wrong_secret_fails_raw_documents_with_a_clear_message(s3_server, dagster_instance, monkeypatch, tmp_path):
    bucket = s3_server.create_bucket("sluice-denied")
    upload_sample(s3_server, bucket)
    resources = build_resources(s3_config(tmp_path, s3_server, bucket))
    use_credentials(monkeypatch, s3_server.access_key, s3_server.secret_key)
    register_snapshots(dagster_instance, resources)

    wrong_secret = "WRONG-" + s3_server.secret_key[::-1]
    use_credentials(monkeypatch, s3_server.access_key, wrong_secret)
    try:
        result = materialize(
            ASSETS,
            selection=["raw_documents"],
            partition_key=multi_key("web", "2026-01"),
            instance=dagster_instance,
            resources=resources,
            raise_on_error=False,
        )
    finally:
        sluice.io.storage._CLIENTS.clear()
    assert not result.success
    text = failure_text(result)
    assert f"s3://{bucket}/crawl/web" in text, text  # one line naming the location (sluice.runtime.preflight) and why
    assert any(code in text for code in ACCESS_DENIED_CODES), text
    assert wrong_secret not in text and s3_server.secret_key not in text
    assert list_keys(s3_server.client(), bucket, "out/") == []  # nothing was published


def test_read_only_identity_fails_raw_documents_on_the_first_write(s3_server, dagster_instance, monkeypatch, tmp_path):
    # Sources are readable, the storage root is not writable: the spawned workers' uploads are refused.
    bucket = s3_server.create_bucket("sluice-readonly")
    upload_sample(s3_server, bucket)
    resources = build_resources(s3_config(tmp_path, s3_server, bucket))
    use_credentials(monkeypatch, s3_server.readonly_access_key, s3_server.readonly_secret_key)
    try:
        register_snapshots(dagster_instance, resources)
        result = materialize(
            ASSETS,
            selection=["raw_documents"],
            partition_key=multi_key("web", "2026-01"),  # 4 files: 2 spawned workers
            instance=dagster_instance,
            resources=resources,
            raise_on_error=False,
        )
    finally:
        sluice.io.storage._CLIENTS.clear()
    assert not result.success
    text = failure_text(result)
    assert f"cannot write s3://{bucket}/out/raw_documents/source=web/snapshot=2026-01/" in text, text
    assert "AccessDenied" in text, text
    assert list_keys(s3_server.client(), bucket, "out/") == []
