"""Hand a plan to Dagster and follow it: what `sluice materialize` does once it knows what needs running.

- `submit`: the plan's asset partitions as one asset backfill on the instance, exactly what the UI's
  "Materialize" launches, tagged with the command.
- `DaemonProcess`: the instance's daemon executes the backfill (its backfill daemon plans the runs, its
  run queue launches them). When no daemon is alive for this instance (`make ui` runs one), the command
  starts one for its own duration (data_assets/daemon.py) in a session of its own, so a terminal's Ctrl-C
  reaches only the command.
- `Follower`: polls the backfill and its runs, reports each run as it starts and ends, and on SIGINT or
  SIGTERM cancels through Dagster: the backfill is marked canceling, and Dagster's backfill daemon
  launches nothing more, cancels queued runs and terminates running ones (their steps are interrupted,
  their workers killed; Dagster marks them CANCELED); it returns once the backfill is CANCELED and every
  run has ended. A run canceled from elsewhere (the UI's Terminate button) is handled
  the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster import DagsterEventType, DagsterRunStatus, Definitions
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.storage.dagster_run import RunsFilter
from dagster._core.utils import make_new_backfill_id
from dagster._time import get_current_timestamp

from data_assets.daemon import PARENT_ENV, pid_file, running_daemon
from data_assets.freshness import Plan
from resources.run_tags import PURPOSE_TAG, WHY_TAG, partition_labels

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DONE = {BulkActionStatus.COMPLETED, BulkActionStatus.COMPLETED_SUCCESS, BulkActionStatus.COMPLETED_FAILED, BulkActionStatus.FAILED, BulkActionStatus.CANCELED}
RUN_ENDED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
HEARTBEAT_MAX_AGE_S = 75.0  # Dagster's daemons beat every 30 s


def submit(instance: Any, defs: Definitions, plan: Plan, command: str) -> str:
    """Submit the plan as an asset backfill; returns its id."""
    backfill_id = make_new_backfill_id()
    backfill = PartitionBackfill.from_asset_graph_subset(
        backfill_id=backfill_id,
        backfill_timestamp=get_current_timestamp(),
        tags={PURPOSE_TAG: command, WHY_TAG: plan.why()},
        dynamic_partitions_store=instance,
        asset_graph_subset=plan.subset(defs),
        title=f"sluice {command}",
        description=f"{plan.count} asset partitions: " + "; ".join(plan.lines()),
        run_config=None,
    )
    instance.add_backfill(backfill)
    return backfill_id


def in_progress(instance: Any) -> list[str]:
    """What is materializing on the instance now: active asset backfills and unfinished asset-job runs (an
    automation backfill of a new snapshot, a UI backfill), one phrase each."""
    from dagster._core.execution.backfill import BulkActionsFilter

    active = instance.get_backfills(filters=BulkActionsFilter(statuses=[BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING]))
    runs = [run for run in instance.get_runs(RunsFilter(statuses=[s for s in DagsterRunStatus if s not in RUN_ENDED])) if run.job_name == "__ASSET_JOB"]
    loose = [run for run in runs if not run.tags.get("dagster/backfill")]
    return [f"backfill {b.backfill_id} ({b.tags.get(PURPOSE_TAG, 'backfill')})" for b in active] + [f"run {run.run_id[:8]}" for run in loose]


def wait_until_quiet(instance: Any, log: Callable[[str], None], daemon: DaemonProcess | None = None, poll_s: float = 1.0) -> None:
    """Wait for what is materializing now to end, so that the plan neither repeats nor races it (a Ctrl-C
    stops waiting; what runs goes on)."""
    busy = in_progress(instance)
    if not busy:
        return
    log(f"Waiting for what is materializing on this instance to end first: {', '.join(busy[:4])}" + (" ..." if len(busy) > 4 else ""))
    while busy:
        if daemon is not None:
            daemon.ensure()
        time.sleep(poll_s)
        busy = in_progress(instance)


def daemon_alive(instance: Any) -> bool:
    """Whether a daemon serves this instance: a sluice daemon whose process is alive (data_assets/daemon.py),
    else (a stock `dagster-daemon`, no pid file) one whose heartbeat is recent."""
    if pid_file().exists():
        return running_daemon() is not None
    beat = instance.get_daemon_heartbeats().get("BACKFILL")
    return beat is not None and get_current_timestamp() - beat.timestamp < HEARTBEAT_MAX_AGE_S


class DaemonProcess:
    """A daemon for this instance, from `ensure()` to the end of the block, unless one is alive already."""

    def __init__(self, instance: Any, log: Callable[[str], None]) -> None:
        self.instance = instance
        self.log = log
        self.process: subprocess.Popen | None = None
        self.external = False  # a daemon that was already running serves the command

    def __enter__(self) -> DaemonProcess:
        return self  # started by `ensure`, when there is work for a daemon

    def ensure(self) -> None:
        """Start a daemon unless one serves the instance (ours still running, or another alive)."""
        if self.process is not None and self.process.poll() is None:
            return
        if daemon_alive(self.instance):
            if not self.external and self.process is None:
                self.log("Using the daemon already running for this instance (make ui)")
            self.external = True
            return
        home = Path(os.environ["DAGSTER_HOME"])
        (home / "logs").mkdir(parents=True, exist_ok=True)
        log_path = home / "logs" / f"daemon-{time.strftime('%Y%m%d-%H%M%S')}.log"
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        with open(log_path, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "data_assets.daemon", "run", "-w", str(PROJECT_ROOT / "workspace.yaml")],
                cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.log(f"Started a Dagster daemon for this command (log: {log_path})")

    def __exit__(self, *_: Any) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)  # dagster-daemon's own shutdown
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@dataclass
class RunReport:
    run_id: str
    status: str
    label: str
    seconds: float
    reason: str = ""


@dataclass
class Outcome:
    """How a followed backfill ended."""

    backfill_id: str
    status: BulkActionStatus
    runs: list[RunReport] = field(default_factory=list)
    signal: int | None = None  # the signal that interrupted the command
    canceled_elsewhere: bool = False  # a run was terminated from elsewhere (the UI's Terminate button)

    @property
    def interrupted(self) -> bool:
        return self.signal is not None or self.canceled_elsewhere

    @property
    def failed(self) -> list[RunReport]:
        return [run for run in self.runs if run.status == "FAILURE"]


def run_label(run: Any) -> str:
    assets = ", ".join(sorted(key.to_user_string() for key in run.asset_selection or []))
    parts = partition_labels(run.tags)
    where = " ".join(f"{name.split('/', 1)[1]} {value}" for name, value in sorted(parts.items()))
    return f"{assets}" + (f" [{where}]" if where else "")


def failure_reason(instance: Any, run_id: str) -> str:
    """The first step failure of a run, as its one line (our stages name each failed partition)."""
    for record in instance.all_logs(run_id, of_type=DagsterEventType.STEP_FAILURE):
        data = record.dagster_event.step_failure_data
        if data.user_failure_data is not None and data.user_failure_data.description:
            return data.user_failure_data.description.strip().splitlines()[0]
        error = data.error
        while error is not None and error.cause is not None and "Error occurred while executing" in error.message:
            error = error.cause
        if error is not None:
            text = error.message.strip().splitlines()
            return text[0] if text else error.cls_name or "failed"
    for record in instance.all_logs(run_id, of_type=DagsterEventType.RUN_FAILURE):
        return (record.dagster_event.message or "the run failed").strip().splitlines()[0]
    return "the run failed"


class Follower:
    """Follows one backfill to its end (see the module docstring)."""

    def __init__(self, instance: Any, backfill_id: str, log: Callable[[str], None], daemon: DaemonProcess | None = None, poll_s: float = 0.5) -> None:
        self.instance = instance
        self.backfill_id = backfill_id
        self.log = log
        self.daemon = daemon
        self.poll_s = poll_s
        self.signal: int | None = None
        self.seen: dict[str, DagsterRunStatus] = {}
        self.reports: dict[str, RunReport] = {}
        self.canceled_elsewhere = False
        self.canceling = False

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signal is None:
            self.signal = signum
        else:
            self.log("  still canceling through Dagster; the command ends once every run has ended")

    def follow(self) -> Outcome:
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _runs(self) -> list[Any]:
        return list(reversed(self.instance.get_runs(RunsFilter(tags={"dagster/backfill": self.backfill_id}))))

    def _loop(self) -> Outcome:
        while True:
            backfill = self.instance.get_backfill(self.backfill_id)
            runs = self._runs()
            self._report(runs)
            if self.signal is not None or self.canceled_elsewhere:
                self._cancel(backfill)
            if backfill.status in DONE and all(run.status in RUN_ENDED for run in runs):
                return Outcome(self.backfill_id, backfill.status, list(self.reports.values()), self.signal, self.canceled_elsewhere)
            if self.daemon is not None:
                self.daemon.ensure()  # restarts a daemon that died under it
            time.sleep(self.poll_s)

    def _report(self, runs: list[Any]) -> None:
        for run in runs:
            before = self.seen.get(run.run_id)
            if before == run.status:
                continue
            self.seen[run.run_id] = run.status
            if run.status == DagsterRunStatus.STARTED:
                self.log(f"  started  {run_label(run)}")
            elif run.status in RUN_ENDED:
                stats = self.instance.get_run_stats(run.run_id)
                seconds = (stats.end_time or 0) - (stats.start_time or stats.end_time or 0)
                reason = failure_reason(self.instance, run.run_id) if run.status == DagsterRunStatus.FAILURE else ""
                if run.status == DagsterRunStatus.CANCELED and self.signal is None and not self.canceling:
                    self.canceled_elsewhere = True
                self.reports[run.run_id] = RunReport(run.run_id, run.status.value, run_label(run), seconds, reason)
                word = {"SUCCESS": "ok", "FAILURE": "FAILED", "CANCELED": "canceled"}[run.status.value]
                self.log(f"  {word:8} {run_label(run)}  {seconds:.1f} s" + (f": {reason}" if reason else ""))

    def _cancel(self, backfill: Any) -> None:
        """Mark the backfill canceling (what the UI's Cancel backfill does): Dagster's backfill daemon then
        launches nothing more, cancels its queued runs, terminates its running ones once they have started
        (a run terminated while its process still loads is marked FAILURE, one interrupted in its steps
        CANCELED) and marks the backfill CANCELED when every run has ended. One owner of the cancellation:
        terminating the same run twice makes Dagster mark it FAILURE."""
        if self.canceling:
            if backfill.status == BulkActionStatus.REQUESTED:
                # The backfill daemon wrote back an iteration it had read before the mark (a lost update):
                # mark it again, or the daemon would run the backfill to its end.
                self.instance.update_backfill(backfill.with_status(BulkActionStatus.CANCELING))
            return
        self.canceling = True
        why = f"{signal.Signals(self.signal).name} received" if self.signal is not None else "a run was canceled"
        self.log(f"{why}: canceling the backfill through Dagster (its runs are canceled, nothing more starts)...")
        if backfill.status not in DONE and backfill.status != BulkActionStatus.CANCELING:
            self.instance.update_backfill(backfill.with_status(BulkActionStatus.CANCELING))
