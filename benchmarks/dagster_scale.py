"""What deciding the work costs as partitions grow: `sluice materialize`'s plan and one automation tick over a
long history, with tiny data (no stage runs).

    python benchmarks/dagster_scale.py [--sources 10] [--snapshots 10 30 100]

For each size a fresh SQLite instance (deploy/dagster.yaml's settings, its folder on tmpfs where there is one,
so that SQLite's fsync per event does not dominate the history's setup) gets a synthetic, consistent history:
for every asset of the code location in topological order and every partition (sources x snapshots), one
runless materialization (observation, for the observable settings and crawl assets) with a data version, the
asset's code version and Dagster's provenance tags (each input's data version and event pointer), as a run
would have left them. Nothing is stale then, so the plan looks at every asset partition's stale causes, the
costly path. Measured in a fresh process per size (CPU of this process: SQLite runs in it):

- `sluice materialize`'s plan (data_assets/freshness.Planner, which backfills are built from; 0 selected
  expected), and
- two automation ticks (`dagster.evaluate_automation_conditions`, the evaluator the daemon's tick runs):
  the first one (no cursor) and the next (with the first one's cursor), the steady state.

Figures per size: `dagster_scale_plan_cpu_s[S sources x N snapshots]` and
`dagster_scale_automation_tick_cpu_s[...]` (goal at 10 x 1,000: a plan within a minute, a tick under
Dagster's 30 s tick interval), and the per-partition ratios of the largest size over the smallest
(goal <= 1.2: cost at most linear in the partitions). Writing the history costs ~10 ms of CPU per event
(Dagster's event write), so 10 x 1,000 (~100,000 events) takes about 20 minutes before anything is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.orchestration import demo_config, instance_yaml  # noqa: E402
from benchmarks.peers import figure  # noqa: E402


def scale_config(work: Path, sources: int) -> Path:
    """`sources` JSONL sources with empty crawl folders, the demo's other settings, one mix over all."""
    import yaml

    raw = yaml.safe_load(demo_config(work).read_text())
    names = [f"s{index:02d}" for index in range(sources)]
    for name in names:
        (work / "crawl" / name).mkdir(parents=True, exist_ok=True)
    raw["sources"] = [{"name": name, "location": str(work / "crawl" / name), "format": "jsonl"} for name in names]
    raw["cleaning"] = {"min_chars": 10}
    raw["quality_model"] = {"positive_source": None}
    raw["perplexity_model"] = {"reference_source": None}
    raw["tokenizer"] = {**raw["tokenizer"], "train_sources": names}
    raw["mixes"] = {"default": {**raw["mixes"]["default"], "weights": dict.fromkeys(names, 1.0 / sources), "eval_sets": []}}
    path = work / "sluice.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def snapshot_names(count: int) -> list[str]:
    return [f"{2000 + index // 12:04d}-{index % 12 + 1:02d}" for index in range(count)]


def write_history(instance, defs, snapshots: list[str]) -> int:
    """One event per asset partition, in topological order, with Dagster's provenance tags; returns the count."""
    from dagster import AssetMaterialization, AssetObservation
    from dagster._core.definitions.data_version import (
        CODE_VERSION_TAG,
        DATA_VERSION_TAG,
        get_input_data_version_tag,
        get_input_event_pointer_tag,
    )

    from data_assets.partitions import SNAPSHOTS

    instance.add_dynamic_partitions(SNAPSHOTS, snapshots)
    graph = defs.resolve_asset_graph()
    latest: dict = {}  # asset -> (storage id, data version) of its latest event
    events = 0
    for key in graph.toposorted_asset_keys:
        node = graph.get(key)
        if not (node.is_materializable or node.is_observable):
            continue
        partitions = node.partitions_def.get_partition_keys(dynamic_partitions_store=instance) if node.partitions_def else [None]
        version = f"{key.to_user_string()}-v1"
        tags = {DATA_VERSION_TAG: version, CODE_VERSION_TAG: node.code_version or ""}
        for parent in node.parent_keys:
            if parent in latest:
                tags[get_input_data_version_tag(parent)] = latest[parent][1]
                tags[get_input_event_pointer_tag(parent)] = str(latest[parent][0])
        kind = AssetMaterialization if node.is_materializable else AssetObservation
        for partition in partitions:
            instance.report_runless_asset_event(kind(asset_key=key, partition=partition, tags=tags))
            events += 1
        records = (instance.fetch_materializations if node.is_materializable else instance.fetch_observations)(key, limit=1).records
        latest[key] = (records[0].storage_id, version)
    return events


def child(sources: int, snapshots: int) -> dict:
    """In a process whose SLUICE_CONFIG and DAGSTER_HOME the parent set: history, plan, two ticks."""
    from dagster import DagsterInstance, evaluate_automation_conditions

    from data_assets.definitions import defs
    from data_assets.freshness import Planner

    with DagsterInstance.get() as instance:
        start = time.perf_counter()
        events = write_history(instance, defs, snapshot_names(snapshots))
        history_s = time.perf_counter() - start
        cpu, wall = time.process_time(), time.perf_counter()
        plan = Planner(defs, instance).plan()
        plan_cpu, plan_wall = time.process_time() - cpu, time.perf_counter() - wall
        ticks = []
        cursor = None
        for _ in range(2):
            cpu = time.process_time()
            result = evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
            ticks.append({"cpu_s": time.process_time() - cpu, "requested": result.total_requested})
            cursor = result.cursor
    return {
        "sources": sources, "snapshots": snapshots, "events": events, "history_s": history_s,
        "plan_cpu_s": plan_cpu, "plan_wall_s": plan_wall, "plan_selected": plan.count, "plan_checked": plan.checked,
        "plan_reasons": plan.lines(), "ticks": ticks,
    }


def measure(sources: int, snapshots: int) -> dict:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    work = Path(tempfile.mkdtemp(prefix="sluice-dagster-scale-", dir=base))
    try:
        home = work / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text(instance_yaml())
        env = {**os.environ, "DAGSTER_HOME": str(home), "SLUICE_CONFIG": str(scale_config(work, sources)), "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(sources), str(snapshots)], env=env, cwd=ROOT, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{sources} x {snapshots}: the measuring process failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=10)
    parser.add_argument("--snapshots", type=int, nargs="+", default=[10, 30, 100])
    parser.add_argument("--child", type=int, nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    results = []
    for snapshots in args.snapshots:
        result = measure(args.sources, snapshots)
        results.append(result)
        label = f"{args.sources} sources x {snapshots} snapshots"
        partitions = args.sources * snapshots
        print(
            f"{label}: {partitions} partitions, {result['events']} events written in {result['history_s']:.0f} s; plan "
            f"{result['plan_cpu_s']:.2f} CPU s ({result['plan_wall_s']:.2f} s wall) over {result['plan_checked']} asset partitions, "
            f"{result['plan_selected']} selected {result['plan_reasons']}; ticks "
            + ", ".join(f"{tick['cpu_s']:.2f} CPU s ({tick['requested']} requested)" for tick in result["ticks"])
        )
        figure("dagster_scale_plan_cpu_s", result["plan_cpu_s"], "<= 60 at 10 x 1000", label)
        figure("dagster_scale_automation_tick_cpu_s", result["ticks"][-1]["cpu_s"], "< 30 at 10 x 1000: the tick interval", label)
    if len(results) > 1:
        small, large = results[0], results[-1]
        growth = (large["snapshots"] / small["snapshots"])
        name = f"{large['snapshots']}_over_{small['snapshots']}"
        figure(f"dagster_scale_plan_cpu_per_partition_ratio_{name}", large["plan_cpu_s"] / small["plan_cpu_s"] / growth, "<= 1.2")
        figure(f"dagster_scale_tick_cpu_per_partition_ratio_{name}", large["ticks"][-1]["cpu_s"] / small["ticks"][-1]["cpu_s"] / growth, "<= 1.2")


if __name__ == "__main__":
    main()
