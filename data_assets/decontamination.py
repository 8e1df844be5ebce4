"""`decontamination`: per deduplicated partition, the documents sharing a word n-gram with an evaluation set.

Computed once per partition for every distinct evaluation spec of the configured mixes and reused by every
mix (`sluice.dedup.decontaminate`). Its code version carries the eval sets' content hash (data_assets/versions.py),
so Dagster shows every partition stale when an eval set changes; a run whose partition and eval sets are unchanged reuses the
published flags instead of rescanning the texts.
"""


from collections.abc import Iterator
from typing import Any

from dagster import AssetDep, AssetExecutionContext, MetadataValue

from data_assets.automation import stage_automation
from data_assets.batch import PartitionResult, in_group, run_source_partitions, stage_asset
from data_assets.partitions import source_snapshot_partitions
from data_assets.versions import CODE_VERSIONS
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.dedup.decontaminate import (
    ASSET,
    FLAGS_FILE,
    ContaminationTask,
    EvalNgrams,
    eval_sets_digest,
    eval_specs,
    find_contaminated,
    flags_identity,
    flags_table,
    read_eval_texts,
)
from sluice.io.layout import PartitionRef, partition_prefix, read_manifest, write_manifest, write_parquet


@stage_asset(
    ASSET,
    partitions_def=source_snapshot_partitions,
    deps=[AssetDep("deduped_documents")],
    automation_condition=stage_automation(ASSET),
    code_version=CODE_VERSIONS[ASSET],
    **in_group("training"),
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "Documents of a deduplicated partition sharing a word n-gram (13 by default) with an evaluation set of any "
        "configured mix (spec, doc_id, matched_ngrams). Computed once per partition and eval-set version; every mix "
        "removes the flagged documents of its own spec."
    ),
)
def decontamination(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> Iterator[Any]:
    yield from run_source_partitions(context, ASSET, lambda ref: flag_partition(context, ref, settings, storage, compute))


def flag_partition(
    context: AssetExecutionContext, ref: PartitionRef, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> PartitionResult:
    config = settings.config
    store = storage.store()
    deduped_prefix = partition_prefix("deduped_documents", ref)
    manifest_key = f"{deduped_prefix}/_manifest.json"
    if not store.exists(manifest_key):
        raise FileNotFoundError(f"{store.uri(deduped_prefix)} has no manifest: materialize deduped_documents for {ref.key} first")
    specs = eval_specs(config.mixes)
    deduped = read_manifest(store, deduped_prefix) or {}
    identity = flags_identity(eval_sets_digest(specs, config.s3), store.read_bytes(manifest_key))
    prefix = partition_prefix(ASSET, ref)
    previous = read_manifest(store, prefix)
    if previous is not None and previous.get("identity") == identity:
        context.log.info(f"{ref.key}: deduplicated partition and eval sets unchanged; the published flags stand")
        return PartitionResult(metadata={**_metadata(store, prefix, previous), "reused": True})
    ngrams = []
    summaries = []
    for spec in specs:
        texts = [text for location in spec.eval_sets for text in read_eval_texts(location, spec.text_field, config.s3)]
        spec_ngrams = EvalNgrams.from_texts(texts, spec.ngram)
        ngrams.append((spec.id, spec_ngrams))
        summaries.append({**spec.describe(), "eval_texts": spec_ngrams.texts, "eval_texts_shorter_than_ngram": spec_ngrams.short_texts, "eval_ngrams": int(len(spec_ngrams.hashes))})
    parts = [entry["key"] for entry in deduped.get("files", []) if entry["key"].startswith("part-")]
    tasks = [ContaminationTask(store.uri(deduped_prefix), key, tuple(ngrams), config.s3) for key in parts] if ngrams else []
    rows = [row for flagged in compute.executor().map(find_contaminated, tasks) for row in flagged]
    table = flags_table(rows)
    for summary in summaries:
        summary["flagged_documents"] = sum(1 for row in rows if row["spec"] == summary["spec"])
    manifest = {
        "asset": ASSET,
        "partition": {"source": ref.source, "snapshot": ref.snapshot},
        "identity": identity,
        "specs": summaries,
        "documents_scanned": sum(int(entry.get("rows") or 0) for entry in deduped.get("files", []) if entry["key"].startswith("part-")) if ngrams else 0,
        "files": [write_parquet(store, f"{prefix}/{FLAGS_FILE}", table)],
    }
    write_manifest(store, prefix, manifest)
    return PartitionResult(metadata={**_metadata(store, prefix, manifest), "reused": False})


def _metadata(store, prefix: str, manifest: dict) -> dict:
    return {
        "dagster/uri": MetadataValue.path(store.uri(prefix)),
        "dagster/row_count": sum(spec["flagged_documents"] for spec in manifest["specs"]),
        "documents_scanned": manifest["documents_scanned"],
        "eval_sets_sha256": manifest["identity"]["eval_sets_sha256"],
        "specs": MetadataValue.json(manifest["specs"]),
        **{f"flagged/{spec['spec']}": spec["flagged_documents"] for spec in manifest["specs"]},
    }
