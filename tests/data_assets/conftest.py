"""Fixtures of the asset-graph tests: a real S3-compatible server (SeaweedFS on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.s3_server import SeaweedS3, shared_server, use_credentials


@pytest.fixture(scope="session")
def s3_server() -> Iterator[SeaweedS3]:
    """SeaweedFS `weed mini` serving S3 on a free 127.0.0.1 port for the whole session (shared per process).

    Gives `endpoint_url`, `access_key`, `secret_key`, `client()` and `create_bucket()`."""
    with shared_server() as server:
        yield server


@pytest.fixture
def s3_credentials(s3_server, monkeypatch) -> Iterator[SeaweedS3]:
    """The server's keys in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for this test (and its worker processes)."""
    import sluice.io.storage

    use_credentials(monkeypatch, s3_server.access_key, s3_server.secret_key)
    yield s3_server
    sluice.io.storage._CLIENTS.clear()  # clients built with this test's keys must not outlive it
