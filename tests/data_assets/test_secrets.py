"""Credentials reach sluice only through the environment and never show up in what a run leaves behind.

A real secret (the SeaweedFS server's secret key) is planted in AWS_SECRET_ACCESS_KEY; the graph's first
three stages run on S3 with it, and one more run fails with a wrong (also planted) secret. Then every
event the Dagster instance stored for those runs (log lines, materializations and their metadata, check
results, step failures with their error chains), the runs' own records, every line written to stdout,
stderr or Python logging, and every object the runs wrote, are scanned for both secrets.
"""

from __future__ import annotations

import logging
import urllib.parse

from dagster import materialize
from dagster._serdes import serialize_value

import sluice.io.storage
from benchmarks.s3_server import use_credentials
from data_assets.cli import register_snapshots
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import multi_key
from tests.data_assets.test_s3 import list_keys, s3_config, upload_sample


def forms(secret: str) -> list[str]:
    return [secret, urllib.parse.quote(secret, safe=""), secret.encode().hex()]


def run_texts(instance, run_id: str) -> list[str]:
    texts = [serialize_value(instance.get_run_by_id(run_id))]
    for entry in instance.all_logs(run_id):
        texts.append(serialize_value(entry))
        texts.append(entry.user_message or "")
    return texts


def test_planted_secret_never_reaches_logs_metadata_errors_or_outputs(s3_server, dagster_instance, monkeypatch, tmp_path, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    bucket = s3_server.create_bucket("sluice-secrets")
    upload_sample(s3_server, bucket)
    resources = build_resources(s3_config(tmp_path, s3_server, bucket))
    wrong_secret = "planted-WRONG-" + s3_server.secret_key[::-1]
    try:
        use_credentials(monkeypatch, s3_server.access_key, s3_server.secret_key)
        register_snapshots(dagster_instance, resources)
        good = materialize(
            ASSETS,
            selection=["raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents"],
            partition_key=multi_key("reference", "2026-01"),
            instance=dagster_instance,
            resources=resources,
            tags={"purpose": "secret-scan"},
        )
        use_credentials(monkeypatch, s3_server.access_key, wrong_secret)
        bad = materialize(
            ASSETS,
            selection=["raw_documents"],
            partition_key=multi_key("web", "2026-01"),
            instance=dagster_instance,
            resources=resources,
            raise_on_error=False,
        )
    finally:
        sluice.io.storage._CLIENTS.clear()
    assert good.success and not bad.success

    texts = run_texts(dagster_instance, good.run_id) + run_texts(dagster_instance, bad.run_id)
    captured = capfd.readouterr()
    texts += [captured.out, captured.err, caplog.text]
    everything = "\n".join(texts)
    # The scan sees what it should: the materializations' metadata and the failure's storage error.
    assert f"s3://{bucket}/out/deduped_documents/source=reference/snapshot=2026-01" in everything
    assert "SignatureDoesNotMatch" in everything or "InvalidAccessKeyId" in everything
    assert "documents_out" in everything

    client = s3_server.client()
    objects = [client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in list_keys(client, bucket, "out/")]
    assert len(objects) >= 6
    for secret in (s3_server.secret_key, wrong_secret):
        for form in forms(secret):
            assert form not in everything
            assert not any(form.encode() in body for body in objects)
