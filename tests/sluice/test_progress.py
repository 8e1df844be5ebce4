"""Stage progress: the executor calls back once per finished task, in any backend; StageProgress turns the
callbacks into log lines with counts, rates and an ETA (and a tqdm bar only on a terminal)."""

from __future__ import annotations

from sluice.compute import Executor, LocalPoolExecutor
from sluice.progress import StageProgress


def square(x: int) -> int:
    return x * x


def test_executor_calls_back_once_per_task_and_keeps_task_order():
    for executor in (Executor(), LocalPoolExecutor(2)):
        seen: list[int] = []
        results = executor.map(square, list(range(7)), progress=seen.append)
        assert results == [x * x for x in range(7)]
        assert sorted(seen) == results  # each result once, in completion order


def test_progress_lines_count_rates_and_eta(monkeypatch):
    lines: list[str] = []
    clock = iter([0.0, 10.0, 20.0, 40.0])
    monkeypatch.setattr("sluice.progress.time.monotonic", lambda: next(clock))
    progress = StageProgress("cleaned_documents web/2026-01", 4, lines.append, every_s=5, bar=False)
    progress.update(documents=100, nbytes=2_000_000)  # at 10 s
    progress.update(documents=100, nbytes=2_000_000)  # at 20 s: 5 s since the last line
    assert lines == [
        "cleaned_documents web/2026-01: 1/4 files, 100 documents (10.0/s), 2.0 MB (0.2 MB/s), 10 s, ETA 30 s",
        "cleaned_documents web/2026-01: 2/4 files, 200 documents (10.0/s), 4.0 MB (0.2 MB/s), 20 s, ETA 20 s",
    ]
    progress.update(documents=50)  # at 40 s: the last task always gets its line
    assert len(lines) == 3 and lines[-1].startswith("cleaned_documents web/2026-01: 3/4 files")
