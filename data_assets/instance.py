"""The project-local Dagster instance folder: $DAGSTER_HOME (default `.dagster_home/`) and the dagster.yaml
sluice writes there (SQLite storage, the run queue's settings, the `dedup_index` pool limit). Used by the
command, `make ui` and the daemon the command starts, so all three see the same instance. Imports nothing of
the code location (no config is loaded)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]

DAGSTER_YAML = """\
# Project-local Dagster instance written by sluice: SQLite storage under this folder (the default when no
# storage is named). For Postgres-backed storage in production, see deploy/dagster.yaml.
# The run queue launches queued runs every second, several at once (Dagster's default: every 5 s, one by one).
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
    dequeue_use_threads: true
    dequeue_num_workers: 4
# Writes to the global dedup index run one at a time: the `dedup_index` pool (the only pool sluice uses).
concurrency:
  pools:
    default_limit: 1
    granularity: op
telemetry:
  enabled: false
"""
WRITTEN_BY_SLUICE = "# Project-local Dagster instance written by sluice"


def ensure_dagster_home() -> str:
    """The instance folder ($DAGSTER_HOME, default .dagster_home/) with sluice's dagster.yaml (rewritten when
    an older one written by sluice is there; a user's own file is left alone)."""
    home = os.environ.get("DAGSTER_HOME") or str(PROJECT_ROOT / ".dagster_home")
    os.environ["DAGSTER_HOME"] = home
    Path(home).mkdir(parents=True, exist_ok=True)
    config = Path(home) / "dagster.yaml"
    if not config.exists() or (config.read_text().startswith(WRITTEN_BY_SLUICE[:32]) and config.read_text() != DAGSTER_YAML):
        config.write_text(DAGSTER_YAML)
    return home
