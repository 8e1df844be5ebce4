"""Resume inside a partition (issue 20): what a re-run costs after the run was SIGKILLed part-way.

Configuration: one source x snapshot partition of `--files` crawl files (copies of the WARC files in
`--crawl`, each copy its own input file; with `--concat K` each input file is K of them concatenated, K
times the size: a gzipped WARC file is a sequence of gzip members, one per record), each of `--stages`
(raw_documents, then cleaned_documents on the uninterrupted raw output), local process pool with 2
workers. For each stage and kill point p (50 %, 90 %):

1. the stage runs in a child process, which is SIGKILLed (with its workers) once p of the partition's tasks
   have completion records;
2. the stage runs again, in this process, and its CPU time (this process + its waited-for workers) is
   measured, as is an uninterrupted run's on a fresh storage root. Each measured run starts its worker
   processes cold (sluice.workers' forkserver and pool stopped before) and ends by stopping them, so
   their CPU time, start-up included, is reaped into this process's RUSAGE_CHILDREN.

Figures: `rerun_work_share` = re-run CPU / uninterrupted run CPU (goal <= 0.55 at 50 %, <= 0.15 at 90 %),
and `outputs_identical` = 1 when the re-run's published files (and completion records) are byte-identical
to the uninterrupted run's. Both runs include Dagster's per-run overhead and the re-run's verification of
the reused outputs (SHA-256 of each); imports are done before measuring. Also printed: a re-run with every
task recorded (nothing left to run), i.e. the fixed cost a run pays whatever is left: Dagster's run, the
worker processes' start (forkserver imports) and the verification of every reused output.

The share is about (what was left) + (fixed cost) / (full run), so the fixed cost (~1 CPU s) weighs with
the partition's size: crawl files of Common Crawl are ~1 GB each, the bundled sample's ~100 KiB and the
shared corpus's ~730 KiB; `--concat 8` makes 204 files of ~5.7 MiB (still ~170 times smaller than a
Common Crawl WARC file).

    .venv/bin/python benchmarks/resume.py [--files 204] [--stages raw_documents cleaned_documents] [--crawl DIR] [--concat K]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.peers import figure  # noqa: E402
from tests.crash_harness import wait_group_gone  # noqa: E402

WORK = Path(os.environ.get("SLUICE_BENCH_DATA", ROOT / ".bench_data")) / "resume"  # git-ignored


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def make_crawl(source: Path, files: int, target: Path, concat: int = 1) -> Path:
    """`files` input files in `target`/web/2026-02, each `concat` of the WARC files in `source` (in turn)."""
    snapshot = target / "web" / "2026-02"
    if snapshot.is_dir() and len(list(snapshot.iterdir())) == files:
        return target / "web"
    shutil.rmtree(target, ignore_errors=True)
    snapshot.mkdir(parents=True)
    originals = sorted(source.glob("*.warc.gz"))
    for index in range(files):
        parts = [originals[(index * concat + offset) % len(originals)] for offset in range(concat)]
        if concat == 1:
            shutil.copy2(parts[0], snapshot / f"{index:05d}-{parts[0].name}")
            continue
        with open(snapshot / f"{index:05d}-{parts[0].name}", "wb") as out:
            for part in parts:
                out.write(part.read_bytes())  # gzip members in a row: one WARC file of all their records
    return target / "web"


def make_config(folder: Path, crawl: Path, workers: int) -> str:
    from tests.conftest import base_config, write_config

    folder.mkdir(parents=True, exist_ok=True)
    raw = base_config(str(folder / "data"))
    raw["sources"] = [{**s, "location": str(crawl)} if s["name"] == "web" else s for s in raw["sources"]]
    raw["compute"] = {"backend": "local", "max_workers": workers}
    return write_config(folder / "sluice.yaml", raw)


def run_stage(config: str, stage: str) -> tuple[float, dict]:
    """Materialize `stage` of web/2026-02 here; (CPU seconds, metadata)."""
    from dagster import DagsterInstance, materialize

    from data_assets.cli import register_snapshots
    from data_assets.definitions import ASSETS, build_resources
    from data_assets.partitions import multi_key
    from sluice import workers

    resources = build_resources(config)
    with DagsterInstance.ephemeral() as instance:
        register_snapshots(instance, resources)
        workers.shutdown()  # each measured run starts its worker processes cold, as a fresh run process does
        started = cpu_seconds()
        result = materialize(
            ASSETS, selection=[stage], partition_key=multi_key("web", "2026-02"), instance=instance, resources=resources,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )
        workers.shutdown()  # waits for the workers and their forkserver: their CPU time is in RUSAGE_CHILDREN
        spent = cpu_seconds() - started
    if not result.success:
        raise SystemExit(f"{stage} failed")
    event = result.get_asset_materialization_events()[0]
    return spent, {k: getattr(v, "value", v) for k, v in event.event_specific_data.materialization.metadata.items()}


def kill_at(config: str, stage: str, records: Path, count: int) -> int:
    """Run `stage` in a child process; SIGKILL its process group once `count` tasks have records."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.crash_harness", config, stage, "web|2026-02"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    while child.poll() is None:
        if records.is_dir() and sum(1 for p in records.iterdir() if p.name.startswith("task-")) >= count:
            os.killpg(child.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    _, err = child.communicate()
    if child.returncode != -signal.SIGKILL:
        raise SystemExit(f"the run ended before it could be killed: {err[-2000:]}")
    wait_group_gone(child.pid)  # its workers too, so the records counted below are final
    return sum(1 for p in records.iterdir() if p.name.startswith("task-"))


def tree(root: Path, folders: tuple[str, ...]) -> dict[str, str]:
    digests = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file():
                digests[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=204, help="input files in the partition (>= 200 for the figures)")
    parser.add_argument("--crawl", type=Path, default=ROOT / "sample_data" / "web" / "2026-02", help="WARC files to copy")
    parser.add_argument("--stages", nargs="+", default=["raw_documents", "cleaned_documents"], choices=["raw_documents", "cleaned_documents"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill-at", type=float, nargs="+", default=[0.5, 0.9])
    parser.add_argument("--concat", type=int, default=1, help="WARC files of --crawl concatenated into each input file")
    args = parser.parse_args()

    key = hashlib.sha256(str(args.crawl.resolve()).encode()).hexdigest()[:8]
    crawl = make_crawl(args.crawl, args.files, WORK / (f"crawl-{key}" + (f"-x{args.concat}" if args.concat > 1 else "")), args.concat)
    base = WORK / "base"
    shutil.rmtree(base, ignore_errors=True)
    config = make_config(base, crawl, args.workers)
    size = sum(p.stat().st_size for p in crawl.rglob("*.warc.gz")) / args.files / 2**10
    for stage in ORDER[: ORDER.index(max(args.stages, key=ORDER.index)) + 1]:
        full_cpu, _ = run_stage(config, stage)
        if stage in args.stages:
            origin = "/".join(args.crawl.resolve().parts[-3:])  # e.g. sample_data/web/2026-02, corpus/web/2026-02
            made = f"{origin}, {args.concat} concatenated" if args.concat > 1 else origin
            name = f"{stage}, {args.files} WARC files of {size:.0f} KiB on average ({made}), {args.workers} workers"
            measure_stage(args, stage, crawl, full_cpu, name)


ORDER = ["raw_documents", "cleaned_documents"]


def measure_stage(args: argparse.Namespace, stage: str, crawl: Path, full_cpu: float, name: str) -> None:
    """Kill runs of `stage` at each point on copies of the base root (upstream stages done), re-run them."""
    base = WORK / "base"
    written = WRITTEN[stage]
    reference = tree(base / "data", written)
    fixed_cpu, _ = run_stage(str(base / "sluice.yaml"), stage)  # every task recorded: nothing left to run
    print(f"{name}: uninterrupted run {full_cpu:.1f} CPU s; a re-run with every task recorded {fixed_cpu:.2f} CPU s")
    goals = {0.5: "<= 0.55", 0.9: "<= 0.15"}
    for share in args.kill_at:
        folder = WORK / f"killed-{int(share * 100)}"
        shutil.rmtree(folder, ignore_errors=True)
        config = make_config(folder, crawl, args.workers)
        copy_upstream(base / "data", folder / "data", stage)
        records = folder / "data" / f"{stage}_tasks" / "source=web" / "snapshot=2026-02"
        done = kill_at(config, stage, records, int(share * args.files))
        rerun_cpu, metadata = run_stage(config, stage)
        identical = tree(folder / "data", written) == reference
        print(
            f"  killed at {share:.0%} ({done} of {args.files} tasks recorded): re-run ran {metadata['tasks_run']} tasks, "
            f"reused {metadata['tasks_reused']}, {rerun_cpu:.1f} CPU s"
        )
        config_name = f"{name}, killed at {share:.0%}"
        figure(f"rerun_work_share ({config_name})", rerun_cpu / full_cpu, goals.get(share, "< 1"))
        figure(f"outputs_identical ({config_name})", int(identical), "1")


def copy_upstream(source: Path, target: Path, stage: str) -> None:
    """Copy a storage root without what `stage` and the stages after it write."""
    downstream = {name for later in ORDER[ORDER.index(stage) :] for name in WRITTEN[later]}
    shutil.copytree(source, target, ignore=lambda folder, names: [n for n in names if Path(folder) == source and n in downstream])


# What each stage writes: its dataset, side dataset and completion records (compared byte for byte).
WRITTEN = {
    "raw_documents": ("raw_documents", "raw_quarantine", "raw_documents_tasks"),
    "cleaned_documents": ("cleaned_documents", "cleaned_dropped", "cleaned_documents_tasks"),
}

if __name__ == "__main__":
    main()
