"""Stage progress: the executor calls back once per finished task, in any backend; StageProgress turns the
callbacks into log lines with counts, rates and an ETA (and a tqdm bar only on a terminal)."""

from __future__ import annotations

from sluice.runtime.compute import Executor, LocalPoolExecutor
from sluice.runtime.progress import StageProgress


def square(x: int) -> int:
    return x * x


def test_executor_calls_back_once_per_task_and_keeps_task_order():
    for executor in (Executor(), LocalPoolExecutor(2)):
        seen: list[int] = []
        results = executor.map(square, list(range(7)), progress=seen.append)
        assert results == [x * x for x in range(7)]
        assert sorted(seen) == results  # each result once, in completion order


def counts(x: int) -> dict[str, int]:
    return {"task": x, "stats": x * 10}


def test_a_callback_may_fold_and_remove_part_of_each_result_before_map_returns():
    """What cleaning does with its per-task stats: the callback gets the very object map returns."""
    for executor in (Executor(), LocalPoolExecutor(2)):
        folded: list[int] = []
        results = executor.map(counts, list(range(5)), progress=lambda r, folded=folded: folded.append(r.pop("stats")))
        assert results == [{"task": x} for x in range(5)]
        assert sorted(folded) == [x * 10 for x in range(5)]


def test_progress_lines_count_rates_and_eta(monkeypatch):
    lines: list[str] = []
    clock = iter([0.0, 10.0, 20.0, 40.0])
    monkeypatch.setattr("sluice.runtime.progress.time.monotonic", lambda: next(clock))
    progress = StageProgress("cleaned_documents web/2026-01", 4, lines.append, every_s=5, bar=False)
    progress.update(documents=100, nbytes=2_000_000)  # at 10 s
    progress.update(documents=100, nbytes=2_000_000)  # at 20 s: 5 s since the last line
    assert lines == [
        "cleaned_documents web/2026-01: 1/4 files, 100 documents (10.0/s), 2.0 MB (0.2 MB/s), 10 s, ETA 30 s",
        "cleaned_documents web/2026-01: 2/4 files, 200 documents (10.0/s), 4.0 MB (0.2 MB/s), 20 s, ETA 20 s",
    ]
    progress.update(documents=50)  # at 40 s: the last task always gets its line
    assert len(lines) == 3 and lines[-1].startswith("cleaned_documents web/2026-01: 3/4 files")
