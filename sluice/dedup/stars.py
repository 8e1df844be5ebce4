"""Connected components over edge files, in rounds of executor tasks: large-star / small-star (Kiveris,
Lattanzi, Mirrokni, Rastogi, Vassilvitskii, "Connected Components in MapReduce and Beyond", SoCC 2014).

Above `sluice.dedup.clusters.EDGES_PER_TASK` edges, `dedup_clusters` does not gather its graph in one
process. The edges stay in files cut into `buckets` node-hash buckets (`node_bucket`; a bucket is a row
group run, as dedup's pair files), each edge stored under both of its nodes. A round is one task per bucket
(`star_round`): it reads its bucket's rows of every file of the round before (`sluice.dedup.shuffle.
bucket_pairs`) and writes its output the same way.

- **large star**, per node u with neighbours Γ(u): m = min(Γ(u) ∪ {u}); every neighbour v > u is linked to m.
- **small star**, per node u with smaller neighbours N(u): m = min(N(u)); every x of N(u) ∪ {u} other than m
  is linked to m.

Neither step changes the components, and both only ever move a node's link to a smaller node. The rounds
alternate until a large and a small star change no edge. Then every component is a star around its smallest
node: small star left each node at most one smaller neighbour w, and large star, unchanged, says w has no
smaller neighbour and a leaf has no larger one. The paper bounds the rounds by O(log² n); near-duplicate
graphs, mostly small clusters, take a few (`MAX_ROUNDS` guards against a bug).

The last task per bucket (`labels`) counts each star, its root being a node whose rows all lead to larger
nodes, and writes (node, label = the root, cluster_size) for the nodes of one partition, cut by part range
(`part_bucket`) so that the clusters writer reads one part range at a time. A task holds the rows keyed by
its bucket's nodes, about 2 x edges / buckets plus the largest star (one cluster's documents); never the
graph. The labels are the smallest node of each component, as `sluice.dedup.clusters.components` gives in
one process: the same decisions whatever the path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from sluice.config import S3Settings
from sluice.dedup.schemas import PartitionOrdinals
from sluice.dedup.shuffle import (
    both_ways,
    bucket_pairs,
    by_first,
    part_bucket,
    read_buckets,
    write_bucketed,
)
from sluice.io.storage import Store, StoreSpec
from sluice.runtime.compute import Executor

MAX_ROUNDS = 200
LABELS_SCHEMA = pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("node", pa.int64(), nullable=False),
        pa.field("label", pa.int64(), nullable=False),
        pa.field("cluster_size", pa.int64(), nullable=False),
    ]
)


@dataclass(frozen=True)
class StarTask:
    """One bucket of one round (`star_round`). step: "large", "small" or "labels"."""

    root_url: str
    step: str
    inputs: tuple[str, ...]  # the files of the round before
    bucket: int
    buckets: int
    out: str  # this task's output file
    ordinal: int = 0  # labels: the partition whose nodes get rows
    parts: int = 1  # labels: its part count (the part-range cut)
    s3: S3Settings = field(default_factory=S3Settings)

    @property
    def label(self) -> str:
        return f"{self.step} star, bucket {self.bucket}"


def star_round(task: StarTask) -> dict[str, Any]:
    """{"key": the written file (None when empty), "changed": edges moved, "ordinals": partitions seen,
    "rows": the rows this task read (what it held)}."""
    store = StoreSpec(task.root_url, task.s3).open()
    rows = bucket_pairs(store, list(task.inputs), task.bucket)  # (u: a node of this bucket, v: a neighbour)
    if task.step == "labels":
        return {**_labels(store, task, rows), "rows": rows.height}
    step = _large if task.step == "large" else _small
    u, v, changed = step(rows)
    edges = both_ways(u, v, task.buckets) if task.step == "small" else by_first(u, v, task.buckets)
    key = write_bucketed(store, task.out, edges) if len(u) else None
    return {"key": key, "changed": changed, "ordinals": [], "rows": rows.height}


def _large(rows: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, int]:
    """(v, m) for every neighbour v > u of each u, m the smallest of u and its neighbours; stored under v
    (small star's key, the larger node). Changed: the edges whose smaller node moved (m < u)."""
    framed = rows.filter(pl.col("u") != pl.col("v")).with_columns(m=pl.min_horizontal(pl.col("v").min().over("u"), pl.col("u")))
    out = framed.filter(pl.col("v") > pl.col("u"))
    return out["v"].to_numpy(), out["m"].to_numpy(), int((out["m"] != out["u"]).sum())


def _small(rows: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, int]:
    """(x, m) for x in N(u) ∪ {u} other than m, N(u) the smaller neighbours of u and m their smallest; stored
    under both nodes (large star's key). Changed: the links beyond (u, m) of a node with several smaller ones."""
    smaller = rows.filter(pl.col("v") < pl.col("u")).with_columns(m=pl.col("v").min().over("u"))
    moved = smaller.filter(pl.col("v") != pl.col("m"))
    heads = smaller.select("u", "m").unique()
    x = np.concatenate([heads["u"].to_numpy(), moved["v"].to_numpy()])
    m = np.concatenate([heads["m"].to_numpy(), moved["m"].to_numpy()])
    return x, m, moved.height


def _labels(store: Store, task: StarTask, rows: pl.DataFrame) -> dict[str, Any]:
    """The converged stars of this bucket's roots: (node, label, cluster_size) of every node of the
    partition `task.ordinal`, cut by part range."""
    roots = rows.filter(pl.col("v") > pl.col("u")).group_by("u").agg(pl.col("v"), (pl.len() + 1).cast(pl.Int64).alias("cluster_size"))
    members = pl.concat(
        [
            roots.select(node="u", label="u", cluster_size="cluster_size"),
            roots.explode("v").select(node="v", label="u", cluster_size="cluster_size"),
        ]
    )
    table = label_table(members, task.ordinal, task.parts, task.buckets)
    ordinals = np.unique(rows["u"].to_numpy() >> np.int64(PartitionOrdinals.SHIFT)).tolist()
    key = write_bucketed(store, task.out, table) if table.num_rows else None
    return {"key": key, "changed": 0, "ordinals": ordinals}


def label_table(members: pl.DataFrame, ordinal: int, parts: int, buckets: int) -> pa.Table:
    """LABELS_SCHEMA rows of the nodes of partition `ordinal` among `members` (node, label, cluster_size),
    sorted by node and cut by part range (`part_bucket`): what the clusters writer reads a range at a time,
    from the star rounds or from the components of one process."""
    here = members.filter(pl.col("node") // (1 << PartitionOrdinals.SHIFT) == ordinal).sort("node")
    docs = here["node"].to_numpy() & np.int64((1 << PartitionOrdinals.SHIFT) - 1)
    columns = {name: here[name].to_numpy() for name in ("node", "label", "cluster_size")}
    return pa.table({"bucket": part_bucket(docs, parts, buckets), **columns}, schema=LABELS_SCHEMA)


@dataclass
class StarLabels:
    """The outcome of `star_components`: label files (LABELS_SCHEMA, cut by part range) and the ordinals
    of every partition holding a linked node; the large/small rounds run and the most rows one task read."""

    keys: list[str]
    ordinals: list[int]
    rounds: int
    max_task_rows: int


def star_components(
    store: Store, prefix: str, inputs: list[str], buckets: int, ordinal: int, parts: int, executor: Executor, s3: S3Settings | None = None
) -> StarLabels:
    """Components of the edges in `inputs` (PAIRS_FILE_SCHEMA files, each edge under both nodes), as rounds
    of `buckets` tasks writing `{prefix}/stars-RRR-BBBBB.parquet`; the labels of partition `ordinal`'s nodes."""
    s3 = s3 or S3Settings()

    def run(step: str, number: int, files: list[str], **extra: int) -> list[dict[str, Any]]:
        tasks = [
            StarTask(store.uri(), step, tuple(files), bucket, buckets, f"{prefix}/stars-{number:03d}-{bucket:05d}.parquet", s3=s3, **extra)
            for bucket in range(buckets)
        ]
        return executor.map(star_round, tasks)

    files, most = inputs, 0
    for number in range(0, 2 * MAX_ROUNDS, 2):
        large = run("large", number, files)
        small = run("small", number + 1, [r["key"] for r in large if r["key"]])
        files, most = [r["key"] for r in small if r["key"]], max([most, *(r["rows"] for r in large + small)])
        if not any(r["changed"] for r in large) and not any(r["changed"] for r in small):
            labels = run("labels", number + 2, files, ordinal=ordinal, parts=parts)
            ordinals = sorted({o for r in labels for o in r["ordinals"]})
            most = max([most, *(r["rows"] for r in labels)])
            return StarLabels([r["key"] for r in labels if r["key"]], ordinals, number // 2 + 1, most)
    raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} large/small star rounds")


def read_labels(store: Store, keys: list[str], bucket: int) -> pl.DataFrame:
    """(node, label, cluster_size) of one part range from every label file, sorted by node."""
    return read_buckets(store, keys, bucket, LABELS_SCHEMA).drop("bucket").sort("node")
