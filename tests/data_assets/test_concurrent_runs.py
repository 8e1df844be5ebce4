"""Two runs of the same partition at once (say a sensor's and a manual one), in separate processes with
their own Dagster instances, writing to the same storage root: both succeed and the partition ends up
byte-identical to a single run's, while a reader polling the root never sees a torn or mismatched file.
"""

from __future__ import annotations

import shutil
import time

import pytest

from data_assets.cli import register_snapshots
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import multi_key
from tests.conftest import base_config, tree_digest, write_config
from tests.data_assets.test_crash import check_visible_files, child


@pytest.mark.parametrize("stages", [["raw_documents"], pytest.param(["raw_documents", "cleaned_documents"], marks=pytest.mark.slow)])
def test_two_concurrent_runs_of_one_partition_do_not_corrupt_each_other(tmp_path, stages):
    STAGES = stages  # noqa: N806
    from dagster import DagsterInstance, materialize

    reference = tmp_path / "reference"
    resources = build_resources(write_config(tmp_path / "ref.yaml", base_config(str(reference))))
    with DagsterInstance.ephemeral() as instance:
        register_snapshots(instance, resources)
        materialize(ASSETS, selection=STAGES, partition_key=multi_key("web", "2026-01"), instance=instance, resources=resources)

    work = tmp_path / "data"
    config = write_config(tmp_path / "sluice.yaml", base_config(str(work)))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    runs = [child(config, ",".join(STAGES), "web|2026-01", scratch) for _ in range(2)]
    for run in runs:
        assert run.stdout is not None and run.stdout.readline().strip() == "READY"
    polls = 0
    while any(run.poll() is None for run in runs):
        check_visible_files(work)
        polls += 1
        time.sleep(0.02)
    outcomes = [run.communicate(timeout=300) for run in runs]
    for run, (out, err) in zip(runs, outcomes, strict=True):
        assert run.returncode == 0 and "DONE" in out, err[-3000:]
    print(f"concurrent runs: both succeeded, reader polled {polls} times")
    assert polls > 0
    check_visible_files(work)
    assert tree_digest(str(work)) == tree_digest(str(reference))
    shutil.rmtree(scratch)
