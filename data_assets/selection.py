"""`sluice materialize --select ASSET[,ASSET...] [--partition SOURCE/SNAPSHOT]`: what the plan is narrowed to.

The asset selection is Dagster's own (`AssetSelection.from_string`, what `dagster asset materialize
--select` and the UI's selection box parse), clause by clause joined by commas: a name (`cleaned_documents`),
with upstream or downstream markers (`+name` one level up, `++name` two, `*name` every level; `name+`,
`name*`), `*` (every asset), or Dagster's selection syntax (`key:cleaned_documents+`, `group:...`, `or`,
`and`, `not`). Only assets that can be materialized count (the settings and crawl assets are observed).

`--partition SOURCE/SNAPSHOT` keeps one source x snapshot partition of the selected assets; selected assets
not partitioned that way (the tokenizer, the models, `mixed_dataset`) are left out and named. The snapshot
must be registered: a selective command registers nothing (declarative automation would build a newly
registered snapshot's other partitions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dagster import AssetKey, AssetSelection, MultiPartitionKey
from dagster._core.definitions.asset_selection import DagsterInvalidAssetSelectionError
from dagster._core.errors import DagsterInvalidSubsetError

from sluice.config import SluiceConfig, did_you_mean


class SelectionError(ValueError):
    """A `--select` or `--partition` that names nothing the graph has; the message says what it has."""


@dataclass(frozen=True)
class Selection:
    """The assets (None: every one) and the source x snapshot partition (None: every one) a plan may hold."""

    assets: frozenset[AssetKey] | None = None
    partition: MultiPartitionKey | None = None
    left_out: tuple[str, ...] = ()  # selected assets without source x snapshot partitions, left out by --partition

    @property
    def narrowed(self) -> bool:
        return self.assets is not None or self.partition is not None

    def allows(self, asset: AssetKey, partition: Any) -> bool:
        if self.assets is not None and asset not in self.assets:
            return False
        return self.partition is None or (isinstance(partition, MultiPartitionKey) and partition == self.partition)


def select_assets(select: str, graph: Any) -> frozenset[AssetKey]:
    """The materializable assets `select` names (comma-separated clauses of Dagster's selection syntax)."""
    clauses = [clause.strip() for clause in select.split(",") if clause.strip()]
    names = sorted(key.to_user_string() for key in graph.materializable_asset_keys)
    if not clauses:
        raise SelectionError(f"--select {select!r}: names no asset; fix: name one or more of {names}, comma-separated")
    try:
        keys = AssetSelection.from_coercible(clauses).resolve(graph)
    except (DagsterInvalidAssetSelectionError, DagsterInvalidSubsetError) as error:
        unknown = [clause for clause in clauses if clause.strip("+*") not in names and ":" not in clause and clause != "*"]
        hint = did_you_mean(unknown[0].strip("+*"), names) if unknown else ""
        first = str(error).strip().splitlines()[0]
        raise SelectionError(f"--select {select!r}: {first}{hint}; fix: name one or more of {names} (Dagster's selection syntax)") from None
    chosen = frozenset(key for key in keys if key in graph.materializable_asset_keys)
    if not chosen:
        raise SelectionError(f"--select {select!r}: selects no asset that can be materialized; fix: name one or more of {names}")
    return chosen


def select_partition(partition: str, config: SluiceConfig, registered: list[str]) -> MultiPartitionKey:
    """The source x snapshot partition `SOURCE/SNAPSHOT` names: a source of the config, a registered snapshot."""
    from data_assets.partitions import multi_key

    source, slash, snapshot = partition.partition("/")
    if not slash or not source or not snapshot:
        raise SelectionError(f"--partition {partition!r}: expected SOURCE/SNAPSHOT, e.g. {config.source_names[0]}/{(registered or ['2026-01'])[-1]}")
    if source not in config.source_names:
        raise SelectionError(
            f"--partition {partition!r}: unknown source {source!r}{did_you_mean(source, config.source_names)}; fix: use one of {config.source_names}"
        )
    if snapshot not in registered:
        raise SelectionError(
            f"--partition {partition!r}: snapshot {snapshot!r} is not registered{did_you_mean(snapshot, registered)}; "
            f"fix: use one of {registered}, or register it first (`sluice register`, or `sluice materialize` without --select)"
        )
    return multi_key(source, snapshot)


def make_selection(select: str | None, partition: str | None, graph: Any, config: SluiceConfig, registered: list[str]) -> Selection:
    """What `--select` and `--partition` narrow the plan to (`Selection()` when neither is given)."""
    assets = select_assets(select, graph) if select is not None else None
    if partition is None:
        return Selection(assets)
    key = select_partition(partition, config, registered)
    candidates = assets if assets is not None else frozenset(graph.materializable_asset_keys)
    partitioned = frozenset(asset for asset in candidates if _by_source_and_snapshot(graph, asset))
    left_out = tuple(sorted(asset.to_user_string() for asset in candidates - partitioned))
    if not partitioned:
        raise SelectionError(
            f"--partition {partition!r}: none of the selected assets ({', '.join(left_out)}) has source/snapshot partitions; "
            "fix: leave --partition out or select a per-partition stage such as raw_documents"
        )
    return Selection(partitioned, key, left_out)


def _by_source_and_snapshot(graph: Any, asset: AssetKey) -> bool:
    from data_assets.partitions import source_snapshot_partitions

    return graph.get(asset).partitions_def == source_snapshot_partitions
