"""The dedup stage: `dedup_signatures` -> `dedup_index` -> `dedup_clusters` -> `deduped_documents`.

The rule and the algorithms live in `sluice.dedup`. What this module adds is the order, declared to Dagster:

- `dedup_signatures` and `dedup_index` depend on their own partition only, so any number run at once;
  `dedup_index` writes the one global index under the concurrency pool `dedup_index` (limit 1, set in the
  instance: `deploy/dagster.yaml`, and the project-local instance `sluice` writes), so its writes never race.
- `dedup_clusters` of a partition reads index rows of the partitions ordered before it only, so it is a pure
  function of them; it depends on `dedup_index` of *every* partition (AllPartitionMapping: Dagster has no
  built-in "partitions ordered before this one" mapping for a dynamic dimension, and a custom PartitionMapping
  is not serialized to the daemon), so backfills and automation start it only once all are indexed, and it
  refuses to run (IndexIncomplete) while a registered earlier partition is missing from the index.
- `deduped_documents` follows its removed documents' parents into earlier partitions' `dedup_clusters`, so
  it depends on `dedup_clusters` of every partition in the same way.
- Both have a backfill policy of their own (`batch_policy("ordered")`), so Dagster never puts them in the run
  of the stage they read (a subset split into several runs would let one start before another wrote).
- Their dependency on every partition is an EARLIER edge (data_assets/automation.py): a new partition does not
  make the earlier ones stale; a changed earlier one makes the later ones stale for `sluice materialize`.
Whatever launches the runs (the command, automation, a UI backfill, several at once through the queue), each
partition's outputs are then the bytes a sequential run gives.
"""


from collections.abc import Iterator
from typing import Any

from dagster import (
    AllPartitionMapping,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetDep,
    AssetExecutionContext,
    MetadataValue,
)

from data_assets.automation import stage_automation
from data_assets.batch import PartitionResult, batch_policy, in_group, run_source_partitions, stage_asset
from data_assets.metadata import counts_table, markdown_table
from data_assets.partitions import (
    partition_check,
    registered_partitions,
    source_snapshot_partitions,
)
from data_assets.versions import CODE_VERSIONS
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.dedup import (
    cluster_partition,
    dedup_partition,
    index_partition,
    publish_deduped,
    sign_partition,
)
from sluice.io.layout import PartitionRef, partition_prefix
from sluice.runtime.tasks import TaskCounts

SIGNATURES_ASSET = "dedup_signatures"
INDEX_ASSET = "dedup_index"
CLUSTERS_ASSET = "dedup_clusters"
ASSET = "deduped_documents"
INDEX_POOL = "dedup_index"
# The dedup assets of one partition, in the order a sequential run materializes them.
STAGE_ASSETS = [SIGNATURES_ASSET, INDEX_ASSET, CLUSTERS_ASSET, ASSET]
NO_DUPLICATES_CHECK = "no_exact_duplicates"
SHARE_CHECK = "removed_share_within_bounds"


def registered_before(context: AssetExecutionContext, ref: PartitionRef, sources: list[str]) -> list[PartitionRef]:
    """The source x snapshot partitions registered in the instance and ordered before `ref`."""
    earlier = (partition for partition in registered_partitions(context, sources) if partition.sort_key() < ref.sort_key())
    return sorted(earlier, key=PartitionRef.sort_key)


def index_pool_limit(context: AssetExecutionContext) -> int | None:
    """The slot limit the instance applies to the index pool (None: unlimited)."""
    storage = context.instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return None
    limits = {pool.name: pool.limit for pool in storage.get_pool_limits()}
    return limits.get(INDEX_POOL, context.instance.get_concurrency_config().pool_config.default_pool_limit)


def common(asset: str) -> dict[str, Any]:
    return {
        "partitions_def": source_snapshot_partitions, **in_group("curation"), "owners": ["team:data-engineering"],
        "code_version": CODE_VERSIONS[asset], "automation_condition": stage_automation(asset),
    }


@stage_asset(
    SIGNATURES_ASSET,
    deps=[AssetDep("cleaned_documents")],
    kinds={"python", "parquet"},
    description=(
        "Per document: normalized-text hash, MinHash LSH band hashes (14 bands x 8 rows over word 5-grams) and, in "
        "dedup_shingles, the shingle-hash set used to verify candidate pairs; in dedup_bands and dedup_hashes, its band rows "
        "and text hash by hash range (dedup.band_ranges), the unit of the clustering tasks. One executor task per cleaned part."
    ),
    **common(SIGNATURES_ASSET),
)
def dedup_signatures(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> Iterator[Any]:
    yield from run_source_partitions(context, SIGNATURES_ASSET, lambda ref: sign(context, ref, settings, storage, compute))


def sign(context: AssetExecutionContext, ref: PartitionRef, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> PartitionResult:
    config = settings.config
    store = storage.store()
    result = sign_partition(store, ref, config.dedup, compute.executor(), config.s3)
    if result.tasks is not None:
        context.log.info(result.tasks.line(f"{SIGNATURES_ASSET} {ref.key}"))
    return PartitionResult(
        metadata={
            "dagster/row_count": result.documents,
            "dagster/uri": MetadataValue.path(store.uri(partition_prefix(SIGNATURES_ASSET, ref))),
            "origin": result.origin,  # signed | unchanged (same cleaned files)
            "parts": len(result.manifest["files"]),
            **(result.tasks or TaskCounts()).metadata(),  # 0 and 0 when unchanged: every materialization has the keys
        }
    )


@stage_asset(
    INDEX_ASSET,
    deps=[AssetDep(SIGNATURES_ASSET)],
    pool=INDEX_POOL,
    kinds={"python", "parquet"},
    description=(
        "This partition's exact hashes and LSH band keys in the global dedup index (dedup_index/: sorted runs in "
        "levels, each index_fanout times the one below, merged LSM-style). Writes run one at a time under the concurrency pool dedup_index."
    ),
    **common(INDEX_ASSET),
)
def dedup_index(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> Iterator[Any]:
    limit = index_pool_limit(context)
    if limit != 1:
        context.log.warning(
            f"the concurrency pool {INDEX_POOL!r} is not limited to 1 on this instance (limit {limit}): concurrent index writes "
            "could lose each other's partitions (later partitions then refuse to run). Set `concurrency: pools: default_limit: 1` "
            f"in dagster.yaml or run `dagster instance concurrency set {INDEX_POOL} 1`."
        )
    yield from run_source_partitions(context, INDEX_ASSET, lambda ref: index(ref, settings, storage, compute, limit))


def index(ref: PartitionRef, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource, limit: int | None) -> PartitionResult:
    config = settings.config
    outcome = index_partition(storage.store(), ref, config.dedup, compute.executor(), config.s3)
    return PartitionResult(
        metadata={
            "dagster/row_count": outcome["documents"],
            "dagster/uri": MetadataValue.path(outcome["index"]),
            "changed": outcome["changed"],  # False: already indexed from the same signatures
            "compacted": outcome["compacted"],  # a leveled run was rewritten (every index_max_deltas partitions)
            "rewritten_rows": outcome["rewritten_rows"],  # index rows written by this insert (delta and merged runs)
            "delta_runs": outcome["deltas"],
            "migrated_partitions": MetadataValue.json(outcome["migrated"]),
            "pool_limit": limit if limit is not None else -1,
        }
    )


@stage_asset(
    CLUSTERS_ASSET,
    deps=[AssetDep(SIGNATURES_ASSET), AssetDep(INDEX_ASSET, partition_mapping=AllPartitionMapping())],
    backfill_policy=batch_policy("ordered"),
    kinds={"python", "parquet"},
    description=(
        "Each document's dedup decision against the partitions ordered before this one (exact copies, verified LSH "
        "candidates, connected components): kind, and its parent, the first document of its cluster. One executor task "
        "per band-hash range finds the exact copies and candidate pairs. Needs every earlier partition in the dedup index."
    ),
    **common(CLUSTERS_ASSET),
)
def dedup_clusters(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> Iterator[Any]:
    yield from run_source_partitions(context, CLUSTERS_ASSET, lambda ref: cluster(context, ref, settings, storage, compute))


def cluster(context: AssetExecutionContext, ref: PartitionRef, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> PartitionResult:
    config = settings.config
    store = storage.store()
    earlier = registered_before(context, ref, config.source_names)
    result = cluster_partition(store, ref, config.dedup, compute.executor(), config.s3, earlier=earlier)
    return PartitionResult(
        metadata={
            "dagster/row_count": result.documents,
            "dagster/uri": MetadataValue.path(store.uri(partition_prefix(CLUSTERS_ASSET, ref))),
            "removed_exact": result.removed_exact,
            "removed_fuzzy": result.removed_fuzzy,
            "candidate_pairs": result.candidate_pairs,
            "linked_pairs": result.linked_pairs,
            "indexed_partitions_before": result.indexed_before,
            "linked_partitions": MetadataValue.json(result.linked_partitions),
        }
    )


@stage_asset(
    ASSET,
    deps=[AssetDep("cleaned_documents"), AssetDep(CLUSTERS_ASSET, partition_mapping=AllPartitionMapping())],
    kinds={"python", "parquet"},
    description=(
        "Cleaned documents without exact duplicates (normalized-text hash) or near duplicates (MinHash LSH, verified "
        "by exact Jaccard), across all sources and snapshots: the first (snapshot, source, file, record) document of "
        "each cluster is kept; removed ones in deduped_removed with kind, the kept document and the cluster size."
    ),
    check_specs=[
        partition_check(NO_DUPLICATES_CHECK, ASSET, blocking=True, description="No normalized-text hash occurs twice among the kept documents, nor in the index for an earlier partition."),
        partition_check(SHARE_CHECK, ASSET, description="The share of documents removed (exact + near duplicates) lies inside dedup.min/max_removed_share (warns)."),
    ],
    **common(ASSET),
)
def deduped_documents(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> Iterator[Any]:
    yield from run_source_partitions(context, ASSET, lambda ref: dedup(ref, settings, storage, compute))


def dedup(ref: PartitionRef, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> PartitionResult:
    config = settings.config
    store = storage.store()
    executor = compute.executor()
    result = dedup_partition(store, ref, config.dedup, executor, config.s3)
    publish_deduped(store, ref, result)
    within, against = result.kept_duplicates  # counted by range tasks while the step ran
    no_duplicates = AssetCheckResult(
        check_name=NO_DUPLICATES_CHECK,
        passed=within == 0 and not against,
        severity=AssetCheckSeverity.ERROR,
        metadata={"duplicates_within": within, "duplicates_against_earlier": MetadataValue.json(against)},
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
    return PartitionResult(
        metadata={
            "dagster/row_count": result.documents_out,
            "dagster/uri": MetadataValue.path(store.uri(partition_prefix(ASSET, ref))),
            "documents_in": result.documents_in,
            "documents_out": result.documents_out,
            "removed_exact": result.removed_exact,
            "removed_fuzzy": result.removed_fuzzy,
            "removed_within_partition": result.removed_within_partition,
            "removed_share": removed_share,
            **{f"removed_share_against/{snapshot}": count / documents_in for snapshot, count in result.removed_against_snapshot.items()},
            "removed_against": counts_table(
                {"(this partition)": result.removed_within_partition, **result.removed_against}, key="kept copy in", value="removed"
            )
            if removed
            else markdown_table(["kept copy in", "removed"], []),
            "cluster_sizes": markdown_table(["cluster size", "clusters"], sorted(result.cluster_sizes.items())),
            "output_bytes": sum(entry["bytes"] for entry in result.files),
        },
        checks=[no_duplicates, share],
    )
