"""The production instance: deploy/dagster.yaml (run, event-log and schedule storage on PostgreSQL)
against a real PostgreSQL server started by the test on 127.0.0.1.

The snapshot sensor ticks against it (its dynamic partitions and crawl observations land in Postgres), then three runs go at
once from three processes: two of the same partition and one of another (SQLite is known to lock under
such multiprocess writes). All succeed, Postgres holds every run and materialization, and the storage
tree equals that of sequential runs.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import PROJECT_ROOT, base_config, tree_digest, write_config
from tests.data_assets.test_crash import check_visible_files, child
from tests.support.pg_server import PostgresServer, pg_binary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(pg_binary("initdb") is None, reason="PostgreSQL binaries not installed (make test-all installs them)"),
]


@pytest.fixture
def postgres_home(tmp_path, monkeypatch):
    with PostgresServer() as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        home = tmp_path / "dagster_home"
        home.mkdir()
        shutil.copy(PROJECT_ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        yield home, server


def test_sensor_and_concurrent_runs_on_the_postgres_instance(postgres_home, tmp_path):
    from dagster import (
        AssetKey,
        DagsterInstance,
        DagsterRunStatus,
        SensorResult,
        build_sensor_context,
        materialize,
    )
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage

    from data_assets.definitions import ASSETS, build_resources
    from data_assets.partitions import SNAPSHOTS, multi_key
    from data_assets.sensors import new_snapshot_sensor
    from resources import SluiceSettings

    home, _ = postgres_home
    work = tmp_path / "data"
    config = write_config(tmp_path / "sluice.yaml", base_config(str(work)))
    with DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        context = build_sensor_context(instance=instance, cursor=None, resources={"settings": SluiceSettings(config_path=config)})
        tick = new_snapshot_sensor(context)
        assert isinstance(tick, SensorResult) and not tick.run_requests  # it registers; automation requests the runs
        for request in tick.dynamic_partitions_requests:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        assert sorted(instance.get_dynamic_partitions(SNAPSHOTS)) == ["2026-01", "2026-02"]

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.environ["SLUICE_HARNESS_INSTANCE"] = "1"
    try:
        runs = [child(config, "raw_documents", partition, scratch) for partition in ("web|2026-01", "web|2026-01", "reference|2026-01")]
        for run in runs:
            assert run.stdout is not None and run.stdout.readline().strip() == "READY"
        while any(run.poll() is None for run in runs):
            check_visible_files(work)
        for run in runs:
            out, err = run.communicate(timeout=300)
            assert run.returncode == 0 and "DONE" in out, err[-3000:]
    finally:
        del os.environ["SLUICE_HARNESS_INSTANCE"]

    with DagsterInstance.get() as instance:
        records = instance.get_run_records()
        assert len(records) == 3 and {r.dagster_run.status for r in records} == {DagsterRunStatus.SUCCESS}
        partitions = sorted(r.dagster_run.tags.get("dagster/partition") for r in records)
        assert partitions == ["reference|2026-01", "web|2026-01", "web|2026-01"]
        event = instance.get_latest_materialization_event(AssetKey("raw_documents"))
        assert event is not None and event.run_id in {r.dagster_run.run_id for r in records}

        # The same partitions, one after the other, into another root: the same bytes.
        sequential = tmp_path / "sequential"
        resources = build_resources(write_config(tmp_path / "seq.yaml", base_config(str(sequential))))
        for source in ("web", "reference"):
            materialize(ASSETS, selection=["raw_documents"], partition_key=multi_key(source, "2026-01"), instance=instance, resources=resources)
    assert tree_digest(str(work)) == tree_digest(str(sequential))
