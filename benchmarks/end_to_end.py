"""The whole graph on a synthetic crawl at growing scale, through the command users run; and datatrove's
pipeline on the same crawl.

    python benchmarks/end_to_end.py [--scales 1 4 16] [--skip-datatrove]

For each scale s: a seeded crawl of ~2,000 s pages (benchmarks/synth_crawl.py; cached under
.bench_data/crawl-<s>x/, rebuilt when its parameters change) is run through GRAPH_COMMAND with SLUICE_CONFIG
pointing at a config for it (one source `web`, the project's sluice.yaml otherwise: every cleaning step,
exact + near dedup with verification, a BPE tokenizer trained on the crawl, tokenized shards, one mix of
50,000 s tokens; compute.max_workers 2) and DAGSTER_HOME in a fresh folder (.bench_data/e2e-<s>x/). Printed:
- per-stage wall seconds, from the run's step events in that Dagster instance (each stage summed over its
  partitions' runs), and what the command spent outside steps (run start-up, registration, summary);
- documents/s: crawl pages / wall seconds, and per core: pages / CPU seconds of the whole process tree;
- peak RSS of the process tree (the command and every descendant, sampled every 0.2 s from /proc), overall
  and while each stage's steps ran;
- bytes written per stage (the storage root's datasets grouped by stage);
- near-duplicate recall and precision against the planted truth: a cleaned document should be removed when
  an earlier document (dedup's global order) of its planted group has exact Jaccard >= 0.8 with it on the
  cleaned texts (word 5-grams, sluice's shingling); recall = those removed / those; precision = removed
  documents that had such an earlier document (in their group, or their named keeper) / removed documents.
- the cost model: per stage, the graph's CPU per page (the process tree's CPU while that stage's steps ran)
  beside the same stage alone on the same pages (benchmarks/stage_costs.py: the library's task and partition
  functions for raw ingest, cleaning, signatures, index + clusters + deduplicated parts, tokenization, in
  one fresh process each, checked to write the graph's bytes). Over the scales, the graph's CPU is fitted
  as fixed + marginal x pages through 1x and the largest scale: `end_to_end_graph_over_steps_<top>x` =
  the graph's marginal CPU per page / the steps' alone (goal <= 1.3) and
  `end_to_end_fixed_cpu_s_per_asset_partition` = the fixed part / the asset partitions materialized at 1x
  (goal <= 0.1); per Dagster run too.
Goals: time 16x / 1x <= 18 (4x / 1x <= 4.5 when 16x is not run), peak RSS 16x / 1x <= 1.3, recall >= 0.95,
precision >= 0.99.

datatrove (on the crawls of --datatrove-scales, default 1x and 4x, unless --skip-datatrove): benchmarks/_datatrove.py `pipeline` in its peer
environment, the FineWeb example's shape on the same WARC files: WarcReader -> the same resiliparse
extraction -> LanguageFilter -> Gopher repetition + quality, C4, FineWeb filters -> 4-stage MinHash ->
DocumentTokenizer with the tokenizer sluice trained; 2 tasks and workers, as sluice's 2 workers. The headline
ratio (goal >= 5 at 1x) compares it with a second run of sluice's graph on that crawl whose cleaning and dedup have the steps
datatrove's pipeline has (STEPS_DATATROVE_LACKS); sluice's run still does more (raw Parquet ingest,
tokenizer training, the mix and every asset check, each partition a Dagster run), all inside its time. The
ratio against the default config is printed too. Ratios are pages per CPU second of each process tree;
wall is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import synth_crawl  # noqa: E402
from benchmarks.peers import datatrove_python, figure  # noqa: E402

# The command users run for the whole graph on their own crawl (`sluice materialize`).
GRAPH_COMMAND = ("-m", "data_assets.cli", "materialize")
DATA = Path(os.environ.get("SLUICE_BENCH_DATA", ROOT / ".bench_data"))  # crawls and run folders (git-ignored)
STAGES = ("raw", "quality_model", "cleaned", "deduped", "tokenizer", "tokenized", "mixed", "quality_report")
# Storage datasets (top-level folders) and step keys -> stage; side datasets follow issue 18's names.
DATASET_STAGE = (("raw", "raw"), ("quality_report", "quality_report"), ("quality", "quality_model"), ("clean", "cleaned"), ("dedup", "deduped"),
                 ("tokenizer", "tokenizer"), ("tokenized", "tokenized"), ("mix", "mixed"), ("decontam", "mixed"))
THRESHOLD = 0.8
TOKENS_PER_SCALE = 50_000


def crawl(scale: float, seed: int = 0) -> Path:
    """The synthetic crawl at this scale (generated once, reused while its parameters are the same)."""
    out = DATA / f"crawl-{scale:g}x"
    summary = out / "crawl.json"
    if summary.exists():
        known = json.loads(summary.read_text())
        if (known.get("version"), known.get("scale"), known.get("seed")) == (synth_crawl.VERSION, scale, seed):
            return out
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    result = synth_crawl.synthesize(out, scale, seed)
    print(f"  synthesized {result['pages']} pages ({result['kinds']}) in {len(result['snapshots'])} snapshots, {result['files']} files, "
          f"{time.perf_counter() - started:.0f} s -> {out}", flush=True)
    return out


# datatrove's pipeline has none of these steps: with `same_steps` they are off in sluice's graph too. PII
# redaction stays on: cleaned_documents' blocking `no_pii_left` check would otherwise stop every partition.
STEPS_DATATROVE_LACKS = (
    "preset datatrove (its rule definitions), no extraction second opinion or skipped page chrome, no length, URL blocklist, "
    "toxicity or code-share step; MinHash LSH without Jaccard verification; "
    "PII redaction kept, which the graph's blocking check needs"
)


def write_config(crawl_folder: Path, work: Path, scale: float, same_steps: bool = False) -> Path:
    """The project's sluice.yaml pointed at the crawl (one source), storage under `work`; with `same_steps`
    the steps datatrove's pipeline lacks are off (STEPS_DATATROVE_LACKS)."""
    import yaml

    raw = yaml.safe_load((ROOT / "sluice.yaml").read_text())
    raw["storage"] = {"root": str(work / "data")}
    raw["sources"] = [{"name": synth_crawl.SOURCE, "location": str(crawl_folder / synth_crawl.SOURCE), "format": "warc"}]
    cleaning = raw.setdefault("cleaning", {})
    if cleaning.get("url_blocklist"):
        cleaning["url_blocklist"] = str(ROOT / cleaning["url_blocklist"])
    cleaning.pop("per_source", None)
    # One source: no curated source to contrast (quality model) or to train perplexity models on.
    raw["quality_model"] = {**raw.get("quality_model", {}), "positive_source": None}
    if "perplexity_model" in raw:
        raw["perplexity_model"] = {**raw["perplexity_model"], "reference_source": None, "sources": {}}
    raw["tokenizer"] = {**raw.get("tokenizer", {}), "train_sources": [synth_crawl.SOURCE]}
    if same_steps:
        cleaning.update(min_chars=0, url_blocklist=None, toxicity={"enabled": False}, code_share={"enabled": False})
        # datatrove's rule definitions and its extractor call (no trafilatura second opinion, no skip_elements,
        # no link-density pass)
        extraction = {**cleaning.get("extraction", {}), "second_opinion": None, "skip_elements": [], "link_density": None}
        cleaning.update(preset="datatrove", extraction=extraction)
        raw["dedup"] = {**raw.get("dedup", {}), "verify_min_jaccard": None}
    raw["compute"] = {**raw.get("compute", {}), "backend": "local", "max_workers": 2}
    mix = dict(next(iter(raw["mixes"].values())))
    mix.update(weights={synth_crawl.SOURCE: 1.0}, token_budget=int(TOKENS_PER_SCALE * scale))
    mix["eval_sets"] = [str(ROOT / path) for path in mix.get("eval_sets", [])]
    raw["mixes"] = {"default": mix}
    path = work / "sluice.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def process_tree(root: int) -> dict[int, tuple[int, float]]:
    """pid -> (resident bytes, CPU seconds so far) of `root` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = defaultdict(list)
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            stats[int(entry)] = fields
            children[int(fields[1])].append(int(entry))
    tree, stack = {}, [root]
    page, tick = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
    while stack:
        pid = stack.pop()
        fields = stats.get(pid)
        if fields is not None:  # fields[0] is the state: utime, stime are stat fields 14, 15; rss is 24
            tree[pid] = (int(fields[21]) * page, (int(fields[11]) + int(fields[12])) / tick)
        stack.extend(children.get(pid, []))
    return tree


def proportional_set_size(pids: Any) -> int:
    """Bytes of the processes' PSS (/proc/<pid>/smaps_rollup): each shared page divided among the processes
    that map it. Unlike a sum of RSS it counts once the pages forked workers share with their forkserver, and
    a fork in the moment before it execs (Dagster's log-capture helpers) adds nothing."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            continue
    return total


def run_measured(command: list[str], env: dict[str, str], log: Path,
                 observe: Callable[[int, dict[int, tuple[int, float]]], None] | None = None) -> dict[str, float]:
    """Run `command`, output to `log`; wall seconds, CPU seconds of the process tree and its peak RSS.
    `observe(root pid, tree)` is called with every sample (process_tree's pid -> (RSS, CPU s)).

    CPU: the reaped descendants' rusage; a process the tree never waited for is not in it, so the CPU
    seen in /proc samples (every 0.2 s, per process its last value) is taken when larger."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak, peak_pss, sampled_cpu, timeline, at_peak = 0, 0, {}, [], {}
    started = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak, peak_pss
            while not done.wait(0.2):
                tree = process_tree(process.pid)
                if observe is not None:
                    observe(process.pid, tree)
                peak_pss = max(peak_pss, proportional_set_size(tree))
                rss = sum(rss for rss, _ in tree.values())
                if rss > peak:
                    peak = rss
                    at_peak.clear()
                    at_peak.update(time=time.time(), processes=sorted(((r, describe(pid, process.pid)) for pid, (r, _) in tree.items()), reverse=True))
                sampled_cpu.update({pid: cpu for pid, (_, cpu) in tree.items()})
                timeline.append((time.time(), rss, tree.get(process.pid, (0, 0.0))[0], sum(sampled_cpu.values())))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = process.wait()
        done.set()
        sampler.join()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        tail = log.read_text()[-4000:]
        raise RuntimeError(f"{' '.join(command)} exited with {code}; the end of {log}:\n{tail}")
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sampled = sum(sampled_cpu.values())
    return {"wall_s": wall, "cpu_s": max(reaped, sampled), "cpu_reaped_s": reaped, "cpu_sampled_s": sampled,
            "cpu_command_s": sampled_cpu.get(process.pid, 0.0), "peak_rss_bytes": peak, "peak_pss_bytes": peak_pss, "rss_timeline": timeline,
            "at_peak": at_peak}


def describe(pid: int, root: int) -> str:
    """Where a process sits in the tree: its ancestry from the command, each process named `command`,
    `forkserver` (a multiprocessing forkserver), `child` (a fork of a forkserver) or its command line."""
    path = []
    while pid != root and pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                text = cmdline.read()
            with open(f"/proc/{pid}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return "exited"
        path.append(text)
        pid = parent
    # A forkserver's forks keep its command line: a forkserver is one whose parent is not a forkserver.
    names, previous = ["command"], False
    for text in reversed(path):
        is_forkserver = b"forkserver" in text
        if is_forkserver:
            names.append("child" if previous else "forkserver")
        else:
            words = [word.decode(errors="replace").rsplit("/", 1)[-1] for word in text.split(b"\0") if word]
            names.append(" ".join(words[:3])[:48] or "child")
        previous = is_forkserver and not previous
    return ">".join(names)


def cpu_per_stage(timeline: list[tuple[float, int, int, float]], intervals: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """CPU seconds of the process tree per stage: each sampling interval's CPU (0.2 s apart) goes to the stage
    whose steps ran at its end, else to "outside steps" (run start-up, Dagster's bookkeeping, the driver)."""
    out: dict[str, float] = defaultdict(float)
    previous = 0.0
    for when, _, _, cpu in timeline:
        stage = next((stage for stage, spans in intervals.items() if any(start <= when <= end for start, end in spans)), "outside steps")
        out[stage] += cpu - previous
        previous = cpu
    return dict(out)


def stage_of(name: str) -> str:
    for prefix, stage in DATASET_STAGE:
        if name.startswith(prefix):
            return stage
    return "other"


def step_seconds(dagster_home: Path, group: Callable[[str], str] = stage_of) -> tuple[dict[str, list[tuple[float, float]]], float, int, int]:
    """Per stage (`group` of the step key), the (start, end) times of its steps (STEP_START -> STEP_SUCCESS,
    over all runs); the runs' total seconds (RUN_START -> RUN_SUCCESS); the number of runs; the number of
    asset partitions materialized (ASSET_MATERIALIZATION events)."""
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    from dagster import DagsterEventType, DagsterInstance

    run_end = (DagsterEventType.RUN_SUCCESS.value, DagsterEventType.RUN_FAILURE.value)
    step_end = (DagsterEventType.STEP_SUCCESS.value, DagsterEventType.STEP_FAILURE.value)
    stages: dict[str, list[tuple[float, float]]] = defaultdict(list)
    runs_total, materialized = 0.0, 0
    with DagsterInstance.get() as instance:
        runs = instance.get_runs()
        for run in runs:
            starts: dict[str, float] = {}
            run_start = None
            for entry in instance.all_logs(run.run_id):
                event = entry.dagster_event
                if event is None:
                    continue
                kind = event.event_type_value
                if kind == DagsterEventType.RUN_START.value:
                    run_start = entry.timestamp
                elif kind in run_end and run_start is not None:
                    runs_total += entry.timestamp - run_start
                elif kind == DagsterEventType.STEP_START.value:
                    starts[event.step_key] = entry.timestamp
                elif kind == DagsterEventType.ASSET_MATERIALIZATION.value:
                    materialized += 1
                elif kind in step_end and event.step_key in starts:
                    stages[group(event.step_key)].append((starts.pop(event.step_key), entry.timestamp))
    return dict(stages), runs_total, len(runs), materialized


def bytes_per_stage(storage: Path) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for dataset in sorted(storage.iterdir()) if storage.exists() else []:
        if dataset.is_dir():
            out[stage_of(dataset.name)] += sum(p.stat().st_size for p in dataset.rglob("*") if p.is_file())
    return dict(out)


def manifest_rows(store: Any, asset: str) -> int:
    from sluice.io.layout import list_partitions, partition_prefix, read_manifest

    return sum(
        entry.get("rows", 0)
        for ref in list_partitions(store, asset)
        for entry in (read_manifest(store, partition_prefix(asset, ref)) or {}).get("files", [])
    )


def removed_documents(store: Any) -> dict[str, str]:
    """doc_id -> duplicate_of of every document dedup removed, read from the removed-documents files that the
    deduped partitions' manifests publish (`entry_key` follows an entry into its side folder)."""
    from sluice.io.layout import (
        entry_key,
        list_partitions,
        partition_prefix,
        read_manifest,
        read_parquet_file,
    )

    removed = {}
    for ref in list_partitions(store, "deduped_documents"):
        prefix = partition_prefix("deduped_documents", ref)
        for entry in (read_manifest(store, prefix) or {}).get("side_files", []):
            if entry["key"].startswith("removed"):
                table = read_parquet_file(store, entry_key(prefix, entry), columns=["doc_id", "duplicate_of"])
                removed.update(zip(table.column("doc_id").to_pylist(), table.column("duplicate_of").to_pylist(), strict=True))
    return removed


def near_duplicate_quality(storage: Path | Any, crawl_folder: Path) -> dict[str, Any]:
    """Recall and precision of dedup's removals against the planted truth (see the module docstring);
    `storage` is the storage root's folder or an open store."""
    import pyarrow.parquet as pq

    from sluice.io.layout import list_partitions, partition_prefix, read_manifest, read_parquet_file
    from sluice.io.storage import Store, open_store

    store = storage if isinstance(storage, Store) else open_store(str(storage))
    truth = pq.read_table(crawl_folder / "truth.parquet", columns=["record_id", "group", "kind"]).to_pylist()
    group_of = {row["record_id"]: row["group"] for row in truth}
    record_of: dict[str, str] = {}
    for ref in list_partitions(store, "raw_documents"):
        prefix = partition_prefix("raw_documents", ref)
        for entry in read_manifest(store, prefix)["files"]:
            table = read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["doc_id", "source_id"])
            record_of.update(zip(table.column("doc_id").to_pylist(), table.column("source_id").to_pylist(), strict=True))
    removed = removed_documents(store)
    # Cleaned documents in dedup's global order (partition, part, row), with the texts dedup saw.
    order: list[str] = []
    texts: dict[str, str] = {}
    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("cleaned_documents", ref)
        for entry in read_manifest(store, prefix)["files"]:
            table = read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["doc_id", "text"])
            for doc_id, text in zip(table.column("doc_id").to_pylist(), table.column("text").to_pylist(), strict=True):
                order.append(doc_id)
                texts[doc_id] = text
    members: dict[str, list[str]] = defaultdict(list)
    for doc_id in order:
        members[group_of[record_of[doc_id]]].append(doc_id)
    shingle_sets: dict[str, set[bytes]] = {}

    def similarity(a: str, b: str) -> float:
        from sluice.dedup.minhash import shingles

        for doc_id in (a, b):
            if doc_id not in shingle_sets:
                shingle_sets[doc_id] = set(shingles(texts[doc_id], 5))
        first, second = shingle_sets[a], shingle_sets[b]
        return 1.0 if not first and not second else len(first & second) / len(first | second)

    should = set()
    for group in members.values():
        for index, doc_id in enumerate(group):
            if any(similarity(doc_id, earlier) >= THRESHOLD for earlier in group[:index]):
                should.add(doc_id)
    justified = {doc_id for doc_id, keeper in removed.items() if doc_id in should or (keeper in texts and similarity(doc_id, keeper) >= THRESHOLD)}
    planted_copies = sum(len(group) - 1 for group in members.values())
    return {
        "cleaned_documents": len(order),
        "planted_copies_cleaned": planted_copies,
        "should_remove": len(should),
        "removed": len(removed),
        "removed_should": len(should & set(removed)),
        "removed_unplanted_justified": len(justified - should),
        "recall": len(should & set(removed)) / len(should) if should else 1.0,
        "precision": len(justified) / len(removed) if removed else 1.0,
    }


def run_sluice(scale: float, same_steps: bool = False) -> dict[str, Any]:
    crawl_folder = crawl(scale)
    work = DATA / (f"e2e-{scale:g}x-same-steps" if same_steps else f"e2e-{scale:g}x")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = write_config(crawl_folder, work, scale, same_steps)
    home = work / "dagster_home"
    env = {**os.environ, "SLUICE_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    pages = json.loads((crawl_folder / "crawl.json").read_text())["pages"]
    variant = f", the steps datatrove has ({STEPS_DATATROVE_LACKS})" if same_steps else ""
    print(f"\n{scale:g}x{variant}: {pages} pages; {' '.join(GRAPH_COMMAND)} (log: {work / 'command.log'})", flush=True)
    measured = run_measured([sys.executable, *GRAPH_COMMAND], env, work / "command.log")
    intervals, runs_total, runs, materialized = step_seconds(home)
    timeline = measured.pop("rss_timeline")
    stages = {stage: sum(end - start for start, end in spans) for stage, spans in intervals.items()}
    during = {stage: [(rss, own) for when, rss, own, _ in timeline if any(start <= when <= end for start, end in spans)] for stage, spans in intervals.items()}
    stage_cpu = cpu_per_stage(timeline, intervals)
    stage_peak_rss = {stage: max((rss for rss, _ in samples), default=0) for stage, samples in during.items()}
    stage_peak_command_rss = {stage: max((own for _, own in samples), default=0) for stage, samples in during.items()}
    peak_time = measured["at_peak"].get("time", 0.0)
    peak_stage = next((stage for stage, spans in intervals.items() if any(start <= peak_time <= end for start, end in spans)), "outside steps")
    from sluice.io.storage import open_store

    store = open_store(str(work / "data"))
    counts = {asset: manifest_rows(store, asset) for asset in ("raw_documents", "cleaned_documents", "deduped_documents")}
    quality = near_duplicate_quality(work / "data", crawl_folder)
    result = {"scale": scale, "pages": pages, **measured, "stages": stages, "stage_peak_rss": stage_peak_rss,
              "stage_peak_command_rss": stage_peak_command_rss, "peak_stage": peak_stage, "command_peak_rss": max((own for _, _, own, _ in timeline), default=0), "stage_cpu": stage_cpu, "runs_s": runs_total, "runs": runs, "asset_partitions": materialized,
              "bytes": bytes_per_stage(work / "data"), "counts": counts, "quality": quality, "tokenizer": str(work / "data" / "tokenizer" / "tokenizer.json"),
              "crawl": str(crawl_folder), "config": str(config), "data": str(work / "data")}
    print_run(result)
    if not same_steps:
        result["alone"] = stages_alone(result, work)
        print_cost_model(result)
    return result


def stages_alone(r: dict[str, Any], work: Path) -> dict[str, float]:
    """CPU seconds of each per-page stage alone on this run's pages (benchmarks/stage_costs.py: a fresh process
    per stage, less the `imports` baseline process)."""
    from benchmarks import stage_costs

    scratch = work / "alone"
    cpu = {}
    for stage in stage_costs.STAGES:
        stage_costs.prepare(stage, Path(r["data"]), scratch)
        command = [sys.executable, str(ROOT / "benchmarks" / "stage_costs.py"), stage, r["config"], str(scratch), r["data"]]
        measured = run_measured(command, {**os.environ, "PYTHONUNBUFFERED": "1"}, work / f"alone-{stage}.log")
        cpu[stage] = measured["cpu_s"]
        compared, differing = stage_costs.differing_outputs(stage, Path(r["data"]), scratch)
        if differing:
            raise RuntimeError(f"{stage} alone wrote other bytes than the graph: {differing[:5]} ({len(differing)} of {compared} files)")
        if stage != "imports":
            print(f"  {stage} alone: {measured['cpu_s']:.1f} CPU s, {compared} files, each the graph's bytes", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    baseline = cpu.pop("imports")
    return {stage: max(0.0, seconds - baseline) for stage, seconds in cpu.items()}


# The graph's stages (step keys, stage_of) and the stage_costs.py stages that do their per-page work.
ALONE_OF_GRAPH = {"raw": ("raw",), "cleaned": ("cleaned",), "deduped": ("signatures", "index_clusters"), "tokenized": ("tokenized",)}


def print_cost_model(r: dict[str, Any]) -> None:
    pages = r["pages"]
    print(f"  cost model, CPU ms per page: {'stage':14s} {'graph':>7s} {'alone':>7s} {'ratio':>6s}")
    for stage in (*STAGES, "other", "outside steps"):
        graph = 1000 * r["stage_cpu"].get(stage, 0.0) / pages
        alone = 1000 * sum(r["alone"][name] for name in ALONE_OF_GRAPH.get(stage, ())) / pages
        if graph or alone:
            ratio = f"{graph / alone:6.2f}" if alone else "     -"
            print(f"  {'':28s} {stage:14s} {graph:7.2f} {alone:7.2f} {ratio}")
    total_alone = 1000 * sum(r["alone"].values()) / pages
    print(f"  {'':28s} {'whole graph':14s} {1000 * r['cpu_s'] / pages:7.2f} {total_alone:7.2f} {r['cpu_s'] / sum(r['alone'].values()):6.2f}"
          f"   ({r['asset_partitions']} asset partitions in {r['runs']} runs)")


def print_run(r: dict[str, Any]) -> None:
    print(f"  wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s (reaped {r['cpu_reaped_s']:.1f}, sampled {r['cpu_sampled_s']:.1f}, of which "
          f"{r['cpu_command_s']:.1f} in the command's own process: Dagster, the driver's work), peak RSS (process tree) "
          f"{r['peak_rss_bytes'] / 2**20:.0f} MiB; {r['pages'] / r['wall_s']:.1f} pages/s wall, {r['pages'] / r['cpu_s']:.1f} pages/s per core")
    print(f"  documents: raw {r['counts']['raw_documents']}, cleaned {r['counts']['cleaned_documents']}, deduped {r['counts']['deduped_documents']}")
    steps = sum(r["stages"].values())
    print(f"  {r['runs']} Dagster runs, {r['runs_s']:.1f} s inside runs, {steps:.1f} s inside steps, "
          f"{r['wall_s'] - steps:.1f} s of the command outside steps")
    print(f"  peak RSS of the command's own process {r['command_peak_rss'] / 2**20:.0f} MiB; peak PSS of the process tree {r['peak_pss_bytes'] / 2**20:.0f} MiB")
    print(f"  at the tree's peak ({r['peak_stage']}): {peak_composition(r['at_peak'])}")
    print(f"  {'stage':14s} {'step s':>8s} {'CPU s':>7s} {'MB written':>11s} {'peak RSS MiB (tree, command)':>29s}")
    for stage in (*STAGES, "other", "outside steps"):
        if stage in r["stages"] or stage in r["bytes"] or stage in r["stage_cpu"]:
            print(f"  {stage:14s} {r['stages'].get(stage, 0.0):8.1f} {r['stage_cpu'].get(stage, 0.0):7.1f} {r['bytes'].get(stage, 0) / 1e6:11.1f} "
                  f"{r['stage_peak_rss'].get(stage, 0) / 2**20:20.0f} {r['stage_peak_command_rss'].get(stage, 0) / 2**20:8.0f}")
    q = r["quality"]
    print(f"  near duplicates: {q['should_remove']} cleaned documents with an earlier copy of their planted group at J >= {THRESHOLD} "
          f"({q['planted_copies_cleaned']} planted copies cleaned); removed {q['removed']} ({q['removed_should']} of those, "
          f"{q['removed_unplanted_justified']} other removals at J >= {THRESHOLD} to their keeper): recall {q['recall']:.4f}, precision {q['precision']:.4f}")


def peak_composition(at_peak: dict[str, Any]) -> str:
    """The processes at the peak, grouped by place in the tree: `count x name total MiB`."""
    groups: dict[str, list[int]] = defaultdict(list)
    for rss, name in at_peak.get("processes", []):
        groups[name].append(rss)
    return ", ".join(f"{len(sizes)} x {name} {sum(sizes) / 2**20:.0f} MiB" for name, sizes in sorted(groups.items(), key=lambda item: -sum(item[1])))


def run_datatrove(sluice_run: dict[str, Any]) -> dict[str, Any]:
    from sluice.clean.models.langid import default_model_path

    python = datatrove_python()
    scale = sluice_run["scale"]
    work = DATA / f"e2e-datatrove-{scale:g}x"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = work / "result.json"
    command = [str(python), str(ROOT / "benchmarks" / "_datatrove.py"), "pipeline", str(Path(sluice_run["crawl"]) / synth_crawl.SOURCE),
               str(default_model_path()), sluice_run["tokenizer"], str(work / "work"), "2", str(out)]
    print(f"\ndatatrove pipeline on the {scale:g}x crawl (log: {work / 'command.log'})", flush=True)
    measured = run_measured(command, {**os.environ}, work / "command.log")
    measured.pop("rss_timeline")
    result = {**json.loads(out.read_text()), **measured}
    pages = sluice_run["pages"]
    print(f"  wall {measured['wall_s']:.1f} s, CPU {measured['cpu_s']:.1f} s (reaped {measured['cpu_reaped_s']:.1f}, sampled {measured['cpu_sampled_s']:.1f}), peak RSS {measured['peak_rss_bytes'] / 2**20:.0f} MiB (PSS {measured['peak_pss_bytes'] / 2**20:.0f} MiB); "
          f"{pages / measured['wall_s']:.1f} pages/s wall, {pages / measured['cpu_s']:.1f} pages/s per core; "
          f"cleaned {result['cleaned_documents']} documents, {result['tokens']} tokens")
    print(f"  {'stage':24s} {'wall s':>8s} {'CPU s':>7s}")
    for stage, seconds in result["stage_seconds"].items():
        print(f"  {stage:24s} {seconds:8.1f} {result.get('stage_cpu_seconds', {}).get(stage, float('nan')):7.1f}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=float, nargs="+", default=[1, 4, 16])
    parser.add_argument("--datatrove-scales", type=float, nargs="+", default=[1, 4],
                        help="scales (of --scales) at which datatrove and the same-steps graph run too")
    parser.add_argument("--skip-datatrove", action="store_true")
    args = parser.parse_args()
    scales = sorted(set(args.scales))
    results = {scale: run_sluice(scale) for scale in scales}
    versus_scales = [] if args.skip_datatrove else [scale for scale in sorted(set(args.datatrove_scales)) if scale in results]
    peers = {scale: run_datatrove(results[scale]) for scale in versus_scales}
    same = {scale: run_sluice(scale, same_steps=True) for scale in versus_scales}

    print()
    for scale, r in results.items():
        config = f"{scale:g}x synthetic crawl, {r['pages']} pages, {GRAPH_COMMAND[-1]} command, 2 workers"
        figure(f"end_to_end_pages_per_s_per_core_{scale:g}x", r["pages"] / r["cpu_s"], "-", config + ", CPU time of the process tree")
        figure(f"end_to_end_pages_per_s_wall_{scale:g}x", r["pages"] / r["wall_s"], "-", config)
        figure(f"end_to_end_near_dup_recall_{scale:g}x", r["quality"]["recall"], ">= 0.95", config + ", vs planted truth, exact Jaccard >= 0.8")
        figure(f"end_to_end_near_dup_precision_{scale:g}x", r["quality"]["precision"], ">= 0.99", config + ", vs planted truth, exact Jaccard >= 0.8")
        figure(f"end_to_end_graph_over_steps_cpu_{scale:g}x", r["cpu_s"] / sum(r["alone"].values()), "-",
               config + ", CPU of the whole graph / CPU of raw ingest, cleaning, signatures, index + clusters, tokenization alone")
    if len(scales) > 1 and 1 in results:
        scaling_figures(results, scales[-1])
    for scale in versus_scales:
        versus_figures(results[scale], same[scale], peers[scale])
    return 0


def scaling_figures(results: dict[float, dict[str, Any]], top: float) -> None:
    """Time, memory and cost ratios between the largest scale and 1x; the cost model's marginal and fixed parts:
    graph CPU = fixed + marginal x pages, fitted through 1x and the top scale."""
    low, high = results[1], results[top]
    config = f"{top:g}x / 1x synthetic crawl, {high['pages']} / {low['pages']} pages, {GRAPH_COMMAND[-1]} command"
    limit = 18 * top / 16
    figure(f"end_to_end_time_ratio_{top:g}x_over_1x", high["wall_s"] / low["wall_s"], f"<= {limit:g}", config + ", wall")
    figure(f"end_to_end_cpu_ratio_{top:g}x_over_1x", high["cpu_s"] / low["cpu_s"], f"<= {limit:g}", config + ", CPU time")
    pages = high["pages"] - low["pages"]
    marginal = (high["cpu_s"] - low["cpu_s"]) / pages
    figure(f"end_to_end_marginal_cpu_ms_per_page_{top:g}x_vs_1x", 1000 * marginal, "-", config + ", (CPU top - CPU 1x) / (pages top - pages 1x)")
    steps = (sum(high["alone"].values()) - sum(low["alone"].values())) / pages
    figure(f"end_to_end_steps_alone_marginal_cpu_ms_per_page_{top:g}x_vs_1x", 1000 * steps, "-",
           config + ", the same for raw ingest, cleaning, signatures, index + clusters, tokenization alone (benchmarks/stage_costs.py)")
    figure(f"end_to_end_graph_over_steps_{top:g}x", marginal / steps, "<= 1.3", config + ", graph marginal CPU per page / the steps' alone")
    fixed = low["cpu_s"] - marginal * low["pages"]
    figure("end_to_end_fixed_cpu_s_per_asset_partition", fixed / low["asset_partitions"], "<= 0.1",
           config + f", (graph CPU at 1x - marginal x pages) / the {low['asset_partitions']} asset partitions of 1x")
    figure("end_to_end_fixed_cpu_s_per_run", fixed / low["runs"], "-", config + f", the same / the {low['runs']} Dagster runs of 1x")
    figure(f"end_to_end_peak_rss_ratio_{top:g}x_over_1x", high["peak_rss_bytes"] / low["peak_rss_bytes"], "<= 1.3", config + ", process tree")
    figure(f"end_to_end_peak_pss_ratio_{top:g}x_over_1x", high["peak_pss_bytes"] / low["peak_pss_bytes"], "-", config + ", process tree, PSS")


def versus_figures(default: dict[str, Any], same: dict[str, Any], peer: dict[str, Any]) -> None:
    """sluice's graph against datatrove's pipeline on one crawl (1x: the historical names without a suffix)."""
    scale = default["scale"]
    suffix = "" if scale == 1 else f"_{scale:g}x"
    theirs = default["pages"] / peer["cpu_s"]

    def versus(graph: str, measure: str = "CPU time of each process tree") -> str:
        return (f"{scale:g}x synthetic crawl, {default['pages']} pages, whole sluice graph{graph} vs datatrove WarcReader + resiliparse + "
                f"LID + 4 filters + 4-stage MinHash + tokenizer, 2 workers each, {measure}")

    same_steps = f" with the steps datatrove has ({STEPS_DATATROVE_LACKS}),"
    figure(f"end_to_end_vs_datatrove_default_config{suffix}", (default["pages"] / default["cpu_s"]) / theirs, "- (sluice's graph does more)",
           versus(", default config,"))
    figure(f"end_to_end_vs_datatrove{suffix}", (same["pages"] / same["cpu_s"]) / theirs, ">= 5" if scale == 1 else "-", versus(same_steps))
    figure(f"end_to_end_vs_datatrove_wall{suffix}", peer["wall_s"] / same["wall_s"], "-", versus(same_steps, "wall"))


if __name__ == "__main__":
    raise SystemExit(main())
