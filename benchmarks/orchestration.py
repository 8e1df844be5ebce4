"""What orchestration costs: the same graph through the command line and through a UI-style backfill executed
by a running daemon, and how that cost grows with the number of partitions.

    python benchmarks/orchestration.py [--graphs demo e2e] [--partitions 10 100] [--per-run N]

Graphs: `demo`, the bundled sample with sluice.yaml (2 sources x 2 snapshots, 42 asset partitions); `e2e`,
benchmarks/end_to_end.py's 1x crawl (1 source x 4 snapshots, ~2,000 pages). Each is run on a fresh
DAGSTER_HOME (SQLite storage, the run-queue settings of deploy/dagster.yaml) and storage root, two ways:

(a) `sluice materialize` (the command starts Dagster's daemon, data_assets/daemon.py, for its duration);
(b) a UI-style asset backfill (every asset, every partition: what the UI's "Materialize all" submits) handed
    to a daemon that is already running (`make ui`); measured from the submission to the backfill's end.

Printed per run: wall seconds, CPU seconds of the process tree (command or daemon, code server, run
processes, step workers: /proc samples every 0.2 s and reaped rusage, the larger), the runs, the asset
partitions materialized, and the CPU outside steps (the tree's CPU while no step ran: process start-up and
code location loading of runs, Dagster's bookkeeping, the daemon's ticks). `--partitions N ...` adds a
synthetic crawl of N tiny partitions (2 sources x N/2 snapshots, one short page each) through (a), so the
fixed cost per run and per partition shows as partitions grow; `--per-run N` batches N partitions per run
there (`orchestration.max_partitions_per_run`, default 25).

Figures: `daemon_over_cli_wall` (goal <= 1.2), `orchestration_cpu_s_per_asset_partition` (goal <= 0.1; the
CPU outside steps divided by the asset partitions materialized, for each graph and path).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import end_to_end  # noqa: E402
from benchmarks.peers import figure  # noqa: E402

DATA = end_to_end.DATA / "orchestration"


def instance_yaml() -> str:
    """deploy/dagster.yaml's settings (run queue, concurrency) on SQLite storage (no Postgres server here)."""
    import yaml

    settings = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    settings.pop("storage", None)
    return yaml.safe_dump(settings, sort_keys=False)


def demo_config(work: Path) -> Path:
    import yaml

    raw = yaml.safe_load((ROOT / "sluice.yaml").read_text())
    raw["storage"] = {"root": str(work / "data")}
    for source in raw["sources"]:
        source["location"] = str(ROOT / source["location"])
    if raw.get("cleaning", {}).get("url_blocklist"):
        raw["cleaning"]["url_blocklist"] = str(ROOT / raw["cleaning"]["url_blocklist"])
    for mix in raw["mixes"].values():
        mix["eval_sets"] = [str(ROOT / path) for path in mix.get("eval_sets", [])]
    path = work / "sluice.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


WORDS = ["the", "of", "and", "to", "in", "that", "is", "was", "for", "with", "as", "on", "by", "at", "from", "this", "have", "which", "are", "not", "but", "be", "had", "one", "they", "you", "were", "their", "all", "there", "when", "would", "river", "bridge", "town", "council", "water", "winter", "market", "road", "school", "year", "people", "city", "report", "plan", "budget", "village", "field", "harvest", "weather", "station", "train", "museum", "garden", "library", "festival", "north", "south", "morning"]


def english_page(index: int) -> str:
    """A page of English words (stop words included), different for every index: kept by the default filters
    and no near duplicate of another."""
    rng = random.Random(index)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(8)]
    return " ".join(sentences)


def tiny_crawl(work: Path, partitions: int, per_run: int | None = None) -> Path:
    """2 sources x partitions/2 snapshots, one short JSONL page each; config with the e2e settings (and
    `orchestration.max_partitions_per_run: per_run` when given)."""
    import yaml

    crawl = work / "crawl"
    for index in range(partitions):
        source, snapshot = ("web", "reference")[index % 2], f"2026-{index // 2 + 1:04d}"
        folder = crawl / source / snapshot
        folder.mkdir(parents=True, exist_ok=True)
        text = english_page(index)
        (folder / "pages.jsonl").write_text(json.dumps({"id": f"{source}-{index}", "text": text}) + "\n")
    raw = yaml.safe_load(demo_config(work).read_text())
    raw["sources"] = [{"name": name, "location": str(crawl / name), "format": "jsonl"} for name in ("web", "reference")]
    raw["cleaning"] = {"min_chars": 10}
    raw["quality_model"] = {"positive_source": None}
    raw["perplexity_model"] = {"reference_source": None}
    if per_run is not None:
        raw["orchestration"] = {"max_partitions_per_run": per_run}
    raw["tokenizer"] = {**raw["tokenizer"], "vocab_size": 512, "train_sources": ["web", "reference"]}
    raw["mixes"]["default"].update(token_budget=70 * partitions, sequence_length=64, eval_sets=[])  # under one epoch of each source
    path = work / "sluice.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def fresh(name: str) -> tuple[Path, Path]:
    work = DATA / name
    shutil.rmtree(work, ignore_errors=True)
    home = work / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(instance_yaml())
    return work, home


def outside_steps(home: Path, timeline: list[tuple[float, int, int, float]]) -> dict[str, Any]:
    """Runs, asset partitions materialized, and the CPU of the tree while no step ran."""
    intervals, _, runs, _ = end_to_end.step_seconds(home)
    spans = {"steps": [span for stage_spans in intervals.values() for span in stage_spans]}
    cpu = end_to_end.cpu_per_stage(timeline, spans)
    os.environ["DAGSTER_HOME"] = str(home)
    from dagster import AssetKey, DagsterInstance

    with DagsterInstance.get() as instance:
        asset_partitions = sum(
            len({r.partition_key for r in instance.fetch_materializations(AssetKey(name), limit=10_000).records}) for name in STAGE_ASSETS
        )
    return {"runs": runs, "asset_partitions": asset_partitions, "cpu_outside_steps_s": cpu.get("outside steps", 0.0), "cpu_in_steps_s": cpu.get("steps", 0.0)}


STAGE_ASSETS = {
    "raw_documents", "quality_model", "perplexity_model", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters",
    "deduped_documents", "decontamination", "blocklist", "blocklist_matches", "tokenizer", "tokenized_shards", "mixed_dataset", "quality_report",
}


def via_command(name: str, config: Path, work: Path, home: Path) -> dict[str, Any]:
    env = {**os.environ, "SLUICE_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    measured = end_to_end.run_measured([sys.executable, "-m", "data_assets.cli", "materialize"], env, work / "command.log")
    return {"name": name, "path": "command", **measured, **outside_steps(home, measured.pop("rss_timeline"))}


def via_daemon(name: str, config: Path, work: Path, home: Path) -> dict[str, Any]:
    """Start the daemon, register and record inputs (`sluice register`), then submit what the UI's
    "Materialize all" submits and measure until the backfill ends."""
    env = {**os.environ, "SLUICE_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    subprocess.run([sys.executable, "-m", "data_assets.cli", "register"], cwd=ROOT, env=env, check=True, capture_output=True)
    with open(work / "daemon.log", "w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "data_assets.daemon", "run", "-w", str(ROOT / "workspace.yaml")], cwd=ROOT, env=env,
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(15)  # the daemon and its code server are up before the measured part
        sampled: dict[int, float] = {}
        timeline: list[tuple[float, int, int, float]] = []
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                tree = end_to_end.process_tree(daemon.pid)
                sampled.update({pid: cpu for pid, (_, cpu) in tree.items()})
                timeline.append((time.time(), 0, 0, sum(sampled.values())))

        base = sum(cpu for _, cpu in end_to_end.process_tree(daemon.pid).values())
        started = time.perf_counter()
        threading.Thread(target=sample, daemon=True).start()
        backfill_id = submit_all(env)
        wait_backfill(home, backfill_id)
        done.set()
        wall = time.perf_counter() - started
        cpu = sum(sampled.values()) - base
        timeline = [(when, rss, own, total - base) for when, rss, own, total in timeline]
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    return {"name": name, "path": "daemon", "wall_s": wall, "cpu_s": cpu, **outside_steps(home, timeline)}


SUBMIT_ALL = """
from dagster import DagsterInstance
from data_assets.backfill import submit
from data_assets.definitions import defs
from data_assets.freshness import Planner
with DagsterInstance.get() as instance:
    print(submit(instance, defs, Planner(defs, instance).plan(force=True), "ui-backfill"))
"""


def submit_all(env: dict[str, str]) -> str:
    """What the UI's "Materialize all" submits, from a process that loads this graph's code location (the
    definitions depend on the config: another graph's, imported here, would name other partitions)."""
    done = subprocess.run([sys.executable, "-c", SUBMIT_ALL], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1]


def wait_backfill(home: Path, backfill_id: str) -> None:
    from dagster import DagsterInstance

    from data_assets.backfill import DONE

    with DagsterInstance.from_config(str(home)) as instance:
        while instance.get_backfill(backfill_id).status not in DONE:
            time.sleep(0.5)
        status = instance.get_backfill(backfill_id).status
    if status.value != "COMPLETED_SUCCESS":
        raise RuntimeError(f"backfill {backfill_id} ended {status.value} (see {home})")


def report(result: dict[str, Any]) -> None:
    per = result["cpu_outside_steps_s"] / max(1, result["asset_partitions"])
    print(f"  {result['name']:10s} {result['path']:8s} wall {result['wall_s']:7.1f} s  CPU {result['cpu_s']:7.1f} s  runs {result['runs']:3d}  "
          f"asset partitions {result['asset_partitions']:4d}  CPU outside steps {result['cpu_outside_steps_s']:6.1f} s ({per:.3f} s each)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", nargs="*", default=["demo", "e2e"], choices=["demo", "e2e"])
    parser.add_argument("--partitions", nargs="*", type=int, default=[])
    parser.add_argument("--per-run", type=int, default=None, help="orchestration.max_partitions_per_run of the tiny crawls (default: the config's, 25)")
    args = parser.parse_args()
    print("orchestration: wall and CPU of the whole graph through `sluice materialize` and through a UI-style backfill on a running daemon")
    for graph in args.graphs:
        results = {}
        for path in ("command", "daemon"):
            work, home = fresh(f"{graph}-{path}")
            config = demo_config(work) if graph == "demo" else end_to_end.write_config(end_to_end.crawl(1), work, 1)
            run = via_command if path == "command" else via_daemon
            results[path] = run(graph, config, work, home)
            report(results[path])
        what = "bundled sample, sluice.yaml" if graph == "demo" else "1x synthetic crawl of benchmarks/end_to_end.py"
        figure(f"daemon_over_cli_wall_{graph}", results["daemon"]["wall_s"] / results["command"]["wall_s"], "<= 1.2", f"{what}, SQLite instance, 2 cores")
        for path, result in results.items():
            figure(f"orchestration_cpu_s_per_asset_partition_{graph}_{path}", result["cpu_outside_steps_s"] / max(1, result["asset_partitions"]),
                   "<= 0.1", f"{what}, {'sluice materialize' if path == 'command' else 'UI-style backfill on a running daemon'}")
    scaling = {}
    for partitions in args.partitions:
        work, home = fresh(f"tiny-{partitions}")
        scaling[partitions] = via_command(f"tiny-{partitions}", tiny_crawl(work, partitions, args.per_run), work, home)
        report(scaling[partitions])
    for partitions, result in scaling.items():
        suffix, per_run = ("", "") if args.per_run is None else (f"_per_run_{args.per_run}", f", {args.per_run} partitions per run")
        figure(f"orchestration_cpu_s_per_asset_partition_tiny_{partitions}{suffix}", result["cpu_outside_steps_s"] / max(1, result["asset_partitions"]),
               "<= 0.1", f"{partitions} one-page partitions (2 sources), sluice materialize{per_run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
