"""`deduped_documents`: exact dedup by normalized-text hash, global across all partitions.

The rule lives in `sluice.dedup`: the first document in (snapshot, source, file, record) order is
kept. A partition is deduplicated against the cleaned output of every earlier partition that exists
when it runs; the list is recorded in metadata, and a warning check names earlier partitions that
are registered but not cleaned yet (an earlier snapshot landing late: re-materialize this partition
after it lands).
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
from resources import SluiceSettings, StorageResource
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
        "Cleaned documents without exact duplicates (normalized-text hash), across all sources and snapshots: "
        "the earliest (snapshot, source, file, record) copy is kept; removed ones in removed.parquet with the id "
        "of the document they duplicate."
    ),
    check_specs=[
        AssetCheckSpec(NO_DUPLICATES_CHECK, asset=ASSET, blocking=True, description="No normalized-text hash occurs twice in this partition or in an earlier partition's output."),
        AssetCheckSpec(ORDER_CHECK, asset=ASSET, description="Every registered partition ordered before this one had been cleaned when this one was deduplicated (warns)."),
    ],
)
def deduped_documents(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource) -> MaterializeResult:
    config = settings.config
    ref = partition_ref(context)
    store = storage.store()
    prefix = partition_prefix(ASSET, ref)
    result = deduplicate_partition(store, ref, prefix, config.s3)
    write_manifest(
        store,
        prefix,
        {
            "asset": ASSET,
            "partition": {"source": ref.source, "snapshot": ref.snapshot},
            "files": result.files,
            "side_files": [result.removed_entry],
            "documents": result.documents_out,
            "deduplicated_against": result.deduplicated_against,
        },
    )

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
    removed_exact = result.documents_in - result.documents_out
    return MaterializeResult(
        metadata={
            "dagster/row_count": result.documents_out,
            "dagster/uri": MetadataValue.path(store.uri(prefix)),
            "documents_in": result.documents_in,
            "documents_out": result.documents_out,
            "removed_exact": removed_exact,
            "removed_within_partition": result.removed_within_partition,
            "removed_share": removed_exact / result.documents_in if result.documents_in else 0.0,
            "deduplicated_against": MetadataValue.json(result.deduplicated_against),
            "removed_against": counts_table(
                {"(this partition)": result.removed_within_partition, **result.removed_against}, key="kept copy in", value="removed"
            )
            if removed_exact
            else markdown_table(["kept copy in", "removed"], []),
            "output_bytes": sum(entry["bytes"] for entry in result.files),
        },
        check_results=[no_duplicates, order],
    )
