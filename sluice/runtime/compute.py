"""Run per-file work of a stage on a local process pool or a Ray cluster, with identical results.

`Executor.map(fn, tasks)` returns the results in task order whatever the backend or worker count. Each
task writes its own output file (named by the task, not by the worker) and returns small statistics,
so outputs are byte-identical across backends. `map(..., progress=callback)` also calls `callback(result)`
in the caller's thread as each task finishes, in completion order (progress reporting, sluice.runtime.progress), with
the very object `map` returns for that task: a stage may fold part of it there (its counts) and remove that
part, so the results kept until `map` returns stay small. `fn` must be a module-level function and its tasks
picklable.

Retries where failures happen: a task whose worker process dies (killed, out of memory, a lost Ray node) is
run again, at most `TASK_RETRIES` more times, before the stage fails with `TaskLost` naming the task's
file (`task_label`). On Ray these are Ray's own task retries (`max_retries`); the local pool resubmits the
tasks that were running in a pool that broke (`BrokenProcessPool`) to a fresh pool. Local workers are
forked warm and reused across calls (sluice.runtime.workers). A task that raises is
not retried: the same input would fail again (damaged input is quarantined by the stage itself).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from sluice.config import ComputeSettings
from sluice.runtime import workers

T = TypeVar("T")
R = TypeVar("R")

TASK_RETRIES = 3
RAY_TASK_RETRIES = TASK_RETRIES
_LAST_ALIVE: dict[str, str] = {}  # Ray nodes alive at the end of this process's previous map


Progress = Callable[[Any], None] | None


class TaskLost(RuntimeError):
    """A task's worker died more often than the retries allow."""


def task_label(task: Any) -> str:
    """The file a task works on, for messages (`label`, `file_label` or `input_key` of the task)."""
    for name in ("label", "file_label", "input_key", "cleaned_key"):
        value = getattr(task, name, None)
        if isinstance(value, str):
            return value
    return repr(task)[:200]


Report = Callable[[str], None]


def _log_warning(message: str) -> None:
    logging.getLogger("sluice.runtime.compute").warning(message)


class Executor:
    """Runs a stage's tasks; what happened to its workers (a retried task, a lost Ray node) is kept in
    `events` and told to `report` as it happens: the running Dagster step's log when the compute resource
    made the executor (whichever stage notices it records it), Python logging otherwise. An executor stays
    in the process that made it; pickled, it reports to Python logging (a run's log cannot be pickled)."""

    backend = "inline"

    def __init__(self, report: Report | None = None) -> None:
        self.events: list[str] = []
        self.report = report or _log_warning

    def _event(self, message: str) -> None:
        self.events.append(message)
        self.report(message)

    def _with_events(self, text: str) -> str:
        return text + (f"; {'; '.join(self.events)}" if self.events else "")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "report": _log_warning}

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress = None) -> list[R]:
        return _inline(fn, tasks, progress)

    def isolated(self, fn: Callable[[T], R], task: T) -> R:
        """Run one memory-heavy task where its memory is returned when it ends (a worker process), so the
        caller (a Dagster run that goes on to other steps) does not keep its peak."""
        return fn(task)

    def describe(self) -> str:
        return self.backend


class LocalPoolExecutor(Executor):
    backend = "local"

    def __init__(self, max_workers: int, report: Report | None = None) -> None:
        super().__init__(report)
        self.max_workers = max_workers

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress = None) -> list[R]:
        if self.max_workers <= 1 or len(tasks) <= 1:
            return _inline(fn, tasks, progress)
        results: dict[int, R] = {}
        deaths = [0] * len(tasks)
        while len(results) < len(tasks):
            lost = self._run_pool(fn, tasks, results, progress)
            for index in lost:
                deaths[index] += 1
                if deaths[index] > TASK_RETRIES:
                    raise TaskLost(
                        f"{task_label(tasks[index])}: its worker process died {deaths[index]} times "
                        f"(killed or out of memory); the stage gives up after {TASK_RETRIES} retries"
                    )
            if lost:
                message = (
                    f"a worker process died during {getattr(fn, '__name__', 'the stage')}: resubmitting "
                    + ", ".join(task_label(tasks[index]) for index in lost)
                )
                self._event(message)
        return [results[index] for index in range(len(tasks))]

    def _run_pool(self, fn: Callable[[T], R], tasks: Sequence[T], results: dict[int, R], progress: Progress) -> list[int]:
        """Run the tasks not in `results` on this process's warm pool (sluice.runtime.workers), at most `max_workers`
        in flight (so a broken pool names only the tasks that were running). Returns the tasks whose worker
        died (the broken pool is discarded; the caller's next round gets a fresh one). Interrupted (a
        KeyboardInterrupt, Dagster terminating the run), it kills the workers instead of waiting for them:
        their tasks publish nothing half-written (outputs are atomic) and a re-run redoes them."""
        pending = iter([index for index in range(len(tasks)) if index not in results])
        pool = workers.pool(self.max_workers)
        try:
            return self._drain(fn, tasks, results, progress, pending, pool)
        except BaseException as error:
            if not isinstance(error, Exception):  # interrupted (Ctrl-C, a run terminated): stop the workers now
                workers.terminate()
            raise

    def _drain(self, fn: Callable[[T], R], tasks: Sequence[T], results: dict[int, R], progress: Progress, pending: Any, pool: ProcessPoolExecutor) -> list[int]:
        in_flight: dict[Future, int] = {}
        lost: list[int] = []
        broken = False
        while True:
            while not broken and len(in_flight) < self.max_workers:
                index = next(pending, None)
                if index is None:
                    break
                try:
                    in_flight[pool.submit(fn, tasks[index])] = index
                except BrokenProcessPool:
                    broken = True
            if not in_flight:
                if broken:
                    workers.discard(pool)
                return lost
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                index = in_flight.pop(future)
                try:
                    results[index] = future.result()
                except BrokenProcessPool:
                    lost.append(index)
                    broken = True
                    continue
                except Exception:
                    wait(in_flight)  # the pool lives on: nothing of this call runs after it has failed
                    raise
                if progress is not None:
                    progress(results[index])

    def isolated(self, fn: Callable[[T], R], task: T) -> R:
        with ProcessPoolExecutor(max_workers=1, mp_context=workers.context()) as pool:
            return pool.submit(fn, task).result()

    def describe(self) -> str:
        return self._with_events(f"local process pool ({self.max_workers} workers)")


class RayExecutor(Executor):
    backend = "ray"

    def __init__(self, address: str | None, num_cpus: int, report: Report | None = None) -> None:
        super().__init__(report)
        self.address = address
        self.num_cpus = num_cpus

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
        labels = {reference: task_label(task) for reference, task in zip(references, tasks, strict=True)}
        if progress is None:
            results = [_ray_get(ray, reference, labels) for reference in references]
        else:  # each result fetched once, as it finishes: `progress` may fold it and keep less of it
            finished_results = {}
            pending = list(references)
            while pending:
                finished, pending = ray.wait(pending, num_returns=1)
                finished_results[finished[0]] = _ray_get(ray, finished[0], labels)
                progress(finished_results[finished[0]])
            results = [finished_results.pop(reference) for reference in references]
        _LAST_ALIVE = self._alive_nodes(ray)
        self._report(set(before) - set(_LAST_ALIVE), len(before), f"during {name}")
        return results

    def isolated(self, fn: Callable[[T], R], task: T) -> R:
        return self.map(fn, [task])[0]  # a Ray worker process

    def _report(self, lost: set[str], of: int, when: str) -> None:
        if lost:
            message = (
                f"{len(lost)} of {of} Ray nodes died {when} ({', '.join(sorted(n[:12] for n in lost))}); "
                f"their tasks were retried on the others (up to {RAY_TASK_RETRIES} times each)"
            )
            self._event(message)

    def describe(self) -> str:
        return self._with_events(f"ray ({self.address or 'local'})")


def _ray_get(ray, reference: Any, labels: dict[Any, str]) -> Any:
    """A task's result; when Ray gave up on it after its retries (its worker or node kept dying), a
    TaskLost naming its file."""
    lost = (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError)
    try:
        return ray.get(reference)
    except lost as error:
        raise TaskLost(
            f"{labels[reference]}: its Ray worker died {RAY_TASK_RETRIES + 1} times; the stage gives up ({type(error).__name__})"
        ) from error


def _inline(fn: Callable[[T], R], tasks: Sequence[T], progress: Progress) -> list[R]:
    results = []
    for task in tasks:
        results.append(fn(task))
        if progress is not None:
            progress(results[-1])
    return results


def make_executor(settings: ComputeSettings, report: Report | None = None) -> Executor:
    """The configured backend's executor; `report` hears of lost workers and nodes as they are noticed."""
    if settings.backend == "ray":
        return RayExecutor(settings.ray_address, settings.max_workers, report)
    return LocalPoolExecutor(settings.max_workers, report)


def run_tasks(settings: ComputeSettings, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
    return make_executor(settings).map(fn, tasks)
