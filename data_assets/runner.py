"""Materialize the whole graph one asset partition per run, as a Dagster backfill does, and keep going
past failures.

The stages and their order come from the Definitions' asset graph: assets in topological order, each
asset's partitions in the order the caller gives (sluice: (snapshot, source)). Every (asset, partition) is
one in-process run of that asset's stage job (`<asset>_job`, data_assets.jobs) through the Dagster instance,
so the runs list names the asset; runs are tagged with the command, invocation, asset, and the source and
snapshot (or mix) of their partition.

A run that fails, or whose blocking check fails, marks that asset partition failed. Which partitions are
downstream of it comes from the asset graph's partition mappings: a child partition that maps to specific
parent partitions (the same source x snapshot; a self-dependency on the previous partition) is blocked
and not run; so is a partitioned child that reads every partition of its parent (global dedup) when a
failed parent partition comes before its own in the global order; a child that consumes every partition of the parent (AllPartitionMapping: the tokenizer, a
mix) runs on the partitions that succeeded and its outcome names the ones it went without (`strict`
blocks those too, as Dagster's own backfills do). Everything else completes. An optional asset whose
`unavailable(config)` gives a reason is skipped with that reason, and does not block its children.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AllPartitionMapping,
    AssetCheckSeverity,
    AssetKey,
    Definitions,
    partition_loading_context,
)

from data_assets.jobs import stage_job_name, stage_jobs

# The runs' events go to the instance (the UI shows them); the command prints its own summary of failures.
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass
class Outcome:
    """What happened to one asset partition."""

    asset: str
    partition: Any  # a partition key (str or MultiPartitionKey), None when unpartitioned
    status: str  # ok | failed | blocked | skipped
    reason: str = ""
    seconds: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    checks: list[tuple[str, str, bool]] = field(default_factory=list)
    without: list[str] = field(default_factory=list)  # failed parent partitions a whole-set consumer ran without
    run_id: str | None = None

    @property
    def label(self) -> str:
        return self.asset if self.partition is None else f"{self.asset} {partition_label(self.partition)}"


def partition_tags(key: Any) -> dict[str, str]:
    """`sluice/source` and `sluice/snapshot` of a source x snapshot key, `sluice/partition` of another key."""
    dims = getattr(key, "keys_by_dimension", None)
    if dims:
        return {f"sluice/{name}": value for name, value in dims.items()}
    return {} if key is None else {"sluice/partition": str(key)}


def partition_label(key: Any) -> str:
    """`web/2026-01` for a source x snapshot key, the key itself otherwise."""
    dims = getattr(key, "keys_by_dimension", None)
    if dims and set(dims) == {"source", "snapshot"}:
        return f"{dims['source']}/{dims['snapshot']}"
    return str(key)


@dataclass
class Stage:
    asset: AssetKey
    partitions: list[Any]  # [None] when unpartitioned


def plan(
    defs: Definitions,
    instance: Any,
    include: Callable[[AssetKey, Any], bool] = lambda asset, key: True,
    order: Callable[[Any], Any] = str,
) -> list[Stage]:
    """One stage per materializable asset, in topological order; its partitions filtered and ordered."""
    graph = defs.resolve_asset_graph()
    stages = []
    with partition_loading_context(dynamic_partitions_store=instance):
        for key in graph.toposorted_asset_keys:
            node = graph.get(key)
            if not node.is_materializable:
                continue
            if node.partitions_def is None:
                partitions: list[Any] = [None]
            else:
                keys = node.partitions_def.get_partition_keys(dynamic_partitions_store=instance)
                partitions = sorted((k for k in keys if include(key, k)), key=order)
            stages.append(Stage(key, partitions))
    return stages


def _failure_reason(result: Any, blocking_failed: list[Any]) -> str:
    if blocking_failed:
        return "; ".join(
            f"blocking check {evaluation.check_name} failed" + (f": {evaluation.description}" if evaluation.description else "")
            for evaluation in blocking_failed
        )
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            while error is not None and error.cause is not None and "Error occurred while executing" in error.message:
                error = error.cause
            if error is not None:
                return error.message.strip().splitlines()[0] if error.message.strip() else error.cls_name or "failed"
    return "the run failed"


class GraphRunner:
    """Runs a plan stage by stage; `outcomes` holds every asset partition's result, in run order."""

    def __init__(
        self,
        defs: Definitions,
        instance: Any,
        resources: dict[str, Any],
        unavailable: dict[str, Callable[[], str | None]] | None = None,
        strict: bool = False,
        log: Callable[[str], None] = print,
        tags: dict[str, str] | None = None,
        order: Callable[[Any], Any] | None = None,
    ) -> None:
        self.defs = defs
        self.order = order  # the partitions' global order (sluice: (snapshot, source)), as in plan()
        self.graph = defs.resolve_asset_graph()
        self.assets = list(defs.assets or [])
        names = [key.to_user_string() for key in self.graph.toposorted_asset_keys if self.graph.get(key).is_materializable]
        # The same assets with the caller's resources, and one named job per stage.
        self.jobs = Definitions(assets=self.assets, jobs=stage_jobs(names), resources=resources)
        self.instance = instance
        self.resources = resources
        self.unavailable = unavailable or {}
        self.strict = strict
        self.log = log
        self.invocation = uuid.uuid4().hex[:12]
        self.tags = {"sluice/invocation": self.invocation, **(tags or {})}
        self.outcomes: list[Outcome] = []
        self.stage_seconds: dict[str, float] = {}
        self._bad: dict[tuple[AssetKey, Any], Outcome] = {}  # failed or blocked asset partitions

    def run(self, stages: Sequence[Stage]) -> list[Outcome]:
        total = sum(len(stage.partitions) for stage in stages)
        done = 0
        for number, stage in enumerate(stages, 1):
            name = stage.asset.to_user_string()
            count = len(stage.partitions)
            self.log(f"[stage {number}/{len(stages)}] {name}: {count} partition{'s' if count != 1 else ''}")
            started = time.monotonic()
            for partition in stage.partitions:
                done += 1
                outcome = self._run_one(stage.asset, partition)
                self.outcomes.append(outcome)
                if outcome.status in ("failed", "blocked"):
                    self._bad[(stage.asset, partition)] = outcome
                self.log(f"  [{done}/{total}] {outcome.label}: {self._describe(outcome)}")
            self.stage_seconds[name] = time.monotonic() - started
        return self.outcomes

    def _describe(self, outcome: Outcome) -> str:
        text = f"{outcome.status} {outcome.seconds:.1f} s" if outcome.status in ("ok", "failed") else outcome.status
        if outcome.reason:
            text += f" ({outcome.reason})"
        if outcome.without:
            text += f" (without {len(outcome.without)} failed upstream partition{'s' if len(outcome.without) != 1 else ''})"
        return text

    def _upstream_problems(self, asset: AssetKey, partition: Any) -> tuple[list[Outcome], list[Outcome]]:
        """(failed parent partitions that block this one, failed ones it runs without)."""
        blocking, tolerated = [], []
        with partition_loading_context(dynamic_partitions_store=self.instance):
            parents = self.graph.get_parents_partitions(asset, partition).parent_partitions
        for parent in parents:
            problem = self._bad.get((parent.asset_key, parent.partition_key))
            if problem is None:
                continue
            mapping = self.graph.get_partition_mapping(asset, parent.asset_key)
            if isinstance(mapping, AllPartitionMapping) and not self.strict and parent.asset_key != asset and not self._earlier(asset, parent, partition):
                tolerated.append(problem)
            else:
                blocking.append(problem)
        return blocking, tolerated

    def _earlier(self, asset: AssetKey, parent: Any, partition: Any) -> bool:
        """A partitioned asset that reads every partition of its parent (global dedup: each partition against
        all earlier ones) depends on the parent partitions ordered before its own: a failed one blocks it,
        as its result would differ once that partition is repaired. Later ones do not change it."""
        if self.order is None or partition is None or parent.partition_key is None:
            return False
        if self.graph.get(asset).partitions_def != self.graph.get(parent.asset_key).partitions_def:
            return False  # e.g. a mix (partitioned by mix name) over source x snapshot partitions
        return self.order(parent.partition_key) <= self.order(partition)

    def _run_one(self, asset: AssetKey, partition: Any) -> Outcome:
        name = asset.to_user_string()
        check_unavailable = self.unavailable.get(name)
        reason = check_unavailable() if check_unavailable else None
        if reason:
            return Outcome(name, partition, "skipped", f"optional: {reason}")
        blocking, tolerated = self._upstream_problems(asset, partition)
        if blocking:
            first = blocking[0]
            more = f" and {len(blocking) - 1} more" if len(blocking) > 1 else ""
            return Outcome(name, partition, "blocked", f"upstream {first.label} {first.status}{more}")
        started = time.monotonic()
        job = self.jobs.resolve_job_def(stage_job_name(name))
        result = job.execute_in_process(
            run_config=QUIET_CONSOLE,
            instance=self.instance,
            partition_key=partition,
            raise_on_error=False,
            tags={**self.tags, "sluice/asset": name, **partition_tags(partition)},
        )
        seconds = time.monotonic() - started
        evaluations = result.get_asset_check_evaluations()
        checks = [(e.asset_key.to_user_string(), e.check_name, e.passed) for e in evaluations]
        blocking_failed = [e for e in evaluations if not e.passed and e.blocking and e.severity == AssetCheckSeverity.ERROR]
        metadata: dict[str, Any] = {}
        for event in result.get_asset_materialization_events():
            materialization = event.event_specific_data.materialization
            if materialization.asset_key == asset:
                metadata = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
        status = "ok" if result.success and not blocking_failed else "failed"
        return Outcome(
            name,
            partition,
            status,
            "" if status == "ok" else _failure_reason(result, blocking_failed),
            seconds,
            metadata,
            checks,
            [problem.label for problem in tolerated],
            result.run_id,
        )

    @property
    def failed(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.status in ("failed", "blocked")]
