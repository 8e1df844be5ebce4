"""Resume inside a partition (issue 20): what a re-run costs after the run was SIGKILLed part-way.

Configuration: one source x snapshot partition (web/2026-02) of `--files` input files, local process pool
with `--workers` (2) workers, for each of `--stages` (raw_documents, cleaned_documents, dedup_signatures,
tokenized_shards; the stages before each are run once, uninterrupted, on a base storage root).

Input files of equal work: input file i is `--concat` K WARC files of `--crawl` (M files) joined end to end
(a gzipped WARC file is a sequence of gzip members), those starting at (i * K) mod M. With K = M / 2
(`--concat 7` on the shared corpus's 14 files) the files alternate between two fixed compositions, so any
even number of consecutive files holds the same records in the same proportions: the files left after a
kill are the same work as the files done. The benchmark prints the byte share of the files left.

The kill point is exact: with n = round(p * files), the stage runs in a child process that is SIGKILLed
(with its workers, its process group) once the completion records of tasks 0 .. n-1 all exist; records
of later tasks that finished meanwhile are then deleted, as if the kill had come just before their
(atomic) write. So exactly tasks 0 .. n-1 are done, and the re-run must run exactly the other files: the
benchmark checks the re-run's `tasks_run` = files - n and `tasks_reused` = n.

Measurement: each measured run (uninterrupted or re-run) is a fresh process (`--run`), measured the same
way: the CPU time of its whole process tree (RUSAGE_SELF + RUSAGE_CHILDREN: the run process, and the
forkserver and the pool's workers, which it stops and waits for) from the materialization's start to the
workers' exit. The process's start, imports and exit (~3 CPU s, the same for any run) are left out; the
fixed-cost line prints them too (os.wait4's rusage of the process). The repeats are interleaved: each
repeat runs the stage uninterrupted, then for each kill point kills a run and re-runs it, and its shares
divide by that repeat's uninterrupted run; the figure is the median over `--repeats` (>= 3) repeats, so a
change of machine load between the two sides moves one repeat's share, not the figure. Load averages are
printed with each run.

Figures: `rerun_work_share` = re-run CPU / uninterrupted run CPU (goal <= 0.55 at 50 %, <= 0.15 at 90 %),
`outputs_identical` = 1 when every re-run's published files and completion records are byte-identical to
the uninterrupted run's. Also printed: a re-run with every task recorded but the manifest not written (a
kill after the last task: nothing left to run): the fixed cost a run pays whatever is left (Dagster's run, the workers' start, verifying every reused output's
SHA-256). The share is about (files left) + (fixed cost) / (full run).

    .venv/bin/python benchmarks/resume.py --crawl ../shared/corpus/web/2026-02 --concat 7 --stages raw_documents
    # the later stages on distinct pages (copies of the same files leave tokenization nothing after dedup):
    .venv/bin/python -m benchmarks.synth_crawl --scale 1.02 --snapshots 1 --pages-per-file 10 --out .bench_data/synth-204
    .venv/bin/python benchmarks/resume.py --crawl .bench_data/synth-204/web/2025-01 --repeats 1 --stages cleaned_documents dedup_signatures tokenized_shards
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.crash_harness import wait_group_gone  # noqa: E402
from benchmarks.peers import figure  # noqa: E402

WORK = Path(os.environ.get("SLUICE_BENCH_DATA", ROOT / ".bench_data")) / "resume"  # git-ignored
PARTITION = "web|2026-02"
FOLDER = Path("source=web") / "snapshot=2026-02"
# The graph up to tokenized_shards; global dedup needs the partitions it orders before web/2026-02 (the
# sample's) in the dedup index first.
ORDER = [
    "raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents",
    "tokenizer", "tokenized_shards",
]
EARLIER = ("reference|2026-01", "web|2026-01", "reference|2026-02")
# What each measured stage writes for web/2026-02: its dataset, side dataset and completion records.
WRITTEN = {
    "raw_documents": ("raw_documents", "raw_quarantine", "raw_documents_tasks"),
    "cleaned_documents": ("cleaned_documents", "cleaned_dropped", "cleaned_documents_tasks"),
    "dedup_signatures": ("dedup_signatures", "dedup_shingles", "dedup_signatures_tasks"),
    "tokenized_shards": ("tokenized_shards", "tokenized_binary", "tokenized_shards_tasks"),
}
GOALS = {0.5: "<= 0.55", 0.9: "<= 0.15"}


def cpu_seconds() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def child_main(config: str, stage: str, partition: str, out: str) -> None:
    """`--run`: materialize `stage` of `partition` in this (fresh) process; write to `out` the CPU time of
    this process and its waited-for descendants when the materialization started and once the workers
    have exited, and the materialization's metadata."""
    from dagster import DagsterInstance, materialize

    from data_assets.cli import register_snapshots
    from data_assets.definitions import ASSETS, build_resources
    from data_assets.partitions import multi_key
    from sluice.runtime import workers

    resources = build_resources(config)
    key = multi_key(*partition.split("|")) if partition != "-" else None
    with DagsterInstance.ephemeral() as instance:
        register_snapshots(instance, resources)
        ready = cpu_seconds()
        result = materialize(
            ASSETS, selection=[stage], partition_key=key, instance=instance, resources=resources,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )
        workers.shutdown()  # stops and waits for the forkserver and the workers: their CPU is in RUSAGE_CHILDREN
        end = cpu_seconds()
    metadata = {}
    if result.success:
        event = result.get_asset_materialization_events()[0]
        items = event.event_specific_data.materialization.metadata.items()
        metadata = {k: v.value for k, v in items if isinstance(getattr(v, "value", None), int | float | str)}
    Path(out).write_text(json.dumps({"ready": ready, "end": end, "success": result.success, "metadata": metadata}))


@dataclass
class Run:
    cpu: float  # the process tree's CPU seconds from the materialization's start to the workers' exit
    lifetime_cpu: float  # the same from the process's start to its exit (start, imports and exit included)
    metadata: dict


def run_stage(config: str, stage: str, partition: str = PARTITION) -> Run:
    """Run `stage` of `partition` in a fresh process and measure its process tree's CPU time."""
    out = Path(config).parent / "run.json"
    out.unlink(missing_ok=True)
    with open(Path(config).parent / "run.log", "ab") as log:
        child = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--run", config, stage, partition, str(out)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=log,
        )
        _, status, usage = os.wait4(child.pid, 0)  # the tree's rusage: the child and what it waited for
        child.returncode = os.waitstatus_to_exitcode(status)
    report = json.loads(out.read_text()) if out.exists() else {"success": False}
    if child.returncode != 0 or not report["success"]:
        raise SystemExit(f"{stage} {partition} failed (exit {child.returncode}); see {log.name}")
    return Run(report["end"] - report["ready"], usage.ru_utime + usage.ru_stime, report["metadata"])


def record_parts(records: Path) -> set[int]:
    if not records.is_dir():
        return set()
    return {int(name[5:10]) for name in os.listdir(records) if name.startswith("task-") and name.endswith(".json")}


def kill_after(config: str, stage: str, records: Path, done: int) -> int:
    """Run `stage` in a child process; SIGKILL its process group once tasks 0 .. done-1 all have records,
    then delete later tasks' records. Returns how many later records were deleted."""
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.crash_harness", config, stage, PARTITION],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    wanted = set(range(done))
    while child.poll() is None:
        if wanted <= record_parts(records):
            os.killpg(child.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    _, err = child.communicate()
    if child.returncode != -signal.SIGKILL:
        raise SystemExit(f"the run ended before it could be killed: {err[-2000:]}")
    wait_group_gone(child.pid)  # its workers too, so the records listed below are final
    later = sorted(record_parts(records) - wanted)
    for part in later:  # finished after task done-1: as if the kill had come before their record's write
        (records / f"task-{part:05d}.json").unlink()
    if record_parts(records) != wanted:
        raise SystemExit(f"records after the kill: {sorted(record_parts(records))}, expected tasks 0..{done - 1}")
    return len(later)


def tree(root: Path, folders: tuple[str, ...]) -> dict[str, str]:
    """SHA-256 of every file of `folders` for web/2026-02 (hashlib.file_digest, as sluice.io.layout.sha256_file)."""
    digests = {}
    for folder in folders:
        for path in sorted((root / folder / FOLDER).rglob("*")):
            if path.is_file():
                with open(path, "rb") as handle:
                    digests[str(path.relative_to(root))] = hashlib.file_digest(handle, "sha256").hexdigest()
    return digests


def make_crawl(source: Path, files: int, target: Path, concat: int = 1) -> tuple[Path, list[int]]:
    """`files` input files in `target`/web/2026-02, file i being the `concat` WARC files of `source` from
    (i * concat) mod M on, and the sample's web/2026-01 (ordered before it by global dedup). Returns the
    crawl's location and the input files' sizes in part order."""
    snapshot = target / "web" / "2026-02"
    if not (snapshot.is_dir() and len(list(snapshot.iterdir())) == files):
        shutil.rmtree(target, ignore_errors=True)
        snapshot.mkdir(parents=True)
        originals = sorted(source.glob("*.warc.gz"))
        for index in range(files):
            parts = [originals[(index * concat + offset) % len(originals)] for offset in range(concat)]
            with open(snapshot / f"{index:05d}-{parts[0].name}", "wb") as out:
                for part in parts:
                    out.write(part.read_bytes())  # gzip members in a row: one WARC file of all their records
        shutil.copytree(ROOT / "sample_data" / "web" / "2026-01", target / "web" / "2026-01")
    return target / "web", [path.stat().st_size for path in sorted(snapshot.iterdir())]


def make_config(folder: Path, crawl: Path, workers: int) -> str:
    from benchmarks.sample_config import base_config, write_config

    folder.mkdir(parents=True, exist_ok=True)
    raw = base_config(str(folder / "data"))
    raw["sources"] = [{**s, "location": str(crawl)} if s["name"] == "web" else s for s in raw["sources"]]
    raw["compute"] = {"backend": "local", "max_workers": workers}
    return write_config(folder / "sluice.yaml", raw)


def build_upto(config: str, stage: str, done: list[str]) -> None:
    """Run the stages before `stage` (and `stage`) uninterrupted on the base root, those not yet in `done`."""
    for name in ORDER[len(done) : ORDER.index(stage) + 1]:
        earlier = EARLIER if name.startswith("dedup") or name == "deduped_documents" else ()
        if name == "dedup_signatures":  # the earlier partitions' raw and cleaned stages too
            for partition in EARLIER:
                run_stage(config, "raw_documents", partition)
                run_stage(config, "cleaned_documents", partition)
        for partition in earlier:
            run_stage(config, name, partition)
        run_stage(config, name, "-" if name == "tokenizer" else PARTITION)
        done.append(name)


def copy_without(base: Path, target: Path, stage: str, keep_records: bool = False) -> None:
    """Copy the base storage root but `stage`'s outputs and records for web/2026-02 (all of it, with
    `keep_records`)."""
    skipped = set() if keep_records else {base / folder / FOLDER for folder in WRITTEN[stage]}
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(base, target, ignore=lambda folder, names: [n for n in names if Path(folder) / n in skipped])


def load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def measure_stage(args: argparse.Namespace, stage: str, base: Path, crawl: Path, sizes: list[int], name: str) -> None:
    """Interleaved repeats of (uninterrupted run, then a killed run and its re-run per kill point)."""
    written = WRITTEN[stage]
    started = cpu_seconds()
    reference = tree(base / "data", written)  # hashes what a re-run's verification hashes (+ the records)
    hashed = sum((base / "data" / key).stat().st_size for key in reference)
    print(f"{name}: hashing the stage's {len(reference)} files ({hashed / 2**20:.0f} MiB) once takes {cpu_seconds() - started:.2f} CPU s")
    folder = WORK / "run"
    # Every task recorded, the manifest not yet written (a kill after the last task): nothing left to run.
    copy_without(base / "data", folder / "data", stage, keep_records=True)
    (folder / "data" / written[0] / FOLDER / "_manifest.json").unlink()
    fixed = run_stage(make_config(folder, crawl, args.workers), stage)
    if fixed.metadata.get("tasks_reused", 0) == 0:
        raise SystemExit(f"{stage} reused no task: {fixed.metadata}")
    print(
        f"  a re-run with every task recorded: {fixed.cpu:.2f} CPU s ({fixed.lifetime_cpu:.2f} with the process's "
        f"start, imports and exit), load {load()}",
        flush=True,
    )
    shares: dict[float, list[float]] = {share: [] for share in args.kill_at}
    identical = True
    for repeat in range(args.repeats):
        copy_without(base / "data", folder / "data", stage)
        config = make_config(folder, crawl, args.workers)
        full = run_stage(config, stage)
        total = full.metadata["tasks_run"]
        identical &= tree(folder / "data", written) == reference
        print(f"  repeat {repeat + 1}: uninterrupted run {full.cpu:.1f} CPU s, {total} tasks (load {load()})", flush=True)
        for share in args.kill_at:
            done = round(share * total)
            copy_without(base / "data", folder / "data", stage)
            config = make_config(folder, crawl, args.workers)
            deleted = kill_after(config, stage, folder / "data" / written[-1] / FOLDER, done)
            rerun = run_stage(config, stage)
            counts = (rerun.metadata["tasks_run"], rerun.metadata["tasks_reused"])
            if counts != (total - done, done):
                raise SystemExit(f"the re-run ran {counts[0]} tasks and reused {counts[1]}; expected {total - done} and {done}")
            same = tree(folder / "data", written) == reference
            identical &= same
            left = f", {sum(sizes[done:]) / sum(sizes):.3f} of the input bytes" if stage == "raw_documents" else ""
            shares[share].append(rerun.cpu / full.cpu)
            print(
                f"    killed after tasks 0..{done - 1} ({deleted} later records deleted): the re-run ran {total - done} "
                f"tasks{left}, reused {done}: {rerun.cpu:.2f} CPU s, share {rerun.cpu / full.cpu:.3f}, "
                f"identical {int(same)} (load {load()})",
                flush=True,
            )
    label = f"{name}, median of {args.repeats} interleaved repeats"
    for share, values in shares.items():
        print(f"  killed at {share:.0%}: shares {' / '.join(f'{v:.3f}' for v in values)}", flush=True)
        figure(f"rerun_work_share (killed at {share:.0%})", statistics.median(values), GOALS.get(share, "< 1"), label)
    figure("outputs_identical", int(identical), "1", label)


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--run":
        return child_main(*sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=204, help="input files in the partition (>= 200 for the figures)")
    parser.add_argument("--crawl", type=Path, default=ROOT / "sample_data" / "web" / "2026-02", help="WARC files to copy")
    parser.add_argument("--stages", nargs="+", default=["raw_documents"], choices=list(WRITTEN))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill-at", type=float, nargs="+", default=[0.5, 0.9])
    parser.add_argument("--concat", type=int, default=1, help="WARC files of --crawl concatenated into each input file")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved (uninterrupted, killed + re-run) repeats")
    args = parser.parse_args()

    key = hashlib.sha256(str(args.crawl.resolve()).encode()).hexdigest()[:8]
    crawl, sizes = make_crawl(args.crawl, args.files, WORK / f"crawl-{key}-x{args.concat}", args.concat)
    base = WORK / "base"
    shutil.rmtree(base, ignore_errors=True)
    config = make_config(base, crawl, args.workers)
    origin = "/".join(args.crawl.resolve().parts[-3:])  # e.g. sample_data/web/2026-02, corpus/web/2026-02
    made = f"{origin}, {args.concat} concatenated" if args.concat > 1 else origin
    print(f"load average at the start {load()} (1/5/15 min, {os.cpu_count()} cores)", flush=True)
    done: list[str] = []
    for stage in sorted(args.stages, key=ORDER.index):
        build_upto(config, stage, done)
        name = f"{stage}, {args.files} WARC files of {sum(sizes) / len(sizes) / 2**10:.0f} KiB on average ({made}), {args.workers} workers"
        measure_stage(args, stage, base, crawl, sizes, name)


if __name__ == "__main__":
    main()
