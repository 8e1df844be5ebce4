"""`python -m data_assets.daemon run -w workspace.yaml`: Dagster's daemon (`dagster-daemon run`, the same
sensors, schedules, automation, run queue and backfill daemons) with a backfill iteration every
`SLUICE_BACKFILL_INTERVAL_S` seconds (default 2) instead of Dagster's fixed 30.

Why: an asset backfill advances one wave of runs per iteration of Dagster's backfill daemon (a stage runs
once the runs of the stages it reads have finished), and Dagster sleeps a fixed 30 s between iterations
(`dagster._daemon.controller.DEFAULT_DAEMON_INTERVAL_SECONDS`, not a dagster.yaml setting). A whole-graph
backfill has about six waves, so the stock daemon adds minutes of waiting to work of seconds; with 2 s a UI
backfill runs about as fast as the command line. Nothing else changes: `make ui` and `sluice materialize`
start this daemon, a deployment may run the stock `dagster-daemon` (Dagster+, Kubernetes) and pays only the
waiting.

`$DAGSTER_HOME/sluice-daemon.json` names its process while it runs and says when it stopped, so
`sluice materialize` knows whether a daemon serves the instance (Dagster's heartbeats outlive a stopped
daemon by up to a minute). With
`SLUICE_DAEMON_PARENT=<pid>` (set by `sluice materialize` for a daemon it starts), the daemon stops itself
when that process is gone, so a killed command leaves no daemon behind.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

BACKFILL_INTERVAL_ENV = "SLUICE_BACKFILL_INTERVAL_S"
PARENT_ENV = "SLUICE_DAEMON_PARENT"
PID_FILE = "sluice-daemon.json"


def pid_file() -> Path:
    return Path(os.environ["DAGSTER_HOME"]) / PID_FILE


def running_daemon() -> int | None:
    """The pid of a sluice daemon serving $DAGSTER_HOME, None when none is (it stopped, or was killed)."""
    try:
        record = json.loads(pid_file().read_text())
        pid = int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.get("stopped"):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def _watch_parent(pid: int) -> None:
    """Interrupt this process (the daemon's own clean shutdown) once `pid` no longer exists."""

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os.kill(os.getpid(), signal.SIGINT)
                return
            except PermissionError:
                pass
            time.sleep(1.0)

    threading.Thread(target=watch, name="sluice-parent-watch", daemon=True).start()


def main() -> int:
    import dagster._daemon.controller as controller
    from dagster._daemon.cli import main as dagster_daemon

    controller.DEFAULT_DAEMON_INTERVAL_SECONDS = float(os.environ.get(BACKFILL_INTERVAL_ENV, "2"))
    if os.environ.get(PARENT_ENV):
        _watch_parent(int(os.environ[PARENT_ENV]))
    sys.argv[0] = "dagster-daemon"
    from data_assets.instance import ensure_dagster_home

    ensure_dagster_home()  # the instance `make ui` and the command use: its dedup_index pool limit among them
    path = pid_file()
    if path is not None:
        path.write_text(json.dumps({"pid": os.getpid(), "started": time.time()}))
    try:
        return dagster_daemon()
    finally:
        # Kept, marked stopped: Dagster's heartbeats outlive the daemon by up to a minute, and this file is
        # how `sluice materialize` knows the instance's (sluice) daemon is gone.
        if path is not None and running_daemon() == os.getpid():
            path.write_text(json.dumps({"pid": os.getpid(), "stopped": time.time()}))


if __name__ == "__main__":
    sys.exit(main())
