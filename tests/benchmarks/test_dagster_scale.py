"""benchmarks/dagster_scale.py (slow): a consistent synthetic history plans nothing, at two sizes, and every
figure is printed."""

from __future__ import annotations

import re

import pytest

from tests.support.bench import run_benchmark


@pytest.mark.slow
def test_the_plan_and_ticks_are_measured_and_a_consistent_history_plans_nothing(tmp_path):
    out, figures = run_benchmark("dagster_scale.py", ["--sources", "2", "--snapshots", "2", "4"], tmp_path)
    lines = re.findall(r"2 sources x (\d) snapshots: (\d+) partitions, .* over (\d+) asset partitions, (\d+) selected", out)
    assert [(snapshots, partitions, selected) for snapshots, partitions, _, selected in lines] == [("2", "4", "0"), ("4", "8", "0")], out
    assert int(lines[1][2]) > int(lines[0][2])  # more asset partitions looked at
    assert {"dagster_scale_plan_cpu_s", "dagster_scale_automation_tick_cpu_s"} <= set(figures)
    assert re.search(r"^figure: dagster_scale_plan_cpu_per_partition_ratio_4_over_2 = \S+", out, re.MULTILINE), out
