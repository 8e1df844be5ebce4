"""The Dagster path as users take it: `sluice materialize` and a real Dagster daemon (the one `make ui` and the
command start, data_assets/daemon.py), on the bundled sample, against a byte-for-byte reference built by the
same backfill in-process (tests/support/graph.py).

- With a daemon already running (`make ui`'s): the command hands its backfill to it. Ctrl-C (SIGINT to the
  command's process group, as a terminal sends it) while a stage runs: one line, exit 130, the backfill
  CANCELED, its running run CANCELED (not FAILURE) with its worker processes gone, nothing downstream
  started; the next command resumes and the outputs equal the reference; a third finds nothing missing or
  stale and submits nothing; automation then launches nothing, and the snapshot sensor switched on finds
  nothing new.
- SIGTERM the same (exit 143), with the daemon the command starts itself, and a run terminated from outside
  (the UI's Terminate: the run coordinator's cancel).
- A UI-style backfill racing the snapshot sensor and automation: no asset partition is materialized twice
  and the outputs equal the reference.
- The command and Ctrl-C on the production instance (deploy/dagster.yaml, PostgreSQL).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, EventRecordsFilter

from data_assets.instance import DAGSTER_YAML
from tests.conftest import PROJECT_ROOT, SAMPLE, base_config, tree_digest, write_config
from tests.support.daemon import (
    automation_trace,
    daemon_processes,
    environment,
    parent_of,
    processes_of,
    sluice,
    start_daemon,
    stop,
    wait_for,
)

pytestmark = pytest.mark.slow

COMMAND_TIMEOUT_S = 900
ENDED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


@pytest.fixture(scope="module")
def reference(sample_graph) -> dict[str, str]:
    """The sample graph's outputs, materialized by the same backfill in the test process."""
    return sample_graph.digest


def setup(tmp_path: Path, home_yaml: Path | None = None) -> tuple[Path, dict[str, str], Path]:
    home = tmp_path / "home"
    home.mkdir()
    # The instance the command and `make ui` write (its `dedup_index` pool limit among them), or the given one.
    if home_yaml is not None:
        shutil.copy(home_yaml, home / "dagster.yaml")
    else:
        (home / "dagster.yaml").write_text(DAGSTER_YAML)
    config = write_config(tmp_path / "sluice.yaml", base_config(str(tmp_path / "data")))
    return home, environment(home, config), tmp_path / "data"


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=COMMAND_TIMEOUT_S)
    return process.returncode, out, err


def materializations(instance: DagsterInstance) -> Counter[tuple[str, str | None]]:
    records = instance.get_event_records(EventRecordsFilter(event_type=DagsterEventType.ASSET_MATERIALIZATION), limit=100_000)
    return Counter((r.asset_key.to_user_string(), r.partition_key) for r in records)


def started_run_of(instance: DagsterInstance, asset: str):
    for run in instance.get_runs():
        if run.status == DagsterRunStatus.STARTED and AssetKey(asset) in (run.asset_selection or set()):
            return run
    return None


def interrupt_during(
    env: dict[str, str], home: Path, asset: str, send: callable, settle_s: float = 1.0, every: float = 0.5
) -> tuple[int, str, str, float]:
    """Run `sluice materialize`, and once a run materializing `asset` has started (polled `every` s), wait
    `settle_s` (to be inside its steps) and call `send(process, run)`."""
    process = sluice(env, "materialize")
    with DagsterInstance.from_config(str(home)) as instance:
        run = wait_for(lambda: started_run_of(instance, asset) or (process.poll() is not None and "ended"), 600, f"a run of {asset}", every)
        assert run != "ended", process.communicate()
        time.sleep(settle_s)
        signaled = time.monotonic()
        send(process, run)
    code, out, err = finish(process)
    return code, out, err, time.monotonic() - signaled


def assert_canceled_cleanly(home: Path, out: str, err: str, daemon: subprocess.Popen | None = None) -> None:
    with DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        [backfill] = [b for b in instance.get_backfills() if b.status.value == "CANCELED"][:1] or [None]
        assert backfill is not None, [b.status for b in instance.get_backfills()]
        ours = [run for run in runs if run.tags.get("dagster/backfill") == backfill.backfill_id]
        assert DagsterRunStatus.CANCELED in {run.status for run in ours}
        # No run was interrupted into FAILURE. (Dagster's own race: a run that finished in the moment its
        # termination was requested is re-marked CANCELING, then FAILURE; its steps had all succeeded.)
        for run in ours:
            if run.status == DagsterRunStatus.FAILURE:
                kinds = [entry.dagster_event.event_type_value for entry in instance.all_logs(run.run_id) if entry.is_dagster_event]
                assert "PIPELINE_SUCCESS" in kinds and "STEP_FAILURE" not in kinds, kinds
        assert all(run.status in ENDED for run in runs)
        # Nothing downstream of the interrupted stage started.
        assert not any(AssetKey("dedup_clusters") in (run.asset_selection or set()) for run in runs if run.tags.get("dagster/backfill") == backfill.backfill_id)
    assert "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1 and err.startswith("Interrupted ("), err
    # The runs' worker processes are gone, and so is the command's daemon if it started one (Dagster's code
    # server ends ~20 s after its daemon, on its own heartbeat timeout); a daemon started before (`make ui`) stays.
    def left() -> list[tuple[int, str]]:
        kept = daemon_processes(home, daemon.pid) if daemon is not None else set()
        servers = {pid for pid, command in processes_of(home) if "api grpc" in command}
        # A code server's own multiprocessing resource tracker lives as long as the server does.
        return [
            (pid, command) for pid, command in processes_of(home)
            if pid not in servers and pid not in kept and not (parent_of(pid) in servers and "resource_tracker" in command)
        ]

    try:
        wait_for(lambda: not left(), 30, "the daemon and the workers to end")
    except AssertionError as error:
        raise AssertionError(f"{error}: {left()}") from None


def test_ctrl_c_with_a_running_daemon_then_resume_then_nothing_to_do(tmp_path, reference):
    """With `make ui`'s daemon running: the command hands its backfill to it; Ctrl-C mid-stage cancels through
    Dagster (the daemon stays); the next command resumes on the same daemon and the outputs equal the
    reference; a third finds nothing missing or stale; automation and the snapshot sensor then start nothing."""
    home, env, data = setup(tmp_path)
    daemon = start_daemon(env, tmp_path / "daemon.log")
    try:
        code, out, err, seconds = interrupt_during(env, home, "cleaned_documents", lambda process, run: os.killpg(process.pid, signal.SIGINT))
        assert code == 130, out[-3000:] + err[-3000:]
        assert seconds < 60  # within seconds, whatever the machine (the runs are canceled through Dagster)
        assert "Using the daemon already running for this instance" in out
        assert_canceled_cleanly(home, out, err, daemon)
        assert daemon.poll() is None

        code, out, err = finish(sluice(env, "materialize"))
        assert code == 0, out[-3000:] + err[-3000:]
        assert "Using the daemon already running for this instance" in out
        assert tree_digest(str(data)) == reference
        with DagsterInstance.from_config(str(home)) as instance:
            runs = instance.get_runs()
            assert runs and all(run.status in ENDED for run in runs)
            assert {run.tags["sluice/purpose"] for run in runs} == {"materialize"}
            before = (len(runs), len(instance.get_backfills()), materializations(instance))

            code, out, err = finish(sluice(env, "materialize"))
            assert code == 0 and "nothing submitted" in out, out + err
            # Automation ticks (every 3 s here) and the snapshot sensor, switched on now, find nothing to do.
            dagster = str(Path(sys.executable).parent / "dagster")
            subprocess.run([dagster, "sensor", "start", "new_snapshot_sensor", "-w", "workspace.yaml"], cwd=PROJECT_ROOT, env=env, check=True, capture_output=True)
            time.sleep(15)
            after = (len(instance.get_runs()), len(instance.get_backfills()), materializations(instance))
            assert after == before
            ticks = {state.instigator_name: instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=50) for state in instance.all_instigator_state()}
            finished = [tick for tick in ticks["new_snapshot_sensor"] if tick.status.value != "STARTED"]  # one may be in flight
            assert finished and all(tick.status.value == "SKIPPED" for tick in finished)
            assert len(ticks["sluice_automation"]) >= 3
    finally:
        stop(daemon)


def test_sigterm_and_a_run_terminated_from_outside(tmp_path):
    home, env, _ = setup(tmp_path)
    code, out, err, _ = interrupt_during(env, home, "cleaned_documents", lambda process, run: os.killpg(process.pid, signal.SIGTERM))
    assert code == 143, out[-3000:] + err[-3000:]
    assert_canceled_cleanly(home, out, err)

    terminated: list[str] = []

    def terminate(_process, run) -> None:
        """What the UI's Terminate button does (GraphQL terminateRun): the run coordinator cancels the run."""
        with DagsterInstance.from_config(str(home)) as instance:
            assert instance.run_coordinator.cancel_run(run.run_id)
        terminated.append(run.run_id)

    # A run of dedup_clusters does about a second of work once STARTED: terminate it at once (a settle
    # second let it finish first now and then, leaving nothing to cancel).
    code, out, err, _ = interrupt_during(env, home, "dedup_clusters", terminate, settle_s=0.0, every=0.1)
    assert code == 130 and "a run was canceled" in err, out[-3000:] + err[-3000:]
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_run_by_id(terminated[0]).status == DagsterRunStatus.CANCELED
        # The command then canceled the backfill: nothing downstream of the clusters started.
        assert not any(AssetKey("deduped_documents") in (run.asset_selection or set()) for run in instance.get_runs())


def test_a_ui_backfill_racing_the_snapshot_sensor(tmp_path, reference):
    """Snapshots land while the sensor is on; as soon as it has registered them, a UI-style backfill of what is
    missing is launched, racing the automation the registration triggers: every run succeeds, automation
    redoes nothing the backfill materialized, nothing starts once both are done, and the outputs equal the
    reference."""
    from dagster._core.execution.backfill import PartitionBackfill

    from data_assets.definitions import defs
    from data_assets.freshness import Planner
    from data_assets.partitions import SNAPSHOTS

    home, env, data = setup(tmp_path)
    crawl = tmp_path / "crawl"
    raw = base_config(str(data))
    for source in raw["sources"]:
        source["location"] = str(crawl / source["name"])
        (crawl / source["name"]).mkdir(parents=True)
    config = write_config(tmp_path / "sluice.yaml", raw)
    env = environment(home, config)
    dagster = str(Path(sys.executable).parent / "dagster")
    subprocess.run([dagster, "sensor", "start", "new_snapshot_sensor", "-w", "workspace.yaml"], cwd=PROJECT_ROOT, env=env, check=True, capture_output=True)
    daemon = start_daemon(env, tmp_path / "daemon.log")
    try:
        for source in ("web", "reference"):
            shutil.copytree(SAMPLE / source, crawl / source, dirs_exist_ok=True)
        with DagsterInstance.from_config(str(home)) as instance:
            wait_for(lambda: sorted(instance.get_dynamic_partitions(SNAPSHOTS)) == ["2026-01", "2026-02"], 120, "the sensor to register")
            plan = Planner(defs, instance).plan()  # what the UI's "Materialize" of the missing partitions targets
            targets = {(key.to_user_string(), str(partition) if partition is not None else None) for key, partitions in plan.selected.items() for partition in partitions}
            submitted = time.time()
            instance.add_backfill(PartitionBackfill.from_asset_graph_subset(
                backfill_id="uibackfill", backfill_timestamp=submitted, tags={}, dynamic_partitions_store=instance,
                asset_graph_subset=plan.subset(defs), title=None, description=None, run_config=None,
            ))

            def settled() -> bool:
                runs = instance.get_runs()
                backfills = instance.get_backfills()
                return bool(runs) and all(r.status in ENDED for r in runs) and all(b.status.value.startswith(("COMPLETED", "FAILED", "CANCELED")) for b in backfills)

            wait_for(settled, 900, "every backfill and run to end", every=2)
            before = len(instance.get_runs())
            time.sleep(10)  # a few more automation and sensor ticks: nothing more starts
            assert len(instance.get_runs()) == before
            records = instance.get_event_records(EventRecordsFilter(event_type=DagsterEventType.ASSET_MATERIALIZATION), limit=100_000)
            origin = {run.run_id: run.tags.get("dagster/backfill") for run in instance.get_runs()}
            created = {run.run_id: instance.get_run_record_by_id(run.run_id).create_timestamp.timestamp() for run in instance.get_runs()}
            runs = instance.get_runs()
            redone = [
                (r.asset_key.to_user_string(), r.partition_key) for r in records
                if origin.get(r.run_id) != "uibackfill" and created[r.run_id] > submitted and (r.asset_key.to_user_string(), r.partition_key) in targets
            ]
            why = "\n".join(automation_trace(instance, asset, partition) for asset, partition in redone[:2])
    finally:
        stop(daemon)
    assert all(run.status == DagsterRunStatus.SUCCESS for run in runs), [(run.run_id, run.status) for run in runs]
    assert redone == [], f"{redone}\n{why}"
    per_origin = Counter((r.asset_key.to_user_string(), r.partition_key, origin.get(r.run_id)) for r in records)
    assert max(per_origin.values()) == 1, per_origin.most_common(3)
    assert tree_digest(str(data)) == reference


@pytest.mark.skipif(shutil.which("initdb") is None and not Path("/usr/lib/postgresql").exists(), reason="PostgreSQL not installed (make test-slow installs it)")
def test_command_and_ctrl_c_on_the_postgres_instance(tmp_path, monkeypatch):
    """The command, its daemon and Ctrl-C on deploy/dagster.yaml's instance: the backfill, the runs and their
    cancellation are Postgres's records. (Resuming equals the reference whatever the instance: its outputs are
    storage's, tested above on SQLite; a whole second graph here would add minutes to CI.)"""
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage

    from tests.support.pg_server import PostgresServer

    with PostgresServer() as server:
        home, env, _ = setup(tmp_path, PROJECT_ROOT / "deploy" / "dagster.yaml")
        env.update(server.env())
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)  # this process reads the instance too
        code, out, err, _ = interrupt_during(env, home, "cleaned_documents", lambda process, run: os.killpg(process.pid, signal.SIGINT))
        assert code == 130, out[-3000:] + err[-3000:]
        assert_canceled_cleanly(home, out, err)
        with DagsterInstance.from_config(str(home)) as instance:
            assert isinstance(instance.run_storage, PostgresRunStorage) and isinstance(instance.event_log_storage, PostgresEventLogStorage)
            assert [backfill.status.value for backfill in instance.get_backfills()] == ["CANCELED"]

