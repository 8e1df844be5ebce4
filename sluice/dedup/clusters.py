"""Clusters: connected components of the linked documents, and the kept document each removed one leads to.

**Components** (`components`): `scipy.sparse.csgraph.connected_components` over the edges, each node
labelled with its component's smallest node, in this process while the partition's linked edges number at
most `EDGES_PER_TASK`; above that, `dedup_clusters` runs them as rounds of executor tasks over edge files
(`sluice.dedup.stars`), whose labels are the same.

**Roots** (`resolve_roots`): every document's `parent` (in `dedup_clusters`) is the first document of the
cluster its partition saw, itself when kept. Following parents through earlier partitions' `dedup_clusters`
files ends at a kept document, the cluster's `cluster_id`. Each step reads, per partition named, only the
row groups holding the documents asked for.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from sluice.dedup.schemas import CLUSTERS, CLUSTERS_FILE, parquet_file, prefix_of
from sluice.io.layout import groups_between
from sluice.io.storage import Store

# Linked edges above which a partition's components run as star rounds of tasks (`sluice.dedup.stars`).
EDGES_PER_TASK = 1 << 20
# Rows per row group of `dedup_clusters` (root resolution reads only the groups holding its documents).
CLUSTER_ROW_GROUP = 4096
MAX_ROOT_STEPS = 100_000


def forest(edges: np.ndarray) -> np.ndarray:
    """(k, 2) int64 edges -> a spanning forest of the same components: (smallest node of the component, node)
    for every other node."""
    if not len(edges):
        return np.empty((0, 2), np.int64)
    # Imported here: every signing worker imports the sluice.dedup package, and scipy (~0.2 CPU s per
    # process) is needed only for clustering.
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    nodes, inverse = np.unique(edges.reshape(-1), return_inverse=True)
    inverse = inverse.reshape(-1, 2)
    graph = coo_matrix((np.ones(len(edges), np.int8), (inverse[:, 0], inverse[:, 1])), shape=(len(nodes), len(nodes)))
    count, labels = connected_components(graph, directed=False)
    smallest = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(smallest, labels, nodes)
    roots = smallest[labels]
    others = roots != nodes
    return np.stack([roots[others], nodes[others]], axis=1)


def components(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, label): every node of the (k, 2) edges and the smallest node of its component."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    final = forest(edges)
    nodes = np.unique(edges.reshape(-1))
    labels = nodes.copy()
    if len(final):
        labels[np.searchsorted(nodes, final[:, 1])] = final[:, 0]
    return nodes, labels


def read_cluster_rows(store: Store, partition: str, docs: np.ndarray) -> pl.DataFrame:
    """(doc, doc_id, parent_partition, parent_doc) of these documents of a partition's
    `dedup_clusters` file (sorted by doc: only the row groups holding them are read)."""
    key = f"{prefix_of(CLUSTERS, partition)}/{CLUSTERS_FILE}"
    docs = np.unique(np.asarray(docs, np.int64))
    columns = ["doc", "doc_id", "parent_partition", "parent_doc"]
    with parquet_file(store, key) as parquet:
        groups = []
        for group in range(parquet.num_row_groups):
            stats = parquet.metadata.row_group(group).column(0).statistics
            at = int(np.searchsorted(docs, stats.min)) if stats is not None and stats.has_min_max else 0
            if stats is None or not stats.has_min_max or (at < len(docs) and docs[at] <= stats.max):
                groups.append(group)
        table = parquet.read_row_groups(groups, columns=columns)
    frame = pl.from_arrow(table)
    found = frame.filter(pl.col("doc").is_in(docs.tolist()))  # type: ignore[union-attr]
    if found.height != len(docs):
        raise ValueError(f"{store.uri(key)} lacks documents its later partitions link to (e.g. doc {sorted(set(docs.tolist()) - set(found['doc'].to_list()))[0]})")
    return found


def cluster_rows_between(store: Store, key: str, low: int, high: int) -> pl.DataFrame:
    """Every `dedup_clusters` row (CLUSTERS_SCHEMA) of the file `key` whose doc is in [low, high] (one part's
    rows: only the row groups overlapping the range are read)."""
    from sluice.dedup.schemas import CLUSTERS_SCHEMA

    with parquet_file(store, key) as parquet:
        groups = groups_between(parquet.metadata, low, high)
        table = parquet.read_row_groups(groups) if groups else CLUSTERS_SCHEMA.empty_table()
    frame: pl.DataFrame = pl.from_arrow(table)  # type: ignore[assignment]
    return frame.filter(pl.col("doc").is_between(low, high))


def resolve_roots(store: Store, starts: pl.DataFrame) -> pl.DataFrame:
    """The kept document each (partition, doc) leads to by following parents: (partition, doc,
    root_partition, root_doc, root_id). `starts` are documents of earlier, already clustered partitions."""
    frontier = starts.select("partition", "doc").unique()
    path = frontier.with_columns(at_partition=pl.col("partition"), at_doc=pl.col("doc"))
    roots: list[pl.DataFrame] = []
    for _ in range(MAX_ROOT_STEPS):
        if frontier.height == 0:
            break
        rows = pl.concat(
            [
                read_cluster_rows(store, partition, group["doc"].to_numpy()).with_columns(partition=pl.lit(partition))
                for (partition,), group in frontier.sort("partition", "doc").group_by(["partition"], maintain_order=True)
            ]
        )
        is_root = (pl.col("parent_partition") == pl.col("partition")) & (pl.col("parent_doc") == pl.col("doc"))
        done = rows.filter(is_root).select(at_partition="partition", at_doc="doc", root_partition="partition", root_doc="doc", root_id="doc_id")
        roots.append(path.join(done, on=["at_partition", "at_doc"]).select("partition", "doc", "root_partition", "root_doc", "root_id"))
        step = rows.filter(~is_root).select(at_partition="partition", at_doc="doc", next_partition="parent_partition", next_doc="parent_doc")
        path = path.join(step, on=["at_partition", "at_doc"]).select("partition", "doc", at_partition="next_partition", at_doc="next_doc")
        frontier = path.select(partition="at_partition", doc="at_doc").unique()
    else:
        raise RuntimeError(f"following dedup_clusters parents did not end after {MAX_ROOT_STEPS} steps (a cycle?)")
    schema = {"partition": pl.String, "doc": pl.Int64, "root_partition": pl.String, "root_doc": pl.Int64, "root_id": pl.String}
    return pl.concat([pl.DataFrame(schema=schema), *roots]).sort("partition", "doc")
