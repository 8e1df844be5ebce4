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

The causes are Dagster's rules read in bulk (data_assets/staleness.py): its resolver answers one asset
partition at a time (~60 ms each here) and stops following a dependency on every partition of an asset at
100 upstream partitions.

`force` selects every partition in scope.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AllPartitionMapping,
    AssetKey,
    Definitions,
    RepositoryDefinition,
)
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.data_version import (
    CachingStaleStatusResolver,
    StaleCauseCategory,
)
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.definitions.partitions.context import partition_loading_context
from dagster._time import get_current_datetime

from data_assets.automation import EARLIER, GATE, role
from data_assets.staleness import NO_PROVENANCE, DirectCauses, LatestEvents, WideDependencies, dedup_order

Partition = Any  # a partition key (str or MultiPartitionKey), None for an unpartitioned asset


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

    def why(self) -> str:
        """Why the plan runs, in a few words (its backfill's and runs' `sluice/why` tag): the causes that
        selected partitions themselves, most partitions first (not `reads <asset>`: those follow them)."""
        causes: Counter[str] = Counter()
        for why in self.reasons.values():
            causes.update({reason: count for reason, count in why.items() if not reason.startswith("reads ")})
        text = "; ".join(reason for reason, _ in causes.most_common())
        return text if len(text) <= 200 else text[:197] + "..."

    def lines(self) -> list[str]:
        return [
            f"{asset}: {sum(why.values())} ({', '.join(f'{reason} {count}' for reason, count in why.most_common())})"
            for asset, why in self.reasons.items()
        ]


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
        self._settings_changes: dict[tuple[Any, str, int | None], list[str]] = {}
        self.resolver = CachingStaleStatusResolver(instance=instance, asset_graph=self.graph, loading_context=view)
        self._wide: dict[AssetKey, list[AssetKey]] = {}
        events = LatestEvents(instance, self.graph)
        self.direct = DirectCauses(events, self._skipped, self._which_settings)
        self.wide = WideDependencies(events)

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
        """The first stale cause that counts along the dependency roles, as one phrase: the partition's own
        (code version, one-partition dependencies: data_assets/staleness.DirectCauses), then its dependencies
        on every partition of an asset (WideDependencies)."""
        why = self.direct.cause(key, partition)
        if why == NO_PROVENANCE:
            why = self._resolver_cause(key, partition)
        if why:
            return why
        for dependency in self._wide_dependencies(key):
            parse = self.graph.get(dependency).partitions_def.get_partition_key_from_str
            why = self.wide.cause(key, partition, dependency, role(key.to_user_string(), dependency.to_user_string()) == EARLIER, parse)
            if why:
                return why
        return None

    def _skipped(self, key: AssetKey, dependency: AssetKey) -> bool:
        """Dependencies DirectCauses leaves out: GATEs, and those on every partition (WideDependencies')."""
        return role(key.to_user_string(), dependency.to_user_string()) == GATE or dependency in self._wide_dependencies(key)

    def _resolver_cause(self, key: AssetKey, partition: Partition) -> str | None:
        """Dagster's own resolver, for a materialization recorded without provenance."""
        partition_str = None if partition is None else str(partition)
        for cause in self.resolver.get_stale_causes(key, partition_str):
            if cause.category == StaleCauseCategory.CODE:
                return "code version changed"
            dependency = cause.dependency
            if dependency is None:
                return cause.reason
            if self._skipped(key, dependency.asset_key):
                continue
            if self.graph.get(dependency.asset_key).is_external:
                return f"{dependency.asset_key.to_user_string()} changed" + self._which_settings(key, partition_str, dependency.asset_key, dependency.partition_key)
            return f"{dependency.asset_key.to_user_string()} updated"
        return None

    def _wide_dependencies(self, key: AssetKey) -> list[AssetKey]:
        if key not in self._wide:
            self._wide[key] = self._find_wide_dependencies(key)
        return self._wide[key]

    def _find_wide_dependencies(self, key: AssetKey) -> list[AssetKey]:
        """The partitioned dependencies `key` reads every partition of (AllPartitionMapping; every
        partitioned dependency of an unpartitioned asset), but GATEs."""
        node = self.graph.get(key)
        return [
            parent for parent in sorted(node.parent_keys)
            if self.graph.get(parent).partitions_def is not None
            and (node.partitions_def is None or isinstance(self.graph.get_partition_mapping(key, parent), AllPartitionMapping))
            and role(key.to_user_string(), parent.to_user_string()) != GATE
        ]

    def _which_settings(self, key: AssetKey, partition: str | None, dependency: AssetKey, dependency_partition: str | None) -> str:
        """` (cleaning.min_chars, ...)`: the settings that changed since the partition's latest materialization
        read them (data_assets/versions.py `changed_settings`); "" when not known (a crawl folder, or settings
        observed before observations recorded them)."""
        from dagster import AssetRecordsFilter

        from data_assets.versions import changed_settings

        if dependency_partition is None:
            return ""
        records = self.instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1).records
        cache_key = (dependency, dependency_partition, records[0].storage_id if records else None)
        if cache_key not in self._settings_changes:
            self._settings_changes[cache_key] = changed_settings(self.instance, dependency.to_user_string(), dependency_partition, cache_key[2])
        changed = self._settings_changes[cache_key]
        return f" ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})" if changed else ""

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
