"""The check before a run (sluice.runtime.preflight.check_config_file) on S3: an unlistable source prefix, a storage
root in a bucket that does not exist and a named S3 file that is not there come in the same list as the
schema's problems, each with its key; an endpoint that cannot be reached is reported in seconds, not after
the run's full retry budget."""

from __future__ import annotations

import socket
import time

import pytest

import sluice.io.storage
from sluice.config import ConfigError
from sluice.runtime.preflight import check_config_file
from tests.conftest import base_config, write_config


def s3_config(tmp_path, endpoint: str, bucket: str, **s3) -> dict:
    raw = base_config(f"s3://{bucket}-missing/out")  # a bucket that does not exist
    raw["sources"][0]["location"] = f"s3://{bucket}/crawl/web"
    raw["s3"] = {"endpoint_url": endpoint, **s3}
    raw["mixes"]["default"]["eval_sets"] = [f"s3://{bucket}/evals/held-out.jsonl"]  # not uploaded
    raw["compute"]["max_workerz"] = 2  # a schema problem in the same list
    return raw


def test_s3_problems_come_in_the_same_list_as_the_schemas(s3_credentials, tmp_path):
    bucket = s3_credentials.create_bucket("sluice-preflight")
    s3_credentials.client().put_object(Bucket=bucket, Key="crawl/web/2026-01/a.warc.gz", Body=b"")
    path = write_config(tmp_path / "sluice.yaml", s3_config(tmp_path, s3_credentials.endpoint_url, bucket))
    with pytest.raises(ConfigError) as error:
        check_config_file(path)
    lines = str(error.value).splitlines()[1:]
    assert [line.strip().split(": ")[0] for line in lines] == ["compute.max_workerz", "storage.root", "mixes.default.eval_sets[0]"], lines
    assert f"bucket '{bucket}-missing' cannot be listed" in lines[1] and "fix:" in lines[1]
    assert lines[2].strip().startswith(f"mixes.default.eval_sets[0]: s3://{bucket}/evals/held-out.jsonl does not exist; fix:")


def test_an_unreachable_endpoint_is_reported_in_seconds(s3_credentials, tmp_path):
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    raw = s3_config(tmp_path, f"http://127.0.0.1:{port}", "sluice-nowhere", max_attempts=10)
    path = write_config(tmp_path / "sluice.yaml", raw)
    start = time.monotonic()
    try:
        with pytest.raises(ConfigError) as error:
            check_config_file(path)
    finally:
        sluice.io.storage._CLIENTS.clear()
    elapsed = time.monotonic() - start
    keys = [line.strip().split(": ")[0] for line in str(error.value).splitlines()[1:]]
    assert keys == ["compute.max_workerz", "sources[0].location (source 'web')", "storage.root", "mixes.default.eval_sets[0]"]
    assert elapsed < 15, elapsed  # 2 attempts per request, not the config's 10 with backoff
