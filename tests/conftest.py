"""Shared fixtures: configs that point the graph at the bundled sample (or other data) with storage in tmp."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.sample_config import base_config, write_config

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SAMPLE = PROJECT_ROOT / "sample_data"
# In CI (CI=true, as .ci/run sets it) a skipped test is a failure: tests that need PostgreSQL, Chromium or
# ../shared/corpus must run there, not pass silently. A test whose skip is legitimate everywhere (it
# depends on the data, not on the machine) carries @pytest.mark.may_skip.
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail") and item.get_closest_marker("may_skip") is None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI ({reason}); with CI=true every test must run (install what it needs, or mark it may_skip with a reason)"


@pytest.fixture
def make_config(tmp_path):
    """make_config(**sections) -> path of a config file; sections replace top-level keys of the base config."""

    def make(name: str = "sluice.yaml", storage_root: str | None = None, **sections: Any) -> str:
        raw = base_config(storage_root or str(tmp_path / "data"))
        for key, value in sections.items():
            raw[key] = copy.deepcopy(value)
        return write_config(tmp_path / name, raw)

    return make


@pytest.fixture(scope="session")
def sample_graph(tmp_path_factory):
    """The bundled sample graph, materialized once per session through Dagster's backfill machinery
    (tests/support/graph.py). Read it; `.copy(tmp_path)` it to change it."""
    from tests.support.graph import build_sample_graph

    return build_sample_graph(tmp_path_factory.mktemp("sample_graph"))


@pytest.fixture
def dagster_instance(tmp_path):
    """An ephemeral-on-disk Dagster instance (SQLite) in tmp."""
    from dagster import DagsterInstance

    home = tmp_path / "dagster_home"
    home.mkdir()
    with DagsterInstance.local_temp(tempdir=str(home)) as instance:
        yield instance


def tree_digest(root: str) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under root (to compare outputs byte for byte)."""
    import hashlib

    digests = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath, name)
            digests[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests
