"""`raw_documents`: crawl files of one source snapshot, read as streams, into one Parquet schema."""


from collections import Counter

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)

from data_assets.metadata import counts_table, markdown_table, prefixed_counts, stage_progress
from data_assets.partitions import partition_ref, source_snapshot_partitions
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.ingest import ingest_file, merge_quarantine, plan_ingest
from sluice.layout import partition_prefix, write_manifest

ASSET = "raw_documents"
QUARANTINE_CHECK = "quarantined_file_share_below_bound"


@asset(
    name=ASSET,
    partitions_def=source_snapshot_partitions,
    group_name="curation",
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "Crawl records (WARC responses, JSONL lines, Parquet rows) of one source snapshot, streamed into "
        "one Parquet schema: doc_id, source, snapshot, url, fetch_date, content_type, content (HTML or text "
        "bytes), charset, content_hash. Damaged records and unreadable files go to quarantine.parquet."
    ),
    check_specs=[
        AssetCheckSpec(
            QUARANTINE_CHECK,
            asset=ASSET,
            blocking=True,
            description="The share of input files that could not be read at all stays below checks.max_quarantined_file_share.",
        )
    ],
)
def raw_documents(
    context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> MaterializeResult:
    config = settings.config
    ref = partition_ref(context)
    source = config.source(ref.source)
    store = storage.store()
    prefix = partition_prefix(ASSET, ref)
    # Fails the run with a clear message when the source location cannot be read (missing, credentials).
    storage.source_store(ref.source).check_access()

    tasks = plan_ingest(source.location, ref, source.format, source.options, store.uri(prefix), config.s3)
    executor = compute.executor()
    context.log.info(f"{ref.key}: {len(tasks)} input files on {executor.describe()}")
    progress = stage_progress(context, f"{ASSET} {ref.key}", len(tasks))
    results = executor.map(ingest_file, tasks, progress=lambda r: progress.update(r["records"], r["content_bytes"]))
    for event in getattr(executor, "events", []):
        context.log.warning(event)  # e.g. a Ray node lost mid-stage (its tasks were retried)

    quarantine_entry = merge_quarantine(store, prefix, results)
    files = [result["part"] for result in results]
    records = sum(result["records"] for result in results)
    reasons: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    for result in results:
        reasons.update(result["quarantine_reasons"])
        skipped.update(result["skipped"])
    quarantined_files = [result["file"] for result in results if result["file_quarantined"]]
    file_share = len(quarantined_files) / len(results) if results else 0.0
    write_manifest(
        store,
        prefix,
        {
            "asset": ASSET,
            "partition": {"source": ref.source, "snapshot": ref.snapshot},
            "files": files,
            "side_files": [quarantine_entry],
            # The per-task quarantine files stay listed: a concurrent run of this partition may still be
            # merging them when this run publishes (they hold the same bytes in both runs).
            "extra_keys": [result["quarantine_part"]["key"] for result in results],
            "documents": records,
            "input_files": [result["file"] for result in results],
            "quarantined_files": quarantined_files,
            "quarantine_reasons": dict(reasons),
        },
    )

    bound = config.checks.max_quarantined_file_share
    check = AssetCheckResult(
        check_name=QUARANTINE_CHECK,
        passed=file_share <= bound,
        severity=AssetCheckSeverity.ERROR,
        metadata={"quarantined_file_share": file_share, "bound": bound, "quarantined_files": MetadataValue.json(quarantined_files)},
        description=f"{len(quarantined_files)} of {len(results)} files unreadable (bound {bound:.0%})",
    )
    per_file = markdown_table(
        ["file", "documents", "quarantined records", "content MB"],
        [(r["file"], r["records"], sum(r["quarantine_reasons"].values()), round(r["content_bytes"] / 1e6, 3)) for r in results],
    )
    return MaterializeResult(
        metadata={
            "dagster/row_count": records,
            "dagster/uri": MetadataValue.path(store.uri(prefix)),
            "documents_out": records,
            "input_files": len(results),
            "quarantined_records": sum(reasons.values()),
            "quarantined_files": len(quarantined_files),
            "content_bytes": sum(r["content_bytes"] for r in results),
            "output_bytes": sum(entry["bytes"] for entry in files),
            **prefixed_counts("quarantine", reasons),
            **prefixed_counts("skipped", skipped),
            "quarantine_reasons": counts_table(reasons),
            "files": per_file,
            "quarantine_uri": MetadataValue.path(store.uri(f"{prefix}/quarantine.parquet")),
            "compute": executor.describe(),
        },
        check_results=[check],
    )
