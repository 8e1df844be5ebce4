"""benchmarks/orchestration.py (slow): the partition-scaling part on the smallest crawl, through the command."""

from __future__ import annotations

import re

import pytest

from tests.support.bench import run_benchmark


@pytest.mark.slow
def test_the_benchmark_measures_a_tiny_crawl_through_the_command(tmp_path):
    out, figures = run_benchmark("orchestration.py", ["--graphs", "--partitions", "2"], tmp_path)
    line = re.search(r"tiny-2\s+command\s+wall\s+(\S+) s\s+CPU\s+(\S+) s\s+runs\s+(\d+)\s+asset partitions\s+(\d+)", out)
    assert line, out
    wall, cpu, runs, asset_partitions = float(line[1]), float(line[2]), int(line[3]), int(line[4])
    assert wall > 0 and cpu > 0 and runs >= 1
    assert asset_partitions >= 2 * 4  # raw, cleaned, deduped and tokenized of both partitions at least
    assert float(figures["orchestration_cpu_s_per_asset_partition_tiny_2"]) > 0
