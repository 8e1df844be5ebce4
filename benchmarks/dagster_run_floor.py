"""What one Dagster run costs when its asset does nothing: the floor under every orchestrated stage.

    python benchmarks/dagster_run_floor.py [--partitions 10] [--per-run 1 10] [--idle-s 20]

No sluice code runs: a code location with one partitioned asset whose body is empty, stock
`dagster-daemon run` on a fresh SQLite instance (the run-queue settings of deploy/dagster.yaml), and for
each `--per-run` value an asset backfill of `--partitions` partitions with `BackfillPolicy.multi_run(N)`,
what the UI's "Materialize" submits. CPU = the daemon's process tree (the daemon, its code server, the run
processes the code server starts; /proc samples every 0.1 s, each process at its last value) from the
submission to the backfill's end, less what the same daemon burns idle over the same time (the lower of
its idle rates measured before the first backfill and after the last, once its heartbeats show it is up). The difference divided by the runs is Dagster's own cost per run: its run process
start (Dagster starts each run in a fresh interpreter), instance and code location loading, event writes,
and the daemon's and code server's share of launching and tracking it.

Figure: `dagster_noop_run_cpu_s` (report: a stage partition's orchestration can cost no less).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.end_to_end import DATA, process_tree  # noqa: E402
from benchmarks.peers import figure  # noqa: E402

DEFINITIONS = '''
import os
from dagster import BackfillPolicy, Definitions, StaticPartitionsDefinition, asset

PARTITIONS = StaticPartitionsDefinition([f"p{i:04d}" for i in range(int(os.environ["FLOOR_PARTITIONS"]))])
assets = []
for per_run in os.environ["FLOOR_PER_RUN"].split(","):
    @asset(name=f"noop_{per_run}", partitions_def=PARTITIONS, backfill_policy=BackfillPolicy.multi_run(int(per_run)))
    def noop() -> None:
        """Does nothing: its runs cost only Dagster's machinery."""
    assets.append(noop)
defs = Definitions(assets=assets)
'''
INSTANCE = """run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config: {dequeue_interval_seconds: 1, dequeue_use_threads: true, dequeue_num_workers: 4}
"""


class TreeCpu:
    """CPU seconds of a process and its descendants, each process at the last value sampled."""

    def __init__(self, pid: int) -> None:
        self.pid, self.seen, self.stop = pid, {}, threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self.stop.wait(0.1):
            self.seen.update({pid: cpu for pid, (_, cpu) in process_tree(self.pid).items()})

    def total(self) -> float:
        return sum(self.seen.values())


def backfill(instance, defs, name: str) -> str:  # noqa: ANN001
    """Submit every partition of asset `name` as one asset backfill; its id."""
    from dagster import AssetKey
    from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id
    from dagster._time import get_current_timestamp

    graph = defs.resolve_asset_graph()
    keys = graph.get(AssetKey(name)).partitions_def.get_partition_keys()
    subset = AssetGraphSubset.from_asset_partition_set({(AssetKey(name), key) for key in keys}, graph)
    backfill_id = make_new_backfill_id()
    instance.add_backfill(PartitionBackfill.from_asset_graph_subset(
        backfill_id=backfill_id, backfill_timestamp=get_current_timestamp(), tags={}, dynamic_partitions_store=instance,
        asset_graph_subset=subset, title=None, description=None, run_config=None,
    ))
    return backfill_id


def wait_done(instance, backfill_id: str, limit_s: float = 400.0) -> str:  # noqa: ANN001
    from dagster._core.execution.backfill import BulkActionStatus

    ended = {BulkActionStatus.COMPLETED, BulkActionStatus.COMPLETED_SUCCESS, BulkActionStatus.COMPLETED_FAILED,
             BulkActionStatus.FAILED, BulkActionStatus.CANCELED}
    deadline = time.monotonic() + limit_s
    while (status := instance.get_backfill(backfill_id).status) not in ended:
        if time.monotonic() > deadline:
            raise TimeoutError(f"backfill {backfill_id} still {status} after {limit_s:.0f} s")
        time.sleep(0.5)
    return status.value


def wait_up(instance, limit_s: float = 120.0) -> None:  # noqa: ANN001
    """Until every daemon of the instance has sent a heartbeat (the code server is loaded by then)."""
    deadline = time.monotonic() + limit_s
    while not instance.get_daemon_heartbeats() or not all(instance.get_daemon_heartbeats().values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no daemon heartbeat after {limit_s:.0f} s")
        time.sleep(1.0)


def idle_rate(tree: TreeCpu, seconds: float) -> float:
    """Cores the process tree uses over `seconds` with nothing to do."""
    started = tree.total()
    time.sleep(seconds)
    return (tree.total() - started) / seconds


def stop(daemon: subprocess.Popen) -> None:
    """SIGTERM to the daemon's session (daemon, code server, run processes), SIGKILL after 60 s."""
    for sig, wait_s in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, sig)
        try:
            daemon.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--per-run", type=int, nargs="+", default=[1, 10], help="partitions per run, one backfill each")
    parser.add_argument("--idle-s", type=float, default=20.0, help="seconds over which the idle daemon is measured")
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dagster_run_floor_", dir=DATA))
    (work / "defs.py").write_text(DEFINITIONS)
    (work / "workspace.yaml").write_text("load_from:\n  - python_file: {relative_path: defs.py, location_name: floor}\n")
    (work / "home").mkdir()
    (work / "home" / "dagster.yaml").write_text(INSTANCE)
    os.environ.update(DAGSTER_HOME=str(work / "home"), FLOOR_PARTITIONS=str(args.partitions),
                      FLOOR_PER_RUN=",".join(map(str, args.per_run)))
    import importlib.util

    from dagster import DagsterInstance
    from dagster._core.storage.dagster_run import RunsFilter

    spec = importlib.util.spec_from_file_location("floor_definitions", work / "defs.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    defs = module.defs
    instance = DagsterInstance.get()
    daemon_bin = Path(sys.executable).with_name("dagster-daemon")
    with open(work / "daemon.log", "w") as log:
        daemon = subprocess.Popen([str(daemon_bin), "run", "-w", "workspace.yaml"], cwd=work, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    tree = TreeCpu(daemon.pid)
    try:
        wait_up(instance)
        idle_before = idle_rate(tree, args.idle_s)
        print(f"dagster {__import__('dagster').__version__}, SQLite instance, stock dagster-daemon")
        measured = []
        for per_run in args.per_run:
            before, t0 = tree.total(), time.monotonic()
            backfill_id = backfill(instance, defs, f"noop_{per_run}")
            status = wait_done(instance, backfill_id)
            time.sleep(1.0)  # the last samples of the last run process
            runs = len(instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id})))
            measured.append((per_run, status, runs, time.monotonic() - t0, tree.total() - before))
        idle = min(idle_before, idle_rate(tree, args.idle_s))
        print(f"idle daemon {idle:.3f} cores (before {idle_before:.3f})")
        per_run_cpu = []
        for per_run, status, runs, wall, busy in measured:
            cpu = busy - idle * wall
            per_run_cpu.append(cpu / runs)
            print(f"  {args.partitions} partitions, {per_run} per run: {status}, {runs} runs, wall {wall:.1f} s, "
                  f"CPU beyond idle {cpu:.1f} s = {cpu / runs:.2f} s per run, {cpu / args.partitions:.2f} s per asset partition")
    finally:
        stop(daemon)
        tree.stop.set()
        shutil.rmtree(work, ignore_errors=True)
    figure("dagster_noop_run_cpu_s", min(per_run_cpu), "report: the least orchestration CPU one run costs",
           "no-op partitioned asset, stock dagster-daemon, SQLite, 2 cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
