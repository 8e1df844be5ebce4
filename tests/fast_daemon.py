"""`dagster-daemon` with a shorter backfill tick, for tests that wait on the daemon.

Dagster's backfill daemon sleeps a fixed 30 s between iterations (`DEFAULT_DAEMON_INTERVAL_SECONDS`, not
configurable in dagster.yaml); an asset backfill, and every multi-partition run request of declarative
automation (submitted as a backfill), advances one wave of runs per iteration. Everything else is the
`dagster-daemon` command users run: `python -m tests.fast_daemon run -w workspace.yaml`.
"""

from __future__ import annotations

import os
import sys

import dagster._daemon.controller as controller
from dagster._daemon.cli import main

if __name__ == "__main__":
    controller.DEFAULT_DAEMON_INTERVAL_SECONDS = int(os.environ.get("SLUICE_TEST_DAEMON_INTERVAL_S", "5"))
    sys.argv[0] = "dagster-daemon"
    sys.exit(main())
