"""Run per-file work of a stage on a local process pool or a Ray cluster, with identical results.

`Executor.map(fn, tasks)` returns the results in task order whatever the backend or worker count. Each
task writes its own output file (named by the task, not by the worker) and returns small statistics,
so outputs are byte-identical across backends. `map(..., progress=callback)` also calls `callback(result)`
in the caller's thread as each task finishes, in completion order (progress reporting, sluice.progress). `fn` must be a module-level function and its tasks
picklable. Ray tasks are retried by Ray when a worker node dies (`max_retries`); a task that raises
is not retried, because the same input would fail again.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from sluice.config import ComputeSettings

T = TypeVar("T")
R = TypeVar("R")

RAY_TASK_RETRIES = 3
_LAST_ALIVE: dict[str, str] = {}  # Ray nodes alive at the end of this process's previous map


Progress = Callable[[Any], None] | None


class Executor:
    backend = "inline"

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress = None) -> list[R]:
        return _inline(fn, tasks, progress)

    def describe(self) -> str:
        return self.backend


class LocalPoolExecutor(Executor):
    backend = "local"

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress = None) -> list[R]:
        if self.max_workers <= 1 or len(tasks) <= 1:
            return _inline(fn, tasks, progress)
        # spawn, not fork: the caller (a Dagster run) has threads, and forking those is unsafe.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(self.max_workers, len(tasks)), mp_context=context) as pool:
            futures = [pool.submit(fn, task) for task in tasks]
            if progress is not None:
                for future in as_completed(futures):
                    progress(future.result())
            return [future.result() for future in futures]

    def describe(self) -> str:
        return f"local process pool ({self.max_workers} workers)"


class RayExecutor(Executor):
    backend = "ray"

    def __init__(self, address: str | None, num_cpus: int) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.events = []

    def _ensure_ray(self):
        import ray

        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, ignore_reinit_error=True, log_to_driver=False)
            else:
                ray.init(
                    num_cpus=self.num_cpus,
                    include_dashboard=False,
                    ignore_reinit_error=True,
                    log_to_driver=False,
                    _node_ip_address="127.0.0.1",
                )
        return ray

    events: list[str]

    def _alive_nodes(self, ray) -> dict[str, str]:
        return {node["NodeID"]: node.get("NodeManagerAddress", "?") for node in ray.nodes() if node.get("Alive")}

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress = None) -> list[R]:
        if not tasks:
            return []
        ray = self._ensure_ray()
        global _LAST_ALIVE
        before = self._alive_nodes(ray)
        name = getattr(fn, "__name__", "the stage")
        # Node deaths are absorbed by Ray's task retries; say so, so the run records what happened. The
        # cluster notices a death after its health checks fail, so a node lost near the end of the previous
        # stage is reported by the next one.
        self._report(set(_LAST_ALIVE) - set(before), len(_LAST_ALIVE), f"before {name} (after the previous stage)")
        remote = ray.remote(max_retries=RAY_TASK_RETRIES, retry_exceptions=False)(fn)
        references = [remote.remote(task) for task in tasks]
        if progress is not None:
            pending = list(references)
            while pending:
                finished, pending = ray.wait(pending, num_returns=1)
                progress(ray.get(finished[0]))
        results = ray.get(references)
        _LAST_ALIVE = self._alive_nodes(ray)
        self._report(set(before) - set(_LAST_ALIVE), len(before), f"during {name}")
        return results

    def _report(self, lost: set[str], of: int, when: str) -> None:
        if lost:
            message = (
                f"{len(lost)} of {of} Ray nodes died {when} ({', '.join(sorted(n[:12] for n in lost))}); "
                f"their tasks were retried on the others (up to {RAY_TASK_RETRIES} times each)"
            )
            self.events.append(message)
            logging.getLogger("sluice.compute").warning(message)

    def describe(self) -> str:
        return f"ray ({self.address or 'local'})" + (f"; {'; '.join(self.events)}" if self.events else "")


def _inline(fn: Callable[[T], R], tasks: Sequence[T], progress: Progress) -> list[R]:
    results = []
    for task in tasks:
        results.append(fn(task))
        if progress is not None:
            progress(results[-1])
    return results


def make_executor(settings: ComputeSettings) -> Executor:
    if settings.backend == "ray":
        return RayExecutor(settings.ray_address, settings.max_workers)
    return LocalPoolExecutor(settings.max_workers)


def run_tasks(settings: ComputeSettings, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
    return make_executor(settings).map(fn, tasks)
