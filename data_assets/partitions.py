"""Partitions: source x snapshot for the per-crawl stages, mix name for `mixed_dataset`.

Sources and mixes are static (from the config); snapshots are dynamic: the sensor (or
`sluice register`) adds a key when a new sub-folder / sub-prefix appears under a source location.
"""

from __future__ import annotations

import warnings

from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    DynamicPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    PreviewWarning,
    StaticPartitionsDefinition,
)

from data_assets.settings import CONFIG
from sluice.layout import PartitionRef

SNAPSHOTS = "snapshots"

snapshot_partitions = DynamicPartitionsDefinition(name=SNAPSHOTS)
source_partitions = StaticPartitionsDefinition(CONFIG.source_names)
source_snapshot_partitions = MultiPartitionsDefinition({"source": source_partitions, "snapshot": snapshot_partitions})


def partition_check(name: str, asset: str, partitions_def=source_snapshot_partitions, **kwargs) -> AssetCheckSpec:
    """An asset check evaluated per partition: each evaluation carries its partition (the UI's checks tab
    links it). Dagster 1.13 marks `partitions_def` on a check spec as preview; that warning is silenced
    here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=PreviewWarning)
        return AssetCheckSpec(name, asset=asset, partitions_def=partitions_def, **kwargs)
mix_partitions = StaticPartitionsDefinition(sorted(CONFIG.mixes))


def partition_ref(context: AssetExecutionContext) -> PartitionRef:
    key = context.partition_key
    if not isinstance(key, MultiPartitionKey):
        raise ValueError(f"expected a source|snapshot partition key, got {key!r}")
    dims = key.keys_by_dimension
    return PartitionRef(source=dims["source"], snapshot=dims["snapshot"])


def multi_key(source: str, snapshot: str) -> MultiPartitionKey:
    return MultiPartitionKey({"source": source, "snapshot": snapshot})


def registered_partitions(context: AssetExecutionContext, sources: list[str]) -> list[PartitionRef]:
    """Every source x snapshot partition registered with Dagster, snapshot by snapshot in registration order."""
    snapshots = context.instance.get_dynamic_partitions(SNAPSHOTS)
    return [PartitionRef(source, snapshot) for snapshot in snapshots for source in sources]
