"""Resume and retries on Ray (issue 20): a partition's per-file stages on a two-node Ray cluster on 127.0.0.1.

- A Ray worker process SIGKILLed while it runs one of the partition's tasks: Ray's own task retries
  (`max_retries`, sluice.runtime.compute.RayExecutor) run that task again; the run succeeds, the tasks that had
  finished before the kill are not run again (their completion records keep their inode and modification
  time), and the published outputs equal an uninterrupted run's byte for byte.
- The run process (the Ray driver) SIGKILLed once about half of the partition's tasks have completion
  records: the re-run runs only the tasks without one (counted from the records on disk and checked against
  the stage's metadata), and its outputs equal an uninterrupted run's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.crash_harness import wait_group_gone
from tests.conftest import PROJECT_ROOT, base_config, tree_digest, write_config
from tests.support.ray_cluster import RayCluster, _pids_with

pytestmark = pytest.mark.slow
COPIES = 6  # of each of the 3 sample WARC files: 18 input files in one partition
TOTAL = COPIES * 3
REPEAT = 4
PARTITION = "source=web/snapshot=2026-02"
TASK_PROCESS = b"ray::run_recorded"  # a Ray worker's title while it runs a stage task
WAIT_S = 300
WRITTEN = {
    "raw_documents": ("raw_documents", "raw_quarantine", "raw_documents_tasks"),
    "cleaned_documents": ("cleaned_documents", "cleaned_dropped", "cleaned_documents_tasks"),
}


def make_crawl(folder: Path) -> Path:
    """COPIES x the sample's WARC files, each input file the sample file REPEAT times over (gzip members
    concatenated: a valid WARC file), so a task runs long enough to be caught running."""
    snapshot = folder / "web" / "2026-02"
    snapshot.mkdir(parents=True)
    for copy in range(COPIES):
        for path in sorted((PROJECT_ROOT / "sample_data/web/2026-02").iterdir()):
            (snapshot / f"{copy:02d}-{path.name}").write_bytes(path.read_bytes() * REPEAT)
    return folder / "web"


def make_config(folder: Path, crawl: Path, address: str) -> str:
    raw = base_config(str(folder / "data"))
    for source in raw["sources"]:
        if source["name"] == "web":
            source["location"] = str(crawl)
    raw["compute"] = {"backend": "ray", "max_workers": 2, "ray_address": address}
    return write_config(folder / "sluice.yaml", raw)


def run_stage(config: str, stage: str) -> dict:
    """Materialize `stage` of web/2026-02 in this process (the Ray driver); its metadata."""
    from dagster import DagsterInstance, materialize

    from data_assets.cli import register_snapshots
    from data_assets.definitions import ASSETS, build_resources
    from data_assets.partitions import multi_key

    resources = build_resources(config)
    with DagsterInstance.ephemeral() as instance:
        register_snapshots(instance, resources)
        result = materialize(ASSETS, selection=[stage], partition_key=multi_key("web", "2026-02"), instance=instance, resources=resources)
    assert result.success
    event = result.get_asset_materialization_events()[0]
    return {key: getattr(value, "value", value) for key, value in event.event_specific_data.materialization.metadata.items()}


_RAYLETS: dict[str, list[int]] = {}


def raylets(cluster: RayCluster) -> list[int]:
    if cluster.address not in _RAYLETS:
        ports = (cluster.head_ports[0], cluster.worker_ports[0])
        _RAYLETS[cluster.address] = [pid for port in ports for pid in _pids_with(f"--node_manager_port={port}")]
    return _RAYLETS[cluster.address]


def children(pid: int) -> list[int]:
    """Child processes of `pid` (its threads' children lists: cheaper than a scan of /proc)."""
    found = []
    for thread in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.extend(int(child) for child in (thread / "children").read_text().split())
        except OSError:
            continue
    return found


def task_workers(cluster: RayCluster) -> list[int]:
    """The cluster's worker processes that are running a stage task now."""
    busy = []
    for pid in (child for raylet in raylets(cluster) for child in children(raylet)):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(TASK_PROCESS):
                busy.append(pid)
        except OSError:
            continue
    return busy


def records(folder: Path) -> dict[str, tuple[int, int]]:
    """Completion record -> (inode, modification time)."""
    if not folder.is_dir():
        return {}
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir() if p.name.startswith("task-")}


def outputs(root: Path, stage: str) -> dict[str, str]:
    return {k: v for k, v in tree_digest(str(root)).items() if k.split("/", 1)[0] in WRITTEN[stage]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with RayCluster(head_cpus=1, worker_cpus=2) as started:
        try:
            yield started
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cluster):
    """An uninterrupted run of raw and cleaned on the cluster (with the crawl it read)."""
    folder = tmp_path_factory.mktemp("ray_resume_reference")
    crawl = make_crawl(folder / "crawl")
    config = make_config(folder, crawl, cluster.address)
    for stage in WRITTEN:
        run_stage(config, stage)
    return folder / "data", crawl


def prepared(tmp_path: Path, reference: tuple[Path, Path], stage: str, address: str) -> tuple[str, Path]:
    """A storage root holding the reference's upstream stages only, and its config."""
    root, crawl = reference
    config = make_config(tmp_path, crawl, address)
    shutil.copytree(root, tmp_path / "data", ignore=lambda folder, names: [n for n in names if Path(folder) == root and n in WRITTEN[stage]])
    return config, tmp_path / "data" / f"{stage}_tasks" / PARTITION


@pytest.mark.parametrize("stage", list(WRITTEN))
def test_a_killed_ray_worker_costs_only_its_task(cluster, reference, tmp_path, stage):
    import threading

    config, folder = prepared(tmp_path, reference, stage, cluster.address)
    outcome: dict = {}
    run = threading.Thread(target=lambda: outcome.update(metadata=run_stage(config, stage)))
    run.start()
    victim, finished, at_kill = None, {}, {}
    deadline = time.monotonic() + WAIT_S
    while victim is None and run.is_alive() and time.monotonic() < deadline:
        finished = records(folder)
        busy = task_workers(cluster) if 1 <= len(finished) <= TOTAL - 3 else []
        if busy:
            victim = busy[0]
            os.kill(victim, signal.SIGKILL)
            at_kill = records(folder)
        time.sleep(0.002)
    run.join(timeout=WAIT_S)
    assert victim is not None, "no Ray worker was caught running a task of the partition"
    metadata = outcome["metadata"]  # the run succeeded (run_stage asserts it)
    after = records(folder)
    assert len(after) == TOTAL
    # Tasks finished before the kill were not run again: Ray retried only what the dead worker ran.
    assert {name: after[name] for name in finished} == finished
    # Every task ran once, except that the victim may have written its record between the look at the records
    # and the kill: Ray's retry of it then finds a verified record and reuses it. Only a task recorded in that
    # window can be reused (no record existed before this run).
    assert metadata["tasks_run"] + metadata["tasks_reused"] == TOTAL
    assert metadata["tasks_reused"] <= min(1, len(at_kill) - len(finished)), (metadata, len(finished), len(at_kill))
    assert outputs(tmp_path / "data", stage) == outputs(reference[0], stage)


def kill_driver_at_half(config: str, stage: str, folder: Path, cluster: RayCluster) -> None:
    """Run `stage` in a child process (a Ray driver); SIGKILL it once half the tasks have records, then wait
    until the cluster has stopped the dead driver's tasks (so the records on disk are final)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.crash_harness", config, stage, "web|2026-02"],
        cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    deadline = time.monotonic() + WAIT_S
    while child.poll() is None and time.monotonic() < deadline:
        if len(records(folder)) >= TOTAL // 2:
            os.killpg(child.pid, signal.SIGKILL)
            break
        time.sleep(0.002)
    _, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == -signal.SIGKILL, f"the run ended before half its tasks were recorded: {err[-2000:]}"
    wait_group_gone(child.pid)
    while task_workers(cluster) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not task_workers(cluster), "the cluster kept running the dead driver's tasks"


@pytest.mark.parametrize("stage", list(WRITTEN))
def test_a_killed_ray_run_resumes_with_only_the_remaining_files(cluster, reference, tmp_path, stage):
    config, folder = prepared(tmp_path, reference, stage, cluster.address)
    kill_driver_at_half(config, stage, folder, cluster)
    done = records(folder)
    assert TOTAL // 2 <= len(done) < TOTAL, sorted(done)

    metadata = run_stage(config, stage)

    after = records(folder)
    assert {name: after[name] for name in done} == done  # reused: not written again
    assert len(after) == TOTAL
    assert (metadata["tasks_run"], metadata["tasks_reused"]) == (TOTAL - len(done), len(done))
    assert outputs(tmp_path / "data", stage) == outputs(reference[0], stage)
