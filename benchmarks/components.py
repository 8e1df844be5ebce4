"""Connected components of dedup's linked documents: large/small star rounds over files vs scipy in one process.

The same graph, the same labels (each node's component's smallest node, asserted equal): `sluice.dedup.
components` (scipy.sparse.csgraph in one process: what `dedup_clusters` runs up to `EDGES_PER_TASK` linked
edges) against `sluice.dedup.stars.star_components` (rounds of tasks over bucketed Parquet edge files on the
local store, inline executor so that CPU is one process's), at growing edge counts.

The graph imitates a partition's near-duplicate links: documents of 4 partitions in clusters whose sizes
follow a power law (most 2-3 documents, a few thousands), each member linked to one to three earlier
members of its cluster (LSH candidates after verification), edges in random order.

Figures: the rounds, CPU of both and their ratio (the price of not holding the graph in one process), CPU
per edge at the largest size over the smallest (goal <= 1.3: linear), and the largest share of the edge
rows one task read (goal <= 2 / buckets x 1.5: a bucket's share, not the graph).

    PYTHONPATH=. .venv/bin/python benchmarks/components.py [--edges 100000 1000000 --buckets 16]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.peers import figure  # noqa: E402
from sluice.dedup.clusters import components  # noqa: E402
from sluice.dedup.schemas import PartitionOrdinals  # noqa: E402
from sluice.dedup.shuffle import both_ways, write_bucketed  # noqa: E402
from sluice.dedup.stars import read_labels, star_components  # noqa: E402
from sluice.io.storage import open_store  # noqa: E402
from sluice.runtime.compute import Executor  # noqa: E402

PARTS = 1024


def near_duplicate_graph(edges: int, seed: int = 0) -> np.ndarray:
    """About `edges` (k, 2) edges over clusters of power-law sizes, nodes of 4 partitions."""
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.zipf(2.2, edges) + 1, 5000)
    sizes = sizes[: np.searchsorted(np.cumsum(sizes - 1) * 2, edges) + 1]
    docs = rng.choice(PARTS << 24, int(sizes.sum()), replace=False).astype(np.int64)
    nodes = docs + (rng.integers(0, 4, len(docs)) << PartitionOrdinals.SHIFT)
    start = np.repeat(np.cumsum(sizes) - sizes, sizes)
    rank = np.arange(len(nodes)) - start
    out = []
    for extra in range(3):  # each member -> one to three earlier members of its cluster
        member = rank > 0 if extra == 0 else (rank > extra) & (rng.random(len(rank)) < 0.5)
        earlier = start[member] + (rng.random(member.sum()) * rank[member]).astype(np.int64)
        out.append(np.stack([nodes[earlier], nodes[member]], axis=1))
    graph = np.unique(np.concatenate(out), axis=0)
    return graph[rng.permutation(len(graph))]


def measure(edges: np.ndarray, buckets: int) -> dict:
    components(edges[:10])  # scipy's import outside the timing
    start = time.process_time()
    nodes, labels = components(edges)
    scipy_cpu = time.process_time() - start
    folder = tempfile.mkdtemp(prefix="sluice-components-")
    try:
        store = open_store(folder)
        inputs = [write_bucketed(store, f"in/edges-{i:03d}.parquet", both_ways(c[:, 0], c[:, 1], buckets)) for i, c in enumerate(np.array_split(edges, buckets))]
        start = time.process_time()
        result = star_components(store, "stars", inputs, buckets, 0, PARTS, Executor())  # partition 0's labels
        star_cpu = time.process_time() - start
        got = {}
        for bucket in range(buckets):
            got.update(zip(*[read_labels(store, result.keys, bucket)[c].to_list() for c in ("node", "label")], strict=True))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    here = (nodes >> PartitionOrdinals.SHIFT) == 0
    assert got == dict(zip(nodes[here].tolist(), labels[here].tolist(), strict=True)), "star rounds and scipy disagree"
    return {"scipy_cpu": scipy_cpu, "star_cpu": star_cpu, "rounds": result.rounds, "max_share": result.max_task_rows / (2 * len(edges))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--buckets", type=int, default=16)
    args = parser.parse_args()
    config = f"near-duplicate graph (power-law clusters, 4 partitions), {args.buckets} buckets, local store, one process"
    rows = {}
    for wanted in args.edges:
        edges = near_duplicate_graph(wanted)
        rows[wanted] = row = measure(edges, args.buckets)
        print(
            f"{len(edges)} edges: labels identical; scipy {row['scipy_cpu']:.2f} CPU s, star rounds {row['rounds']} x 2 in "
            f"{row['star_cpu']:.2f} CPU s, largest task read {row['max_share']:.3f} of the edge rows", flush=True
        )
        tag = f"{wanted:.0e}".replace("+0", "")
        figure(f"components_star_rounds_{tag}", row["rounds"], "report", config)
        figure(f"components_star_cpu_vs_scipy_{tag}", row["star_cpu"] / row["scipy_cpu"], "report (the price of a bounded task)", config)
        figure(f"components_star_max_task_share_{tag}", row["max_share"], f"<= {3 / args.buckets:.3g} (a bucket's share)", config)
    low, high = min(rows), max(rows)
    if high > low:
        ratio = (rows[high]["star_cpu"] / high) / (rows[low]["star_cpu"] / low)
        figure(f"components_star_cpu_per_edge_ratio_{high:.0e}_over_{low:.0e}".replace("+0", ""), ratio, "<= 1.3", config)


if __name__ == "__main__":
    main()
