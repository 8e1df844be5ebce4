"""The snapshot sensor registers new snapshots and records what changed (crawl folders, settings) as
observations, once each; it requests no runs itself (automation does, from the registered partitions), and a
tick on an up-to-date instance registers and records nothing."""

from __future__ import annotations

import shutil

from dagster import AssetKey, SensorResult, SkipReason, build_sensor_context

from data_assets.partitions import SNAPSHOTS
from data_assets.sensors import new_snapshot_sensor
from data_assets.versions import CRAWL, observe, recorded_versions
from resources import SluiceSettings
from tests.conftest import SAMPLE


def tick(instance, settings, cursor):
    """One evaluation, with its result applied as the daemon applies it."""
    context = build_sensor_context(instance=instance, cursor=cursor, resources={"settings": settings})
    result = new_snapshot_sensor(context)
    if isinstance(result, SensorResult):
        for request in result.dynamic_partitions_requests:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
    return result


def crawl_partitions(result) -> list[str]:
    return sorted(str(event.partition) for event in result.asset_events if event.asset_key == AssetKey(CRAWL))


def test_sensor_registers_and_records_each_change_once(tmp_path, make_config, dagster_instance):
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
    assert isinstance(first, SensorResult) and not first.run_requests
    assert dagster_instance.get_dynamic_partitions(SNAPSHOTS) == ["2026-01"]
    assert crawl_partitions(first) == ["reference|2026-01", "web|2026-01"]
    settings_keys = {event.asset_key.to_user_string() for event in first.asset_events} - {CRAWL}
    assert settings_keys == {"source_settings", "cleaning_settings", "mix_settings"}

    second = tick(dagster_instance, settings, first.cursor)
    assert isinstance(second, SkipReason) and "nothing new" in second.skip_message

    # A new snapshot lands for one source only: one new snapshot key; both sources' crawl versions recorded
    # (the other source's partition is empty). A folder that cannot be a partition key is reported.
    shutil.copytree(SAMPLE / "web" / "2026-02", web / "2026-02")
    (web / "not a valid name").mkdir()
    third = tick(dagster_instance, settings, first.cursor)
    assert isinstance(third, SensorResult) and not third.run_requests
    assert sorted(dagster_instance.get_dynamic_partitions(SNAPSHOTS)) == ["2026-01", "2026-02"]
    assert crawl_partitions(third) == ["reference|2026-02", "web|2026-02"]

    fourth = tick(dagster_instance, settings, third.cursor)
    assert isinstance(fourth, SkipReason) and "not a valid name" in fourth.skip_message

    # The other source's data for that snapshot lands late: its crawl version changes (automation re-runs it).
    before = recorded_versions(dagster_instance, CRAWL)["reference|2026-02"]
    shutil.copytree(SAMPLE / "reference" / "2026-02", reference / "2026-02")
    fifth = tick(dagster_instance, settings, third.cursor)
    assert isinstance(fifth, SensorResult) and crawl_partitions(fifth) == ["reference|2026-02"]
    assert recorded_versions(dagster_instance, CRAWL)["reference|2026-02"] != before


def test_sensor_on_an_instance_the_command_brought_up_to_date_records_nothing(tmp_path, make_config, dagster_instance):
    """What `sluice materialize` records (every partition's crawl and settings versions) is what the sensor
    would: switched on afterwards, its first tick finds nothing new."""
    from sluice.config import load_config
    from sluice.io.layout import PartitionRef

    config = make_config()
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01", "2026-02"])
    refs = [PartitionRef(source, snapshot) for snapshot in ("2026-01", "2026-02") for source in ("web", "reference")]
    assert observe(dagster_instance, load_config(config), refs)  # what the command records before planning
    result = tick(dagster_instance, SluiceSettings(config_path=config), None)
    assert isinstance(result, SkipReason), result
