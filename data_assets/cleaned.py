"""`cleaned_documents`: HTML -> text, UTF-8 validation, length bounds, fastText language ID."""


from collections import Counter

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

from data_assets.metadata import counts_table, markdown_table, prefixed_counts
from data_assets.partitions import partition_ref, source_snapshot_partitions
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.clean import CleanTask, clean_part
from sluice.layout import partition_prefix, read_manifest, write_manifest

ASSET = "cleaned_documents"
DROP_RATE_CHECK = "drop_rate_within_bounds"


@asset(
    name=ASSET,
    partitions_def=source_snapshot_partitions,
    deps=[AssetDep("raw_documents")],
    group_name="curation",
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "Extracted main text (resiliparse), valid in its charset, inside the length bounds, with fastText "
        "lid.176 language and score; dropped documents and their reasons in dropped-*.parquet."
    ),
    check_specs=[
        AssetCheckSpec(
            DROP_RATE_CHECK,
            asset=ASSET,
            description="The share of documents dropped lies inside checks.min/max_cleaned_drop_rate (warns).",
        )
    ],
)
def cleaned_documents(
    context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> MaterializeResult:
    config = settings.config
    ref = partition_ref(context)
    store = storage.store()
    raw_prefix = partition_prefix("raw_documents", ref)
    raw_manifest = read_manifest(store, raw_prefix)
    if raw_manifest is None:
        raise FileNotFoundError(f"{store.uri(raw_prefix)} has no manifest: materialize raw_documents for {ref.key} first")
    prefix = partition_prefix(ASSET, ref)
    tasks = [
        CleanTask(store.uri(raw_prefix), entry["key"], store.uri(prefix), index, config.cleaning, config.s3)
        for index, entry in enumerate(raw_manifest["files"])
    ]
    executor = compute.executor()
    results = executor.map(clean_part, tasks)

    documents_in = sum(r["stats"]["documents_in"] for r in results)
    documents_out = sum(r["stats"]["documents_out"] for r in results)
    drops: Counter[str] = Counter()
    reached: Counter[str] = Counter()
    languages: Counter[str] = Counter()
    chars_out = 0
    for r in results:
        drops.update(r["stats"]["drops"])
        reached.update(r["stats"]["reached"])
        languages.update(r["stats"]["languages"])
        chars_out += r["stats"]["chars_out"]
    files = [r["part"] for r in results]
    write_manifest(
        store,
        prefix,
        {
            "asset": ASSET,
            "partition": {"source": ref.source, "snapshot": ref.snapshot},
            "files": files,
            "side_files": [r["dropped"] for r in results],
            "documents": documents_out,
            "drops": dict(drops),
        },
    )
    drop_rate = 1 - documents_out / documents_in if documents_in else 0.0
    low, high = config.checks.min_cleaned_drop_rate, config.checks.max_cleaned_drop_rate
    check = AssetCheckResult(
        check_name=DROP_RATE_CHECK,
        passed=documents_in == 0 or low <= drop_rate <= high,
        severity=AssetCheckSeverity.WARN,
        metadata={"drop_rate": drop_rate, "min": low, "max": high},
        description=f"dropped {drop_rate:.1%} of {documents_in} documents (bounds {low:.0%}..{high:.0%})",
    )
    funnel = [("input", documents_in)] + [(f"reached {step}", count) for step, count in reached.items()] + [("kept", documents_out)]
    return MaterializeResult(
        metadata={
            "dagster/row_count": documents_out,
            "dagster/uri": MetadataValue.path(store.uri(prefix)),
            "documents_in": documents_in,
            "documents_out": documents_out,
            "drop_rate": drop_rate,
            "mean_chars_out": chars_out / documents_out if documents_out else 0.0,
            "output_bytes": sum(entry["bytes"] for entry in files),
            **prefixed_counts("drop", drops),
            **prefixed_counts("language", languages),
            "drop_reasons": counts_table(drops),
            "funnel": markdown_table(["stage", "documents"], funnel),
            "languages": counts_table(languages, key="language"),
            "compute": executor.describe(),
        },
        check_results=[check],
    )
