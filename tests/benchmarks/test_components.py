"""benchmarks/components.py: star rounds and scipy agree on a near-duplicate graph at two sizes (the script
asserts the labels equal), and every figure is printed."""

from __future__ import annotations

import re

import numpy as np

from tests.support.bench import run_benchmark


def test_the_generated_graph_has_power_law_clusters_of_four_partitions():
    from benchmarks.components import near_duplicate_graph
    from sluice.dedup.clusters import components
    from sluice.dedup.schemas import PartitionOrdinals

    edges = near_duplicate_graph(20_000, seed=1)
    assert 10_000 < len(edges) <= 20_000 and len(np.unique(edges, axis=0)) == len(edges)
    nodes, labels = components(edges)
    sizes = np.unique(labels, return_counts=True)[1]
    assert np.median(sizes) <= 3 and sizes.max() >= 50  # mostly pairs and triples, a few large clusters
    assert set(np.unique(nodes >> PartitionOrdinals.SHIFT).tolist()) == {0, 1, 2, 3}


def test_both_sizes_agree_and_print_their_figures(tmp_path):
    out, figures = run_benchmark("components.py", ["--edges", "2000", "8000", "--buckets", "4"], tmp_path)
    assert len(re.findall(r"^\d+ edges: labels identical; ", out, re.MULTILINE)) == 2, out
    assert {"components_star_rounds_2e3", "components_star_max_task_share_8e3", "components_star_cpu_per_edge_ratio_8e3_over_2e3"} <= set(figures), out
