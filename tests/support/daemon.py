"""Driving `sluice` and Dagster's daemon as users do, for the daemon tests: processes in their own sessions
(so a test signals a command's process group the way a terminal does), and what is left of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FAST_TICKS = {"SLUICE_SENSOR_INTERVAL_S": "3", "SLUICE_AUTOMATION_INTERVAL_S": "3", "SLUICE_BACKFILL_INTERVAL_S": "1"}


def environment(home: Path, config: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "DAGSTER_HOME": str(home), "SLUICE_CONFIG": config, "PYTHONPATH": str(PROJECT_ROOT), **FAST_TICKS, **extra}


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """A process in a session (and process group) of its own, its output to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(args, cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def start_daemon(env: dict[str, str], log: Path) -> subprocess.Popen:
    """What `make ui` starts besides the webserver, once it has opened (on a fresh home: created) the instance:
    two processes creating one SQLite instance at the same moment can both stamp its schema version
    ("alembic_version has more than one head"), and `make ui` is up before a user runs a command."""
    process = start([sys.executable, "-m", "data_assets.daemon", "run", "-w", str(PROJECT_ROOT / "workspace.yaml")], env, log)
    wait_for(lambda: process.poll() is not None or "Instance is configured with the following daemons" in log.read_text(errors="replace"), 120, "the daemon to open the instance")
    return process


def stop(process: subprocess.Popen, timeout: float = 60) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def sluice(env: dict[str, str], *args: str) -> subprocess.Popen:
    """`sluice <args>` with its output captured, in its own process group."""
    return subprocess.Popen(
        [sys.executable, "-m", "data_assets.cli", *args], cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def processes_of(home: Path) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose environment names this DAGSTER_HOME."""
    found = []
    marker = f"DAGSTER_HOME={home}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if marker in environ.split(b"\0") and command:
            found.append((int(entry.name), command))
    return found


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def daemon_processes(home: Path, daemon_pid: int) -> set[int]:
    """The daemon and the processes it keeps for itself (not its code server's, where runs execute)."""
    found = {daemon_pid}
    for pid, command in processes_of(home):
        chain, parent = [], parent_of(pid)
        while parent not in (None, 0, 1, daemon_pid):
            chain.append(parent)
            parent = parent_of(parent)
        if parent == daemon_pid and "api grpc" not in command and not any("api grpc" in cmd for p, cmd in processes_of(home) if p in chain):
            found.add(pid)
    return found


def _true_partitions(node: Any) -> set[str]:
    value = node.true_subset.value
    if isinstance(value, bool):
        return {"(all)"} if value else set()
    return {str(key) for key in value.get_partition_keys()}


def _nodes(node: Any, depth: int = 0):
    yield depth, node
    for child in node.child_evaluations:
        yield from _nodes(child, depth + 1)


def automation_evaluations(instance: Any, asset: str, limit: int = 500) -> list[Any]:
    """The stored declarative-automation evaluations of `asset`, oldest first."""
    from dagster import AssetKey

    records = instance.schedule_storage.get_auto_materialize_asset_evaluations(key=AssetKey(asset), limit=limit)
    return sorted(records, key=lambda record: record.evaluation_id)


def automation_trace(instance: Any, asset: str, partition: str) -> str:
    """Each stored evaluation of `asset`: the conditions that were true for `partition` (a failure message)."""
    lines = []
    for record in automation_evaluations(instance, asset):
        evaluation = record.get_evaluation_with_run_ids()
        true = [
            f"  {'  ' * depth}{node.condition_snapshot.label or node.condition_snapshot.name}"
            for depth, node in _nodes(evaluation.evaluation) if partition in _true_partitions(node)
        ]
        lines.append(f"evaluation {record.evaluation_id} at {record.timestamp:.0f}, runs {sorted(evaluation.run_ids)}")
        lines.extend(true)
    return "\n".join(lines)
