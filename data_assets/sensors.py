"""The snapshot sensor: notice new snapshot folders / prefixes under each source, register them as dynamic
partitions, and record what changed (new crawl folders, changed settings) as observations.

It requests no runs itself: a registered partition is newly missing, and declarative automation
(data_assets/automation.py) requests everything it needs as one asset backfill, batched like any other; a
changed setting makes exactly the partitions it governs stale, and automation re-runs those. On an
up-to-date instance a tick registers and records nothing. Folder names that cannot be partition keys, and
sources whose location cannot be read, are reported on every tick (the tick's log and its skip reason).
"""

from __future__ import annotations

import json
import os

from dagster import SensorEvaluationContext, SensorResult, SkipReason, sensor

from data_assets.partitions import SNAPSHOTS, snapshot_partitions
from data_assets.versions import current_versions, observations, settings_values
from resources import SluiceSettings
from sluice.config import check_snapshot_name
from sluice.io.layout import PartitionRef
from sluice.io.storage import open_store
from sluice.runtime.preflight import source_problem


def discover_snapshots(settings: SluiceSettings, rejected: list[str] | None = None) -> list[tuple[str, str]]:
    """(source, snapshot) pairs present in the source locations, sorted. Folder names that are not safe
    partition keys (`..`, spaces, characters that break S3 keys) and sources whose location cannot be
    read are skipped and, with `rejected` given, reported there as "source: reason"."""
    config = settings.config
    found = []
    for source in config.sources:
        problem = source_problem(config, source.name, settings.path)
        if problem:  # a missing or unreadable location is reported, never silently an empty source
            if rejected is not None:
                rejected.append(f"{source.name}: {problem}")
            continue
        for name in open_store(source.location, config.s3).list_dirs():
            try:
                check_snapshot_name(name)
            except ValueError as error:
                if rejected is not None:
                    rejected.append(f"{source.name}: {error}")
                continue
            found.append((source.name, name))
    return sorted(found, key=lambda pair: (pair[1], pair[0]))


# Seconds between sensor ticks (SLUICE_SENSOR_INTERVAL_S: shorter in tests that drive the daemon).
SENSOR_INTERVAL_S = int(os.environ.get("SLUICE_SENSOR_INTERVAL_S", "60"))


@sensor(
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    description=(
        "New crawl snapshots -> dynamic partitions (automation then materializes them); new crawl folders and changed "
        "settings -> observations of crawl / source_settings / cleaning_settings / mix_settings."
    ),
)
def new_snapshot_sensor(context: SensorEvaluationContext, settings: SluiceSettings) -> SensorResult | SkipReason:
    config = settings.config
    seen = set(json.loads(context.cursor)) if context.cursor else set()
    rejected: list[str] = []
    pairs = discover_snapshots(settings, rejected)
    for line in rejected:
        context.log.warning(f"not registered as a snapshot partition: {line}")
    registered = set(context.instance.get_dynamic_partitions(SNAPSHOTS))
    snapshots = sorted({snapshot for _, snapshot in pairs})
    new_snapshots = [snapshot for snapshot in snapshots if snapshot not in registered]
    # Every source of a new snapshot (one without a folder is an empty partition), and folders of known
    # snapshots seen for the first time (late data): their crawl version is recorded.
    fresh = {PartitionRef(source, snapshot) for snapshot in new_snapshots for source in config.source_names}
    fresh |= {PartitionRef(source, snapshot) for source, snapshot in pairs if f"{source}/{snapshot}" not in seen}
    events = observations(context.instance, current_versions(config, sorted(fresh, key=PartitionRef.sort_key)), settings_values(config))
    cursor = json.dumps(sorted(seen | {f"{source}/{snapshot}" for source, snapshot in pairs}))
    if not new_snapshots and not events:
        problems = f"; {len(rejected)} folder(s) not usable: {' | '.join(rejected)}" if rejected else ""
        return SkipReason(f"nothing new ({len(snapshots)} snapshots known){problems}")
    return SensorResult(
        dynamic_partitions_requests=[snapshot_partitions.build_add_request(new_snapshots)] if new_snapshots else [],
        asset_events=events,
        cursor=cursor,
    )
