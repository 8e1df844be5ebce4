"""Schedule: rebuild every mix that is missing or stale at 04:00 UTC (one asset backfill, as
`sluice materialize --select mixed_dataset` would submit); nothing when they are up to date."""

from __future__ import annotations

from dagster import AssetKey, RunRequest, ScheduleEvaluationContext, SkipReason, schedule

from resources.run_tags import PURPOSE_TAG


@schedule(
    target=["mixed_dataset"], cron_schedule="0 4 * * *", execution_timezone="UTC",
    description="Rebuild the mixes that are missing or stale (new tokenized data, changed settings) at 04:00 UTC.",
)
def daily_mix_rebuild(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
    from data_assets.freshness import Planner

    defs = context.repository_def  # this code location's definitions, as the daemon loaded them
    planner = Planner(defs, context.instance, in_scope=lambda asset, partition: asset == AssetKey("mixed_dataset"))
    plan = planner.plan()
    if not plan.count:
        return SkipReason("every mix is up to date")
    return RunRequest.for_asset_graph_subset(plan.subset(defs), tags={PURPOSE_TAG: "daily-mix-rebuild"})
