"""`tokenized_shards`: deduplicated text -> binary token shards + document index (see `sluice.shards`)."""

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AutomationCondition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from data_assets.metadata import markdown_table
from data_assets.partitions import partition_ref, source_snapshot_partitions
from resources import ComputeResource, SluiceSettings, StorageResource, TokenizerResource
from sluice.layout import partition_prefix, read_manifest, read_parquet_file, write_manifest
from sluice.shards import ShardView, verify_files
from sluice.storage import local_temp_dir
from sluice.tokenize import TokenizeTask, shard_manifest, tokenize_part

ASSET = "tokenized_shards"
IDS_CHECK = "token_ids_below_vocab_size"
ROUND_TRIP_CHECK = "decoded_sample_equals_text"
CHECKSUM_CHECK = "checksums_verify"


@asset(
    name=ASSET,
    partitions_def=source_snapshot_partitions,
    deps=[AssetDep("deduped_documents"), AssetDep("tokenizer")],
    automation_condition=AutomationCondition.eager(),
    group_name="tokenization",
    kinds={"python", "numpy"},
    owners=["team:data-engineering"],
    description=(
        "Token shards of the deduplicated documents: flat little-endian uint16/uint32 token files with EOS after "
        "each document, uint64 document offsets, and a manifest with dtype, vocabulary size, tokenizer hash and "
        "checksums. Memory-mappable with numpy alone."
    ),
    check_specs=[
        AssetCheckSpec(IDS_CHECK, asset=ASSET, blocking=True, description="Every token id is < the vocabulary size."),
        AssetCheckSpec(ROUND_TRIP_CHECK, asset=ASSET, blocking=True, description="Decoding a sample of documents gives back their deduplicated text exactly."),
        AssetCheckSpec(CHECKSUM_CHECK, asset=ASSET, blocking=True, description="Every written file matches the SHA-256 in the manifest."),
    ],
)
def tokenized_shards(
    context: AssetExecutionContext,
    settings: SluiceSettings,
    storage: StorageResource,
    compute: ComputeResource,
    tokenizer_resource: TokenizerResource,
) -> MaterializeResult:
    config = settings.config
    ref = partition_ref(context)
    store = storage.store()
    deduped_prefix = partition_prefix("deduped_documents", ref)
    deduped = read_manifest(store, deduped_prefix)
    if deduped is None:
        raise FileNotFoundError(f"{store.uri(deduped_prefix)} has no manifest: materialize deduped_documents for {ref.key} first")
    tok_manifest = tokenizer_resource.manifest()
    tokenizer_json = tokenizer_resource.tokenizer_json()
    prefix = partition_prefix(ASSET, ref)
    tasks = [
        TokenizeTask(store.uri(deduped_prefix), entry["key"], store.uri(prefix), index, tokenizer_json, tok_manifest["eos_token"], max_shard_tokens=config.tokenizer.max_shard_tokens, s3=config.s3)
        for index, entry in enumerate(deduped["files"])
    ]
    executor = compute.executor()
    results = executor.map(tokenize_part, tasks)
    manifest = shard_manifest(results, tok_manifest["sha256"], tok_manifest["vocab_size"], tok_manifest["eos_id"])
    manifest.update({"asset": ASSET, "partition": {"source": ref.source, "snapshot": ref.snapshot}})
    write_manifest(store, prefix, manifest)

    # Checks read back what was published, not what was computed.
    scratch = local_temp_dir()
    try:
        local_files = {entry["key"]: store.fetch(f"{prefix}/{entry['key']}", scratch) for entry in manifest["files"]}
        problems = verify_files(local_files, manifest)
        max_id = -1
        views = []
        for shard in manifest["shards"]:
            view = ShardView.open(local_files[f"{shard['name']}.bin"], local_files[f"{shard['name']}.idx"], manifest["dtype"])
            views.append((shard, view))
            if len(view.tokens):
                max_id = max(max_id, int(view.tokens.max()))
        # Round trip on a sample spread over the shards; only the sampled texts are read back.
        sample: list[tuple[str, np.ndarray]] = []
        per_shard = max(1, config.checks.tokenized_sample_documents // max(1, len(views)))
        for shard, view in views:
            doc_ids = pq.read_table(local_files[f"{shard['name']}.docs.parquet"]).column("doc_id").to_pylist()
            step = max(1, len(view) // per_shard)
            sample.extend((doc_ids[index], view.doc(index)) for index in range(0, len(view), step))
        wanted = pa.array([doc_id for doc_id, _ in sample], pa.string())
        texts: dict[str, str] = {}
        for entry in deduped["files"]:
            table = read_parquet_file(store, f"{deduped_prefix}/{entry['key']}", columns=["doc_id", "text"])
            table = table.filter(pc.is_in(table.column("doc_id"), value_set=wanted))
            texts.update(zip(table.column("doc_id").to_pylist(), table.column("text").to_pylist(), strict=True))
        tokenizer = tokenizer_resource.load()
        mismatches = []
        for doc_id, ids in sample:
            decoded = tokenizer.decode(np.asarray(ids[:-1]).tolist(), skip_special_tokens=False)
            if decoded != texts.get(doc_id) or int(ids[-1]) != manifest["eos_id"]:
                mismatches.append(doc_id)
        checked = len(sample)
        lengths = [length for r in results for length in r["lengths"]]
        histogram = np.histogram(lengths, bins=[0, 64, 256, 1024, 4096, 16384, 1 << 62])[0] if lengths else []
        text_bytes = sum(r["text_bytes"] for r in results)
        unsupported = next((r["fast_path_unsupported"] for r in results if r["fast_path_unsupported"]), None)
        return MaterializeResult(
            metadata={
                "dagster/row_count": manifest["documents"],
                "dagster/uri": MetadataValue.path(store.uri(prefix)),
                "documents": manifest["documents"],
                "tokens": manifest["tokens"],
                "bytes_per_token": text_bytes / manifest["tokens"] if manifest["tokens"] else 0.0,
                "shards": len(manifest["shards"]),
                "dtype": manifest["dtype"],
                # the word-cache fast path of sluice.tokenize, or why this tokenizer does not allow it
                "encoder": f"encode_batch_fast ({unsupported})" if unsupported else "word cache fast path",
                "encoder_fallback_documents": sum(r["fallback_documents"] for r in results),
                "tokenizer_sha256": manifest["tokenizer_sha256"],
                "output_bytes": sum(entry["bytes"] for entry in manifest["files"]),
                "token_length_histogram": markdown_table(
                    ["tokens per document", "documents"],
                    zip(["<64", "64-255", "256-1023", "1024-4095", "4096-16383", ">=16384"], [int(x) for x in histogram], strict=False),
                ),
            },
            check_results=[
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
                    metadata={"files": len(manifest["files"]), "problems": MetadataValue.json(problems)},
                ),
            ],
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
