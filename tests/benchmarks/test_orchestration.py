"""benchmarks/orchestration.py (slow): the partition-scaling part on the smallest crawl, through the command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_benchmark_measures_a_tiny_crawl_through_the_command(tmp_path):
    env = {**os.environ, "SLUICE_BENCH_DATA": str(tmp_path)}
    done = subprocess.run([sys.executable, "benchmarks/orchestration.py", "--graphs", "--partitions", "2"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = re.search(r"tiny-2\s+command\s+wall\s+(\S+) s\s+CPU\s+(\S+) s\s+runs\s+(\d+)\s+asset partitions\s+(\d+)", done.stdout)
    assert line, done.stdout
    wall, cpu, runs, asset_partitions = float(line[1]), float(line[2]), int(line[3]), int(line[4])
    assert wall > 0 and cpu > 0 and runs >= 1
    assert asset_partitions >= 2 * 4  # raw, cleaned, deduped and tokenized of both partitions at least
    figures = dict(re.findall(r"^figure: (\S+?)\[.*\] = (\S+) ", done.stdout, re.MULTILINE))
    assert float(figures["orchestration_cpu_s_per_asset_partition_tiny_2"]) > 0
