"""A stage over the partitions of one run.

Dagster batches partitions into runs (each asset's backfill policy: `batch_policy()`), so one step of a
partitioned stage may hold many partitions. A stage's asset function hands `run_partitions` its
per-partition work; this module runs it for each partition of the run in dedup order ((snapshot, source))
and decides what the run records:

- every partition ok: the asset's output. Dagster records one materialization per partition, with that
  partition's metadata (`add_asset_metadata`), the code version and the data version; then each partition's
  check evaluations, partitioned like the check, each naming that materialization as its target (the UI's
  Checks -> Partitions view counts an evaluation as Passed / Failed only when its target is the partition's
  latest materialization; without one it reads Missing).
- some partitions failed (the work raised, or a blocking check failed): the others are recorded as
  materialized (their events are yielded before the step fails), the failed ones are not, and the step
  fails with one line per failed partition naming its cause. Dagster's backfill then marks only those
  partitions, and what depends on them, failed ("a ranged run can materialize some partitions of an asset
  and fail on others"). A failed partition's evaluations name as their target the partition's latest recorded
  materialization, an earlier run's, whose files the failed run's output replaced (every stage publishes
  before its checks judge), and the run whose output they judged (`judged_run`): the Checks -> Partitions
  view shows Failed for that partition, not Missing nor the earlier Passed. A partition never materialized
  before has no target (the view shows Failed too: Dagster counts a check as current when there is no
  materialization to compare with).

The checks of a stage are declared on the asset (`AssetCheckSpec`, partitioned) and evaluated from values
its work measured while writing; the asset is a `multi_asset` with `can_subset=True` only so that its
check outputs are optional, because a ranged step records one evaluation per partition itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    AssetSpec,
    BackfillPolicy,
    DagsterEventType,
    Failure,
    FloatMetadataValue,
    MaterializeResult,
    MetadataValue,
    multi_asset,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from data_assets.partitions import ref_of, source_snapshot_partitions, source_view_links
from data_assets.settings import CONFIG
from sluice.io.layout import PartitionRef


def in_group(stage: str) -> dict[str, Any]:
    """An asset's stage (crawl, settings, curation, tokenization, training, reporting) as its group and as
    the tag `sluice/stage`. The UI's global lineage opens with one box per group, whose labels are readable at
    its default zoom (a single group of every asset drew labels of about 6 px); a group's page, or a box
    expanded, shows its assets, and an asset's Lineage tab its neighbours whatever their group."""
    return {"group_name": stage, "tags": {"sluice/stage": stage}}


def batch_policy(kind: str = "partitions") -> BackfillPolicy:
    """How many partitions of a stage one run holds (`orchestration.max_partitions_per_run`).

    `kind` separates stages that must not share a run with their parent: Dagster puts a child that reads
    every partition of its parent (dedup_clusters, deduped_documents) into the parent's run when their
    backfill policies are equal, but a multi-dimensional subset is split into several runs (one per
    source or per snapshot), so such a child could start before another run has written the partitions
    it reads. A different policy makes it wait for its parent's runs instead.
    """
    size = CONFIG.orchestration.max_partitions_per_run
    if kind == "ordered":
        return BackfillPolicy.single_run() if size is None else BackfillPolicy.multi_run(size + 1)
    return BackfillPolicy.multi_run(size) if size is not None else BackfillPolicy.single_run()


def stage_asset(
    name: str,
    *,
    partitions_def: Any,
    check_specs: Sequence[AssetCheckSpec] = (),
    backfill_policy: BackfillPolicy | None = None,
    pool: str | None = None,
    **spec: Any,
) -> Callable[..., Any]:
    """The decorator of a partitioned stage: one asset `name` (its `AssetSpec` fields in `spec`), its
    partitioned checks, its batch policy; a source x snapshot stage links each source's quality view."""
    if partitions_def is source_snapshot_partitions:
        spec["metadata"] = {**source_view_links(), **spec.get("metadata", {})}
    return multi_asset(
        name=name,
        specs=[AssetSpec(name, partitions_def=partitions_def, **spec)],
        check_specs=list(check_specs),
        can_subset=True,
        backfill_policy=backfill_policy or batch_policy(),
        pool=pool,
    )


@dataclass
class PartitionResult:
    """What one partition's work measured: its materialization metadata and its check results."""

    metadata: dict[str, Any]
    checks: list[AssetCheckResult] = field(default_factory=list)
    # The names each per-name count (`drop/<reason>`, ...) can take, by prefix, from the config and the rule
    # tables: recorded as 0 where the partition counted none (fill_counts), whatever the run saw.
    names: dict[str, Iterable[str]] = field(default_factory=dict)


def root_cause(error: BaseException) -> str:
    """`Type: first line of the message` of the innermost cause an error carries."""
    while error.__cause__ is not None and not str(error).strip():
        error = error.__cause__
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    description = getattr(error, "description", None)  # dagster.Failure keeps its text here
    if isinstance(error, Failure) and description:
        return description.strip().splitlines()[0]
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def run_partitions(
    context: AssetExecutionContext,
    asset: str,
    work: Callable[[Any], PartitionResult],
    order: Callable[[Any], Any],
    label: Callable[[Any], str] = str,
) -> Iterator[Any]:
    """Run `work(partition_key)` for each partition of this run in `order`, then yield what the run records
    (see the module docstring). A failing partition does not stop the others."""
    key = AssetKey(asset)
    blocking = {spec.name for spec in context.assets_def.check_specs if spec.blocking}
    done: dict[Any, PartitionResult] = {}
    failed: dict[Any, str] = {}
    for partition in sorted(context.partition_keys, key=order):
        try:
            result = work(partition)
        except Exception as error:
            context.log.error(f"{asset} {label(partition)} failed: {root_cause(error)}")
            failed[partition] = root_cause(error)
            continue
        bad = [check for check in result.checks if not check.passed and check.check_name in blocking]
        if bad:
            failed[partition] = "; ".join(_check_failure(check) for check in bad)
        done[partition] = result
    ok = {partition: result for partition, result in done.items() if partition not in failed}
    for result in done.values():
        result.metadata = rounded(result.metadata)
    fill_counts([result.metadata for result in ok.values()], {**declared_count_keys(ok.values()), **recorded_count_keys(context, key)})
    if not failed:
        for partition, result in ok.items():
            context.add_asset_metadata(result.metadata, partition_key=partition)
        yield MaterializeResult(asset_key=key)
    for partition, result in ok.items() if failed else ():
        yield AssetMaterialization(asset_key=key, partition=partition, metadata=result.metadata, tags=_version_tags(context, key))
    targets = latest_materializations(context, key, list(done))
    for partition, result in done.items():
        target = targets.get(str(partition))
        # what a failed partition's evaluations judged is no recorded materialization: the run that wrote it
        judged = {"judged_run": MetadataValue.dagster_run(context.run.run_id)} if partition in failed else {}
        for check in result.checks:
            yield _evaluation(key, partition, check, check.check_name in blocking, target, judged)
    if not failed:
        return
    lines = [f"{asset} {label(partition)}: {cause}" for partition, cause in sorted(failed.items(), key=lambda item: order(item[0]))]
    raise Failure(
        description=f"{len(failed)} of {len(failed) + len(ok)} partitions failed: " + " | ".join(lines),
        metadata={"failed_partitions": [label(partition) for partition in failed]},
        allow_retries=False,
    )


def run_source_partitions(context: AssetExecutionContext, asset: str, work: Callable[[PartitionRef], PartitionResult]) -> Iterator[Any]:
    """`run_partitions` over the source x snapshot partitions of this run, in dedup order."""
    return run_partitions(
        context, asset, lambda key: work(ref_of(key)), order=lambda key: ref_of(key).sort_key(), label=lambda key: ref_of(key).key
    )


def latest_materializations(
    context: AssetExecutionContext, key: AssetKey, partitions: Sequence[Any]
) -> dict[str, AssetCheckEvaluationTargetMaterializationData]:
    """By partition key, the latest recorded materialization of `key` for each of `partitions`: what each
    partition's check evaluations name as their target. For a partition this run recorded (Dagster stores each
    event as the step yields it, so those yielded above are there) it is that materialization, the one they
    judged; for a failed partition, an earlier run's, whose files the failed run replaced (absent if none).
    The UI counts an evaluation as the partition's Passed / Failed only when its target is the partition's
    latest materialization; read from the asset's records by storage id, the ids the UI compares (on SQLite a
    run's own event log numbers its events apart). Two queries whatever the partitions' histories."""
    if not partitions:
        return {}
    latest = context.instance.get_latest_storage_id_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION, {str(p) for p in partitions})
    if not latest:
        return {}
    records = context.instance.fetch_materializations(AssetRecordsFilter(asset_key=key, storage_ids=list(latest.values())), limit=len(latest)).records
    return {
        record.partition_key: AssetCheckEvaluationTargetMaterializationData(storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp)
        for record in records
        if record.partition_key is not None
    }


def fill_counts(metadata: list[dict[str, Any]], known: Mapping[str, type] | None = None) -> None:
    """Give every partition of the run the same per-name counts (`drop/<reason>`, `language/<code>`, ...: a
    numeric key with a `/`): each one `known` (declared, or recorded by a materialization of another partition)
    or recorded by another partition of this run, and absent here, is recorded as 0 (0.0 for a float key, so a
    key keeps one type; appended in name order), so each count's plot across partitions has no hole. Not the
    funnel: `funnel/<nn>_<step>` counts the documents reaching a step of this source's chain, and a step
    another source's chain has is not 0 here."""
    names = {key: kind for key, kind in (known or {}).items() if _count_key(key)}
    for entry in metadata:
        for key, value in entry.items():
            if _count_key(key) and _number(value):
                names[key] = float if isinstance(value, float) or names.get(key) is float else int
    for entry in metadata:
        for key in sorted(set(names) - set(entry)):
            entry[key] = names[key](0)


def _count_key(key: str) -> bool:
    return "/" in key and not key.startswith(("dagster/", "funnel/"))


def declared_count_keys(results: Iterable[PartitionResult]) -> dict[str, type]:
    """The count keys the stages declared (PartitionResult.names): counts, ints."""
    return {f"{prefix}/{name}": int for result in results for prefix, names in result.names.items() for name in names}


def recorded_count_keys(context: AssetExecutionContext, key: AssetKey) -> dict[str, type]:
    """The count keys (numeric, with a `/`), with their type, of the asset's latest materialization (of any
    partition). Each run records these too, so the latest holds every key any earlier run recorded: one
    record read, whatever the number of partitions (reading every partition's latest would cost each new
    partition's run O(partitions))."""
    records = context.instance.fetch_materializations(key, limit=1).records
    found: dict[str, type] = {}
    for record in records:
        materialization = record.asset_materialization
        for name, value in (materialization.metadata.items() if materialization is not None else ()):
            plain = getattr(value, "value", None)
            if _count_key(name) and _number(plain):
                found[name] = float if isinstance(plain, float) or found.get(name) is float else int
    return found


def rounded(metadata: dict[str, Any]) -> dict[str, Any]:
    """The metadata with every float to 4 significant digits, and to units from 1000 up: a share, a rate or a
    mean means no more (drop_rate 0.19999999999999996 is 0.2, a mean length 2345.67 is 2346.0). Floats stay
    floats and ints ints, so a key keeps one type."""
    return {key: _round(value) for key, value in metadata.items()}


def _round(value: Any) -> Any:
    if isinstance(value, FloatMetadataValue):  # a check result's metadata arrives normalized
        return MetadataValue.float(_round(value.value)) if value.value is not None else value
    if not isinstance(value, float) or not math.isfinite(value) or value == 0:
        return value
    return round(value, max(0, 3 - math.floor(math.log10(abs(value)))))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_failure(check: AssetCheckResult) -> str:
    return f"blocking check {check.check_name} failed" + (f": {check.description}" if check.description else "")


def _evaluation(
    key: AssetKey,
    partition: Any,
    check: AssetCheckResult,
    blocking: bool,
    target: AssetCheckEvaluationTargetMaterializationData | None,
    extra: Mapping[str, Any],
) -> AssetCheckEvaluation:
    return AssetCheckEvaluation(
        asset_key=key,
        check_name=check.check_name,
        passed=check.passed,
        metadata={**rounded(dict(check.metadata or {})), **extra},
        severity=check.severity or AssetCheckSeverity.ERROR,
        description=check.description,
        blocking=blocking,
        partition=str(partition),
        target_materialization_data=target,
    )


def _version_tags(context: AssetExecutionContext, key: AssetKey) -> dict[str, str]:
    """The provenance tags Dagster gives a materialization it records (code version, input data versions,
    the logical data version), for the partitions this module records itself when others failed: their
    stale status is then judged like any other materialization's. Built by Dagster's own functions."""
    from dagster._core.definitions.data_version import compute_logical_data_version
    from dagster._core.execution.plan.execute_step import _build_data_version_tags, _get_input_provenance_data

    step_context = context.op_execution_context._step_execution_context
    if not step_context.is_external_input_asset_version_info_loaded:
        step_context.fetch_external_input_asset_version_info()
    code_version = context.assets_def.code_versions_by_key.get(key) or context.run_id
    inputs = _get_input_provenance_data(key, step_context)
    data_version = compute_logical_data_version(code_version, {k: meta["data_version"] for k, meta in inputs.items()})
    return _build_data_version_tags(data_version, code_version, inputs, False)
