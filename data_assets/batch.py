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
  and fail on others"). A failed partition's evaluations have no target: what they judged was not recorded
  (the view shows Failed for a partition never materialized before; for one materialized before, that
  earlier materialization is no longer vouched for: Missing).

The checks of a stage are declared on the asset (`AssetCheckSpec`, partitioned) and evaluated from values
its work measured while writing; the asset is a `multi_asset` with `can_subset=True` only so that its
check outputs are optional, because a ranged step records one evaluation per partition itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
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
    Failure,
    MaterializeResult,
    multi_asset,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from data_assets.settings import CONFIG

GROUP = "sluice"


def in_group(stage: str) -> dict[str, Any]:
    """Every asset in one group, so the UI's lineage opens with every node shown (it collapses a graph of
    several groups into one box each); the stage (curation, tokenization, training, reporting, settings,
    crawl) is a tag to filter by."""
    return {"group_name": GROUP, "tags": {"sluice/stage": stage}}


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
    partitioned checks, its batch policy."""
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
    fill_counts([result.metadata for result in ok.values()])
    if not failed:
        for partition, result in ok.items():
            context.add_asset_metadata(result.metadata, partition_key=partition)
        yield MaterializeResult(asset_key=key)
    for partition, result in ok.items() if failed else ():
        yield AssetMaterialization(asset_key=key, partition=partition, metadata=result.metadata, tags=_version_tags(context, key))
    targets = recorded_materializations(context, key, list(ok))
    for partition, result in done.items():
        for check in result.checks:
            yield _evaluation(key, partition, check, check.check_name in blocking, targets.get(str(partition)))
    if not failed:
        return
    lines = [f"{asset} {label(partition)}: {cause}" for partition, cause in sorted(failed.items(), key=lambda item: order(item[0]))]
    raise Failure(
        description=f"{len(failed)} of {len(failed) + len(ok)} partitions failed: " + " | ".join(lines),
        metadata={"failed_partitions": [label(partition) for partition in failed]},
        allow_retries=False,
    )


def recorded_materializations(
    context: AssetExecutionContext, key: AssetKey, partitions: Sequence[Any]
) -> dict[str, AssetCheckEvaluationTargetMaterializationData]:
    """By partition key, the materialization of `key` this run recorded for `partitions` (Dagster stores each
    event as the step yields it, so those yielded above are there): what each partition's check evaluations
    judged. The evaluations carry it as their target, which is how the UI tells a check of the latest
    materialization (Passed / Failed per partition) from a stale one (Missing). Read from the asset's records,
    as Dagster reads a single-partition step's target: their storage ids are the ones the UI compares (on
    SQLite a run's own event log numbers its events apart)."""
    if not partitions:
        return {}
    wanted = [str(partition) for partition in partitions]
    records = context.instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=wanted), limit=4 * len(wanted) + 16).records
    targets: dict[str, AssetCheckEvaluationTargetMaterializationData] = {}
    for record in records:  # newest first
        if record.run_id == context.run.run_id and record.partition_key not in targets:
            targets[record.partition_key] = AssetCheckEvaluationTargetMaterializationData(
                storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp
            )
    return targets


def fill_counts(metadata: list[dict[str, Any]]) -> None:
    """Record every per-name count (`drop/<reason>`, `language/<code>`, ...: a numeric key with a `/`) that
    some partition of the run recorded as 0 in the others, so each one's plot has no hole at them."""
    names = {key for entry in metadata for key, value in entry.items() if "/" in key and not key.startswith("dagster/") and _number(value)}
    for entry in metadata:
        for key in names - set(entry):
            entry[key] = 0


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_failure(check: AssetCheckResult) -> str:
    return f"blocking check {check.check_name} failed" + (f": {check.description}" if check.description else "")


def _evaluation(
    key: AssetKey, partition: Any, check: AssetCheckResult, blocking: bool, target: AssetCheckEvaluationTargetMaterializationData | None
) -> AssetCheckEvaluation:
    return AssetCheckEvaluation(
        asset_key=key,
        check_name=check.check_name,
        passed=check.passed,
        metadata=check.metadata,
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
