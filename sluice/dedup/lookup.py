"""The global cluster of one document, found by probes of the dedup index (what `sluice trace` reports).

A document's cluster is every indexed document whose parents (`dedup_clusters`) lead to the same kept
document, in whichever partition it was decided, later ones included. Every link deduplication makes joins
two documents that share an index key (the 128-bit text hash, or an LSH band hash), so the cluster is
reached from the document by key: probe the index with the keys of the members found so far (their
`dedup_signatures` rows), resolve the roots of the documents the probe returns (`resolve_roots`), keep
those with the document's root, repeat with the new members until none is added.

Cost: per round one index probe (at most 1 + 2 x (shards + T) files, row groups without a probe key
skipped, `DedupIndex.probe`), and per document found one row group of its signatures and clusters files.
That grows with the cluster and its band buckets, not with the number of partitions or documents; past
`limit` documents looked at, the search stops and the size is a lower bound (`complete` False).
Documents of partitions indexed but not clustered yet have no decision: counted apart (`undecided`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from sluice.config import DedupSettings, S3Settings
from sluice.dedup.clusters import resolve_roots
from sluice.dedup.index import DedupIndex, partition_rows
from sluice.dedup.schemas import (
    CLUSTERS,
    ROW_BITS,
    SIGNATURES,
    parquet_file,
    prefix_of,
    ref_of,
    signatures_schema,
)
from sluice.layout import MANIFEST, PartitionRef, read_manifest
from sluice.storage import Store

LIMIT = 10_000  # documents looked at before the search stops (the size is then a lower bound)


@dataclass(frozen=True)
class GlobalCluster:
    cluster_id: str  # doc_id of the cluster's kept document
    cluster_partition: str  # its partition (source/snapshot)
    size: int  # documents of the cluster found in every indexed, clustered partition
    partitions: int  # partitions holding members
    undecided: int  # documents sharing a key with a member, in partitions indexed but not clustered yet
    complete: bool  # False: stopped after `limit` documents, `size` is a lower bound
    rounds: int  # index probes made


def signature_rows(store: Store, partition: str, docs: np.ndarray) -> pl.DataFrame:
    """The `dedup_signatures` rows (doc, doc_id, text_hash, bands) of these documents of a partition: per
    cleaned part, only the row groups holding them (part files are sorted by doc)."""
    prefix = prefix_of(SIGNATURES, partition)
    manifest = read_manifest(store, prefix)
    if manifest is None:
        raise FileNotFoundError(f"{store.uri(prefix)}: no signatures for {partition}")
    docs = np.unique(np.asarray(docs, np.int64))
    schema = signatures_schema(manifest["minhash"]["bands"])
    frames = [pl.from_arrow(schema.empty_table())]
    for part in np.unique(docs >> ROW_BITS).tolist():
        wanted = docs[(docs >> ROW_BITS) == part]
        with parquet_file(store, f"{prefix}/part-{part:05d}.parquet") as parquet:
            groups = [g for g in range(parquet.num_row_groups) if _holds(parquet.metadata.row_group(g).column(0).statistics, wanted)]
            table = parquet.read_row_groups(groups).cast(schema) if groups else schema.empty_table()
        frames.append(pl.from_arrow(table).filter(pl.col("doc").is_in(wanted.tolist())))  # type: ignore[union-attr]
    return pl.concat(frames)  # type: ignore[arg-type]


def _holds(stats: object, sorted_docs: np.ndarray) -> bool:
    if stats is None or not stats.has_min_max:  # type: ignore[attr-defined]
        return True
    at = int(np.searchsorted(sorted_docs, stats.min))  # type: ignore[attr-defined]
    return at < len(sorted_docs) and sorted_docs[at] <= stats.max  # type: ignore[attr-defined]


def neighbours(index: DedupIndex, manifest: dict, store: Store, members: pl.DataFrame) -> pl.DataFrame:
    """(partition, doc) of every indexed document sharing an exact or band key with one of `members`
    (partition, doc), in any partition."""
    keys = {"exact": [], "bands": []}
    for (partition,), group in members.group_by(["partition"]):
        rows = partition_rows(signature_rows(store, partition, group["doc"].to_numpy()), ref_of(partition))
        for table, frame in rows.items():
            keys[table].append(frame)
    found = [pl.DataFrame(schema={"partition": pl.String, "doc": pl.Int64})]
    for table, frames in keys.items():
        probe_keys = pl.concat(frames)
        if probe_keys.height and (table == "exact" or index.settings.fuzzy):
            found.append(index.probe(table, probe_keys, None, manifest).select("partition", "doc"))
    return pl.concat(found).unique()


def clustered(store: Store, partitions: list[str]) -> set[str]:
    """The partitions among these whose `dedup_clusters` is published."""
    return {p for p in partitions if store.exists(f"{prefix_of(CLUSTERS, p)}/{MANIFEST}")}


def global_cluster(store: Store, settings: DedupSettings, ref: PartitionRef, doc: int, limit: int = LIMIT, s3: S3Settings | None = None) -> GlobalCluster | None:
    """The global cluster of document `doc` (dedup position `part << 24 | row`) of partition `ref`; None
    when its partition is not indexed or not clustered with these settings."""
    index = DedupIndex(store, settings, s3)
    manifest = index.manifest()
    if ref.key not in manifest["partitions"] or not clustered(store, [ref.key]):
        return None
    start = pl.DataFrame({"partition": [ref.key], "doc": [doc]}, schema={"partition": pl.String, "doc": pl.Int64})
    root = resolve_roots(store, start).row(0, named=True)
    members, frontier, seen = start, start, start
    undecided, rounds, complete = 0, 0, True
    decided: dict[str, bool] = {}
    while frontier.height:
        if seen.height >= limit:
            complete = False
            break
        rounds += 1
        new = neighbours(index, manifest, store, frontier).join(seen, on=["partition", "doc"], how="anti")
        seen = pl.concat([seen, new])
        unknown = [p for p in new["partition"].unique().to_list() if p not in decided]
        known = clustered(store, unknown)
        decided.update({p: p in known for p in unknown})
        ready = new.filter(pl.col("partition").is_in([p for p, done in decided.items() if done]))
        undecided += new.height - ready.height
        roots = resolve_roots(store, ready)
        same = (pl.col("root_partition") == root["root_partition"]) & (pl.col("root_doc") == root["root_doc"])
        frontier = roots.filter(same).select("partition", "doc")
        members = pl.concat([members, frontier])
    return GlobalCluster(
        root["root_id"], root["root_partition"], members.height, members["partition"].n_unique(), undecided, complete, rounds
    )
