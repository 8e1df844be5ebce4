"""The whole graph inside the test process, through Dagster's own backfill machinery.

`materialize_graph` does what `sluice materialize` does (register, record changed inputs, plan what is
missing or stale, submit one asset backfill) and then lets Dagster's backfill daemon iteration
(`execute_backfill_iteration`) plan and launch the runs, as the daemon would, with an instance whose run
launcher executes each run synchronously in this process (Dagster's `SyncInMemoryRunLauncher`) and an
in-process code location. The runs, their batching, order and outputs are the daemon's; only the process
that executes them differs, which saves the daemon's start and a process per run in tests that just need a
materialized graph. The command's own path (a real daemon, signals) is tested in
tests/data_assets/test_daemon.py.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster import DagsterInstance
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.backfill import execute_backfill_iteration

from data_assets.backfill import DONE, submit
from data_assets.cli import plan_work, register_snapshots
from data_assets.summary import backfill_checks, backfill_partitions, collect, registered_refs
from sluice.config import CONFIG_ENV_VAR

PROJECT_ROOT = Path(__file__).resolve().parents[2]
IN_PROCESS = {
    "run_launcher": {"module": "dagster._core.launcher.sync_in_memory_run_launcher", "class": "SyncInMemoryRunLauncher"},
    "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"},
    "concurrency": {"pools": {"default_limit": 1, "granularity": "op"}},
    "telemetry": {"enabled": False},
}


@contextmanager
def graph_instance(home: Path) -> Iterator[DagsterInstance]:
    """A SQLite instance in `home` whose runs execute synchronously in this process."""
    home.mkdir(parents=True, exist_ok=True)
    with DagsterInstance.local_temp(tempdir=str(home), overrides=IN_PROCESS) as instance:
        yield instance


@contextmanager
def config_env(config_path: str) -> Iterator[None]:
    """The code location's runs read the config the environment names (resources/settings.py)."""
    before = os.environ.get(CONFIG_ENV_VAR)
    os.environ[CONFIG_ENV_VAR] = config_path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CONFIG_ENV_VAR, None)
        else:
            os.environ[CONFIG_ENV_VAR] = before


def run_backfill(instance: DagsterInstance, backfill_id: str, max_iterations: int = 200) -> BulkActionStatus:
    """Iterate Dagster's backfill daemon over the instance until the backfill is done."""
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(module_name="data_assets.definitions", working_directory=str(PROJECT_ROOT)), location_name="sluice"
    )
    logger = logging.getLogger("tests.support.graph")
    with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as workspace:
        for _ in range(max_iterations):
            list(execute_backfill_iteration(workspace, logger))
            status = instance.get_backfill(backfill_id).status
            if status in DONE:
                return status
    raise AssertionError(f"backfill {backfill_id} did not finish in {max_iterations} iterations")


def materialize_graph(instance: DagsterInstance, config_path: str, force: bool = False, command: str = "test") -> dict[str, Any]:
    """Register, plan, and run the plan's backfill here. Returns what the command's summary reads: per
    partition the stages' metadata, the mixes', the checks, the failed runs, the backfill's status."""
    from data_assets.definitions import build_resources, defs
    from data_assets.summary import failed_runs

    resources = build_resources(config_path)
    config = resources["settings"].config
    with config_env(config_path):
        register_snapshots(instance, resources, log=lambda _: None)
        plan = plan_work(instance, resources, force, log=lambda _: None)
        if not plan.count:
            return {**collect(instance, config, registered_refs(instance, config)), "checks": [], "failed": [], "planned": 0, "status": None}
        backfill_id = submit(instance, defs, plan, command)
        status = run_backfill(instance, backfill_id)
    refs = backfill_partitions(instance, backfill_id)
    return {
        **collect(instance, config, refs), "checks": backfill_checks(instance, backfill_id), "failed": failed_runs(instance, backfill_id),
        "planned": plan.count, "status": status, "backfill_id": backfill_id, "runs": partition_runs(instance, refs),
    }


def partition_runs(instance: DagsterInstance, refs: list[Any]) -> dict[tuple[str, str, str], str]:
    """(asset, source, snapshot) -> the run that materialized it last, for the per-partition stages."""
    from dagster import AssetKey, AssetRecordsFilter

    from data_assets.partitions import partition_key
    from data_assets.summary import STAGE_ROWS

    found = {}
    for asset in STAGE_ROWS:
        for ref in refs:
            records = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition_key(ref)]), limit=1).records
            if records:
                found[(asset, ref.source, ref.snapshot)] = records[0].run_id
    return found


@dataclass
class SampleGraph:
    """The bundled sample materialized once per test session (tests/conftest.py `sample_graph`): its folder
    (`data/`, `home/`, `sluice.yaml`), the report `materialize_graph` returned, and the data tree's digest
    taken right after (tests may add files, e.g. batch traces, to the shared tree)."""

    folder: Path
    config: str
    report: dict[str, Any]
    digest: dict[str, str]

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def home(self) -> Path:
        return self.folder / "home"

    def copy(self, destination: Path) -> SampleGraph:
        """The same materialized graph (outputs and instance) under `destination`, for a test that changes it."""
        import shutil

        import yaml

        destination.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.data, destination / "data")
        shutil.copytree(self.home, destination / "home")
        raw = yaml.safe_load(Path(self.config).read_text())
        raw["storage"] = {"root": str(destination / "data")}
        config = destination / "sluice.yaml"
        config.write_text(yaml.safe_dump(raw, sort_keys=False))
        return SampleGraph(destination, str(config), self.report, self.digest)


def build_sample_graph(folder: Path) -> SampleGraph:
    from tests.conftest import base_config, tree_digest, write_config

    config = write_config(folder / "sluice.yaml", base_config(str(folder / "data")))
    with graph_instance(folder / "home") as instance:
        report = materialize_graph(instance, config)
    assert report["status"].value == "COMPLETED_SUCCESS", report["failed"]
    return SampleGraph(folder, config, report, tree_digest(str(folder / "data")))
