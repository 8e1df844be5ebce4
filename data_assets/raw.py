"""`raw_documents`: crawl files of one source snapshot, read as streams, into one Parquet schema."""


from collections import Counter
from collections.abc import Iterator
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetDep,
    AssetExecutionContext,
    Failure,
    MetadataValue,
)

from data_assets.automation import stage_automation
from data_assets.batch import PartitionResult, in_group, run_source_partitions, stage_asset
from data_assets.metadata import counts_table, known_keys, markdown_table, prefixed_counts, stage_progress
from data_assets.partitions import partition_check, source_snapshot_partitions
from data_assets.versions import CODE_VERSIONS, CRAWL, SOURCE_SETTINGS, settings_dep
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.config import SluiceConfig
from sluice.ingest.raw import QUARANTINE_DATASET, ingest_file, plan_ingest, snapshot_files
from sluice.io.layout import PartitionRef, partition_prefix, side_prefix, write_manifest
from sluice.io.storage import Store
from sluice.runtime.preflight import source_problem
from sluice.runtime.tasks import (
    RecordedTask,
    TaskCounts,
    record_key,
    record_listing,
    records_prefix,
    run_recorded,
    task_digest,
)

ASSET = "raw_documents"
QUARANTINE_CHECK = "quarantined_file_share_below_bound"
MAX_ROWS_NAMED = 1000  # unrecognized or quarantined file names recorded in the metadata (the manifest lists all)
MAX_FILES_SHOWN = 20  # rows of the per-file table; one more counts the rest


@stage_asset(
    ASSET,
    partitions_def=source_snapshot_partitions,
    deps=[AssetDep(CRAWL), settings_dep(SOURCE_SETTINGS)],
    code_version=CODE_VERSIONS[ASSET],
    automation_condition=stage_automation(ASSET),
    **in_group("curation"),
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "Crawl records (WARC responses, JSONL lines, Parquet rows) of one source snapshot, streamed into "
        "one Parquet schema: doc_id, url, fetch_date, content_type, content (HTML or text bytes), charset, "
        "content_hash, file, ordinal, source_id (source and snapshot are the Hive partition folders). Damaged "
        "records and unreadable files go to the raw_quarantine dataset."
    ),
    check_specs=[
        partition_check(QUARANTINE_CHECK, ASSET,
            blocking=True,
            description="The share of input files that could not be read at all stays below checks.max_quarantined_file_share.",
        )
    ],
)
def raw_documents(
    context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> Iterator[Any]:
    yield from run_source_partitions(context, ASSET, lambda ref: ingest_partition(context, ref, settings, storage, compute))


def ingest_partition(
    context: AssetExecutionContext, ref: PartitionRef, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> PartitionResult:
    config = settings.config
    store = storage.store()
    # Fails the run with one line naming the config key, the path and the fix when the source location
    # cannot be read (missing, not a folder, permissions, S3 credentials).
    problem = source_problem(config, ref.source, settings.path)
    if problem:
        raise Failure(description=problem, allow_retries=False)
    jobs, unrecognized = _jobs(store, ref, config)
    executor = compute.executor()
    context.log.info(f"{ref.key}: {len(jobs)} input files on {executor.describe()}")
    if unrecognized:
        context.log.warning(f"{ref.key}: {len(unrecognized)} files of no known {config.source(ref.source).format} suffix not read: {_names(unrecognized)}")
    progress = stage_progress(context, f"{ASSET} {ref.key}", len(jobs))
    results = executor.map(run_recorded, jobs, progress=lambda r: progress.update(r["records"], r["content_bytes"]))
    counts = TaskCounts.of(results)
    context.log.info(counts.line(f"{ASSET} {ref.key}"))
    reasons: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    recovered: Counter[str] = Counter()
    for result in results:
        reasons.update(result["quarantine_reasons"])
        skipped.update(result["skipped"])
        recovered.update(result.get("recovered", {}))
    _write_manifest(store, ref, results, reasons, [job.task.part for job in jobs], unrecognized)
    known = known_keys(context, ASSET, ("quarantine", "skipped", "recovered"))
    metadata = {
        **_metadata(store, ref, results, reasons),
        **_unrecognized_metadata(unrecognized),
        "recovered_records": sum(recovered.values()),
        **prefixed_counts("quarantine", reasons, known["quarantine"]),
        **prefixed_counts("skipped", skipped, known["skipped"]),
        **prefixed_counts("recovered", recovered, known["recovered"]),
        **counts.metadata(),
        "compute": executor.describe(),
    }
    return PartitionResult(metadata=metadata, checks=[_quarantine_check(config, results, unrecognized)])


def _jobs(store: Store, ref: PartitionRef, config: SluiceConfig) -> tuple[list[RecordedTask], list[str]]:
    """One recorded task per input file of the source's snapshot folder, and the folder's files of no known
    suffix (not read: listed by name). Each task records its completion; a re-run reuses the verified
    outputs of finished tasks (sluice.runtime.tasks)."""
    source = config.source(ref.source)
    files, unrecognized = snapshot_files(source.location.rstrip("/") + "/" + ref.snapshot, source.format, config.s3)
    tasks = plan_ingest(
        source.location, ref, source.format, source.options, store.uri(partition_prefix(ASSET, ref)), config.s3,
        store.uri(side_prefix(QUARANTINE_DATASET, ref)), files=files,
    )
    records_url = store.uri(records_prefix(ASSET, ref))
    return [
        RecordedTask(
            ingest_file, task, task.file_label, task_digest(ASSET, task), records_url, record_key(task.part),
            (("part", task.output_url), ("quarantine_part", task.quarantine_url or task.output_url)), config.s3,
            input_url=task.source_url, input_key=task.file_key,
        )
        for task in tasks
    ], [f"{ref.snapshot}/{key}" for key in unrecognized]


MAX_NAMES_LOGGED = 20


def _names(files: list[str]) -> str:
    shown = ", ".join(files[:MAX_NAMES_LOGGED])
    return shown + (f" and {len(files) - MAX_NAMES_LOGGED} more" if len(files) > MAX_NAMES_LOGGED else "")


def _unrecognized_metadata(unrecognized: list[str]) -> dict[str, Any]:
    """Files of the snapshot folder that were not read because their name matches no known suffix: counted,
    and named (all of them in the manifest, the first ones here)."""
    return {
        "unrecognized_files": len(unrecognized),
        "unrecognized_file_names": MetadataValue.json(unrecognized[:MAX_ROWS_NAMED]),
    }


def _quarantined_files(results: list[dict[str, Any]]) -> list[str]:
    return [result["file"] for result in results if result["file_quarantined"]]


def _write_manifest(
    store: Store, ref: PartitionRef, results: list[dict[str, Any]], reasons: Counter[str], parts: list[int], unrecognized: list[str]
) -> None:
    quarantine_prefix = side_prefix(QUARANTINE_DATASET, ref)
    write_manifest(
        store,
        partition_prefix(ASSET, ref),
        {
            "asset": ASSET,
            "partition": {"source": ref.source, "snapshot": ref.snapshot},
            "files": [result["part"] for result in results],
            "side_files": [{**result["quarantine_part"], "prefix": quarantine_prefix} for result in results],
            "documents": sum(result["records"] for result in results),
            "input_files": [result["file"] for result in results],
            "quarantined_files": _quarantined_files(results),
            "quarantine_reasons": dict(reasons),
            "task_records": record_listing(ASSET, ref, parts),
            **({"unrecognized_files": unrecognized} if unrecognized else {}),  # files of the folder not read
        },
    )


def _quarantine_check(config: SluiceConfig, results: list[dict[str, Any]], unrecognized: list[str]) -> AssetCheckResult:
    """The share of input files that could not be read at all stays under checks.max_quarantined_file_share."""
    quarantined = _quarantined_files(results)
    file_share = len(quarantined) / len(results) if results else 0.0
    bound = config.checks.max_quarantined_file_share
    return AssetCheckResult(
        check_name=QUARANTINE_CHECK,
        passed=file_share <= bound,
        severity=AssetCheckSeverity.ERROR,
        metadata={
            "quarantined_file_share": file_share, "bound": bound, "quarantined_file_count": len(quarantined),
            "quarantined_files": MetadataValue.json(quarantined[:MAX_ROWS_NAMED]),  # the manifest lists every one
            # what the partition read, for the command's summary when this check fails it (no materialization then)
            "documents_out": sum(result["records"] for result in results),
            "quarantined_records": sum(sum(result["quarantine_reasons"].values()) for result in results),
            "input_files": len(results),
            **_unrecognized_metadata(unrecognized),
        },
        description=f"{len(quarantined)} of {len(results)} files unreadable (bound {bound:.0%})",
    )


def _files_shown(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The per-file table's rows, at most MAX_FILES_SHOWN whatever the partition's file count (a CommonCrawl
    snapshot has ~90,000): the files with the most quarantined records, then the largest, in file order, and
    a last row counting the rest (the manifest's `input_files` lists every one)."""
    quarantined = [sum(r["quarantine_reasons"].values()) for r in results]
    order = sorted(range(len(results)), key=lambda i: (-quarantined[i], -results[i]["content_bytes"], i))
    rows = [(results[i]["file"], results[i]["records"], quarantined[i], round(results[i]["content_bytes"] / 1e6, 3)) for i in sorted(order[:MAX_FILES_SHOWN])]
    if len(results) > MAX_FILES_SHOWN:
        rest = order[MAX_FILES_SHOWN:]
        rows.append((
            f"... {len(rest)} more files (every one in the manifest's input_files)", sum(results[i]["records"] for i in rest),
            sum(quarantined[i] for i in rest), round(sum(results[i]["content_bytes"] for i in rest) / 1e6, 3),
        ))
    return rows


def _metadata(store: Store, ref: PartitionRef, results: list[dict[str, Any]], reasons: Counter[str]) -> dict[str, Any]:
    records = sum(result["records"] for result in results)
    per_file = markdown_table(["file", "documents", "quarantined records", "content MB"], _files_shown(results))
    return {
        "dagster/row_count": records,
        "dagster/uri": MetadataValue.path(store.uri(partition_prefix(ASSET, ref))),
        "documents_out": records,
        "input_files": len(results),
        "quarantined_records": sum(reasons.values()),
        "quarantined_files": len(_quarantined_files(results)),
        "content_bytes": sum(r["content_bytes"] for r in results),
        "output_bytes": sum(result["part"]["bytes"] for result in results),
        "quarantine_reasons": counts_table(reasons),
        "files": per_file,
        "quarantine_uri": MetadataValue.path(store.uri(side_prefix(QUARANTINE_DATASET, ref))),
    }
