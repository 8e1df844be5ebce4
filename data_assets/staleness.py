"""Why partitions are stale, for many partitions at once: Dagster's rules, read from the instance in bulk.

Dagster's `CachingStaleStatusResolver` answers one asset partition at a time with about five queries each
(its latest record, then per dependency the records after and before the recorded input), each opening a
SQLite connection: ~60 ms of CPU per asset partition here, so a plan over 10 sources x 1,000 snapshots (~90,000
asset partitions) would take about an hour and a half (benchmarks/dagster_scale.py). The rules are Dagster's
(`dagster/_core/definitions/data_version.py`, `_get_stale_causes_materialized`); what changes is how they are
read:

- `LatestEvents`: per asset, the latest materialization (observation, for an observable source asset) of
  every partition in a few queries: storage ids by partition, then the records by storage id in chunks; kept
  as (storage id, data version, provenance) only.
- `DirectCauses`: a partition's own causes: its asset's code version differs from the one recorded; a
  dependency it did not record (new) or recorded and no longer has (removed); a dependency partition whose
  data version changed after the input the partition recorded (Dagster's `_is_dep_updated`: one query, only
  for the partitions some dependency partition was materialized after). Dependencies on every partition are
  `WideDependencies`' (which Dagster's resolver does not follow past 100 upstream partitions).
- A record without provenance (written before Dagster kept it) is left to Dagster's resolver.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from dagster import (
    AllPartitionMapping,
    AssetKey,
    AssetRecordsFilter,
    DagsterEventType,
    IdentityPartitionMapping,
    MultiPartitionKey,
    MultiToSingleDimensionPartitionMapping,
)
from dagster._core.definitions.data_version import (
    DATA_VERSION_TAG,
    DEFAULT_DATA_VERSION,
    NULL_DATA_VERSION,
    DataProvenance,
    extract_data_provenance_from_entry,
    extract_data_version_from_entry,
)

from data_assets.partitions import ref_of

Partition = Any  # a partition key (str or MultiPartitionKey), None for an unpartitioned asset
RECORDS_PER_QUERY = 500


def dedup_order(key: Partition) -> tuple[str, ...]:
    """The global order of partitions (dedup's: snapshot, then source); a mix by name."""
    if isinstance(key, MultiPartitionKey):
        ref = ref_of(key)
        return (ref.snapshot, ref.source)
    return (str(key),)


@dataclass(frozen=True)
class Latest:
    storage_id: int
    data_version: str | None
    provenance: DataProvenance | None


class LatestEvents:
    """Each partition's latest data-version event of an asset, fetched in bulk once per asset."""

    def __init__(self, instance: Any, graph: Any) -> None:
        self.instance, self.graph = instance, graph
        self.storage = instance.event_log_storage
        self._ids: dict[AssetKey, dict[str | None, int]] = {}
        self._latest: dict[AssetKey, dict[str | None, Latest]] = {}

    def event_type(self, key: AssetKey) -> DagsterEventType:
        node = self.graph.get(key)
        return DagsterEventType.ASSET_OBSERVATION if node.is_external else DagsterEventType.ASSET_MATERIALIZATION

    def ids(self, key: AssetKey) -> dict[str | None, int]:
        """Partition (None when unpartitioned) -> storage id of its latest event."""
        if key not in self._ids:
            if self.graph.get(key).partitions_def is None:
                fetch = self.instance.fetch_observations if self.graph.get(key).is_external else self.instance.fetch_materializations
                records = fetch(key, limit=1).records
                self._ids[key] = {None: records[0].storage_id} if records else {}
            else:
                self._ids[key] = dict(self.storage.get_latest_storage_id_by_partition(key, self.event_type(key)))
        return self._ids[key]

    def latest(self, key: AssetKey) -> dict[str | None, Latest]:
        """Partition -> its latest event's storage id, data version and provenance."""
        if key not in self._latest:
            by_id = {storage_id: partition for partition, storage_id in self.ids(key).items()}
            fetch = self.instance.fetch_observations if self.graph.get(key).is_external else self.instance.fetch_materializations
            found: dict[str | None, Latest] = {}
            ids = sorted(by_id)
            for start in range(0, len(ids), RECORDS_PER_QUERY):
                chunk = ids[start:start + RECORDS_PER_QUERY]
                for record in fetch(AssetRecordsFilter(asset_key=key, storage_ids=chunk), limit=len(chunk)).records:
                    entry = record.event_log_entry
                    version = extract_data_version_from_entry(entry)
                    found[by_id[record.storage_id]] = Latest(record.storage_id, None if version is None else version.value, extract_data_provenance_from_entry(entry))
            self._latest[key] = found
        return self._latest[key]

    def current_version(self, key: AssetKey, partition: str | None) -> str:
        """Dagster's current data version: INITIAL for an external asset with no event, NULL for a missing one."""
        entry = self.latest(key).get(partition)
        if entry is None:
            return DEFAULT_DATA_VERSION.value if self.graph.get(key).is_external else NULL_DATA_VERSION.value
        return entry.data_version or DEFAULT_DATA_VERSION.value

    def versions_before(self, key: AssetKey, partitions: list[str], cursor: int) -> dict[str, str | None]:
        """The data versions of these partitions' latest events before storage id `cursor` (one query)."""
        tags = self.storage.get_latest_tags_by_partition(key, self.event_type(key), [DATA_VERSION_TAG], asset_partitions=partitions, before_cursor=cursor)
        return {partition: values.get(DATA_VERSION_TAG) for partition, values in tags.items()}


def versions_differ(before: str | None, now: str) -> bool:
    """Dagster's `_data_versions_differ`: INITIAL recorded and NULL now count as unchanged."""
    if before == DEFAULT_DATA_VERSION.value and now == NULL_DATA_VERSION.value:
        return False
    return (before or DEFAULT_DATA_VERSION.value) != now


class WideDependencies:
    """Staleness through a dependency on every partition of an asset (AllPartitionMapping: dedup's EARLIER
    edges, a mix on every tokenized partition), by Dagster's rule: a dependency partition's data version
    changed since the partition was materialized. Dagster's resolver follows such an edge only below 100
    upstream partitions (`SKIP_PARTITION_DATA_VERSION_DEPENDENCY_THRESHOLD`), at O(upstream) per partition;
    past that it reports nothing, so a re-materialized earlier partition would no longer make later ones stale.

    Per partition a vectorized look for dependency partitions materialized after it (for an EARLIER edge only
    those ordered at or before it: a prefix of the dependency's partitions in dedup order, with a prefix
    maximum that answers "none" at once), and only where there are such partitions one more query: their data
    versions as of the partition's materialization. Queries grow with the partitions that may be stale, not
    with the history."""

    def __init__(self, events: LatestEvents) -> None:
        self.events = events
        self._ordered: dict[AssetKey, tuple[list[tuple[str, ...]], list[str], np.ndarray, np.ndarray]] = {}

    def _in_order(self, dependency: AssetKey, parse: Callable[[str], Any]) -> tuple[list[tuple[str, ...]], list[str], np.ndarray, np.ndarray]:
        """The dependency's materialized partitions in dedup order: their orders, keys, storage ids and the
        running maximum of the ids."""
        if dependency not in self._ordered:
            rows = sorted((dedup_order(parse(partition)), partition, storage_id) for partition, storage_id in self.events.ids(dependency).items())
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
        own = self.events.ids(key).get(None if partition is None else str(partition))
        if own is None:
            return None  # missing: counted as such by the planner
        candidates = self.newer(dependency, own, dedup_order(partition) if earlier else None, parse)
        if not candidates:
            return None
        then = self.events.versions_before(dependency, candidates, own)
        now = self.events.latest(dependency)
        if any(q not in then or then[q] != (now[q].data_version if q in now else None) for q in candidates):
            return f"{dependency.to_user_string()} updated"
        return None


NO_PROVENANCE = "no provenance"  # DirectCauses' answer where Dagster's resolver must judge


class DirectCauses:
    """A partition's own stale causes through its code version and its one-partition dependencies (identity
    and per-dimension mappings, unpartitioned dependencies), as one phrase; see the module docstring."""

    def __init__(
        self, events: LatestEvents, skip: Callable[[AssetKey, AssetKey], bool], explain: Callable[[AssetKey, str | None, AssetKey, str | None], str] | None = None
    ) -> None:
        """`skip(asset, dependency)`: dependencies judged elsewhere; `explain(asset, partition, dependency,
        dependency partition)`: what to add to "<dependency> changed" for an observed dependency (which
        settings)."""
        self.events, self.graph, self.skip = events, events.graph, skip
        self.explain = explain or (lambda *_: "")

    def cause(self, key: AssetKey, partition: Partition) -> str | None:
        partition_str = None if partition is None else str(partition)
        own = self.events.latest(key).get(partition_str)
        if own is None:
            return None  # missing: the planner counts it as such
        provenance = own.provenance
        if provenance is None:
            return NO_PROVENANCE
        node = self.graph.get(key)
        if node.code_version and node.code_version != provenance.code_version:
            return "code version changed"
        for removed in sorted(set(provenance.input_data_versions) - set(node.parent_keys)):
            return f"removed dependency on {removed.to_user_string()}"
        for dependency in sorted(node.parent_keys):
            if self.skip(key, dependency):
                continue
            changed = self._changed(key, partition, provenance, dependency)
            if changed is None:
                continue
            if self.graph.get(dependency).is_external:
                return f"{dependency.to_user_string()} changed" + self.explain(key, partition_str, dependency, changed or None)
            return f"{dependency.to_user_string()} updated"
        return None

    def _changed(self, key: AssetKey, partition: Partition, provenance: DataProvenance, dependency: AssetKey) -> str | None:
        """None when the dependency did not change for this partition; else the dependency partition that
        changed ("" for an unpartitioned or a new dependency)."""
        if not provenance.has_input_asset(dependency):
            return ""  # a new dependency
        if self.graph.get(dependency).partitions_def is None:
            recorded = provenance.input_data_versions[dependency]
            return "" if versions_differ(recorded.value if recorded else None, self.events.current_version(dependency, None)) else None
        cursor = provenance.input_storage_ids.get(dependency)
        if cursor is None:
            return None  # Dagster compares the latest event with itself then
        ids = self.events.ids(dependency)
        newer = [q for q in self._parents(key, partition, dependency) if ids.get(q, -1) > cursor]
        if not newer:
            return None
        before = self.events.versions_before(dependency, newer, cursor + 1)
        return next((q for q in newer if versions_differ(before.get(q), self.events.current_version(dependency, q))), None)

    def _parents(self, key: AssetKey, partition: Partition, dependency: AssetKey) -> Iterable[str]:
        """The dependency partitions `partition` reads (the common mappings directly, others through Dagster)."""
        mapping = self.graph.get_partition_mapping(key, dependency)
        if isinstance(mapping, IdentityPartitionMapping):
            return [str(partition)]
        if isinstance(mapping, MultiToSingleDimensionPartitionMapping) and isinstance(partition, MultiPartitionKey) and mapping.partition_dimension_name:
            return [partition.keys_by_dimension[mapping.partition_dimension_name]]
        if isinstance(mapping, AllPartitionMapping):
            return []
        subset = self.graph.get_parent_partition_keys_for_child(str(partition), dependency, key).partitions_subset
        return subset.get_partition_keys()
