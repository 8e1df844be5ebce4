"""The snapshot sensor registers new snapshots and requests each source x snapshot run exactly once."""

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

    # A new snapshot lands for one source only: one new partition key and one run.
    shutil.copytree(SAMPLE / "web" / "2026-02", web / "2026-02")
    (web / "not a valid/..").mkdir(parents=True, exist_ok=True)  # ignored: not a valid snapshot name
    third = tick(dagster_instance, settings, first.cursor)
    assert isinstance(third, SensorResult)
    assert [str(request.partition_key) for request in third.run_requests] == ["2026-02|web"]
    assert sorted(dagster_instance.get_dynamic_partitions(SNAPSHOTS)) == ["2026-01", "2026-02"]

    fourth = tick(dagster_instance, settings, third.cursor)
    assert not isinstance(fourth, SensorResult) or not fourth.run_requests
