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

The daemon reloads its code location only when something it is built from changed. Dagster's daemon
replaces its code server every 60 s (`RELOAD_WORKSPACE_INTERVAL`) so that it picks up edited code; each new
server imports Dagster and the code location again (~5 CPU s here), which was half of what an idle daemon
cost and a few CPU seconds of every minute of a run. This daemon still looks every 60 s
(`SLUICE_WORKSPACE_CHECK_S`) and reloads, through Dagster's own reload, when a source file of the code
location (`data_assets/`, `resources/`, `sluice/`), the config file or a file the config names (whose
content feeds code versions) changed, or when the code server died or failed to load.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

BACKFILL_INTERVAL_ENV = "SLUICE_BACKFILL_INTERVAL_S"
WORKSPACE_CHECK_ENV = "SLUICE_WORKSPACE_CHECK_S"
CODE_PACKAGES = ("data_assets", "resources", "sluice")
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


def code_fingerprint() -> tuple:
    """(path, mtime, size) of every file the code location is built from: the Python sources of its
    packages, the config file and the local files the config names."""
    from data_assets.instance import PROJECT_ROOT
    from resources.settings import resolve_config_path

    paths = [path for package in CODE_PACKAGES for path in sorted((PROJECT_ROOT / package).rglob("*.py"))]
    config_path = resolve_config_path()
    paths.append(Path(config_path))
    try:
        from sluice.config import load_config
        from sluice.runtime.preflight import named_files

        paths += [Path(location) for _, location in named_files(load_config(config_path)) if not location.startswith("s3://")]
    except Exception:  # an invalid config: its own file's change is what to watch (the code server reports it)
        pass
    return tuple((str(path), *_stat(path)) for path in paths)


def _stat(path: Path) -> tuple[int, int]:
    try:
        status = path.stat()
    except OSError:
        return (-1, -1)
    return (status.st_mtime_ns, status.st_size)


def servers_healthy(registry: Any) -> bool:
    """Whether every code server the daemon started is alive and loaded its code (no ErrorRegistryEntry)."""
    if registry is None:
        return True
    for entry in list(registry._active_entries.values()):
        process = getattr(entry, "process", None)
        if process is None or process.server_process.poll() is not None:
            return False
    return True


def reload_only_on_change(controller_class: Any) -> None:
    """Make the daemon controller's periodic workspace reload (Dagster's `check_workspace_freshness`) happen
    only when `code_fingerprint()` changed or a code server is unhealthy; the reload itself stays Dagster's."""
    reload = controller_class.check_workspace_freshness
    seen = {"fingerprint": code_fingerprint()}

    def check_workspace_freshness(self: Any, last_workspace_update_time: float) -> float:
        import dagster._daemon.controller as controller

        now = time.time()
        if now - last_workspace_update_time <= controller.RELOAD_WORKSPACE_INTERVAL:
            return last_workspace_update_time
        fingerprint = code_fingerprint()
        if fingerprint == seen["fingerprint"] and servers_healthy(self._grpc_server_registry):
            return now
        seen["fingerprint"] = fingerprint
        return reload(self, 0.0)

    controller_class.check_workspace_freshness = check_workspace_freshness


def main() -> int:
    import dagster._daemon.controller as controller
    from dagster._daemon.cli import main as dagster_daemon

    controller.DEFAULT_DAEMON_INTERVAL_SECONDS = float(os.environ.get(BACKFILL_INTERVAL_ENV, "2"))
    controller.RELOAD_WORKSPACE_INTERVAL = float(os.environ.get(WORKSPACE_CHECK_ENV, "60"))
    reload_only_on_change(controller.DagsterDaemonController)
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
