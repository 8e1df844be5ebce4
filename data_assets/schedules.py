"""Schedule: rebuild every mix daily from whatever is materialized upstream."""


from dagster import RunRequest, ScheduleEvaluationContext, schedule

from data_assets.jobs import mix_job
from data_assets.partitions import mix_partitions


@schedule(job=mix_job, cron_schedule="0 4 * * *", execution_timezone="UTC", description="Rebuild every mix at 04:00 UTC.")
def daily_mix_rebuild(context: ScheduleEvaluationContext):
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    for mix in mix_partitions.get_partition_keys():
        yield RunRequest(run_key=f"{mix}/{day}", partition_key=mix, tags={"sluice/mix": mix, "sluice/purpose": "daily-mix-rebuild"})
