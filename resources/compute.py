"""Compute resource: where per-file work of a stage runs (local process pool by default, or Ray)."""

from __future__ import annotations

from dagster import ConfigurableResource, DagsterInvariantViolationError, OpExecutionContext

from resources.settings import SluiceSettings
from sluice.config import ComputeSettings
from sluice.runtime.compute import Executor, Report, make_executor


class ComputeResource(ConfigurableResource):
    """Backend and worker count come from the config's `compute` section; the fields here override
    them per run (e.g. from the launchpad) without editing the file."""

    settings: SluiceSettings
    backend: str | None = None  # local | ray (validated against the config model)
    max_workers: int | None = None
    ray_address: str | None = None

    def compute_settings(self) -> ComputeSettings:
        base = self.settings.config.compute
        return ComputeSettings(
            backend=self.backend or base.backend,
            max_workers=self.max_workers or base.max_workers,
            ray_address=self.ray_address if self.ray_address is not None else base.ray_address,
        )

    def executor(self) -> Executor:
        """The stage's executor; what happens to its workers (a retried task, a lost Ray node) goes to the
        log of the step that runs it, whichever stage notices it."""
        return make_executor(self.compute_settings(), report=step_warning())


def step_warning() -> Report | None:
    """The running Dagster step's `log.warning` (its messages carry the step), or None outside a step (a
    script, a test: Python logging)."""
    try:
        return OpExecutionContext.get().log.warning
    except DagsterInvariantViolationError:
        return None
