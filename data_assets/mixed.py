"""`mixed_dataset`: per named mix, a seeded token-weighted selection over all tokenized partitions."""

from dagster import (
    AllPartitionMapping,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    asset,
)

from data_assets.metadata import markdown_table
from data_assets.partitions import mix_partitions
from resources import ComputeResource, SluiceSettings, StorageResource, TokenizerResource
from sluice.decontaminate import ContaminationTask, EvalNgrams, find_contaminated, read_eval_texts
from sluice.layout import _remove_tree, list_partitions, partition_prefix, read_manifest, read_parquet_file
from sluice.mix import build_mix, range_documents, read_docs_table, realized_shares
from sluice.storage import Store, local_temp_dir

ASSET = "mixed_dataset"
SHARES_CHECK = "realized_shares_match_weights"
DISJOINT_CHECK = "validation_disjoint_from_training"
DECONTAMINATED_CHECK = "no_evaluation_overlap_in_mix"


def file_reader(store: Store, scratch: str):
    """Local path of a stored file: the file itself on a local store, else a fetched copy in `scratch`."""

    def read(key: str) -> str:
        return store.fetch(key, scratch)

    return read


def contaminated_documents(store: Store, mix, compute: ComputeResource, s3) -> tuple[list[dict], dict]:
    """Documents of the mix's sources sharing an n-gram with its evaluation sets, found per deduped part file."""
    if not mix.eval_sets:
        return [], {"eval_sets": [], "ngram": mix.decontamination_ngram}
    texts = [text for location in mix.eval_sets for text in read_eval_texts(location, mix.eval_text_field, s3)]
    ngrams = EvalNgrams.from_texts(texts, mix.decontamination_ngram)
    tasks, partitions = [], []
    for ref in list_partitions(store, "deduped_documents"):
        if ref.source not in mix.sources:
            continue
        prefix = partition_prefix("deduped_documents", ref)
        for entry in (read_manifest(store, prefix) or {}).get("files", []):
            if entry["key"].startswith("part-"):
                tasks.append(ContaminationTask(store.uri(prefix), entry["key"], ngrams, s3))
                partitions.append(ref)
    rows = []
    for ref, flagged in zip(partitions, compute.executor().map(find_contaminated, tasks), strict=True):
        rows.extend({**row, "source": ref.source, "partition": ref.key} for row in flagged)
    rows.sort(key=lambda row: row["doc_id"])
    summary = {
        "eval_sets": list(mix.eval_sets),
        "ngram": mix.decontamination_ngram,
        "eval_texts": ngrams.texts,
        "eval_texts_shorter_than_ngram": ngrams.short_texts,
        "eval_ngrams": int(len(ngrams.hashes)),
    }
    return rows, summary


@asset(
    name=ASSET,
    partitions_def=mix_partitions,
    deps=[
        AssetDep("tokenized_shards", partition_mapping=AllPartitionMapping()),
        AssetDep("deduped_documents", partition_mapping=AllPartitionMapping()),
        AssetDep("tokenizer"),
    ],
    group_name="training",
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "A training mix: token ranges over the tokenized shards of its sources, selected by token weight with a "
        "seeded shuffle and an epoch cap, plus a validation split held out by document and decontaminated "
        "against the configured evaluation sets. An index, not a copy: the training loader reads the shards through it."
    ),
    check_specs=[
        AssetCheckSpec(SHARES_CHECK, asset=ASSET, blocking=True, description="Realized token share of each component, recomputed from the index, is within checks.mix_share_tolerance of its weight."),
        AssetCheckSpec(DISJOINT_CHECK, asset=ASSET, blocking=True, description="No document appears in both the training and the validation index."),
        AssetCheckSpec(DECONTAMINATED_CHECK, asset=ASSET, blocking=True, description="No document flagged by decontamination is in either index."),
    ],
)
def mixed_dataset(
    context: AssetExecutionContext,
    settings: SluiceSettings,
    storage: StorageResource,
    compute: ComputeResource,
    tokenizer_resource: TokenizerResource,
) -> MaterializeResult:
    config = settings.config
    mix_name = context.partition_key
    store = storage.store()
    scratch = local_temp_dir()
    try:
        return _materialize(config, mix_name, store, file_reader(store, scratch), compute, tokenizer_resource)
    finally:
        _remove_tree(scratch)


def _materialize(config, mix_name: str, store: Store, read, compute: ComputeResource, tokenizer_resource: TokenizerResource) -> MaterializeResult:
    mix = config.mixes[mix_name]
    contaminated, decontamination = contaminated_documents(store, mix, compute, config.s3)
    manifest = build_mix(
        store,
        mix_name,
        mix,
        read,
        tokenizer_sha256=tokenizer_resource.manifest()["sha256"],
        contaminated=contaminated,
        decontamination=decontamination,
    )
    prefix = f"{ASSET}/{mix_name}"
    # Checks read back the published index.
    train = read_parquet_file(store, f"{prefix}/{manifest['splits']['train']['ranges']}")
    validation = read_parquet_file(store, f"{prefix}/{manifest['splits']['validation']['ranges']}")
    shares = realized_shares(manifest, train, read)
    tolerance = config.checks.mix_share_tolerance
    deviations = {row["component"]: abs(shares[row["component"]] - row["weight"]) for row in manifest["sources"]}
    documents = {split: _document_keys(manifest, table, read) for split, table in (("train", train), ("validation", validation))}
    shared = documents["train"] & documents["validation"]
    flagged = {row["doc_id"] for row in contaminated}
    ids = _document_ids(manifest, documents["train"] | documents["validation"], read)
    leaked = sorted(ids & flagged)
    rows = [
        (
            row["component"],
            round(row["weight"], 4),
            round(shares[row["component"]], 4),
            row["target_tokens"],
            row["available_tokens"],
            row["epochs"],
            row["validation_tokens"],
            row["contaminated_documents"],
        )
        for row in manifest["sources"]
    ]
    splits = manifest["splits"]
    return MaterializeResult(
        metadata={
            "dagster/row_count": manifest["samples"],
            "dagster/uri": MetadataValue.path(store.uri(prefix)),
            "tokens": manifest["tokens"],
            "samples": manifest["samples"],
            "sequence_length": manifest["sequence_length"],
            "ranges": train.num_rows,
            "shards": len(manifest["shards"]),
            "validation_tokens": splits["validation"]["tokens"],
            "validation_samples": splits["validation"]["samples"],
            "validation_documents": validation.num_rows,
            "contaminated_documents": len(contaminated),
            **{f"share/{name}": value for name, value in sorted(shares.items())},
            **{f"epochs/{row['component']}": row["epochs"] for row in manifest["sources"]},
            "sources": markdown_table(
                ["component", "weight", "realized share", "tokens", "available tokens", "epochs", "validation tokens", "contaminated docs"],
                rows,
            ),
            "decontamination": MetadataValue.json(manifest["decontamination"]),
        },
        check_results=[
            AssetCheckResult(
                check_name=SHARES_CHECK,
                passed=all(d <= tolerance for d in deviations.values()),
                severity=AssetCheckSeverity.ERROR,
                metadata={"max_deviation": max(deviations.values()), "tolerance": tolerance, "shares": MetadataValue.json(shares)},
            ),
            AssetCheckResult(
                check_name=DISJOINT_CHECK,
                passed=not shared,
                severity=AssetCheckSeverity.ERROR,
                metadata={"training_documents": len(documents["train"]), "validation_documents": len(documents["validation"]), "shared": len(shared)},
            ),
            AssetCheckResult(
                check_name=DECONTAMINATED_CHECK,
                passed=not leaked,
                severity=AssetCheckSeverity.ERROR,
                metadata={"flagged": len(flagged), "still_in_mix": MetadataValue.json(leaked[:20])},
            ),
        ],
    )


def _document_keys(manifest: dict, ranges, read) -> set[tuple[int, int]]:
    """(shard, document index) of every range, re-derived from the shards' document offsets."""
    documents = range_documents(manifest, ranges, read)
    return set(zip(ranges.column("shard").to_numpy().tolist(), documents.tolist(), strict=True))


def _document_ids(manifest: dict, keys: set[tuple[int, int]], read) -> set[str]:
    by_shard: dict[int, list[int]] = {}
    for shard_id, document in keys:
        by_shard.setdefault(shard_id, []).append(document)
    ids: set[str] = set()
    for shard_id, documents in sorted(by_shard.items()):
        shard = manifest["shards"][shard_id]
        doc_ids = read_docs_table(read(f"{shard['prefix']}/{shard['name']}.docs.parquet")).column("doc_id").to_pylist()
        ids.update(doc_ids[d] for d in documents)
    return ids
