"""Order is enforced by Dagster, not by timing: the real daemon launches every partition's runs at once through
the run queue (4 concurrent runs allowed), and the storage tree ends byte-identical to materializing the
partitions one after the other in the global order. Launched two ways:

- `sensor`: the snapshot sensor requests one ingest run per partition in one tick, declarative automation
  (`dedup_automation`) the rest;
- `backfill`: an asset backfill of raw_documents ... decontamination over all partitions, as the UI's
  "Materialize -> partitions -> Launch backfill" creates (automation stopped).

The daemon (`dagster-daemon run`) and sensor start/stop (`dagster sensor start|stop`) are the commands users
run; ticks are shortened by SLUICE_SENSOR_INTERVAL_S / SLUICE_AUTOMATION_INTERVAL_S, and the backfill daemon's
fixed 30 s tick by `tests/fast_daemon.py` (the same daemon, started with a 5 s tick).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, base_config, tree_digest, write_config

pytestmark = pytest.mark.slow

# Through decontamination, which automation also runs once a partition is deduplicated (tokenized_shards waits
# for a tokenizer, which nothing here trains).
DEDUP = ["raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents", "decontamination"]
PARTITIONS = [("reference", "2026-01"), ("web", "2026-01"), ("reference", "2026-02"), ("web", "2026-02")]
TIMEOUT_S = 1200
INSTANCE_YAML = """\
concurrency:
  runs:
    max_concurrent_runs: 4
  pools:
    default_limit: 1
    granularity: op
telemetry:
  enabled: false
"""


def sequential_reference(root: Path, folder: Path) -> dict[str, str]:
    from dagster import DagsterInstance, materialize

    from data_assets.cli import register_snapshots
    from data_assets.definitions import ASSETS, build_resources
    from data_assets.partitions import multi_key

    resources = build_resources(write_config(folder / "sequential.yaml", base_config(str(root))))
    with DagsterInstance.ephemeral() as instance:
        register_snapshots(instance, resources)
        for source, snapshot in PARTITIONS:
            materialize(ASSETS, selection=DEDUP, partition_key=multi_key(source, snapshot), instance=instance, resources=resources)
    return tree_digest(str(root))


def wait_until_deduplicated(instance, root: Path, daemon: subprocess.Popen) -> None:
    from dagster import DagsterRunStatus, RunsFilter

    unfinished = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        assert daemon.poll() is None, "the daemon exited"
        done = all((root / "decontamination" / f"source={s}" / f"snapshot={n}" / "_manifest.json").exists() for s, n in PARTITIONS)
        if done and not instance.get_run_records(RunsFilter(statuses=unfinished)):
            return
        time.sleep(2)
    raise AssertionError(f"not deduplicated after {TIMEOUT_S} s: {[(r.dagster_run.job_name, r.dagster_run.status) for r in instance.get_run_records()]}")


def launch_backfill(instance) -> None:
    """What the UI's backfill dialog submits: an asset backfill of these assets over every partition."""
    from dagster import AssetKey
    from dagster._core.execution.backfill import PartitionBackfill

    from data_assets.definitions import defs
    from data_assets.partitions import SNAPSHOTS

    instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01", "2026-02"])
    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id="dedupbackfill", asset_graph=defs.resolve_asset_graph(), partition_names=[f"{n}|{s}" for s, n in PARTITIONS],
        asset_selection=[AssetKey(name) for name in DEDUP], backfill_timestamp=time.time(), tags={}, dynamic_partitions_store=instance,
        all_partitions=False, title=None, description=None, run_config=None,
    )
    instance.add_backfill(backfill)


@pytest.mark.parametrize("launch", ["sensor", "backfill"])
def test_runs_launched_at_once_equal_a_sequential_run(tmp_path, launch):
    from dagster import AssetKey, DagsterInstance, DagsterRunStatus

    reference = sequential_reference(tmp_path / "sequential", tmp_path)
    root = tmp_path / "data"
    config = write_config(tmp_path / "sluice.yaml", base_config(str(root)))
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    env = {
        **os.environ, "DAGSTER_HOME": str(home), "SLUICE_CONFIG": config, "PYTHONPATH": str(PROJECT_ROOT),
        "SLUICE_SENSOR_INTERVAL_S": "5", "SLUICE_AUTOMATION_INTERVAL_S": "5",
    }
    dagster = str(PROJECT_ROOT / ".venv" / "bin" / "dagster")
    sensor = ["start", "new_snapshot_sensor"] if launch == "sensor" else ["stop", "dedup_automation"]
    subprocess.run([dagster, "sensor", *sensor, "-w", "workspace.yaml"], cwd=PROJECT_ROOT, env=env, check=True, capture_output=True)
    # The blocklist and the quality report are not part of the sequential reference.
    subprocess.run([dagster, "sensor", "stop", "report_automation", "-w", "workspace.yaml"], cwd=PROJECT_ROOT, env=env, check=True, capture_output=True)
    log = open(tmp_path / "daemon.log", "w")  # noqa: SIM115 - closed below
    daemon = subprocess.Popen(
        [str(PROJECT_ROOT / ".venv" / "bin" / "python"), "-m", "tests.fast_daemon", "run", "-w", "workspace.yaml"],
        cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    os.environ["DAGSTER_HOME"], previous = str(home), os.environ.get("DAGSTER_HOME")
    try:
        with DagsterInstance.get() as instance:
            if launch == "backfill":
                launch_backfill(instance)
            wait_until_deduplicated(instance, root, daemon)
            records = instance.get_run_records()
            events = {key: [r.timestamp for r in instance.fetch_materializations(AssetKey(key), limit=100).records] for key in ("dedup_index", "dedup_clusters")}
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=60)
        log.close()
        if previous is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = previous
    statuses = {r.dagster_run.run_id: r.dagster_run.status for r in records}
    assert set(statuses.values()) == {DagsterRunStatus.SUCCESS}, (tmp_path / "daemon.log").read_text()[-5000:]
    first = [r for r in records if r.dagster_run.job_name == "ingest_job" or AssetKey("dedup_index") in (r.dagster_run.asset_selection or set())]
    assert len(first) == 4  # one run per partition up to its index (the sensor's ingest runs, or the backfill's first)
    # They did run at once: some two of them overlapped.
    spans = sorted((r.start_time, r.end_time) for r in first)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)), spans
    # No partition was clustered before every partition was indexed (the AllPartitionMapping gate).
    assert len(events["dedup_index"]) == 4 and len(events["dedup_clusters"]) == 4
    assert min(events["dedup_clusters"]) > max(events["dedup_index"])
    assert tree_digest(str(root)) == reference
