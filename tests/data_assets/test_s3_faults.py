"""Storage faults: the graph on a real S3 server (SeaweedFS) behind a fault-injecting proxy.

About 10 % of requests are answered `503 SlowDown`, reset without an answer, or delayed. Only botocore's
configured retries (`s3.retry_mode`, `s3.max_attempts`) stand between those faults and the run: the
outputs must equal, byte for byte, those of a fault-free run. With the store down for good, the run fails
with a message naming the store and the cause, and no partition is published half-written.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance, materialize

import sluice.config
import sluice.io.storage
from benchmarks.s3_server import use_credentials
from data_assets.cli import register_snapshots
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import multi_key
from sluice.io.layout import entry_key
from tests.conftest import base_config, write_config
from tests.data_assets.test_s3 import failure_text, list_keys, s3_digest, upload_sample
from tests.support.fault_proxy import FaultProxy
from tests.support.graph import graph_instance, materialize_graph

STAGES = ["raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents"]


def config_for(folder: Path, endpoint: str, bucket: str, out: str, name: str, **s3: object) -> str:
    raw = base_config(f"s3://{bucket}/{out}")
    for source in raw["sources"]:
        source["location"] = f"s3://{bucket}/crawl/{source['name']}"
    raw["s3"] = {"endpoint_url": endpoint, **s3}
    folder.mkdir(parents=True, exist_ok=True)
    return write_config(folder / name, raw)


def run_partition(config: str, home: Path, partitions: list[tuple[str, str]], raise_on_error: bool = True, registered=None):
    resources = build_resources(config)
    home.mkdir(parents=True, exist_ok=True)
    results = []
    with DagsterInstance.local_temp(tempdir=str(home)) as instance:
        register_snapshots(instance, resources)
        if registered is not None:
            registered()
        for source, snapshot in partitions:
            result = materialize(
                ASSETS,
                selection=STAGES,
                partition_key=multi_key(source, snapshot),
                instance=instance,
                resources=resources,
                raise_on_error=raise_on_error,
            )
            results.append(result)
            if not result.success:
                break
    return results


@pytest.fixture
def bucket(s3_credentials):
    name = s3_credentials.create_bucket("sluice-faults")
    upload_sample(s3_credentials, name)
    return name


def test_partition_under_injected_faults_equals_fault_free_run(s3_credentials, bucket, tmp_path):
    server = s3_credentials
    partitions = [("reference", "2026-01")]  # the first in the dedup order: it needs no other partition
    run_partition(config_for(tmp_path, server.endpoint_url, bucket, "clean", "clean.yaml"), tmp_path / "h1", partitions)
    with FaultProxy(server.endpoint_url, fault_rate=0.10, seed=7) as proxy:
        faulty = config_for(tmp_path, proxy.endpoint_url, bucket, "faulty", "faulty.yaml", max_attempts=12)
        results = run_partition(faulty, tmp_path / "h2", partitions)
    assert all(result.success for result in results)
    counts = proxy.counts
    print(f"fault proxy: {dict(counts)}")
    assert counts["requests"] > 40
    assert counts["slowdown"] + counts["reset"] >= 3  # faults were really injected (and survived)
    client = server.client()
    clean, faulted = s3_digest(client, bucket, "clean"), s3_digest(client, bucket, "faulty")
    assert len(clean) >= 8
    assert faulted == clean


def assert_nothing_half_written(client, bucket: str, prefix: str) -> int:
    """Every visible object is whole, and every published manifest's files exist with their digests."""
    keys = list_keys(client, bucket, prefix + "/")
    bodies = {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}
    for key, body in bodies.items():
        assert "/.tmp-" not in key
        if key.endswith(".parquet"):
            pq.read_table(io.BytesIO(body))  # a torn upload would not parse
        if key.endswith("_manifest.json"):
            manifest = json.loads(body)
            folder = key.rsplit("/", 1)[0]
            for entry in manifest.get("files", []) + manifest.get("side_files", []):
                data = bodies[f"{prefix}/{entry_key(folder[len(prefix) + 1 :], entry)}"]
                assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    return len(keys)


@pytest.mark.parametrize("down_after", [pytest.param(0, marks=pytest.mark.slow), 25, pytest.param(60, marks=pytest.mark.slow)])
def test_store_down_for_good_fails_clearly_and_publishes_nothing_half_written(s3_credentials, bucket, tmp_path, down_after):
    server = s3_credentials
    with FaultProxy(server.endpoint_url, fault_rate=0.0) as proxy:
        config = config_for(tmp_path, proxy.endpoint_url, bucket, "out", "down.yaml", max_attempts=3, connect_timeout_s=2, read_timeout_s=5)

        def go_down_later() -> None:  # the store dies `down_after` requests into the run
            proxy.down_after = proxy.counts["requests"] + down_after

        try:
            results = run_partition(config, tmp_path / "home", [("reference", "2026-01")], raise_on_error=False, registered=go_down_later)
        finally:
            sluice.io.storage._CLIENTS.clear()
    result = results[-1]
    assert not result.success
    text = failure_text(result)
    assert f"s3://{bucket}/" in text, text
    # A StorageError from the stage, or (store down from the first request) the preflight's one line naming
    # the source location it could not list.
    assert ("StorageError" in text or "cannot be listed" in text) and ("Connection" in text or "connection" in text), text
    client = server.client()
    assert_nothing_half_written(client, bucket, "out")
    # A stage may fail before or after publishing its manifest (e.g. while removing stale files): either
    # way the manifest-listed files are whole (checked above), and no later stage ran.
    failed_stage = [event.step_key for event in result.get_step_failure_events()][0]
    for later in STAGES[STAGES.index(failed_stage) + 1 :]:
        assert not list_keys(client, bucket, f"out/{later}/")


@pytest.mark.slow
def test_whole_graph_under_injected_faults_equals_fault_free_run(s3_server, tmp_path, monkeypatch):
    use_credentials(monkeypatch, s3_server.access_key, s3_server.secret_key)
    bucket = s3_server.create_bucket("sluice-faults-graph")
    upload_sample(s3_server, bucket)

    def whole_graph(endpoint: str, out: str, home: str, **s3: object) -> None:
        config = config_for(tmp_path, endpoint, bucket, out, f"{out}.yaml", **s3)
        with graph_instance(tmp_path / home) as instance:
            report = materialize_graph(instance, config)
        assert report["failed"] == [], report["failed"]

    try:
        whole_graph(s3_server.endpoint_url, "clean", "h1")
        with FaultProxy(s3_server.endpoint_url, fault_rate=0.10, seed=11) as proxy:
            whole_graph(proxy.endpoint_url, "faulty", "h2", max_attempts=12)
    finally:
        sluice.io.storage._CLIENTS.clear()
    print(f"fault proxy, whole graph: {dict(proxy.counts)}")
    assert proxy.counts["slowdown"] + proxy.counts["reset"] >= 10
    client = s3_server.client()
    clean = s3_digest(client, bucket, "clean")
    assert len(clean) > 40
    assert s3_digest(client, bucket, "faulty") == clean


def test_cleanup_aborts_interrupted_multipart_uploads_only_under_the_root(s3_credentials, bucket):
    from sluice.io.storage import open_store

    client = s3_credentials.client()
    inside = client.create_multipart_upload(Bucket=bucket, Key="out/raw_documents/part-00000.parquet")
    outside = client.create_multipart_upload(Bucket=bucket, Key="elsewhere/file")
    client.upload_part(Bucket=bucket, Key="out/raw_documents/part-00000.parquet", UploadId=inside["UploadId"], PartNumber=1, Body=b"x" * 100)
    store = open_store(f"s3://{bucket}/out", sluice.config.S3Settings(endpoint_url=s3_credentials.endpoint_url))
    assert store.abort_stale_uploads(older_than_s=3600) == []  # a young upload may belong to a live run
    assert store.abort_stale_uploads(older_than_s=0) == ["out/raw_documents/part-00000.parquet"]
    left = [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    assert left == ["elsewhere/file"]
    client.abort_multipart_upload(Bucket=bucket, Key="elsewhere/file", UploadId=outside["UploadId"])
    assert list_keys(client, bucket, "out/") == []
