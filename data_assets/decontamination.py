"""`decontamination`: per deduplicated partition, the documents sharing a word n-gram with an evaluation set.

Computed once per partition for every distinct evaluation spec of the configured mixes and reused by every
mix (`sluice.decontaminate`). Its code version carries the eval sets' content hash, so Dagster shows every
partition stale when an eval set changes; a run whose partition and eval sets are unchanged reuses the
published flags instead of rescanning the texts.
"""


from dagster import (
    AssetDep,
    AssetExecutionContext,
    AutomationCondition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from data_assets.partitions import partition_ref, source_snapshot_partitions
from data_assets.settings import CONFIG
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.decontaminate import (
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
from sluice.layout import partition_prefix, read_manifest, write_manifest, write_parquet


def code_version() -> str:
    """Version 1 of the flags plus the eval sets' content hash (read when the code location loads)."""
    specs = eval_specs(CONFIG.mixes)
    try:
        return f"1-{eval_sets_digest(specs, CONFIG.s3)[:16]}"
    except (OSError, ValueError):  # unreadable now: the run fails with the file named
        return "1-eval-sets-unreadable"


@asset(
    name=ASSET,
    partitions_def=source_snapshot_partitions,
    deps=[AssetDep("deduped_documents")],
    automation_condition=AutomationCondition.eager(),  # after its deduped partition (dedup_automation; the ingest job stops at the index)
    code_version=code_version(),
    group_name="training",
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "Documents of a deduplicated partition sharing a word n-gram (13 by default) with an evaluation set of any "
        "configured mix (spec, doc_id, matched_ngrams). Computed once per partition and eval-set version; every mix "
        "removes the flagged documents of its own spec."
    ),
)
def decontamination(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> MaterializeResult:
    config = settings.config
    ref = partition_ref(context)
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
        return MaterializeResult(metadata={**_metadata(store, prefix, previous), "reused": True})
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
    return MaterializeResult(metadata={**_metadata(store, prefix, manifest), "reused": False})


def _metadata(store, prefix: str, manifest: dict) -> dict:
    return {
        "dagster/uri": MetadataValue.path(store.uri(prefix)),
        "dagster/row_count": sum(spec["flagged_documents"] for spec in manifest["specs"]),
        "documents_scanned": manifest["documents_scanned"],
        "eval_sets_sha256": manifest["identity"]["eval_sets_sha256"],
        "specs": MetadataValue.json(manifest["specs"]),
        **{f"flagged/{spec['spec']}": spec["flagged_documents"] for spec in manifest["specs"]},
    }
