"""The per-document budget of the cleaning chain (sluice.runtime.budget): a step that overruns on one document gets it
dropped as `step_timeout:<step>` (counted, kept in the dropped output), a worker that dies on one gets it
dropped as `step_crashed:<step>`, and every other document comes out exactly as in an unbudgeted run.

No timing is asserted: the slow steps never finish by themselves (a C-level loop in resiliparse on a
20,000-deep page, a test step that spins forever), so the only way past them is the budget.
"""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice.clean.pipeline
import sluice.runtime.budget
import sluice.runtime.workers
from sluice.clean import CleanTask, clean_part
from sluice.clean.steps import Drop, Step
from sluice.config import CleaningSettings, ExtractionSettings
from sluice.ingest.raw import RAW_SCHEMA
from sluice.runtime.budget import ChildError
from tests.data_assets.test_cleaned import SENTENCES

PAGE = "<html><head><title>{title}</title></head><body><article><h1>{title}</h1>{paragraphs}</article></body></html>"


def page(index: int) -> bytes:
    rotated = SENTENCES[index % len(SENTENCES) :] + SENTENCES[: index % len(SENTENCES)]
    paragraphs = "".join(f"<p>{sentence}</p>" for sentence in rotated)
    paragraphs += f"<p>This is page number {index} of the story, kept for the test of the budget.</p>"
    return PAGE.format(title=f"Page {index} about the mill", paragraphs=paragraphs).encode()


def deep_page(depth: int = 20_000) -> bytes:
    return (b"<html><body>" + b"<div>" * depth + b"deep text " * 50 + b"</div>" * depth + b"</body></html>")


def raw_part(folder, contents: list[tuple[str, bytes]]) -> str:
    """A raw part file (RAW_SCHEMA) with these (doc_id, html) documents; returns its folder."""
    rows = [
        {
            "doc_id": doc_id, "source": "web", "snapshot": "s", "url": f"https://example.org/{doc_id}", "fetch_date": None,
            "content_type": "text/html", "content": html, "charset": "utf-8", "content_hash": str(index),
            "file": "f.warc.gz", "ordinal": index, "source_id": None,
        }
        for index, (doc_id, html) in enumerate(contents)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=RAW_SCHEMA), folder / "part-00000.parquet")
    return str(folder)


def clean(tmp_path, name: str, contents, **settings) -> tuple[dict, list[dict], list[dict]]:
    """clean_part on these documents: (result, kept rows, dropped rows)."""
    input_url = raw_part(tmp_path / name / "in", contents)
    output = tmp_path / name / "out"
    task = CleanTask(input_url, "part-00000.parquet", str(output), 0, CleaningSettings(**settings))
    result = clean_part(task)
    return result, pq.read_table(output / "part-00000.parquet").to_pylist(), pq.read_table(output / "dropped-00000.parquet").to_pylist()


def without(rows: list[dict], doc_ids: set[str]) -> list[dict]:
    return [row for row in rows if row["doc_id"] not in doc_ids]


def test_extraction_looping_in_c_is_dropped_and_the_part_goes_on(tmp_path):
    """resiliparse on a 20,000-deep tree (quadratic, ~25 s) run in-process: only the budget can stop it."""
    normal = [(f"d{i}", page(i)) for i in range(6)]
    contents = normal[:3] + [("deep", deep_page())] + normal[3:]
    settings = {"extraction": ExtractionSettings(isolate="never"), "step_cpu_budget_s": 0.5}

    result, kept, dropped = clean(tmp_path, "budgeted", contents, **settings)
    _, reference_kept, reference_dropped = clean(tmp_path, "reference", normal, **{**settings, "step_cpu_budget_s": None})

    [timed_out] = [row for row in dropped if row["doc_id"] == "deep"]
    assert (timed_out["step"], timed_out["reason"]) == ("extract", "step_timeout:extract")
    assert "0.5 s of CPU time" in timed_out["detail"]
    assert kept == reference_kept and len(kept) == 6
    assert without(dropped, {"deep"}) == reference_dropped
    stats = result["stats"]
    assert stats["drops"]["step_timeout:extract"] == 1
    assert stats["drops_by_step"]["extract"] == 1
    assert stats["documents_in"] == 7 and stats["documents_out"] == 6
    assert stats["reached"]["extract"] == 7 and stats["reached"]["length"] == 6
    assert result["budget_skips"] == 1


class Misbehaving(Step):
    """A test step: spins forever on the document `stuck` (a C-level loop of the `re` engine that cannot
    finish: exponential backtracking), ends its process on `crash`, raises on `broken`."""

    name = "misbehaving"
    PATTERN = re.compile(r"(a|a)*b")

    def apply(self, doc) -> Drop | None:
        if doc.doc_id == "stuck":
            while True:
                self.PATTERN.fullmatch("a" * 64)
        if doc.doc_id == "crash":
            os._exit(3)
        if doc.doc_id == "broken":
            raise ValueError("a bug in a step")
        return None


@pytest.fixture
def misbehaving_chain(monkeypatch):
    """build_steps with the test step right after extraction, in forked workers (they inherit the patch)."""
    original = sluice.clean.pipeline.build_steps

    def build_steps(settings, *args, **kwargs):
        steps = original(settings, *args, **kwargs)
        at = next(i for i, step in enumerate(steps) if step.name == "extract") + 1
        return steps[:at] + [Misbehaving()] + steps[at:]

    monkeypatch.setattr(sluice.clean.pipeline, "build_steps", build_steps)
    monkeypatch.setattr(sluice.runtime.budget, "START_METHOD", "fork")
    # Forking copies this process with its threads' locks: first stop the warm pool an earlier test left,
    # and the resident workers that were started without the patch (or, after the test, with it).
    sluice.runtime.workers.shutdown()
    sluice.runtime.budget.retire()
    yield
    sluice.runtime.budget.retire()


def test_a_step_that_never_returns_or_kills_its_process_costs_one_document(tmp_path, misbehaving_chain):
    normal = [(f"d{i}", page(i)) for i in range(80)]  # more than one chunk of 64: a restart redoes the rest
    contents = normal[:10] + [("stuck", page(100))] + normal[10:70] + [("crash", page(101))] + normal[70:]

    result, kept, dropped = clean(tmp_path, "budgeted", contents, step_cpu_budget_s=0.3)
    _, reference_kept, reference_dropped = clean(tmp_path, "reference", normal, step_cpu_budget_s=None)

    reasons = {row["doc_id"]: (row["step"], row["reason"]) for row in dropped}
    assert reasons["stuck"] == ("misbehaving", "step_timeout:misbehaving")
    assert reasons["crash"] == ("misbehaving", "step_crashed:misbehaving")
    assert kept == reference_kept and len(kept) == 80
    assert without(dropped, {"stuck", "crash"}) == reference_dropped
    assert result["stats"]["drops"]["step_timeout:misbehaving"] == 1
    assert result["stats"]["drops"]["step_crashed:misbehaving"] == 1
    assert result["stats"]["documents_in"] == 82


def test_an_exception_in_a_step_still_fails_the_task(tmp_path, misbehaving_chain):
    """...and its first line (what the command and the Dagster run's failure show) is the root cause and
    where it happened, the worker's traceback after it."""
    with pytest.raises(ChildError) as error:
        clean(tmp_path, "broken", [("d0", page(0)), ("broken", page(1))], step_cpu_budget_s=5)
    first, *rest = str(error.value).splitlines()
    assert first.startswith("ValueError: a bug in a step (in the worker, item 1, step ")
    assert rest[0].startswith("Traceback (most recent call last):")


def test_budgeted_and_unbudgeted_outputs_are_byte_identical(tmp_path):
    contents = [(f"d{i}", page(i)) for i in range(20)] + [("short", b"<p>too short</p>")]
    budgeted, _, _ = clean(tmp_path, "a", contents, step_cpu_budget_s=10)
    unbudgeted, _, _ = clean(tmp_path, "b", contents, step_cpu_budget_s=None)
    for name in ("part-00000.parquet", "dropped-00000.parquet"):
        assert (tmp_path / "a" / "out" / name).read_bytes() == (tmp_path / "b" / "out" / name).read_bytes()
    assert budgeted["stats"] == unbudgeted["stats"]
    if os.path.isdir("/proc"):
        assert budgeted["worker_cpu_s"] > 0 and unbudgeted["worker_cpu_s"] is None  # the worker's CPU time is counted


def resident_pids() -> list[int]:
    return [child.process.pid for child in sluice.runtime.budget._idle if child.owner == os.getpid() and child.process.is_alive()]


@pytest.fixture
def forked_workers(monkeypatch):
    """Budgeted workers forked from this process (they see a patched IDLE_EXIT_S), none resident before or after."""
    monkeypatch.setattr(sluice.runtime.budget, "START_METHOD", "fork")
    sluice.runtime.workers.shutdown()
    sluice.runtime.budget.retire()
    yield monkeypatch
    sluice.runtime.budget.retire()


def test_a_worker_lives_across_parts_and_a_dead_one_is_replaced(tmp_path, forked_workers):
    """A budgeted worker that finished a part stays for the next one (one process cleans both, and each part's
    files are byte-identical to an unbudgeted run's); one killed while idle is replaced by a new one."""
    import signal

    forked_workers.setattr(sluice.runtime.budget, "IDLE_EXIT_S", 600.0)
    contents = [(f"d{i}", page(i)) for i in range(12)]
    clean(tmp_path, "reference", contents, step_cpu_budget_s=None)
    pids = []
    for name in ("first", "second", "after-kill"):
        result, _, _ = clean(tmp_path, name, contents, step_cpu_budget_s=10)
        for output in ("part-00000.parquet", "dropped-00000.parquet"):
            assert (tmp_path / name / "out" / output).read_bytes() == (tmp_path / "reference" / "out" / output).read_bytes()
        if os.path.isdir("/proc"):
            assert result["worker_cpu_s"] > 0
        pids.append(resident_pids())
        if name == "second":
            os.kill(pids[-1][0], signal.SIGKILL)
            sluice.runtime.budget._idle[0].process.join(timeout=30)
    sluice.runtime.budget.retire()
    assert len(pids[0]) == 1 and pids[1] == pids[0]  # the same worker cleaned the second part
    assert len(pids[2]) == 1 and pids[2] != pids[1]  # a new one took over from the killed one
    assert resident_pids() == []


def test_an_idle_worker_exits_by_itself_and_the_next_part_gets_a_new_one(tmp_path, forked_workers):
    forked_workers.setattr(sluice.runtime.budget, "IDLE_EXIT_S", 0.5)
    contents = [(f"d{i}", page(i)) for i in range(3)]
    clean(tmp_path, "first", contents, step_cpu_budget_s=10)
    [idle] = [child for child in sluice.runtime.budget._idle if child.owner == os.getpid()]
    idle.process.join(timeout=60)
    assert idle.process.exitcode == 0  # it ended by itself (not killed), with no job in sight
    result, kept, _ = clean(tmp_path, "second", contents, step_cpu_budget_s=10)
    assert [row["doc_id"] for row in kept] == ["d0", "d1", "d2"]
    assert resident_pids() and resident_pids() != [idle.process.pid]


def test_a_worker_that_overran_is_not_kept(tmp_path, misbehaving_chain, monkeypatch):
    monkeypatch.setattr(sluice.runtime.budget, "IDLE_EXIT_S", 600.0)  # the survivor must still be there for the next part
    contents = [("d0", page(0)), ("stuck", page(1)), ("d2", page(2))]
    result, kept, _ = clean(tmp_path, "stuck", contents, step_cpu_budget_s=0.3)
    assert result["budget_skips"] == 1 and [row["doc_id"] for row in kept] == ["d0", "d2"]
    survivors = resident_pids()
    assert len(survivors) == 1  # the worker that resumed after the killed one, kept for the next part
    result, kept, _ = clean(tmp_path, "next", [("d3", page(3))], step_cpu_budget_s=0.3)
    assert [row["doc_id"] for row in kept] == ["d3"] and resident_pids() == survivors


def test_cpu_seconds_reads_this_process():
    before = sluice.runtime.budget.cpu_seconds(os.getpid())
    if before is None:
        pytest.skip("no /proc here: the budget falls back to wall-clock time")
    sum(i * i for i in range(3_000_000))
    assert sluice.runtime.budget.cpu_seconds(os.getpid()) > before


LONG_TMPDIR_PROBE = """
import os, sys, tempfile
from pathlib import Path
deep = Path(sys.argv[1])
os.environ["TMPDIR"] = str(deep)
tempfile.tempdir = None
from tests.sluice.runtime.test_budget import page, raw_part
from sluice.runtime.budget import _context
from sluice.clean import CleanTask, clean_part
from sluice.config import CleaningSettings
url = raw_part(deep / "in", [(f"d{i}", page(i)) for i in range(3)])
result = clean_part(CleanTask(url, "part-00000.parquet", str(deep / "out"), 0, CleaningSettings()))
print(_context().get_start_method(), result["stats"]["documents_out"])
"""


def test_a_temporary_folder_too_deep_for_a_unix_socket_still_cleans(tmp_path):
    """The forkserver's socket lives under $TMPDIR and a socket path has at most 107 bytes: workers are
    then spawned instead (the crash tests run with such a TMPDIR)."""
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT

    deep = tmp_path / ("x" * 60) / ("y" * 60)
    deep.mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-c", LONG_TMPDIR_PROBE, str(deep)], cwd=PROJECT_ROOT, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["spawn", "3"]


def loaded_models(queue) -> None:
    from sluice.clean.models import langid

    queue.put((sorted(langid._MODELS), "pandas" in __import__("sys").modules))


def test_budgeted_children_start_with_the_language_model_and_pandas_loaded():
    """The budget's forkserver preloads them (sluice.clean.models.langid_warm, workers.ARROW_LAZY): a cleaning child (one
    per worker process, and a new one after a kill) does not load the model or import pandas again."""
    from sluice.clean.models.langid import default_model_path

    if not default_model_path().is_file():
        pytest.skip("no default language-ID model (make setup fetches it)")
    sluice.runtime.workers.shutdown()  # a forkserver started by an earlier test may preload other modules
    context = sluice.runtime.budget._context()
    queue = context.Queue()
    child = context.Process(target=loaded_models, args=(queue,))
    child.start()
    models, has_pandas = queue.get(timeout=120)
    child.join(timeout=60)
    sluice.runtime.workers.shutdown()
    assert models == [str(default_model_path())]
    assert has_pandas
