"""Partitions: source x snapshot for the per-crawl stages, mix name for `mixed_dataset`.

Sources and mixes are static (from the config); snapshots are dynamic: the sensor (or
`sluice register`) adds a key when a new sub-folder / sub-prefix appears under a source location.
"""

from __future__ import annotations

import warnings
from typing import Any

from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    DynamicPartitionsDefinition,
    MetadataValue,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    PreviewWarning,
    StaticPartitionsDefinition,
)

from data_assets.settings import CONFIG
from sluice.io.layout import PartitionRef

SNAPSHOTS = "snapshots"
# Dagster orders the dimensions of a partition key by name: "source" before "time" makes keys `web|2026-01` and
# the partition order source-major, so a metadata plot over partitions follows one source's snapshots, then the
# next source's (with "snapshot" as the name, sources would alternate along the axis).
SNAPSHOT_DIMENSION = "time"

snapshot_partitions = DynamicPartitionsDefinition(name=SNAPSHOTS)
source_partitions = StaticPartitionsDefinition(CONFIG.source_names)
source_snapshot_partitions = MultiPartitionsDefinition({"source": source_partitions, SNAPSHOT_DIMENSION: snapshot_partitions})


# The per-source views of the quality figures (data_assets/report.py): one observable asset per source.
SOURCE_VIEW = "quality_of"


def source_view_key(source: str) -> AssetKey:
    return AssetKey(f"{SOURCE_VIEW}_{source}")


def source_view_links(sources: list[str] | None = None) -> dict[str, MetadataValue]:
    """Definition metadata for a source x snapshot asset: a link per source to its `quality_of_<source>` view.
    The asset's metadata plots run across every partition, so one line joins the last snapshot of one source
    to the first of the next; a view's plots are one source's snapshots alone. The UI shows each entry in the
    asset's Overview -> Metadata as a link to that view's page (an asset metadata value)."""
    return {f"per-source plots: {source}": MetadataValue.asset(source_view_key(source)) for source in sources or CONFIG.source_names}


def partition_check(name: str, asset: str, partitions_def=source_snapshot_partitions, **kwargs) -> AssetCheckSpec:
    """An asset check evaluated per partition: each evaluation carries its partition (the UI's checks tab
    links it). Dagster 1.13 marks `partitions_def` on a check spec as preview; that warning is silenced
    here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=PreviewWarning)
        return AssetCheckSpec(name, asset=asset, partitions_def=partitions_def, **kwargs)
mix_partitions = StaticPartitionsDefinition(sorted(CONFIG.mixes))


def partition_ref(context: AssetExecutionContext) -> PartitionRef:
    return ref_of(context.partition_key)


def ref_of(key: Any) -> PartitionRef:
    """The source x snapshot of a partition key (a MultiPartitionKey or its `source|snapshot` string)."""
    if not isinstance(key, MultiPartitionKey):
        try:
            key = source_snapshot_partitions.get_partition_key_from_str(str(key))
        except Exception as error:
            raise ValueError(f"expected a source|snapshot partition key, got {key!r}") from error
    dims = key.keys_by_dimension
    return PartitionRef(source=dims["source"], snapshot=dims[SNAPSHOT_DIMENSION])


def multi_key(source: str, snapshot: str) -> MultiPartitionKey:
    return MultiPartitionKey({"source": source, SNAPSHOT_DIMENSION: snapshot})


def partition_key(ref: PartitionRef) -> str:
    """The Dagster partition key string of a source x snapshot partition (`source|snapshot`)."""
    return str(multi_key(ref.source, ref.snapshot))


def registered_partitions(context: AssetExecutionContext, sources: list[str]) -> list[PartitionRef]:
    """Every source x snapshot partition registered with Dagster, snapshot by snapshot in registration order."""
    snapshots = context.instance.get_dynamic_partitions(SNAPSHOTS)
    return [PartitionRef(source, snapshot) for snapshot in snapshots for source in sources]
