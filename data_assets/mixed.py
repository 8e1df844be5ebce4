"""`mixed_dataset`: per named mix, a seeded token-weighted selection over all tokenized partitions.

The build (`sluice.mix`) streams over the shards' metadata in bounded memory and reads each partition's
decontamination flags (the `decontamination` asset) instead of rescanning texts; the checks compare values
gathered while the indexes were written.
"""


from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from dagster import (
    AllPartitionMapping,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetDep,
    AssetExecutionContext,
    MetadataValue,
)

from data_assets.automation import stage_automation
from data_assets.batch import PartitionResult, in_group, run_partitions, stage_asset
from data_assets.blocklist import blocked_reader
from data_assets.metadata import markdown_table
from data_assets.partitions import mix_partitions, partition_check
from data_assets.versions import CODE_VERSIONS, MIX_SETTINGS
from resources import SluiceSettings, StorageResource, TokenizerResource
from sluice.blocklist import load_configured
from sluice.config import MixSettings, S3Settings
from sluice.dedup.decontaminate import ASSET as DECONTAMINATION
from sluice.dedup.decontaminate import FLAGS_FILE, EvalSpec, eval_sets_digest, eval_specs, flags_identity
from sluice.io.layout import PartitionRef, partition_prefix, read_manifest, read_parquet_file
from sluice.io.storage import Store
from sluice.mix import MixError, build_mix, mix_prefix

ASSET = "mixed_dataset"
SHARES_CHECK = "realized_shares_match_weights"
DISJOINT_CHECK = "validation_disjoint_from_training"
DECONTAMINATED_CHECK = "no_evaluation_overlap_in_mix"
COPIES_CHECK = "copies_of_a_document_never_share_a_sample"
BLOCKLIST_CHECK = "no_blocklisted_document_in_mix"


def partition_flags(store: Store, spec: EvalSpec, mixes: dict[str, MixSettings], s3: S3Settings):
    """flags(ref): the documents of a partition flagged for `spec`, from its decontamination output, refused
    when that output is missing or was computed from another deduplicated partition or eval-set version."""
    digest = eval_sets_digest(eval_specs(mixes), s3)

    def flags(ref: PartitionRef) -> pa.Table:
        prefix = partition_prefix(DECONTAMINATION, ref)
        manifest = read_manifest(store, prefix)
        deduped_key = f"{partition_prefix('deduped_documents', ref)}/_manifest.json"
        fix = f"materialize decontamination for {ref.key} (after deduped_documents) before mixing"
        if manifest is None:
            raise MixError(f"{store.uri(prefix)} has no manifest: {fix}")
        if not store.exists(deduped_key) or manifest.get("identity") != flags_identity(digest, store.read_bytes(deduped_key)):
            raise MixError(f"{store.uri(prefix)} was computed from another deduplicated partition or eval-set version: {fix}")
        table = read_parquet_file(store, f"{prefix}/{FLAGS_FILE}")
        return table.filter(pa.compute.equal(table.column("spec"), spec.id)).select(["doc_id", "matched_ngrams"])

    return flags, digest


@stage_asset(
    ASSET,
    partitions_def=mix_partitions,
    code_version=CODE_VERSIONS[ASSET],
    automation_condition=stage_automation(ASSET),
    deps=[
        AssetDep(MIX_SETTINGS),
        AssetDep("tokenized_shards", partition_mapping=AllPartitionMapping()),
        AssetDep(DECONTAMINATION, partition_mapping=AllPartitionMapping()),
        AssetDep("blocklist_matches", partition_mapping=AllPartitionMapping()),
        AssetDep("blocklist"),
        AssetDep("tokenizer"),
    ],
    **in_group("training"),
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "A training mix: token ranges over the tokenized shards of its sources, selected by token weight with a "
        "seeded placement and an epoch cap, plus a validation split held out by document, without the documents "
        "decontamination flagged for its evaluation sets or the training blocklist matches (its version is in the "
        "metadata and the lineage). An index, not a copy: the training loader reads the "
        "shards through it (mixed_index/mix=<name>/*.idx); the ranges are also a Parquet dataset here."
    ),
    check_specs=[
        partition_check(SHARES_CHECK, ASSET, mix_partitions, blocking=True, description="Realized token share of each component, summed from the index as it was written, is within checks.mix_share_tolerance of its weight."),
        partition_check(DISJOINT_CHECK, ASSET, mix_partitions, blocking=True, description="No document is in both splits: every validation document's id hash is below every training document's."),
        partition_check(DECONTAMINATED_CHECK, ASSET, mix_partitions, blocking=True, description="No document flagged by decontamination is in either index."),
        partition_check(COPIES_CHECK, ASSET, mix_partitions, blocking=True, description="No two copies of an upsampled document fall in the same training sample."),
        partition_check(BLOCKLIST_CHECK, ASSET, mix_partitions, blocking=True, description="No document the training blocklist matches is in either index (counted while the indexes were written)."),
    ],
)
def mixed_dataset(
    context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, tokenizer_resource: TokenizerResource
) -> Iterator[Any]:
    yield from run_partitions(context, ASSET, lambda mix_name: build_mix_partition(context, mix_name, settings, storage, tokenizer_resource), order=str)


def build_mix_partition(
    context: AssetExecutionContext, mix_name: str, settings: SluiceSettings, storage: StorageResource, tokenizer_resource: TokenizerResource
) -> PartitionResult:
    config = settings.config
    mix = config.mixes[mix_name]
    store = storage.store()
    spec = EvalSpec.of(mix)
    flags, decontamination = None, {"eval_sets": [], "ngram": mix.decontamination_ngram}
    if spec is not None:
        flags, digest = partition_flags(store, spec, config.mixes, config.s3)
        decontamination = {**spec.describe(), "eval_sets_sha256": digest}
    listed = load_configured(config.blocklist)
    blocked, blocklist = None, {"sha256": None, "entries": {}}
    if config.blocklist.path is not None:
        blocked = blocked_reader(store, config, listed)
        blocklist = {"sha256": listed.sha256, "entries": listed.counts(), "path": config.blocklist.path}
    manifest = build_mix(
        store, mix_name, mix, tokenizer_sha256=tokenizer_resource.manifest()["sha256"], flags=flags, decontamination=decontamination,
        blocked=blocked, blocklist=blocklist,
    )
    context.log.info(
        f"mix {mix_name}: blocklist {str(blocklist['sha256'])[:16]} removed {manifest['blocklist']['removed_documents']} documents "
        f"({manifest['blocklist']['removed_tokens']} tokens)"
    )
    return _result(store, manifest, config.checks.mix_share_tolerance)


def _result(store: Store, manifest: dict, tolerance: float) -> PartitionResult:
    return PartitionResult(metadata=_metadata(store, manifest), checks=_checks(manifest, tolerance))


def _metadata(store: Store, manifest: dict) -> dict:
    """The mix's metadata: sizes, splits, realized shares and epochs per component, decontamination."""
    shares = manifest["checks"]["realized_shares"]
    splits = manifest["splits"]
    rows = [
        (row["component"], round(row["weight"], 4), round(shares[row["component"]], 4), row["target_tokens"], row["available_tokens"],
         row["epochs"], row["validation_tokens"], row["contaminated_documents"], row.get("blocked_documents", 0), row.get("blocked_tokens", 0))
        for row in manifest["sources"]
    ]
    return {
        "dagster/row_count": manifest["samples"],
        "dagster/uri": MetadataValue.path(store.uri(mix_prefix(manifest["mix"]))),
        "tokens": manifest["tokens"],
        "samples": manifest["samples"],
        "sequence_length": manifest["sequence_length"],
        "ranges": splits["train"]["ranges_count"],
        "shards": manifest["shard_table"]["rows"] if "shard_table" in manifest else len(manifest["shards"]),
        "validation_tokens": splits["validation"]["tokens"],
        "validation_samples": splits["validation"]["samples"],
        "validation_documents": splits["validation"]["ranges_count"],
        "contaminated_documents": manifest["decontamination"]["removed_documents"],
        "blocklist_sha256": str(manifest.get("blocklist", {}).get("sha256")),
        "blocklisted_documents": manifest.get("blocklist", {}).get("removed_documents", 0),
        "blocklisted_tokens": manifest.get("blocklist", {}).get("removed_tokens", 0),
        "blocklist": MetadataValue.json(manifest.get("blocklist", {})),
        **{f"share/{name}": value for name, value in sorted(shares.items())},
        **{f"epochs/{row['component']}": row["epochs"] for row in manifest["sources"]},
        "sources": markdown_table(
            ["component", "weight", "realized share", "tokens", "available tokens", "epochs", "validation tokens", "contaminated docs",
             "blocklisted docs", "blocklisted tokens"],
            rows,
        ),
        "decontamination": MetadataValue.json(manifest["decontamination"]),
    }


def _checks(manifest: dict, tolerance: float) -> list[AssetCheckResult]:
    """The mix's checks, from the values the mix step computed while writing (manifest["checks"])."""
    values = manifest["checks"]
    shares = values["realized_shares"]
    deviations = {row["component"]: abs(shares[row["component"]] - row["weight"]) for row in manifest["sources"]}
    low, high = values["training_min_doc_hash"], values["validation_max_doc_hash"]
    disjoint = low is None or high is None or high < low
    return [
        AssetCheckResult(
            check_name=SHARES_CHECK,
            passed=all(d <= tolerance for d in deviations.values()),
            severity=AssetCheckSeverity.ERROR,
            metadata={"max_deviation": max(deviations.values()), "tolerance": tolerance, "shares": MetadataValue.json(shares)},
        ),
        AssetCheckResult(
            check_name=DISJOINT_CHECK,
            passed=disjoint,
            severity=AssetCheckSeverity.ERROR,
            metadata={
                "training_documents": values["training_documents"],
                "validation_documents": values["validation_documents"],
                "validation_max_doc_hash": str(high),
                "training_min_doc_hash": str(low),
            },
        ),
        AssetCheckResult(
            check_name=DECONTAMINATED_CHECK,
            passed=values["flagged_in_index"] == 0,
            severity=AssetCheckSeverity.ERROR,
            metadata={"flagged": values["flagged_documents"], "still_in_mix": values["flagged_in_index"]},
        ),
        AssetCheckResult(
            check_name=BLOCKLIST_CHECK,
            passed=values.get("blocked_in_index", 0) == 0,
            severity=AssetCheckSeverity.ERROR,
            metadata={"blocklisted": values.get("blocked_documents", 0), "still_in_mix": values.get("blocked_in_index", 0),
                      "blocklist_sha256": str(manifest.get("blocklist", {}).get("sha256"))},
        ),
        AssetCheckResult(
            check_name=COPIES_CHECK,
            passed=values["copies_in_one_sample"] == 0,
            severity=AssetCheckSeverity.ERROR,
            metadata={"ranges_sharing_a_sample_with_a_copy": values["copies_in_one_sample"]},
        ),
    ]
