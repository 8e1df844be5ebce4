"""Sensor: notice new snapshot folders / prefixes under each source, register them, request their ingest runs.

The runs it requests (raw -> cleaned -> signatures -> index) may all go at once; the ordered rest of each
partition is declarative automation (`dedup_automation`, see data_assets/deduped.py)."""


import json
import os

from dagster import RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor

from data_assets.jobs import ingest_job
from data_assets.partitions import SNAPSHOTS, multi_key, snapshot_partitions
from resources import SluiceSettings
from sluice.config import check_snapshot_name
from sluice.preflight import source_problem
from sluice.storage import open_store


def discover_snapshots(settings: SluiceSettings, rejected: list[str] | None = None) -> list[tuple[str, str]]:
    """(source, snapshot) pairs present in the source locations, sorted. Folder names that are not safe
    partition keys (`..`, spaces, characters that break S3 keys) and sources whose location cannot be
    read are skipped and, with `rejected` given, reported there as "source: reason"."""
    config = settings.config
    found = []
    for source in config.sources:
        problem = source_problem(config, source.name, settings.config_path)
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
    job=ingest_job,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    description=(
        "New crawl snapshots -> dynamic partitions + one ingest run per source x snapshot (every configured source of a "
        "new snapshot: one without data materializes empty, so dedup's wait for every partition ends)."
    ),
)
def new_snapshot_sensor(context: SensorEvaluationContext, settings: SluiceSettings) -> SensorResult | SkipReason:
    seen = set(json.loads(context.cursor)) if context.cursor else set()
    rejected: list[str] = []
    pairs = discover_snapshots(settings, rejected)
    for line in rejected:
        context.log.warning(f"not registered as a snapshot partition: {line}")
    new_pairs = [pair for pair in pairs if f"{pair[0]}/{pair[1]}" not in seen]
    if not new_pairs:
        return SkipReason(f"no new snapshots ({len(pairs)} known)")
    registered = set(context.instance.get_dynamic_partitions(SNAPSHOTS))
    to_register = sorted({snapshot for _, snapshot in new_pairs} - registered)
    requests = [
        RunRequest(
            run_key=f"{source}/{snapshot}", partition_key=multi_key(source, snapshot),
            tags={"sluice/source": source, "sluice/snapshot": snapshot, "sluice/purpose": "new-snapshot"},
        )
        for source, snapshot in new_pairs
    ]
    found = set(new_pairs)
    for snapshot in to_register:  # sources without data in a new snapshot: their (empty) partitions too
        requests.extend(
            RunRequest(run_key=f"{source}/{snapshot}/empty", partition_key=multi_key(source, snapshot), tags={"sluice/empty": "true", "sluice/source": source, "sluice/snapshot": snapshot, "sluice/purpose": "new-snapshot"})
            for source in settings.config.source_names
            if (source, snapshot) not in found
        )
    late = sorted({snapshot for _, snapshot in new_pairs if snapshot in registered})
    if late:
        context.log.warning(
            f"data landed for already registered snapshot(s) {late}: the dedup results of partitions ordered after them are "
            "stale; backfill dedup_clusters, deduped_documents and tokenized_shards for those partitions"
        )
    return SensorResult(
        run_requests=sorted(requests, key=lambda request: request.run_key or ""),
        dynamic_partitions_requests=[snapshot_partitions.build_add_request(to_register)] if to_register else [],
        cursor=json.dumps(sorted(seen | {f"{s}/{n}" for s, n in new_pairs})),
    )
