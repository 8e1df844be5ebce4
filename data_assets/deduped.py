"""`deduped_documents`: exact (normalized-text hash) and near-duplicate (MinHash LSH) dedup, global.

The rule lives in `sluice.dedup`: the first document in (snapshot, source, file, record) order is
kept. A partition is deduplicated against every earlier partition that exists when it runs (exact:
their cleaned hashes; near duplicates: their persisted band indexes); the list is recorded in
metadata, and a warning check names earlier partitions that are registered but not cleaned yet (an
earlier snapshot landing late: re-materialize this partition after it lands).
"""


import pyarrow as pa
import pyarrow.compute as pc
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)

from data_assets.metadata import counts_table, markdown_table
from data_assets.partitions import SNAPSHOTS, partition_ref, source_snapshot_partitions
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.dedup import deduplicate_partition
from sluice.layout import (
    PartitionRef,
    list_partitions,
    partition_prefix,
    read_manifest,
    read_parquet_file,
    write_manifest,
)
from sluice.storage import Store

ASSET = "deduped_documents"
NO_DUPLICATES_CHECK = "no_exact_duplicates"
ORDER_CHECK = "deduplicated_against_all_earlier_partitions"
SHARE_CHECK = "removed_share_within_bounds"


def _hashes(store: Store, asset: str, ref: PartitionRef) -> pa.ChunkedArray:
    prefix = partition_prefix(asset, ref)
    manifest = read_manifest(store, prefix)
    if manifest is None:
        return pa.chunked_array([], pa.string())
    tables = [read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["text_hash"]) for entry in manifest["files"]]
    return pa.chunked_array([c for t in tables for c in t.column("text_hash").chunks], pa.string())


def count_remaining_duplicates(store: Store, ref: PartitionRef) -> tuple[int, dict[str, int]]:
    """Duplicates left in this partition's output, and its hashes found in earlier deduped outputs."""
    hashes = _hashes(store, ASSET, ref)
    within = len(hashes) - len(pc.unique(hashes))
    against: dict[str, int] = {}
    unique = pc.unique(hashes)
    for other in list_partitions(store, ASSET):
        if other.sort_key() >= ref.sort_key():
            continue
        found = int(pc.sum(pc.is_in(_hashes(store, ASSET, other), value_set=unique)).as_py() or 0)
        if found:
            against[other.key] = found
    return within, against


@asset(
    name=ASSET,
    partitions_def=source_snapshot_partitions,
    deps=[AssetDep("cleaned_documents")],
    group_name="curation",
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "Cleaned documents without exact duplicates (normalized-text hash) or near duplicates (MinHash LSH, "
        "14 bands x 8 rows over word 5-grams), across all sources and snapshots: the earliest (snapshot, source, "
        "file, record) document of each cluster is kept; removed ones in removed.parquet with kind, the id of the "
        "kept document and the cluster size. Band hashes persist per partition (bands-*.parquet, clusters.parquet) "
        "so later snapshots are deduplicated against them without recomputing."
    ),
    check_specs=[
        AssetCheckSpec(NO_DUPLICATES_CHECK, asset=ASSET, blocking=True, description="No normalized-text hash occurs twice in this partition or in an earlier partition's output."),
        AssetCheckSpec(ORDER_CHECK, asset=ASSET, description="Every registered partition ordered before this one had been cleaned when this one was deduplicated (warns)."),
        AssetCheckSpec(SHARE_CHECK, asset=ASSET, description="The share of documents removed (exact + near duplicates) lies inside dedup.min/max_removed_share (warns)."),
    ],
)
def deduped_documents(
    context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> MaterializeResult:
    config = settings.config
    ref = partition_ref(context)
    store = storage.store()
    prefix = partition_prefix(ASSET, ref)
    result = deduplicate_partition(store, ref, prefix, config.s3, config.dedup, compute.executor())
    manifest = {
        "asset": ASSET,
        "partition": {"source": ref.source, "snapshot": ref.snapshot},
        "files": result.files,
        "side_files": result.side_files,
        "documents": result.documents_out,
        "deduplicated_against": result.deduplicated_against,
    }
    if result.band_index is not None:
        manifest["band_index"] = result.band_index
    if result.task_records is not None:
        manifest["task_records"] = result.task_records
    if result.signature_tasks is not None:
        context.log.info(result.signature_tasks.line(f"dedup signatures {ref.key}"))
    write_manifest(store, prefix, manifest)

    within, against = count_remaining_duplicates(store, ref)
    no_duplicates = AssetCheckResult(
        check_name=NO_DUPLICATES_CHECK,
        passed=within == 0 and not against,
        severity=AssetCheckSeverity.ERROR,
        metadata={"duplicates_within": within, "duplicates_against_earlier": MetadataValue.json(against)},
    )
    registered = context.instance.get_dynamic_partitions(SNAPSHOTS)
    earlier_registered = [
        PartitionRef(source, snapshot)
        for snapshot in registered
        for source in config.source_names
        if (snapshot, source) < ref.sort_key()
    ]
    seen = set(result.deduplicated_against)
    not_cleaned = sorted(other.key for other in earlier_registered if other.key not in seen)
    order = AssetCheckResult(
        check_name=ORDER_CHECK,
        passed=not not_cleaned,
        severity=AssetCheckSeverity.WARN,
        metadata={"earlier_partitions_not_cleaned": MetadataValue.json(not_cleaned)},
        description=(
            "all earlier partitions were included"
            if not not_cleaned
            else f"{len(not_cleaned)} earlier partitions were not cleaned yet; re-materialize this partition after them"
        ),
    )
    removed = result.documents_in - result.documents_out
    removed_share = removed / result.documents_in if result.documents_in else 0.0
    bounds = (config.dedup.min_removed_share, config.dedup.max_removed_share)
    share = AssetCheckResult(
        check_name=SHARE_CHECK,
        passed=bounds[0] <= removed_share <= bounds[1],
        severity=AssetCheckSeverity.WARN,
        metadata={"removed_share": removed_share, "min_removed_share": bounds[0], "max_removed_share": bounds[1]},
    )
    documents_in = result.documents_in or 1
    return MaterializeResult(
        metadata={
            "dagster/row_count": result.documents_out,
            "dagster/uri": MetadataValue.path(store.uri(prefix)),
            "documents_in": result.documents_in,
            "documents_out": result.documents_out,
            "removed_exact": result.removed_exact,
            "removed_fuzzy": result.removed_fuzzy,
            "removed_within_partition": result.removed_within_partition,
            "removed_share": removed_share,
            **{f"removed_share_against/{snapshot}": count / documents_in for snapshot, count in result.removed_against_snapshot.items()},
            "deduplicated_against": MetadataValue.json(result.deduplicated_against),
            "removed_against": counts_table(
                {"(this partition)": result.removed_within_partition, **result.removed_against}, key="kept copy in", value="removed"
            )
            if removed
            else markdown_table(["kept copy in", "removed"], []),
            "cluster_sizes": markdown_table(["cluster size", "clusters"], sorted(result.cluster_sizes.items())),
            "band_index_files": len(result.band_index["files"]) if result.band_index else 0,
            "recomputed_band_indexes": MetadataValue.json(result.recomputed_band_indexes),
            "output_bytes": sum(entry["bytes"] for entry in result.files),
            **({f"signature_{k}": v for k, v in result.signature_tasks.metadata().items()} if result.signature_tasks else {}),
        },
        check_results=[no_duplicates, order, share],
    )
