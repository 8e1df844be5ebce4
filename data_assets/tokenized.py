"""`tokenized_shards`: deduplicated text -> binary token shards + document index (see `sluice.tokens.shards`)."""

from collections.abc import Iterator
from typing import Any

import numpy as np
from dagster import AssetCheckResult, AssetCheckSeverity, AssetDep, AssetExecutionContext, MetadataValue

from data_assets.automation import stage_automation
from data_assets.batch import PartitionResult, in_group, run_source_partitions, stage_asset
from data_assets.metadata import markdown_table, stage_progress
from data_assets.partitions import partition_check, source_snapshot_partitions
from data_assets.versions import CODE_VERSIONS
from resources import ComputeResource, SluiceSettings, StorageResource, TokenizerResource
from sluice.config import SluiceConfig
from sluice.io.layout import PartitionRef, partition_prefix, required_manifest, side_prefix, write_manifest
from sluice.io.storage import Store
from sluice.runtime.tasks import (
    RecordedTask,
    TaskCounts,
    record_key,
    record_listing,
    records_prefix,
    run_recorded,
    task_digest,
)
from sluice.tokens.shards import BINARY_DATASET
from sluice.tokens.tokenize import LENGTH_LABELS, TokenizeTask, shard_manifest, tokenize_part

ASSET = "tokenized_shards"
IDS_CHECK = "token_ids_below_vocab_size"
ROUND_TRIP_CHECK = "decoded_sample_equals_text"
CHECKSUM_CHECK = "checksums_verify"


@stage_asset(
    ASSET,
    partitions_def=source_snapshot_partitions,
    deps=[AssetDep("deduped_documents"), AssetDep("tokenizer")],
    code_version=CODE_VERSIONS[ASSET],
    automation_condition=stage_automation(ASSET),
    **in_group("tokenization"),
    kinds={"python", "numpy"},
    owners=["team:data-engineering"],
    description=(
        "Token shards of the deduplicated documents: flat little-endian uint16/uint32 token files with EOS after "
        "each document, uint64 document offsets, and a manifest with dtype, vocabulary size, tokenizer hash and "
        "checksums. Memory-mappable with numpy alone."
    ),
    check_specs=[
        partition_check(IDS_CHECK, ASSET, blocking=True, description="Every token id is < the vocabulary size (the largest id each task wrote)."),
        partition_check(ROUND_TRIP_CHECK, ASSET, blocking=True, description="A sample of documents decoded from the written shards gives back their deduplicated text exactly (checked by each task)."),
        partition_check(CHECKSUM_CHECK, ASSET, blocking=True, description="Every published file matches the SHA-256 of what its task wrote (verified by the task after publishing)."),
    ],
)
def tokenized_shards(
    context: AssetExecutionContext,
    settings: SluiceSettings,
    storage: StorageResource,
    compute: ComputeResource,
    tokenizer_resource: TokenizerResource,
) -> Iterator[Any]:
    yield from run_source_partitions(context, ASSET, lambda ref: tokenize(context, ref, settings, storage, compute, tokenizer_resource))


def tokenize(
    context: AssetExecutionContext,
    ref: PartitionRef,
    settings: SluiceSettings,
    storage: StorageResource,
    compute: ComputeResource,
    tokenizer_resource: TokenizerResource,
) -> PartitionResult:
    config = settings.config
    store = storage.store()
    tok_manifest = tokenizer_resource.manifest()
    jobs = _jobs(store, ref, config, tok_manifest, tokenizer_resource.tokenizer_json())
    executor = compute.executor()
    progress = stage_progress(context, f"{ASSET} {ref.key}", len(jobs))
    results = executor.map(run_recorded, jobs, progress=lambda r: progress.update(r.get("documents", 0), r.get("text_bytes", 0)))
    counts = TaskCounts.of(results)
    context.log.info(counts.line(f"{ASSET} {ref.key}"))
    manifest = shard_manifest(results, tok_manifest["sha256"], tok_manifest["vocab_size"], tok_manifest["eos_id"], side_prefix(BINARY_DATASET, ref))
    manifest.update({"asset": ASSET, "partition": {"source": ref.source, "snapshot": ref.snapshot}})
    manifest["task_records"] = record_listing(ASSET, ref, (job.task.part for job in jobs))
    write_manifest(store, partition_prefix(ASSET, ref), manifest)
    metadata = {**_metadata(store, ref, manifest, results), **counts.metadata()}
    return PartitionResult(metadata=metadata, checks=_checks(manifest, results))


def _jobs(store: Store, ref: PartitionRef, config: SluiceConfig, tok_manifest: dict[str, Any], tokenizer_json: str) -> list[RecordedTask]:
    """One recorded task per deduplicated part. Each records its completion; a re-run reuses the verified
    shards of finished tasks (sluice.runtime.tasks). A task's identity: its deduped part's digest, the tokenizer (in
    the task) and the shard settings. The round-trip sample is spread over the parts: each task decodes its
    share from what it wrote."""
    deduped = required_manifest(store, "deduped_documents", ref)
    per_part = -(-config.checks.tokenized_sample_documents // max(1, len(deduped["files"])))
    tasks = [
        TokenizeTask(
            store.uri(partition_prefix("deduped_documents", ref)), entry["key"], store.uri(partition_prefix(ASSET, ref)), index,
            tokenizer_json, tok_manifest["eos_token"], max_shard_tokens=config.tokenizer.max_shard_tokens, s3=config.s3,
            sample_documents=per_part, binary_url=store.uri(side_prefix(BINARY_DATASET, ref)),  # .bin / .idx / .urls: a side folder
        )
        for index, entry in enumerate(deduped["files"])
    ]
    records_url = store.uri(records_prefix(ASSET, ref))
    return [
        RecordedTask(
            tokenize_part, task, f"{ref.key}/{entry['key']}", task_digest(ASSET, task, [entry["sha256"]]),
            records_url, record_key(task.part), (("files", task.output_url), ("binary_files", task.binary_url)), config.s3,
        )
        for task, entry in zip(tasks, deduped["files"], strict=True)
    ]


def _metadata(store: Store, ref: PartitionRef, manifest: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    histogram = np.sum([r["length_histogram"] for r in results], axis=0) if results else np.zeros(len(LENGTH_LABELS), np.int64)
    text_bytes = sum(r["text_bytes"] for r in results)
    unsupported = next((r["fast_path_unsupported"] for r in results if r["fast_path_unsupported"]), None)
    return {
        "dagster/row_count": manifest["documents"],
        "dagster/uri": MetadataValue.path(store.uri(partition_prefix(ASSET, ref))),
        "documents": manifest["documents"],
        "tokens": manifest["tokens"],
        "bytes_per_token": text_bytes / manifest["tokens"] if manifest["tokens"] else 0.0,
        "shards": len(manifest["shards"]),
        "dtype": manifest["dtype"],
        # the word-cache fast path of sluice.tokens.tokenize, or why this tokenizer does not allow it
        "encoder": f"encode_batch_fast ({unsupported})" if unsupported else "word cache fast path",
        "encoder_fallback_documents": sum(r["fallback_documents"] for r in results),
        "tokenizer_sha256": manifest["tokenizer_sha256"],
        "output_bytes": sum(entry["bytes"] for group in ("files", "side_files") for entry in manifest.get(group, [])),
        "token_length_histogram": markdown_table(["tokens per document", "documents"], zip(LENGTH_LABELS, [int(x) for x in histogram], strict=True)),
    }


def _checks(manifest: dict[str, Any], results: list[dict[str, Any]]) -> list[AssetCheckResult]:
    """From what the tasks measured while writing (their digests of the published files, the largest id, a
    decoded sample): nothing is read back here."""
    problems = [problem for r in results for problem in r["publish_problems"]]
    max_id = max((r["max_token_id"] for r in results), default=-1)
    mismatches = [doc_id for r in results for doc_id in r["round_trip_mismatched"]]
    checked = sum(r["round_trip_checked"] for r in results)
    return [
        AssetCheckResult(
            check_name=IDS_CHECK,
            passed=max_id < manifest["vocab_size"],
            severity=AssetCheckSeverity.ERROR,
            metadata={"max_token_id": max_id, "vocab_size": manifest["vocab_size"]},
        ),
        AssetCheckResult(
            check_name=ROUND_TRIP_CHECK,
            passed=not mismatches,
            severity=AssetCheckSeverity.ERROR,
            metadata={"documents_checked": checked, "mismatched": MetadataValue.json(mismatches[:20])},
        ),
        AssetCheckResult(
            check_name=CHECKSUM_CHECK,
            passed=not problems,
            severity=AssetCheckSeverity.ERROR,
            metadata={"files": len(manifest["files"]) + len(manifest.get("side_files", [])), "problems": MetadataValue.json(problems[:20])},
        ),
    ]
