"""benchmarks/dagster_run_floor.py (slow): no-op backfills batched as asked, measured per run."""

from __future__ import annotations

import re

import pytest

from tests.support.bench import run_benchmark


@pytest.mark.slow
def test_the_floor_is_measured_per_run_of_each_batching(tmp_path):
    out, figures = run_benchmark("dagster_run_floor.py", ["--partitions", "2", "--per-run", "1", "2", "--idle-s", "8"], tmp_path)
    lines = re.findall(r"2 partitions, (\d) per run: (\w+), (\d+) runs, wall \S+ s, CPU beyond idle (\S+) s = (\S+) s per run", out)
    assert [(per_run, status, runs) for per_run, status, runs, _, _ in lines] == [("1", "COMPLETED_SUCCESS", "2"), ("2", "COMPLETED_SUCCESS", "1")], out
    per_run_cpu = [float(value) for *_, value in lines]
    assert all(cpu > 0 for cpu in per_run_cpu)
    assert float(figures["dagster_noop_run_cpu_s"]) == pytest.approx(min(per_run_cpu), rel=0.01)
