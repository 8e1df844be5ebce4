"""Running a benchmark script as `make bench` does, with its data in a scratch folder, for the slow tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"^figure: (\S+?)\[.*\] = (\S+) ", re.MULTILINE)


def run_benchmark(script: str, args: list[str], data: Path, timeout: float = 1200) -> tuple[str, dict[str, str]]:
    """(stdout, figure name -> printed value) of `benchmarks/<script>` run with SLUICE_BENCH_DATA=`data`;
    fails the test with the output's tail when the script exits non-zero."""
    env = {**os.environ, "SLUICE_BENCH_DATA": str(data)}
    done = subprocess.run([sys.executable, f"benchmarks/{script}", *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, dict(FIGURE.findall(done.stdout))
