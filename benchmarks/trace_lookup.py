"""Trace lookup at growing mix size, at 10^6 and 10^7 documents: from a step number alone to the segments of
the global batch, and the full trace of a batch (every per-document probe) on an upstream of the same size.

    .venv/bin/python benchmarks/trace_lookup.py [--sizes 1e6 1e7] [--data DIR] [--steps 20] [--full-steps 5]

Data: benchmarks/loader_scale.py's synthetic mixes (`.bench_data/loader_scale/docs=N`, generated when
missing; --data reads another checkout's copy, read-only).

1. Step alone -> segments. Configuration: L = 2048, batch 8 per rank x 64 ranks (a global batch of 512
   samples), random steps over the whole epoch (seeded), each timed from an opened mix (`MixedTokens`, pread)
   to the list of segments (`sluice.trace.batch.batch_segments`: the order's permutation at those positions,
   the index records of each sample, packing). Reported: median and worst step, the 10^7 / 10^6 ratio.
2. Full trace (`sluice.trace.trace_batch`, --full-steps random steps): rank 0's batch of 8 samples at world
   size 64, every document of it traced: its shard row, deduplicated row, raw record, filter statistics
   replayed from the raw record, and its global dedup cluster by probes of the dedup index. The upstream is
   built by benchmarks/trace_upstream.py under `.bench_data/trace_upstream/docs=N` (git-ignored; each shard
   a partition of 262,144 documents, so 10^7 documents are 39 partitions, the index built by the real
   `DedupIndex` with the repository's sluice.yaml dedup settings). Each trace starts from a fresh tracer (no
   file cached from an earlier step); page cache warm after the first step. Reported: median and worst wall
   seconds per batch, median per document, median CPU seconds per batch (user + system of this process: on a
   shared machine the wall time mostly measures the others' load), and the 10^7 / 10^6 ratio of the CPU
   medians. --steps 0 skips part 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers import figure  # noqa: E402

BATCH, WORLD = 8, 64


def measure(root: Path, steps: int) -> list[float]:
    from sluice.io.storage import open_store
    from sluice.loader import MixedTokens
    from sluice.trace.batch import BatchSpec, batch_segments

    data = MixedTokens(open_store(str(root)), "scale", read_mode="pread")
    chosen = np.random.default_rng(7).integers(0, len(data) // (BATCH * WORLD), size=steps).tolist()
    batch_segments(data, BatchSpec(mix="scale", step=0, batch_size=BATCH, world_size=WORLD, seed=1))  # imports, first probe
    times = []
    for step in chosen:
        started = time.perf_counter()
        segments = batch_segments(data, BatchSpec(mix="scale", step=step, batch_size=BATCH, world_size=WORLD, seed=1))
        times.append(time.perf_counter() - started)
        assert len({(s.rank, s.row) for s in segments}) == BATCH * WORLD
    return times


def full_trace(root: Path, steps: int) -> tuple[list[float], list[float], list[float]]:
    """(seconds per batch, seconds per document, CPU seconds per batch) of `steps` full traces of rank 0's
    batch (CPU time of this process, user + system: what the trace costs whatever else the machine runs)."""
    from sluice.config import load_config
    from sluice.io.storage import open_store
    from sluice.loader import MixedTokens
    from sluice.trace import BatchSpec, trace_batch

    config = load_config(str(Path(__file__).resolve().parents[1] / "sluice.yaml"))
    store = open_store(str(root))
    data = MixedTokens(store, "scale", read_mode="pread")
    spec = lambda step: BatchSpec(mix="scale", step=step, batch_size=BATCH, world_size=WORLD, seed=1, ranks=(0,))  # noqa: E731
    trace_batch(store, config, spec(0), data=data)  # imports, first reads
    per_batch, per_doc, cpu = [], [], []
    for step in np.random.default_rng(11).integers(0, len(data) // (BATCH * WORLD), size=steps).tolist():
        started, cpu_started = time.perf_counter(), time.process_time()
        trace = trace_batch(store, config, spec(step), data=data)
        per_batch.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        per_doc.append(per_batch[-1] / len(trace.documents))
        problems = [p for doc in trace.documents for p in doc["problems"]]
        assert not problems and all(doc["dedup_cluster_size"] and doc["dedup_scope"].startswith("global") for doc in trace.documents), problems[:3]
    return per_batch, per_doc, cpu


def report_full(sizes: list[int], roots: dict[int, Path], steps: int) -> None:
    from benchmarks.trace_upstream import build

    medians = {}
    for size in sizes:
        mix_root = roots.get(size)
        if mix_root is None:
            continue
        upstream = build(Path(__file__).resolve().parents[1] / ".bench_data" / "trace_upstream" / f"docs={size}", mix_root)
        per_batch, per_doc, cpu = full_trace(upstream, steps)
        medians[size] = statistics.median(cpu)
        config = f"{size:.0e} documents, rank 0 of 64, batch {BATCH}, step alone, {steps} random steps, filter replay and global dedup cluster on"
        figure(f"trace_full_batch_s[{config}, median]", statistics.median(per_batch), "< 1 at 1e7")
        figure(f"trace_full_batch_s[{config}, worst]", max(per_batch), "< 1 at 1e7")
        figure(f"trace_full_per_document_s[{config}, median]", statistics.median(per_doc), "-")
        figure(f"trace_full_batch_cpu_s[{config}, median]", medians[size], "< 1 at 1e7")
    if 10**6 in medians and 10**7 in medians:
        figure("trace_full_batch_cpu_s_1e7_vs_1e6 (medians)", medians[10**7] / medians[10**6], "<= 1.5")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e6, 1e7])
    parser.add_argument("--data", default=None, help="folder holding docs=N mixes (default: loader_scale's)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--full-steps", type=int, default=5, help="full traces per size (0: none)")
    args = parser.parse_args()
    medians, roots = {}, {}
    for size in [int(s) for s in args.sizes]:
        if args.data:
            root = Path(args.data) / f"docs={size}"
        else:
            from benchmarks.loader_scale import prepared

            root = prepared(size)
        if root is None or not root.exists():
            print(f"{size:.0e}: no data, skipped")
            continue
        roots[size] = root
        if not args.steps:
            continue
        times = measure(root, args.steps)
        medians[size] = statistics.median(times)
        config = f"{size:.0e} documents, global batch {BATCH}x{WORLD}, step alone, {args.steps} random steps"
        figure(f"trace_batch_lookup_s[{config}, median]", medians[size], "< 1 at 1e7")
        figure(f"trace_batch_lookup_s[{config}, worst]", max(times), "< 1 at 1e7")
    if 10**6 in medians and 10**7 in medians:
        figure("trace_batch_lookup_s_1e7_vs_1e6 (medians)", medians[10**7] / medians[10**6], "<= 1.5")
    if args.full_steps:
        report_full(sorted(roots), roots, args.full_steps)


if __name__ == "__main__":
    main()
