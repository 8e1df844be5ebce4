"""The snapshot sensor registers new snapshots and requests each source x snapshot run exactly once (and an
empty-partition run for each source without data in a new snapshot)."""

from __future__ import annotations

import shutil

from dagster import SensorResult, build_sensor_context

from data_assets.partitions import SNAPSHOTS
from data_assets.sensors import new_snapshot_sensor
from resources import SluiceSettings
from tests.conftest import SAMPLE


def tick(instance, settings, cursor):
    context = build_sensor_context(instance=instance, cursor=cursor, resources={"settings": settings})
    result = new_snapshot_sensor(context)
    if isinstance(result, SensorResult):
        for request in result.dynamic_partitions_requests:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def test_sensor_requests_each_partition_once_across_ticks(tmp_path, make_config, dagster_instance):
    web = tmp_path / "crawl" / "web"
    reference = tmp_path / "crawl" / "reference"
    shutil.copytree(SAMPLE / "web" / "2026-01", web / "2026-01")
    shutil.copytree(SAMPLE / "reference" / "2026-01", reference / "2026-01")
    config = make_config(
        sources=[
            {"name": "web", "location": str(web), "format": "warc"},
            {"name": "reference", "location": str(reference), "format": "jsonl"},
        ]
    )
    settings = SluiceSettings(config_path=config)

    first = tick(dagster_instance, settings, None)
    assert isinstance(first, SensorResult)
    keys = sorted(str(request.partition_key) for request in first.run_requests)
    assert keys == ["2026-01|reference", "2026-01|web"]
    assert len({request.run_key for request in first.run_requests}) == 2
    assert dagster_instance.get_dynamic_partitions(SNAPSHOTS) == ["2026-01"]

    second = tick(dagster_instance, settings, first.cursor)
    assert not isinstance(second, SensorResult) or not second.run_requests

    # A new snapshot lands for one source only: one new snapshot key, and a run for every source (the other
    # source's partition materializes empty, so the dedup of the snapshot need not wait for it forever).
    shutil.copytree(SAMPLE / "web" / "2026-02", web / "2026-02")
    (web / "not a valid/..").mkdir(parents=True, exist_ok=True)  # ignored: not a valid snapshot name
    third = tick(dagster_instance, settings, first.cursor)
    assert isinstance(third, SensorResult)
    assert [(str(r.partition_key), r.run_key) for r in third.run_requests] == [("2026-02|reference", "reference/2026-02/empty"), ("2026-02|web", "web/2026-02")]
    assert sorted(dagster_instance.get_dynamic_partitions(SNAPSHOTS)) == ["2026-01", "2026-02"]

    fourth = tick(dagster_instance, settings, third.cursor)
    assert not isinstance(fourth, SensorResult) or not fourth.run_requests

    # The other source's data for that snapshot lands late: its run (another run key) re-ingests it.
    shutil.copytree(SAMPLE / "reference" / "2026-02", reference / "2026-02")
    fifth = tick(dagster_instance, settings, third.cursor)
    assert isinstance(fifth, SensorResult)
    assert [(str(r.partition_key), r.run_key) for r in fifth.run_requests] == [("2026-02|reference", "reference/2026-02")]
