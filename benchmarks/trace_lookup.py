"""Trace lookup at growing mix size: from a step number alone to the (shard, document, token span) of every
packed segment of the global batch, at 10^6 and 10^7 documents.

    .venv/bin/python benchmarks/trace_lookup.py [--sizes 1e6 1e7] [--data DIR] [--steps 20]

Data: benchmarks/loader_scale.py's synthetic mixes (`.bench_data/loader_scale/docs=N`, generated when
missing; --data reads another checkout's copy, read-only). Configuration: L = 2048, batch 8 per rank x 64
ranks (a global batch of 512 samples), random steps over the whole epoch (seeded), each timed from an opened
mix (`MixedTokens`, pread) to the list of segments (`sluice.trace.batch.batch_segments`: the order's
permutation at those positions, the index records of each sample, packing). This is the part of a trace
whose cost could grow with the corpus; the per-document probes that follow (one row group of the shard's
.docs.parquet, the deduplicated part, the raw part and the dedup clusters file) read one row group each and
do not depend on the number of partitions or documents (`sluice.lineage`). Reported: the median and the
worst step (goal < 1 s on a 10^7-document mix), and the 10^7 / 10^6 ratio of medians.
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
    from sluice.loader import MixedTokens
    from sluice.storage import open_store
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e6, 1e7])
    parser.add_argument("--data", default=None, help="folder holding docs=N mixes (default: loader_scale's)")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    medians = {}
    for size in [int(s) for s in args.sizes]:
        if args.data:
            root = Path(args.data) / f"docs={size}"
        else:
            from benchmarks.loader_scale import prepared

            root = prepared(size)
        if root is None or not root.exists():
            print(f"{size:.0e}: no data, skipped")
            continue
        times = measure(root, args.steps)
        medians[size] = statistics.median(times)
        config = f"{size:.0e} documents, global batch {BATCH}x{WORLD}, step alone, {args.steps} random steps"
        figure(f"trace_batch_lookup_s[{config}, median]", medians[size], "< 1 at 1e7")
        figure(f"trace_batch_lookup_s[{config}, worst]", max(times), "< 1 at 1e7")
    if 10**6 in medians and 10**7 in medians:
        figure("trace_batch_lookup_s_1e7_vs_1e6 (medians)", medians[10**7] / medians[10**6], "<= 1.5")


if __name__ == "__main__":
    main()
