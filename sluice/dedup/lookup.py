"""The global dedup cluster of a document, found by probes of the dedup index (what `sluice trace` reports).

A document's cluster is every indexed document whose parents (`dedup_clusters`) lead to the same kept
document, in whichever partition it was decided, later ones included. Every link deduplication makes joins
two documents that share an index key (the 128-bit text hash, or an LSH band hash), so the cluster is
reached from the document by key: probe the index with the keys of the members found so far (their
`dedup_signatures` rows), resolve the roots of the documents the probe returns (`resolve_roots`), keep
those with the document's root, repeat with the new members until none is added. The documents of a batch
are searched together (`global_clusters`): one probe per table and round for all of them.

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
from sluice.dedup.index import MATCH, DedupIndex, partition_rows
from sluice.dedup.schemas import (
    CLUSTERS,
    ROW_BITS,
    SIGNATURES,
    parquet_file,
    prefix_of,
    ref_of,
    signatures_schema,
)
from sluice.io.layout import MANIFEST, PartitionRef, read_manifest
from sluice.io.storage import Store

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


ROOT = ["root_partition", "root_doc"]
PLACE = {"partition": pl.String, "doc": pl.Int64}


def neighbours(index: DedupIndex, manifest: dict, store: Store, members: pl.DataFrame) -> pl.DataFrame:
    """(partition, doc, root_partition, root_doc) of every indexed document sharing an exact or band key
    with one of `members` (partition, doc, root_partition, root_doc), in any partition, with the root of
    the member it shares the key with. One probe per table for all members."""
    keys: dict[str, list[pl.DataFrame]] = {"exact": [], "bands": []}
    for (partition,), group in members.group_by(["partition"]):
        rows = partition_rows(signature_rows(store, partition, group["doc"].to_numpy()), ref_of(partition))
        for table, frame in rows.items():
            keys[table].append(frame.select(*MATCH[table], "doc").join(group.select("doc", *ROOT), on="doc").drop("doc"))
    found = [pl.DataFrame(schema={**PLACE, "root_partition": pl.String, "root_doc": pl.Int64})]
    for table, frames in keys.items():
        probe_keys = pl.concat(frames)
        if probe_keys.height and (table == "exact" or index.settings.fuzzy):
            rows = index.probe(table, probe_keys.select(MATCH[table]), None, manifest, columns=[*MATCH[table], "part", "doc"])  # no doc_id: no Parquet read
            found.append(rows.select(*MATCH[table], "partition", "doc").join(probe_keys, on=MATCH[table]).select(*PLACE, *ROOT))
    return pl.concat(found).unique()


def clustered(store: Store, partitions: list[str]) -> set[str]:
    """The partitions among these whose `dedup_clusters` is published."""
    return {p for p in partitions if store.exists(f"{prefix_of(CLUSTERS, p)}/{MANIFEST}")}


def global_clusters(store: Store, settings: DedupSettings, docs: list[tuple[PartitionRef, int]], limit: int = LIMIT, s3: S3Settings | None = None) -> list[GlobalCluster | None]:
    """The global cluster of each document (partition, dedup position `part << 24 | row`), searched together
    (one probe per table and round for all of them); None for a document whose partition is not indexed or
    not clustered with these settings."""
    index = DedupIndex(store, settings, s3)
    manifest = index.manifest()
    known = clustered(store, sorted({ref.key for ref, _ in docs if ref.key in manifest["partitions"]}))
    starts = pl.DataFrame({"partition": [ref.key for ref, _ in docs], "doc": [doc for _, doc in docs]}, schema=PLACE)
    roots = resolve_roots(store, starts.filter(pl.col("partition").is_in(sorted(known))).unique())
    wanted = roots.select(*ROOT).unique()
    members = seen = frontier = roots.select(*PLACE, *ROOT)
    decided = dict.fromkeys(known, True)
    undecided: list[pl.DataFrame] = [pl.DataFrame(schema={**PLACE, "root_partition": pl.String, "root_doc": pl.Int64})]
    rounds, complete = 0, True
    while frontier.height:
        if seen.height >= limit:
            complete = False
            break
        rounds += 1
        found = neighbours(index, manifest, store, frontier)
        new = found.select(*PLACE).unique().join(seen.select(*PLACE), on=list(PLACE), how="anti")
        seen = pl.concat([seen, new.with_columns(pl.lit(None, pl.String).alias("root_partition"), pl.lit(None, pl.Int64).alias("root_doc"))])
        unknown = [p for p in new["partition"].unique().to_list() if p not in decided]
        decided.update(dict.fromkeys(unknown, False) | dict.fromkeys(clustered(store, unknown), True))
        ready = pl.col("partition").is_in([p for p, done in decided.items() if done])
        undecided.append(found.join(new.filter(~ready), on=list(PLACE)))
        frontier = resolve_roots(store, new.filter(ready)).select(*PLACE, *ROOT).join(wanted, on=ROOT)
        members = pl.concat([members, frontier])
    return [_cluster(ref, doc, roots, members, pl.concat(undecided), complete, rounds) for ref, doc in docs]


def _cluster(ref: PartitionRef, doc: int, roots: pl.DataFrame, members: pl.DataFrame, undecided: pl.DataFrame, complete: bool, rounds: int) -> GlobalCluster | None:
    root = roots.filter((pl.col("partition") == ref.key) & (pl.col("doc") == doc))
    if root.height == 0:
        return None
    row = root.row(0, named=True)
    of_root = (pl.col("root_partition") == row["root_partition"]) & (pl.col("root_doc") == row["root_doc"])
    mine = members.filter(of_root)
    pending = undecided.filter(of_root).select(*PLACE).unique().height
    return GlobalCluster(row["root_id"], row["root_partition"], mine.height, mine["partition"].n_unique(), pending, complete, rounds)


def global_cluster(store: Store, settings: DedupSettings, ref: PartitionRef, doc: int, limit: int = LIMIT, s3: S3Settings | None = None) -> GlobalCluster | None:
    """The global cluster of document `doc` (dedup position `part << 24 | row`) of partition `ref`; None
    when its partition is not indexed or not clustered with these settings."""
    return global_clusters(store, settings, [(ref, doc)], limit, s3)[0]
