"""Shared helpers for the benchmark scripts: peer environments and the `figure:` line format.

Peers (datatrove, MosaicML Streaming, LitData) conflict with sluice's pins, so each lives in its own
virtual environment under `$SLUICE_BENCH_ENVS` (default `.bench_envs/` in the project root, git-ignored).
`peer_python` creates one on first use, under a file lock so two benchmark scripts never install into the
same environment at once, and returns its interpreter. Benchmark scripts run the peer's side in that
interpreter (a subprocess) and sluice's side in their own, on the same input, in one run.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The workplace's shared folder (../shared: the corpus, ENVIRONMENT.md); $SLUICE_SHARED names another one (a
# git worktree elsewhere, say). The benchmarks and the tests that read the corpus all take it from here.
SHARED = Path(os.environ.get("SLUICE_SHARED") or ROOT.parent / "shared")
ENVS_DIR = Path(os.environ.get("SLUICE_BENCH_ENVS", ROOT / ".bench_envs"))


def peer_python(name: str, requirements: Sequence[str], uninstall: Sequence[str] = ()) -> Path:
    """Interpreter of the peer environment `name` holding `requirements` (installed on first use)."""
    env = ENVS_DIR / name
    stamp = env / ".sluice-installed"
    wanted = json.dumps({"requirements": list(requirements), "uninstall": list(uninstall)}, sort_keys=True)
    ENVS_DIR.mkdir(parents=True, exist_ok=True)
    with open(ENVS_DIR / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text() == wanted):
            print(f"[peers] installing {name} into {env} (first use only) ...", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
            pip = [str(env / "bin" / "python"), "-m", "pip", "install", "-q"]
            subprocess.run([*pip, "-U", "pip"], check=True)
            subprocess.run([*pip, *requirements], check=True)
            if uninstall:
                subprocess.run([str(env / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", *uninstall], check=True)
            stamp.write_text(wanted)
    return env / "bin" / "python"


def datatrove_requirements() -> list[str]:
    """datatrove 0.10.1 and what the benchmarks' datatrove pipelines need (../shared/ENVIRONMENT.md): boto3 and
    botocore pinned (its aiobotocore pins botocore; unpinned, pip backtracks for many minutes), spaCy for its
    word splitting and MinHash shingles, and resiliparse at the version sluice runs, for the Resiliparse
    extractor the benchmarks give it (0.10.1 ships none), so both sides run the same extractor code."""
    from importlib.metadata import version

    return [
        "datatrove[processing,io,s3]==0.10.1",
        "boto3>=1.43.115,<1.43.118",
        "botocore>=1.43.115,<1.43.118",
        "spacy",
        f"resiliparse=={version('resiliparse')}",
    ]


def ensure_peer_package(python: Path, module: str, requirement: str) -> None:
    """Install `requirement` into a peer environment that cannot import `module` (under the peers' lock):
    an extra one benchmark needs, added without rebuilding the environment."""
    if subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0:
        return
    env = python.parent.parent
    with open(ENVS_DIR / f"{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        print(f"[peers] installing {requirement} into {env} ...", file=sys.stderr, flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)


def datatrove_python() -> Path:
    """Interpreter of the datatrove peer environment (one environment for every benchmark script)."""
    return peer_python("datatrove", datatrove_requirements())


def figure(name: str, value: float | str, goal: str, config: str | None = None) -> None:
    """Print one headline figure in the format every benchmark ends with:
    `figure: name[configuration measured] = value (goal ...)` (scripts/update_readme_figures.py reads it)."""
    shown = f"{value:.3g}" if isinstance(value, float) else str(value)
    label = f"{name}[{config}]" if config else name
    print(f"figure: {label} = {shown} (goal {goal})", flush=True)
