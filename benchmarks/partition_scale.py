"""One source x one snapshot of growing size through the command users run: is every process bounded?

    python benchmarks/partition_scale.py [--sizes 10000 100000 1000000] [--compute local ray]

A CommonCrawl snapshot is one partition of `raw_documents`: tens of millions of documents, each stage of
it one Dagster run. Here one snapshot of N short English JSONL documents (so that extraction does not
dominate: ~150 words each, from a seeded vocabulary, DOCS_PER_FILE a file), of which NEAR_SHARE are
planted near copies (an earlier original with EDITED_WORDS words replaced; `truth.parquet` records each
document's group), goes through `sluice materialize` (the whole graph: every cleaning step, exact + near
dedup, a BPE tokenizer, tokenized shards, one mix with a token budget proportional to N) with its own
SLUICE_CONFIG, DAGSTER_HOME and storage root under .bench_data/partition_scale/, at each size.

Measured (benchmarks/end_to_end.py's run_measured: /proc samples of the command's process tree every 0.2 s):
- the peak RSS of each process, grouped by kind (KINDS: classified by the process's place in the tree and
  its command line): the command, Dagster's daemon, its code server, each Dagster run process, the pool
  workers, the cleaning children, and under `--compute ray` Ray's workers and services. That is a local
  one-node Ray (`ray_address: null`) which each run process starts, so it is in the tree; a cluster
  started apart (tests/support/ray_cluster.py's two nodes) would not be, and is not measured here;
- each run process's peak while each of its steps ran (from the steps' events in the instance);
- the CPU seconds of the whole tree per document;
- near-duplicate recall and precision against the planted truth (benchmarks/end_to_end.py's
  near_duplicate_quality: a cleaned document should be removed when an earlier member of its group has
  exact Jaccard >= 0.8 with it on the cleaned texts; the removals are read from `deduped_removed`).

Figures (for the largest size run, TOP, over the smallest, LOW; names e.g. `_1e6_over_1e4`):
`partition_scale_peak_rss_ratio_TOP_over_LOW_<kind>` (goal <= 1.3, every kind),
`partition_scale_cpu_per_doc_ratio_TOP_over_LOW` (goal <= 1.2), `partition_scale_largest_process_bytes_per_doc_TOP_vs_LOW`
(the largest process's peak growth per extra document, goal <= 16), and `partition_scale_near_dup_recall_<size>` /
`_precision_<size>` (goals >= 0.95 / >= 0.99). A fork caught between its fork and its exec (its parent's
command line and pages) is printed as such and left out of the figures. With more than one size, the local
runs on the local store rewrite the sizing table of docs/guides/at-scale.md (benchmarks/sizing.py).

`--store s3` puts the crawl and the storage root in a bucket of the SeaweedFS server the tests use
(benchmarks/s3_server.py) and adds `partition_scale_s3_requests_per_1000_docs_<size>` (every process's S3
requests during the command, as the server's own Prometheus counter has them, by type),
`partition_scale_s3_requests_per_doc_ratio_TOP_over_LOW` (goal <= 1.2) and
`partition_scale_s3_requests_per_1000_extra_docs_TOP_vs_LOW` (goal: flat; small sizes are dominated by a
run's fixed requests). Cheap sizes: `--store s3 --sizes 1000 10000`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import end_to_end, sizing  # noqa: E402
from benchmarks.orchestration import WORDS  # noqa: E402
from benchmarks.peers import figure  # noqa: E402

DATA = end_to_end.DATA / "partition_scale"
VERSION = 1  # of the generated documents: a change rebuilds the cached snapshots
SOURCE, SNAPSHOT = "web", "2026-01"
DOCS_PER_FILE = 2_500
WORDS_PER_DOC = 150
NEAR_SHARE = 0.03
EDITED_WORDS = 2  # replaced words of a near copy: exact Jaccard of word 5-grams ~0.87 with its original
TOKENS_PER_DOC = 50  # the mix's token budget per document (about a third of the tokens)
GOAL_RSS, GOAL_CPU, GOAL_BYTES = 1.3, 1.2, 16


def original_text(seed: int, index: int) -> str:
    """Document `index`'s own text: WORDS_PER_DOC words in sentences of 10-15, from its own seeded stream."""
    rng = random.Random(f"{seed}-{index}")
    words, sentences = 0, []
    while words < WORDS_PER_DOC:
        length = min(rng.randint(10, 15), WORDS_PER_DOC - words)
        sentences.append(" ".join(rng.choice(WORDS) for _ in range(length)).capitalize() + ".")
        words += length
    return " ".join(sentences)


def is_copy(seed: int, index: int) -> bool:
    return index > 0 and random.Random(f"{seed}-copy-{index}").random() < NEAR_SHARE


def near_copy(seed: int, index: int) -> tuple[int, str]:
    """(original, text) of planted copy `index`: an earlier original with EDITED_WORDS words replaced."""
    rng = random.Random(f"{seed}-of-{index}")
    original = rng.randrange(index)
    while is_copy(seed, original):
        original = rng.randrange(index)
    words = original_text(seed, original).split(" ")
    for position in rng.sample(range(len(words)), EDITED_WORDS):
        words[position] = rng.choice([word for word in WORDS if word != words[position].strip(".").lower()])
    return original, " ".join(words)


def documents(count: int, seed: int) -> Iterator[tuple[str, str, str]]:
    """(id, text, group id) of the snapshot's documents in order; a copy's group is its original's id."""
    for index in range(count):
        if is_copy(seed, index):
            original, text = near_copy(seed, index)
            yield f"d{index}", text, f"d{original}"
        else:
            yield f"d{index}", original_text(seed, index), f"d{index}"


def snapshot(count: int, seed: int = 0) -> Path:
    """The folder (the crawl: `web/2026-01/*.jsonl` and `truth.parquet`) of `count` documents, generated once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = DATA / f"snapshot-{count}"
    summary = out / "crawl.json"
    wanted = {"version": VERSION, "documents": count, "seed": seed, "per_file": DOCS_PER_FILE}
    if summary.exists() and json.loads(summary.read_text()) == wanted:
        return out
    shutil.rmtree(out, ignore_errors=True)
    folder = out / SOURCE / SNAPSHOT
    folder.mkdir(parents=True)
    truth: dict[str, list[str]] = defaultdict(list)
    stream = documents(count, seed)
    for start in range(0, count, DOCS_PER_FILE):
        with open(folder / f"part-{start // DOCS_PER_FILE:05d}.jsonl", "w") as handle:
            for doc_id, text, group in itertools.islice(stream, DOCS_PER_FILE):
                handle.write(json.dumps({"id": doc_id, "text": text}) + "\n")
                truth["record_id"].append(doc_id)
                truth["group"].append(group)
                truth["kind"].append("original" if group == doc_id else "near")
    pq.write_table(pa.table(truth), out / "truth.parquet")
    summary.write_text(json.dumps(wanted))
    return out


def write_config(crawl: Path, work: Path, count: int, compute: str, s3: dict[str, str] | None = None) -> Path:
    """The project's sluice.yaml on this one-source crawl: every cleaning step at its setting there, the
    curated-source models off (one source), a 1,024-token BPE, a mix of TOKENS_PER_DOC x count tokens.
    `s3` (endpoint, root, crawl): the storage root and the source on that S3 store instead of local folders."""
    import yaml

    raw = yaml.safe_load((ROOT / "sluice.yaml").read_text())
    raw["storage"] = {"root": s3["root"] if s3 else str(work / "data")}
    raw["sources"] = [{"name": SOURCE, "location": f"{s3['crawl']}/{SOURCE}" if s3 else str(crawl / SOURCE), "format": "jsonl"}]
    if s3:
        raw["s3"] = {**raw.get("s3", {}), "endpoint_url": s3["endpoint"]}
    cleaning = raw.setdefault("cleaning", {})
    cleaning.pop("per_source", None)
    if cleaning.get("url_blocklist"):
        cleaning["url_blocklist"] = str(ROOT / cleaning["url_blocklist"])
    raw["quality_model"] = {**raw.get("quality_model", {}), "positive_source": None}
    raw["perplexity_model"] = {**raw.get("perplexity_model", {}), "reference_source": None}
    raw["tokenizer"] = {**raw.get("tokenizer", {}), "vocab_size": 1024, "train_sources": [SOURCE]}
    raw["compute"] = {**raw.get("compute", {}), "backend": compute, "max_workers": 2, "ray_address": None}
    mix = dict(next(iter(raw["mixes"].values())))
    mix.update(weights={SOURCE: 1.0}, token_budget=TOKENS_PER_DOC * count, eval_sets=[str(ROOT / path) for path in mix.get("eval_sets", [])])
    raw["mixes"] = {"default": mix}
    path = work / "sluice.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


# Process kinds, by the process's place in the tree (end_to_end.describe: `command`, then each descendant's
# command line, `forkserver` / `child` for multiprocessing's forkserver and its forks): the command starts
# Dagster's daemon, which starts its code server, which starts each run process; a run process has its
# pool's forkserver (workers are its `child`ren; a worker's own forkserver forks the supervised cleaning
# children), Dagster's log-capture helpers, and under `compute: ray` a local Ray. The first rule that holds.
# Ray's task workers name themselves `ray::<task>` (`ray::IDLE` between tasks); its services are the rest.
RAY_NAMES = ("raylet", "gcs_server", "ray::", "default_worker", "ray/", "dashboard", "log_monitor", "monitor.py", "runtime_env")
# Tests of (path, the process's own whole command line). Multiprocessing's resource trackers (of the code
# server and of each run process) are told apart by their command line.
KINDS = (
    ("command", lambda path, own: len(path) == 1),
    ("daemon", lambda path, own: len(path) == 2),
    ("code server", lambda path, own: len(path) == 3),
    ("resource tracker", lambda path, own: "resource_tracker" in own),
    ("run process", lambda path, own: len(path) == 4),
    ("ray worker", lambda path, own: "ray::" in own or "default_worker" in own),
    ("ray service", lambda path, own: any(word in name for name in [*path[4:], own] for word in RAY_NAMES)),
    ("log helper", lambda path, own: "watch_orphans" in path[-1] or path[-1].startswith("tail")),
    ("cleaning child", lambda path, own: path.count("child") >= 2),
    ("pool worker", lambda path, own: path[-1] == "child"),
    ("forkserver", lambda path, own: path[-1] == "forkserver"),
)


def kind_of(name: str, own: str = "") -> str:
    """The kind of the process at `name` (end_to_end.describe's path) whose command line is `own`."""
    path = name.split(">")
    return next((kind for kind, test in KINDS if test(path, own)), "other: " + path[-1])


def forked_before_exec(pid: int, own: bytes) -> bool:
    """A fork caught between fork and exec (its parent's command line, its parent's pages in its RSS), other
    than multiprocessing's forkserver children, which keep the forkserver's command line for good."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{parent}/cmdline", "rb") as cmdline:
            return cmdline.read() == own and b"forkserver" not in own
    except (OSError, IndexError, ValueError):
        return False


class ProcessPeaks:
    """run_measured's observer: each process's peak RSS with its place in the tree (end_to_end.describe),
    named again whenever its own command line changes (a fork before its exec carries its parent's
    memory and command line: it is another process by then)."""

    def __init__(self) -> None:
        self.names: dict[tuple[int, bytes], tuple[str, str]] = {}  # (pid, command line) -> (name, kind)
        self.peaks: dict[tuple[int, str], tuple[int, float]] = {}  # (pid, name) -> (peak RSS, when)
        self.kinds: dict[tuple[int, str], str] = {}
        self.timelines: dict[int, list[tuple[float, int]]] = defaultdict(list)  # run process -> (when, RSS) samples
        self.seen: dict[int, tuple[float, float]] = {}  # pid -> (first, last) sample it was in

    def __call__(self, root: int, tree: dict[int, tuple[int, float]]) -> None:
        now = time.time()
        for pid, (rss, _) in tree.items():
            self.seen[pid] = (self.seen.get(pid, (now, now))[0], now)
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    own = cmdline.read()
            except OSError:
                continue
            known = self.names.get((pid, own))
            if known is None:
                name = end_to_end.describe(pid, root)
                kind = "fork before exec" if forked_before_exec(pid, own) else kind_of(name, own.replace(b"\0", b" ").decode(errors="replace"))
                known = self.names[(pid, own)] = (name, kind)
            name, kind = known
            if kind == "run process":
                self.timelines[pid].append((now, rss))
            if name != "exited" and rss > self.peaks.get((pid, name), (0, 0.0))[0]:
                self.peaks[(pid, name)] = (rss, now)
                self.kinds[(pid, name)] = kind

    def run_processes(self, steps: dict[str, list[tuple[float, float]]]) -> list[tuple[int, list[str], dict[str, int]]]:
        """(peak RSS, the steps that ran at that moment, step -> its peak RSS while that step ran) of each
        Dagster run process, largest first (`steps`: step key -> its (start, end) times)."""
        def at(when: float) -> list[str]:
            return sorted(step for step, spans in steps.items() if any(start <= when <= end for start, end in spans))

        out = []
        for (pid, name), (rss, when) in self.peaks.items():
            if self.kinds[(pid, name)] == "run process":
                per_step: dict[str, int] = {}
                for sampled, sample_rss in self.timelines[pid]:
                    for step in at(sampled):
                        per_step[step] = max(per_step.get(step, 0), sample_rss)
                out.append((rss, at(when), per_step))
        return sorted(out, key=lambda row: -row[0])

    def processes(self) -> list[tuple[str, str, int]]:
        """(kind, name, peak RSS) of every process seen."""
        return sorted(((self.kinds[key], key[1], rss) for key, (rss, _) in self.peaks.items()), key=lambda row: -row[2])

    def by_kind(self) -> dict[str, dict[str, Any]]:
        """kind -> its processes' count, largest peak RSS and the name of that process."""
        kinds: dict[str, dict[str, Any]] = {}
        for key, (rss, _) in self.peaks.items():
            name = key[1]
            entry = kinds.setdefault(self.kinds[key], {"processes": 0, "peak_rss_bytes": 0, "largest": ""})
            entry["processes"] += 1
            if rss > entry["peak_rss_bytes"]:
                entry.update(peak_rss_bytes=rss, largest=name)
        return kinds


def upload_crawl(server: Any, bucket: str, crawl: Path) -> str:
    """The snapshot's JSONL files copied to `s3://bucket/crawl/...`; returns that folder's URL."""
    client = server.client()
    for path in sorted((crawl / SOURCE).rglob("*.jsonl")):
        client.upload_file(str(path), bucket, f"crawl/{path.relative_to(crawl).as_posix()}")
    return f"s3://{bucket}/crawl"


def run_size(count: int, compute: str, server: Any = None) -> dict[str, Any]:
    """`sluice materialize` on a fresh instance and storage root over the snapshot of `count` documents; with
    `server` (a SeaweedS3), crawl and storage root in a fresh bucket of it, and the S3 requests the run sent
    (every process, as the server counts them) in `s3_requests`."""
    from sluice.config import S3Settings
    from sluice.io.storage import open_store

    crawl = snapshot(count)
    store_kind = "s3" if server else "local"
    work = DATA / f"run-{count}-{compute}-{store_kind}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "DAGSTER_HOME": str(work / "dagster_home"), "PYTHONUNBUFFERED": "1"}
    s3, store = None, None
    if server:
        bucket = server.create_bucket("partition-scale")
        s3 = {"endpoint": server.endpoint_url, "root": f"s3://{bucket}/data", "crawl": upload_crawl(server, bucket, crawl)}
        env.update(server.env())
        os.environ.update(server.env())  # this process reads the outputs too
        store = open_store(s3["root"], S3Settings(endpoint_url=server.endpoint_url))
        before = server.request_counts(bucket)
    config = write_config(crawl, work, count, compute, s3)
    env["SLUICE_CONFIG"] = str(config)
    print(f"\n{count} documents ({compute} compute, {store_kind} store): {' '.join(end_to_end.GRAPH_COMMAND)} (log: {work / 'command.log'})", flush=True)
    peaks, cpu = ProcessPeaks(), sizing.StageCpu()

    def observe(root: int, tree: dict[int, tuple[int, float]]) -> None:
        peaks(root, tree)
        cpu(root, tree)

    measured = end_to_end.run_measured([sys.executable, *end_to_end.GRAPH_COMMAND], env, work / "command.log", observe=observe)
    measured.pop("rss_timeline")
    requests = None
    if server:
        after = server.request_counts(bucket)
        requests = {kind: after[kind] - before.get(kind, 0) for kind in sorted(after) if after[kind] > before.get(kind, 0)}
    store = store or open_store(str(work / "data"))
    counts = {asset: end_to_end.manifest_rows(store, asset) for asset in ("raw_documents", "cleaned_documents", "deduped_documents")}
    steps = end_to_end.step_seconds(work / "dagster_home", group=lambda key: key)[0]
    result = {"documents": count, "compute": compute, "store": store_kind, **measured, "kinds": peaks.by_kind(),
              "run_processes": peaks.run_processes(steps), "counts": counts, "processes": peaks.processes(), "s3_requests": requests,
              "stage_cpu_s": cpu.by_step(steps), "docs_per_file": DOCS_PER_FILE,
              "datasets": sizing.dataset_footprint(work / "data") if server is None else {},
              "quality": end_to_end.near_duplicate_quality(store, crawl)}
    print_size(result)
    (work / "result.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def print_size(r: dict[str, Any]) -> None:
    print(f"  wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s ({1000 * r['cpu_s'] / r['documents']:.2f} ms per document), "
          f"peak RSS of the tree {r['peak_rss_bytes'] / 2**20:.0f} MiB; documents raw {r['counts']['raw_documents']}, "
          f"cleaned {r['counts']['cleaned_documents']}, deduped {r['counts']['deduped_documents']}")
    print(f"  {'kind':16s} {'processes':>9s} {'peak RSS MiB':>12s}  the largest")
    for kind, entry in sorted(r["kinds"].items(), key=lambda item: -item[1]["peak_rss_bytes"]):
        print(f"  {kind:16s} {entry['processes']:9d} {entry['peak_rss_bytes'] / 2**20:12.0f}  {entry['largest'][-110:]}")
    print("  each Dagster run process's peak RSS MiB (the steps running at its peak; its peak while each of its steps ran):")
    for rss, at_peak, per_step in r["run_processes"]:
        steps = ", ".join(f"{step} {peak / 2**20:.0f}" for step, peak in sorted(per_step.items(), key=lambda item: -item[1])) or "no step"
        print(f"    {rss / 2**20:6.0f}  {', '.join(at_peak) or 'no step'}; {steps}")
    if r.get("s3_requests"):
        total = sum(r["s3_requests"].values())
        kinds = ", ".join(f"{kind} {n}" for kind, n in r["s3_requests"].items())
        print(f"  S3 requests: {total} ({kinds}): {1000 * total / r['documents']:.1f} per 1,000 documents")
    q = r["quality"]
    print(f"  near duplicates: {q['should_remove']} cleaned documents with an earlier member of their planted group at J >= {end_to_end.THRESHOLD}; "
          f"removed {q['removed']} ({q['removed_should']} of those): recall {q['recall']:.4f}, precision {q['precision']:.4f}", flush=True)


def label(count: int) -> str:
    """1e4 for 10000; other counts as they are."""
    exponent = len(str(count)) - 1
    return f"1e{exponent}" if count == 10**exponent else str(count)


def scaling_figures(low: dict[str, Any], high: dict[str, Any]) -> None:
    top, base = label(high["documents"]), label(low["documents"])
    config = f"1 source x 1 snapshot, {high['documents']} / {low['documents']} short JSONL documents, sluice materialize, {high['compute']} compute, 2 workers"
    for kind in sorted(set(low["kinds"]) | set(high["kinds"])):
        if kind in low["kinds"] and kind in high["kinds"] and kind != "fork before exec":
            ratio = high["kinds"][kind]["peak_rss_bytes"] / low["kinds"][kind]["peak_rss_bytes"]
            figure(f"partition_scale_peak_rss_ratio_{top}_over_{base}_{kind.replace(' ', '_')}", ratio, f"<= {GOAL_RSS}",
                   config + f", the largest {kind} process's peak RSS")
    per_doc = (high["cpu_s"] / high["documents"]) / (low["cpu_s"] / low["documents"])
    figure(f"partition_scale_cpu_per_doc_ratio_{top}_over_{base}", per_doc, f"<= {GOAL_CPU}", config + ", CPU of the process tree per document")
    def largest_of(r: dict[str, Any]) -> int:
        return max(entry["peak_rss_bytes"] for kind, entry in r["kinds"].items() if kind != "fork before exec")

    if high.get("s3_requests") and low.get("s3_requests"):
        # A run's fixed requests (listings, manifests, models) dominate small sizes: the growth per extra document is what scales.
        requests = [sum(r["s3_requests"].values()) for r in (high, low)]
        figure(f"partition_scale_s3_requests_per_doc_ratio_{top}_over_{base}", (requests[0] / high["documents"]) / (requests[1] / low["documents"]),
               "<= 1.2", config + ", S3 requests of every process per document, counted by the SeaweedFS server")
        figure(f"partition_scale_s3_requests_per_1000_extra_docs_{top}_vs_{base}", 1000 * (requests[0] - requests[1]) / (high["documents"] - low["documents"]),
               "flat", config + ", (S3 requests at the top size - at the base size) per 1,000 extra documents")
    largest = largest_of(high) - largest_of(low)
    figure(f"partition_scale_largest_process_bytes_per_doc_{top}_vs_{base}", largest / (high["documents"] - low["documents"]), f"<= {GOAL_BYTES}",
           config + ", (largest process's peak RSS at the top size - at the base size) / the extra documents")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="documents in the snapshot, one run each")
    parser.add_argument("--compute", nargs="+", default=["local"], choices=["local", "ray"],
                        help="compute backends: local (the process pool); ray (a local Ray the run process starts)")
    parser.add_argument("--store", choices=["local", "s3"], default="local",
                        help="where crawl and storage root live: local folders, or a bucket of the SeaweedFS S3 server the tests use")
    parser.add_argument("--sizing-page", default=str(sizing.PAGE),
                        help="the page whose sizing table a local run of several sizes rewrites ('' leaves every page alone: the tests' tiny runs)")
    args = parser.parse_args()
    if args.store == "s3":
        from benchmarks.s3_server import shared_server

        with shared_server() as server:
            return measure(args, server)
    return measure(args, None)


def measure(args: argparse.Namespace, server: Any) -> int:
    """Every size on every compute backend, then the figures."""
    sizes = sorted(set(args.sizes))
    print(f"partition_scale: one snapshot of {', '.join(map(str, sizes))} short documents through sluice materialize "
          f"({NEAR_SHARE:.0%} planted near copies, {DOCS_PER_FILE} documents a file)")
    for compute in args.compute:
        results = {count: run_size(count, compute, server) for count in sizes}
        print()
        for count, r in results.items():
            config = f"1 source x 1 snapshot, {count} short JSONL documents, {NEAR_SHARE:.0%} planted near copies, sluice materialize, {compute} compute"
            suffix = "" if compute == "local" else f"_{compute}"
            figure(f"partition_scale_near_dup_recall_{label(count)}{suffix}", r["quality"]["recall"], ">= 0.95", config + ", vs planted truth, exact Jaccard >= 0.8")
            figure(f"partition_scale_near_dup_precision_{label(count)}{suffix}", r["quality"]["precision"], ">= 0.99", config + ", vs planted truth, exact Jaccard >= 0.8")
            figure(f"partition_scale_cpu_ms_per_doc_{label(count)}{suffix}", 1000 * r["cpu_s"] / count, "-", config + ", CPU of the process tree")
            if r["s3_requests"]:
                figure(f"partition_scale_s3_requests_per_1000_docs_{label(count)}{suffix}", 1000 * sum(r["s3_requests"].values()) / count, "flat",
                       config + ", crawl and storage on SeaweedFS S3, requests of every process counted by the server")
        if len(sizes) > 1:
            scaling_figures(results[sizes[0]], results[sizes[-1]])
            if compute == "local" and server is None and args.sizing_page:
                sizing.write_page(list(results.values()), Path(args.sizing_page))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
