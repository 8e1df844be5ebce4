"""What needs running: every asset partition that is missing or stale, and what reads it.

`sluice materialize`, the snapshot sensor and the daily schedule submit exactly this set as a Dagster asset
backfill, so a second `sluice materialize` with nothing changed submits nothing. The notions are Dagster's:

- missing: no materialization of the partition (Dagster's partition status);
- stale: Dagster's stale causes of the partition (what the UI's "stale" badge lists): its asset's code
  version changed, or a dependency has a newer data version than the one it read (a settings asset whose
  observed version changed, an upstream partition re-materialized with other data). Causes are counted
  along the dependency roles of data_assets/automation.py: never through a GATE (models and the tokenizer
  are not rebuilt because more data arrived); through an EARLIER dependency only from partitions ordered
  at or before the partition (dedup's global order: a new snapshot does not make earlier ones stale);
- then everything that reads a selected partition, along the same roles (its input is about to change).

Through a dependency on every partition of an asset (AllPartitionMapping), staleness is judged by
`WideDependencies` with the same rule as Dagster's, at any partition count: Dagster's resolver stops
following such an edge at 100 upstream partitions.

`force` selects every partition in scope.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dagster import (
    AllPartitionMapping,
    AssetKey,
    DagsterEventType,
    Definitions,
    MultiPartitionKey,
    RepositoryDefinition,
)
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.data_version import (
    DATA_VERSION_TAG,
    CachingStaleStatusResolver,
    StaleCauseCategory,
)
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.definitions.partitions.context import partition_loading_context
from dagster._time import get_current_datetime

from data_assets.automation import EARLIER, GATE, role
from data_assets.partitions import ref_of

Partition = Any  # a partition key (str or MultiPartitionKey), None for an unpartitioned asset


def dedup_order(key: Partition) -> tuple[str, ...]:
    """The global order of partitions (dedup's: snapshot, then source); a mix by name."""
    if isinstance(key, MultiPartitionKey):
        ref = ref_of(key)
        return (ref.snapshot, ref.source)
    return (str(key),)



def asset_graph(defs: Definitions | RepositoryDefinition) -> Any:
    """The asset graph of the code location's definitions, or of the repository a schedule or sensor is
    evaluated in (`context.repository_def`)."""
    return defs.asset_graph if isinstance(defs, RepositoryDefinition) else defs.resolve_asset_graph()

@dataclass
class Plan:
    """The asset partitions to run, with why each was selected (`reasons[asset][why]` = partitions)."""

    selected: dict[AssetKey, list[Partition]] = field(default_factory=dict)
    reasons: dict[str, Counter[str]] = field(default_factory=dict)
    checked: int = 0  # asset partitions looked at

    @property
    def count(self) -> int:
        return sum(len(partitions) for partitions in self.selected.values())

    def subset(self, defs: Definitions | RepositoryDefinition) -> AssetGraphSubset:
        graph = asset_graph(defs)
        pairs = {AssetKeyPartitionKey(key, partition) for key, partitions in self.selected.items() for partition in partitions}
        return AssetGraphSubset.from_asset_partition_set(pairs, graph)

    def lines(self) -> list[str]:
        return [
            f"{asset}: {sum(why.values())} ({', '.join(f'{reason} {count}' for reason, count in why.most_common())})"
            for asset, why in self.reasons.items()
        ]


class WideDependencies:
    """Staleness through a dependency on every partition of an asset (AllPartitionMapping: dedup's EARLIER
    edges, a mix on every tokenized partition), by Dagster's rule: a dependency partition's data version
    changed since the partition was materialized. Dagster's resolver follows such an edge only below 100
    upstream partitions (`SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD`), at O(upstream) per partition;
    past that it reports nothing, so a re-materialized earlier partition would no longer make later ones stale.

    Here: per asset one query of the latest materialization's storage id per partition and one of the
    current data versions; per partition a vectorized look for dependency partitions materialized after it
    (for an EARLIER edge only those ordered at or before it: a prefix of the dependency's partitions in dedup
    order, with a prefix maximum that answers "none" at once), and only where there are such partitions one
    more query: their data versions as of the partition's materialization (`before_cursor`). Queries thus grow
    with the partitions that may be stale, not with the history."""

    def __init__(self, instance: Any) -> None:
        self.instance = instance
        self.storage = instance.event_log_storage
        self._ids: dict[AssetKey, dict[str, int]] = {}
        self._versions: dict[AssetKey, dict[str, str | None]] = {}
        self._ordered: dict[AssetKey, tuple[list[tuple[str, ...]], list[str], np.ndarray, np.ndarray]] = {}

    def latest_ids(self, key: AssetKey) -> dict[str, int]:
        if key not in self._ids:
            self._ids[key] = dict(self.storage.get_latest_storage_id_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION))
        return self._ids[key]

    def _own_id(self, key: AssetKey, partition: Partition) -> int | None:
        """The storage id of the partition's (or the unpartitioned asset's) latest materialization."""
        if partition is not None:
            return self.latest_ids(key).get(str(partition))
        records = self.instance.fetch_materializations(key, limit=1).records
        return records[0].storage_id if records else None

    def _current_versions(self, key: AssetKey) -> dict[str, str | None]:
        if key not in self._versions:
            tags = self.storage.get_latest_tags_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG])
            self._versions[key] = {partition: values.get(DATA_VERSION_TAG) for partition, values in tags.items()}
        return self._versions[key]

    def _in_order(self, dependency: AssetKey, parse: Callable[[str], Any]) -> tuple[list[tuple[str, ...]], list[str], np.ndarray, np.ndarray]:
        """The dependency's materialized partitions in dedup order: their orders, keys, storage ids and the
        running maximum of the ids."""
        if dependency not in self._ordered:
            rows = sorted((dedup_order(parse(partition)), partition, storage_id) for partition, storage_id in self.latest_ids(dependency).items())
            ids = np.array([row[2] for row in rows], dtype=np.int64)
            self._ordered[dependency] = ([row[0] for row in rows], [row[1] for row in rows], ids, np.maximum.accumulate(ids) if len(ids) else ids)
        return self._ordered[dependency]

    def newer(self, dependency: AssetKey, since: int, order: tuple[str, ...] | None, parse: Callable[[str], Any]) -> list[str]:
        """The dependency's partitions last materialized after storage id `since` (only those ordered at or
        before `order` when it is given)."""
        orders, keys, ids, running_max = self._in_order(dependency, parse)
        count = len(keys) if order is None else bisect.bisect_right(orders, order)
        if count == 0 or running_max[count - 1] <= since:
            return []
        return [keys[i] for i in np.flatnonzero(ids[:count] > since)]

    def cause(self, key: AssetKey, partition: Partition, dependency: AssetKey, earlier: bool, parse: Callable[[str], Any]) -> str | None:
        """"<dependency> updated" when a dependency partition (ordered at or before `partition` for an EARLIER
        edge) has another data version now than when `partition` was last materialized; else None."""
        own = self._own_id(key, partition)
        if own is None:
            return None  # missing: counted as such by the planner
        candidates = self.newer(dependency, own, dedup_order(partition) if earlier else None, parse)
        if not candidates:
            return None
        then = self.storage.get_latest_tags_by_partition(
            dependency, DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG], asset_partitions=candidates, before_cursor=own
        )
        now = self._current_versions(dependency)
        if any(q not in then or then[q].get(DATA_VERSION_TAG) != now.get(q) for q in candidates):
            return f"{dependency.to_user_string()} updated"
        return None


class Planner:
    """Walks the asset graph in topological order and selects partitions (see the module docstring)."""

    def __init__(
        self, defs: Definitions | RepositoryDefinition, instance: Any, in_scope: Callable[[AssetKey, Partition], bool] | None = None, new_snapshots: Iterable[str] = ()
    ) -> None:
        """`new_snapshots`: snapshots about to be registered, planned as if they were (all their partitions
        missing), so that registering and submitting the backfill can follow each other at once."""
        from dagster._core.instance.types import DynamicPartitionsStoreAfterRequests

        from data_assets.partitions import snapshot_partitions

        self.graph = asset_graph(defs)
        self.instance = instance
        pending = list(new_snapshots)
        self.partitions_store = (
            DynamicPartitionsStoreAfterRequests.from_requests(instance, [snapshot_partitions.build_add_request(pending)]) if pending else instance
        )
        self.in_scope = in_scope or (lambda asset, partition: True)
        view = AssetGraphView(
            temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
            instance=instance,
            asset_graph=self.graph,
        )
        self.resolver = CachingStaleStatusResolver(instance=instance, asset_graph=self.graph, loading_context=view)
        self.wide = WideDependencies(instance)

    def plan(self, force: bool = False) -> Plan:
        plan = Plan()
        with partition_loading_context(dynamic_partitions_store=self.partitions_store):
            for key in self.graph.toposorted_asset_keys:
                node = self.graph.get(key)
                if not node.is_materializable:
                    continue
                self._select(plan, key, self._partitions(key), force)
        return plan

    def _partitions(self, key: AssetKey) -> list[Partition]:
        partitions_def = self.graph.get(key).partitions_def
        if partitions_def is None:
            return [None] if self.in_scope(key, None) else []
        keys = partitions_def.get_partition_keys(dynamic_partitions_store=self.partitions_store)
        objects = [partitions_def.get_partition_key_from_str(k) if hasattr(partitions_def, "get_partition_key_from_str") else k for k in keys]
        return sorted((k for k in objects if self.in_scope(key, k)), key=dedup_order)

    def _select(self, plan: Plan, key: AssetKey, partitions: list[Partition], force: bool) -> None:
        materialized = self._materialized(key)
        downstream = self._downstream_of_selected(plan, key, partitions)
        chosen: list[Partition] = []
        reasons: Counter[str] = Counter()
        for partition in partitions:
            plan.checked += 1
            if force:
                why = "forced"
            elif not (materialized is True if partition is None else str(partition) in materialized):
                why = "missing"
            elif partition in downstream:
                why = downstream[partition]
            else:
                why = self._stale_cause(key, partition)
            if why:
                chosen.append(partition)
                reasons[why] += 1
        if chosen:
            plan.selected[key] = chosen
            plan.reasons[key.to_user_string()] = reasons

    def _materialized(self, key: AssetKey) -> set[str] | bool:
        if self.graph.get(key).partitions_def is None:
            return self.instance.get_latest_materialization_event(key) is not None
        return set(self.instance.get_materialized_partitions(key))

    def _stale_cause(self, key: AssetKey, partition: Partition) -> str | None:
        """The first of Dagster's stale causes that counts along the dependency roles, as one phrase."""
        partition_str = None if partition is None else str(partition)
        wide = self._wide_dependencies(key)
        for cause in self.resolver.get_stale_causes(key, partition_str):
            if cause.category == StaleCauseCategory.CODE:
                return "code version changed"
            dependency = cause.dependency
            if dependency is None:
                return cause.reason
            if dependency.asset_key in wide or role(key.to_user_string(), dependency.asset_key.to_user_string()) == GATE:
                continue  # a wide dependency is judged below, whatever its partition count
            if self.graph.get(dependency.asset_key).is_external:
                return f"{dependency.asset_key.to_user_string()} changed"
            return f"{dependency.asset_key.to_user_string()} updated"
        for dependency in wide:
            parse = self.graph.get(dependency).partitions_def.get_partition_key_from_str
            why = self.wide.cause(key, partition, dependency, role(key.to_user_string(), dependency.to_user_string()) == EARLIER, parse)
            if why:
                return why
        return None

    def _wide_dependencies(self, key: AssetKey) -> list[AssetKey]:
        """The partitioned dependencies `key` reads every partition of (AllPartitionMapping; every
        partitioned dependency of an unpartitioned asset), but GATEs."""
        node = self.graph.get(key)
        return [
            parent for parent in sorted(node.parent_keys)
            if self.graph.get(parent).partitions_def is not None
            and (node.partitions_def is None or isinstance(self.graph.get_partition_mapping(key, parent), AllPartitionMapping))
            and role(key.to_user_string(), parent.to_user_string()) != GATE
        ]

    def _downstream_of_selected(self, plan: Plan, key: AssetKey, partitions: list[Partition]) -> dict[Partition, str]:
        """The partitions of `key` that read a partition already selected (not through a GATE)."""
        found: dict[Partition, str] = {}
        for parent in sorted(self.graph.get(key).parent_keys):
            selected = plan.selected.get(parent)
            kind = role(key.to_user_string(), parent.to_user_string())
            if not selected or kind == GATE:
                continue
            why = f"reads {parent.to_user_string()}"
            for partition in self._readers(key, parent, selected, partitions, kind):
                found.setdefault(partition, why)
        return found

    def _readers(self, key: AssetKey, parent: AssetKey, selected: list[Partition], partitions: list[Partition], kind: str | None) -> Iterable[Partition]:
        parent_node = self.graph.get(parent)
        if parent_node.partitions_def is None:
            return partitions
        mapping = self.graph.get_partition_mapping(key, parent)
        if isinstance(mapping, AllPartitionMapping):
            if kind == EARLIER:
                first = min(dedup_order(p) for p in selected)
                return [p for p in partitions if dedup_order(p) >= first]
            return partitions
        chosen = {str(p) for p in selected}
        return [
            p for p in partitions
            if p is not None
            and chosen & set(self.graph.get_parent_partition_keys_for_child(str(p), parent, key).partitions_subset.get_partition_keys())
        ]
