"""The compute resource's executors tell the running step's log what happened to their workers: a worker
death noticed by any stage (not only the ones that print `describe()` into their metadata) is in the run,
on that stage's step."""

from __future__ import annotations

import pickle

from dagster import DagsterInstance, asset, materialize

from resources.compute import ComputeResource
from resources.settings import SluiceSettings
from tests.sluice.test_task_retries import Job, attempt


@asset
def any_stage(compute: ComputeResource) -> None:
    folder = compute.settings.config.storage.root
    executor = compute.executor()
    executor.map(attempt, [Job(f"part-{i}.parquet", folder, deaths=1 if i == 1 else 0) for i in range(4)])
    assert pickle.loads(pickle.dumps(executor)).events == executor.events  # picklable, the run's log left out


def test_a_lost_worker_is_told_in_the_log_of_the_step_that_noticed_it(tmp_path, make_config):
    (tmp_path / "attempts").mkdir()
    settings = SluiceSettings(config_path=make_config(storage_root=str(tmp_path / "attempts")))
    with DagsterInstance.ephemeral() as instance:
        result = materialize([any_stage], instance=instance, resources={"compute": ComputeResource(settings=settings, max_workers=2)})
        warnings = [entry for entry in instance.all_logs(result.run_id) if entry.level >= 30]
    assert result.success
    # The pool may lose the task running beside the dying one too: the message names both, in any order.
    told = [entry for entry in warnings if "resubmitting" in entry.user_message and "part-1.parquet" in entry.user_message]
    assert told, [entry.user_message for entry in warnings]
    assert {entry.step_key for entry in told} == {"any_stage"}
