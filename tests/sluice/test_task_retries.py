"""The local process pool retries tasks whose worker process died, a bounded number of times, and names
the file when it gives up; a task that raises is not retried. Attempts are counted in files the tasks
write themselves (an oracle outside the executor)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from sluice.runtime.compute import TASK_RETRIES, LocalPoolExecutor, TaskLost


@dataclass(frozen=True)
class Job:
    label: str
    folder: str
    deaths: int  # how many of its attempts kill their own worker process (-1: all)
    fails: bool = False  # raises a ValueError instead (a deterministic failure)


def attempt(job: Job) -> str:
    log = Path(job.folder, job.label)
    with open(log, "a") as handle:
        handle.write("x")
    attempts = len(log.read_text())
    if job.fails:
        raise ValueError(f"{job.label} is corrupt")
    if job.deaths < 0 or attempts <= job.deaths:
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies, as under the OOM killer
    return f"{job.label} ok"


def attempts(folder: Path, label: str) -> int:
    path = folder / label
    return len(path.read_text()) if path.exists() else 0


def test_a_task_whose_worker_dies_is_resubmitted_and_the_results_stay_in_order(tmp_path):
    jobs = [Job(f"file-{i}.warc.gz", str(tmp_path), deaths=2 if i == 3 else 0) for i in range(8)]
    executor = LocalPoolExecutor(2)
    results = executor.map(attempt, jobs)
    assert results == [f"file-{i}.warc.gz ok" for i in range(8)]
    assert attempts(tmp_path, "file-3.warc.gz") == 3  # died twice, then finished
    assert all(attempts(tmp_path, f"file-{i}.warc.gz") <= 3 for i in range(8))
    assert any("file-3.warc.gz" in event for event in executor.events)  # said in the run's log (describe())
    assert "resubmitting" in executor.describe()


def test_a_task_that_keeps_killing_its_worker_fails_the_stage_naming_its_file(tmp_path):
    jobs = [Job("good-0.jsonl", str(tmp_path), 0), Job("poison.jsonl", str(tmp_path), -1), Job("good-1.jsonl", str(tmp_path), 0)]
    with pytest.raises(TaskLost, match="poison.jsonl"):
        LocalPoolExecutor(2).map(attempt, jobs)
    assert attempts(tmp_path, "poison.jsonl") == TASK_RETRIES + 1  # bounded


def test_a_task_that_raises_is_not_retried(tmp_path):
    jobs = [Job("good.jsonl", str(tmp_path), 0), Job("corrupt.jsonl", str(tmp_path), 0, fails=True)]
    with pytest.raises(ValueError, match="corrupt.jsonl is corrupt"):
        LocalPoolExecutor(2).map(attempt, jobs)
    assert attempts(tmp_path, "corrupt.jsonl") == 1
