"""`mixed_dataset`: per named mix, a seeded token-weighted selection over all tokenized partitions."""


import numpy as np
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
from resources import SluiceSettings, StorageResource
from sluice.layout import read_parquet_file
from sluice.mix import build_mix, realized_shares
from sluice.storage import Store, local_temp_dir

ASSET = "mixed_dataset"
SHARES_CHECK = "realized_shares_match_weights"


def idx_reader(store: Store):
    scratch = local_temp_dir()

    def read(key: str) -> np.ndarray:
        path = store.local_path(key) or store.fetch(key, scratch)
        return np.fromfile(path, dtype="<u8")

    return read


@asset(
    name=ASSET,
    partitions_def=mix_partitions,
    deps=[AssetDep("tokenized_shards", partition_mapping=AllPartitionMapping()), AssetDep("tokenizer")],
    group_name="training",
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "A training mix: token ranges over the tokenized shards of its sources, selected by token weight with a "
        "seeded shuffle and an epoch cap. An index, not a copy: the training loader reads the shards through it."
    ),
    check_specs=[
        AssetCheckSpec(SHARES_CHECK, asset=ASSET, blocking=True, description="Realized token share of each source, recomputed from the index, is within checks.mix_share_tolerance of its weight."),
    ],
)
def mixed_dataset(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource) -> MaterializeResult:
    config = settings.config
    mix_name = context.partition_key
    mix = config.mixes[mix_name]
    store = storage.store()
    manifest = build_mix(store, mix_name, mix, idx_reader(store))
    prefix = f"{ASSET}/{mix_name}"
    ranges = read_parquet_file(store, f"{prefix}/ranges.parquet")
    shares = realized_shares(manifest, ranges)
    tolerance = config.checks.mix_share_tolerance
    deviations = {row["source"]: abs(shares[row["source"]] - row["weight"]) for row in manifest["sources"]}
    rows = [
        (row["source"], row["weight"], round(shares[row["source"]], 4), row["target_tokens"], row["available_tokens"], row["epochs"])
        for row in manifest["sources"]
    ]
    return MaterializeResult(
        metadata={
            "dagster/row_count": manifest["samples"],
            "dagster/uri": MetadataValue.path(store.uri(prefix)),
            "tokens": manifest["tokens"],
            "samples": manifest["samples"],
            "sequence_length": manifest["sequence_length"],
            "ranges": ranges.num_rows,
            "shards": len(manifest["shards"]),
            **{f"share/{name}": value for name, value in sorted(shares.items())},
            "sources": markdown_table(["source", "weight", "realized share", "tokens", "available tokens", "epochs"], rows),
        },
        check_results=[
            AssetCheckResult(
                check_name=SHARES_CHECK,
                passed=all(d <= tolerance for d in deviations.values()),
                severity=AssetCheckSeverity.ERROR,
                metadata={"max_deviation": max(deviations.values()), "tolerance": tolerance, "shares": MetadataValue.json(shares)},
            )
        ],
    )
