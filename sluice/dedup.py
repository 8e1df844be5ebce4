"""Deduplication, global across all source x snapshot partitions: exact, then near duplicates (MinHash LSH).

**Order and keeper rule** (deterministic, independent of worker count and engine): partitions are totally
ordered by (snapshot, source); inside a partition documents keep their order (cleaned part file, then
row). A document's position is `doc = part << 24 | row` inside its partition.

**Exact**: a document is removed (kind `exact`) when a document with the same `text_hash`
(`sluice.clean.normalize_for_hash`: NFKC, case-folded, whitespace collapsed) comes before it in that
order; `duplicate_of` is that first copy. Earlier partitions' cleaned outputs are streamed file by file,
two columns, matched with Arrow's `is_in`.

**Near duplicates** (`dedup.fuzzy`): every document gets LSH band hashes (`sluice.minhash`). The
candidate graph joins documents sharing any (band, hash). Partition P is deduplicated against the graph
of all documents of P and of every partition ordered before it: a document of P is removed (kind
`fuzzy`) when its connected component holds a document ordered before it. Documents kept by an earlier
partition are never removed later; a later document that bridges two earlier clusters is itself removed
and changes nothing before it. The one-batch result (all partitions' documents clustered at once, the
first of each component kept) is the same whenever no later document bridges earlier ones; tests check
this on the sample with planted near duplicates.

**Incremental band index** (files of the deduped partition, listed in its manifest under `band_index`):
- `bands-NNNNN.parquet`, one per cleaned part: `band uint8, hash uint64, doc int64`, sorted by
  (band, hash, doc); documents without any word have no rows (they never match).
- `clusters.parquet`: `doc int64, doc_id string, keeper_partition string, keeper_doc int64, keeper_id
  string`: for each indexed document the kept document of its cluster (itself when kept).
- `shingles-NNNNN.parquet` (when verifying; listed under `shingles`), one per cleaned part: `doc int64,
  shingles large_list<uint32>`, every document of the part in order, its sorted shingle-hash set (from
  the same shingling as its signature), in row groups of SHINGLE_ROW_GROUP documents.
Deduplicating P reads only these files of earlier partitions (each partition's in its own executor
task, a semi-join on P's (band, hash) keys), never their texts. An
earlier partition whose index is missing or was built with other MinHash settings is re-signed from its
cleaned texts in the task (its documents then count as their own keepers) and named in
`recomputed_band_indexes`.

**Clustering** runs on Polars frames: P's band rows plus the matched earlier rows, each earlier
document replaced by its cluster's keeper (a kept document, so `duplicate_of` always names a document
that is in the deduped output). Each (band, hash) group links its members to its smallest node;
connected components by iterative min-label propagation with pointer jumping (joins and group-bys, no
Python dict of documents). Node ids are `partition ordinal << 40 | doc`, so a component's minimum is its
first document in the global order: the keeper. `cluster_id` is the keeper's doc_id, `cluster_size` the
component's size (P's documents plus the earlier keepers they reach).

**Where it runs** (the compute executor: local process pool or Ray; all results are unions sorted
before use, so outputs are byte-identical whatever the engine, worker count or task split):
1. signing: one task per cleaned part of P (writes `bands-NNNNN.parquet`);
2. matching: one task per earlier partition; it writes its matched rows, sorted by band, to
   `_matches/earlier-NNNNN.parquet` under P's output folder (atomically; deleted once P is clustered);
3. candidate edges: one task per band (`band_edges`): (band, hash) groups of different bands are
   independent, so a task reads only its band's rows of P's band files and of the matched rows (both
   sorted by band: row groups of other bands are skipped), and returns that band's edges (or, when
   verifying, candidate pairs), far fewer than the rows;
4. verification: candidate pairs, de-duplicated across bands, in tasks of VERIFY_PAIRS_PER_TASK pairs
   (`verify_pairs`: each reads the shingle sets of its pairs' documents);
5. connected components over the union of the edges, in one executor task (`cluster_components`; given
   the edges, the keeper ids of the earlier nodes they touch and P's document ids): on Ray a cluster
   worker, not the Dagster run's process, computes them (a local pool runs a single task in process).
When the earlier band indexes plus P's band rows are smaller than INLINE_BELOW_BYTES, steps 2-5 run in
the driver process instead, in memory (`cluster_partition`: the same functions, no matched-row files):
starting worker processes, or a file per earlier partition, would cost more than the work.

**Verification** (`dedup.verify_min_jaccard`, 0.8 by default; the false-positive check of NeMo
Curator's fuzzy dedup; `null` turns it off for datatrove's rule, a shared bucket is enough): candidate
pairs (each member of a bucket with each of the bucket's first `dedup.verify_anchors` members in the
global order, its anchors, as Curator's num_anchors: linear in the bucket's size, where all pairs would
be quadratic) are linked only if the Jaccard similarity of their shingle-hash sets reaches the bound.
LSH alone links many pairs below the bound (on benchmarks/dedup_quality.py pair precision at J >= 0.8
is 0.53 without, 1.0 with it, at the same recall). An earlier document enters as its cluster's keeper,
so a new document is compared with the kept document. The sets come from the `shingles-*` sidecars
(only the row groups holding the candidates; an earlier partition without sidecars, e.g. indexed by an
older version, has its candidates' texts read and shingled instead), and all pairs are compared in one
vectorized pass (`pair_jaccard`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.compute import Executor
from sluice.config import DedupSettings, S3Settings
from sluice.layout import (
    PartitionRef,
    list_partitions,
    local_copy,
    partition_prefix,
    read_manifest,
    read_parquet_file,
    write_parquet,
)
from sluice.minhash import MAX_HASH32, MinHasher
from sluice.storage import Store, StoreSpec
from sluice.tasks import (
    RecordedTask,
    TaskCounts,
    record_key,
    record_listing,
    records_prefix,
    run_recorded,
    task_digest,
)

CLEANED = "cleaned_documents"
DEDUPED = "deduped_documents"
SIGNATURES_STAGE = "dedup_signatures"  # its completion records: dedup_signatures_tasks/source=.../snapshot=.../
ROW_BITS = 24  # doc = part << ROW_BITS | row
PARTITION_SHIFT = 40  # node = partition ordinal << PARTITION_SHIFT | doc
PARTITION_UNIT = 1 << PARTITION_SHIFT
MAX_COMPONENT_ITERATIONS = 64
# Earlier band indexes plus this partition's band rows smaller than this in total are matched and
# clustered in the driver process, in memory, not in executor tasks: starting worker processes (and
# writing the matched rows to files) costs more than the work.
INLINE_BELOW_BYTES = 32 << 20

REMOVED_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("snapshot", pa.string(), nullable=False),
        pa.field("text_hash", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # exact | fuzzy
        pa.field("duplicate_of", pa.string(), nullable=False),  # exact: first copy; fuzzy: the cluster's kept document
        pa.field("duplicate_of_partition", pa.string(), nullable=False),  # source/snapshot of that document
        pa.field("cluster_id", pa.string(), nullable=False),  # doc_id of the cluster's kept document
        pa.field("cluster_size", pa.int64()),  # null when the document has no band hashes (no words / fuzzy off)
    ]
)
BANDS_SCHEMA = pa.schema([pa.field("band", pa.uint8(), nullable=False), pa.field("hash", pa.uint64(), nullable=False), pa.field("doc", pa.int64(), nullable=False)])
CLUSTERS_SCHEMA = pa.schema(
    [
        pa.field("doc", pa.int64(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("keeper_partition", pa.string(), nullable=False),
        pa.field("keeper_doc", pa.int64(), nullable=False),
        pa.field("keeper_id", pa.string(), nullable=False),
    ]
)
CLUSTERS_FILE = "clusters.parquet"
# Shingle-hash sets per document (written when pairs are verified): later partitions verify against an
# earlier document by reading its set here instead of re-reading and re-shingling its text. Row groups of
# SHINGLE_ROW_GROUP documents, so a read of a few candidates skips the others.
SHINGLES_PREFIX = "shingles-"
SHINGLE_ROW_GROUP = 128
SHINGLES_SCHEMA = pa.schema([pa.field("doc", pa.int64(), nullable=False), pa.field("shingles", pa.large_list(pa.uint32()))])


@dataclass
class DedupResult:
    files: list[dict[str, Any]]
    side_files: list[dict[str, Any]]
    band_index: dict[str, Any] | None
    documents_in: int
    documents_out: int
    removed_exact: int
    removed_fuzzy: int
    removed_within_partition: int
    removed_against: dict[str, int] = field(default_factory=dict)  # earlier partition -> removed count
    removed_against_snapshot: dict[str, int] = field(default_factory=dict)  # snapshot of the kept copy -> removed
    cluster_sizes: dict[int, int] = field(default_factory=dict)  # size -> clusters with a document removed here
    deduplicated_against: list[str] = field(default_factory=list)
    recomputed_band_indexes: list[str] = field(default_factory=list)
    signature_tasks: TaskCounts | None = None  # signing tasks run / reused from completion records
    task_records: dict[str, Any] | None = None  # the manifest's `task_records` (sluice.tasks)


def earlier_partitions(store: Store, ref: PartitionRef) -> list[PartitionRef]:
    return [other for other in list_partitions(store, CLEANED) if other.sort_key() < ref.sort_key()]


def minhash_identity(settings: DedupSettings) -> dict[str, Any]:
    """The settings that make band hashes comparable; an index built with others is not reused."""
    return {
        "ngram_size": settings.ngram_size,
        "bands": settings.bands,
        "rows_per_band": settings.rows_per_band,
        "seed": settings.seed,
        "hash_function": settings.hash_function,
        "verify_min_jaccard": settings.verify_min_jaccard,  # changes the clusters' keepers
        "verify_anchors": settings.verify_anchors,
    }


# --- per-file work (runs in executor tasks) ------------------------------------------------------


@dataclass(frozen=True)
class SignatureTask:
    cleaned_url: str  # cleaned partition folder
    cleaned_key: str  # part file
    part: int
    output_url: str  # deduped partition folder: bands-NNNNN.parquet goes here
    settings: DedupSettings
    s3: S3Settings = field(default_factory=S3Settings)


def band_table(texts: list[str], part: int, settings: DedupSettings, shingle_sink: Callable[[int, np.ndarray, np.ndarray], None] | None = None) -> pa.Table:
    """Band rows of one part's documents, sorted by (band, hash, doc). `shingle_sink`: see MinHasher.signatures."""
    if len(texts) >= 1 << ROW_BITS:
        raise ValueError(f"a cleaned part holds {len(texts)} documents; at most {(1 << ROW_BITS) - 1} are supported")
    hasher = MinHasher.from_settings(settings)
    signatures = hasher.signatures(texts, shingle_sink)
    has_words = (signatures != MAX_HASH32).any(axis=1)
    rows = np.flatnonzero(has_words)
    bands = hasher.band_hashes(signatures[rows])
    docs = (np.int64(part) << ROW_BITS) | rows.astype(np.int64)
    frame = pl.DataFrame(
        {
            "band": np.tile(np.arange(settings.bands, dtype=np.uint8), len(rows)),
            "hash": bands.reshape(-1),
            "doc": np.repeat(docs, settings.bands),
        },
        schema={"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64},
    ).sort(["band", "hash", "doc"])
    return frame.to_arrow().cast(BANDS_SCHEMA)


def shingle_table(sets: ShingleSets, part: int) -> pa.Table:
    """Each document's shingle-hash set (sorted unique uint32, the MinHash input), by doc."""
    docs = (np.int64(part) << ROW_BITS) | np.arange(len(sets.offsets) - 1, dtype=np.int64)
    hashes = (sets.keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    shingles = pa.LargeListArray.from_arrays(pa.array(sets.offsets, pa.int64()), pa.array(hashes, pa.uint32()))
    return pa.Table.from_arrays([pa.array(docs, pa.int64()), shingles], schema=SHINGLES_SCHEMA)


def signature_part(task: SignatureTask) -> dict[str, Any]:
    """Sign one cleaned part file and publish its `bands-NNNNN.parquet` (and, when pairs are verified, its
    `shingles-NNNNN.parquet`); returns their manifest entries {"bands": ..., "shingles": ... or None}."""
    cleaned = StoreSpec(task.cleaned_url, task.s3).open()
    texts = read_parquet_file(cleaned, task.cleaned_key, columns=["text"]).column("text").to_pylist()
    verify = task.settings.verify_min_jaccard is not None
    blocks: list[np.ndarray] = [np.empty(0, np.uint64)]
    table = band_table(texts, task.part, task.settings, (lambda start, hashes, counts: blocks.append(_set_keys(start, hashes, counts))) if verify else None)
    output = StoreSpec(task.output_url, task.s3).open()
    bands = write_parquet(output, f"bands-{task.part:05d}.parquet", table, row_group_size=1 << 16)
    shingles = None
    if verify:  # the sets from the same shingling as the signatures
        sets = ShingleSets.from_keys(np.concatenate(blocks), len(texts))
        shingles = write_parquet(output, f"{SHINGLES_PREFIX}{task.part:05d}.parquet", shingle_table(sets, task.part), row_group_size=SHINGLE_ROW_GROUP)
    return {"bands": bands, "shingles": shingles}


@dataclass(frozen=True)
class MatchTask:
    """Find the band rows of one earlier partition that share a (band, hash) with the current one."""

    current_url: str  # deduped folder of the partition being deduplicated
    current_band_keys: tuple[str, ...]
    earlier: str  # source/snapshot
    earlier_url: str  # deduped folder of the earlier partition (its band index), if usable
    earlier_band_keys: tuple[str, ...]  # empty: no usable index, sign `cleaned_keys` instead
    cleaned_url: str
    cleaned_keys: tuple[str, ...]
    settings: DedupSettings
    s3: S3Settings = field(default_factory=S3Settings)
    match_key: str = ""  # where `match_earlier` writes the matched rows, relative to current_url


MATCH_SCHEMA = {"band": pl.UInt8, "hash": pl.UInt64, "keeper_partition": pl.String, "keeper_doc": pl.Int64, "keeper_id": pl.String}
MATCHES_FOLDER = "_matches"  # under the deduped partition: matched earlier rows while it is clustered, then deleted


def current_keys(task: MatchTask) -> pl.DataFrame:
    """The (band, hash) keys of the partition being deduplicated."""
    current = StoreSpec(task.current_url, task.s3).open()
    return pl.concat(
        [pl.from_arrow(read_parquet_file(current, key, columns=["band", "hash"])) for key in task.current_band_keys]
        or [pl.DataFrame(schema={"band": pl.UInt8, "hash": pl.UInt64})]
    ).unique()


def matched_rows(task: MatchTask, keys: pl.DataFrame | None = None) -> pl.DataFrame:
    """(band, hash, keeper_partition, keeper_doc, keeper_id) of the earlier partition's matching rows,
    sorted by (band, hash, keeper_partition, keeper_doc). `keys`: `current_keys(task)` when the caller
    has them (matching many earlier partitions in one process reads them once)."""
    keys = current_keys(task) if keys is None else keys
    matched: list[pl.DataFrame] = []
    if task.earlier_band_keys:
        earlier = StoreSpec(task.earlier_url, task.s3).open()
        for key in task.earlier_band_keys:  # one index file at a time: memory holds the matches only
            rows = pl.from_arrow(read_parquet_file(earlier, key))
            matched.append(rows.join(keys, on=["band", "hash"], how="semi"))
        rows = pl.concat(matched) if matched else pl.DataFrame(schema={"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64})
        if rows.height == 0:  # nothing in common: the cluster file need not be read
            return pl.DataFrame(schema=MATCH_SCHEMA)
        labels = pl.from_arrow(read_parquet_file(earlier, CLUSTERS_FILE, columns=["doc", "keeper_partition", "keeper_doc", "keeper_id"]))
        out = rows.join(labels, on="doc", how="left")
        missing = out.filter(pl.col("keeper_id").is_null())
        if missing.height:
            raise ValueError(f"{earlier.uri(CLUSTERS_FILE)} lacks documents of its band index (e.g. doc {missing['doc'][0]})")
    else:
        cleaned = StoreSpec(task.cleaned_url, task.s3).open()
        for part, key in enumerate(task.cleaned_keys):
            table = read_parquet_file(cleaned, key, columns=["doc_id", "text"])
            rows = pl.from_arrow(band_table(table.column("text").to_pylist(), part, task.settings))
            rows = rows.join(keys, on=["band", "hash"], how="semi")
            ids = pl.DataFrame({"doc": (np.int64(part) << ROW_BITS) | np.arange(table.num_rows, dtype=np.int64), "keeper_id": table.column("doc_id").to_pylist()}, schema={"doc": pl.Int64, "keeper_id": pl.String})
            matched.append(rows.join(ids, on="doc", how="left"))
        out = pl.concat(matched) if matched else pl.DataFrame(schema={"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64, "keeper_id": pl.String})
        # Without a cluster file every document is its own keeper (still ordered before the current partition).
        out = out.with_columns(keeper_partition=pl.lit(task.earlier), keeper_doc=pl.col("doc"))
    return out.select(list(MATCH_SCHEMA)).cast(MATCH_SCHEMA).unique().sort(["band", "hash", "keeper_partition", "keeper_doc"])


def match_earlier(task: MatchTask) -> dict[str, Any]:
    """Write the matched rows (`matched_rows`) to `task.match_key` under the current partition, sorted by
    band so that each band's task reads only its row groups; returns the key (None when nothing
    matched), the row count and the keeper partitions named."""
    rows = matched_rows(task)
    if rows.height == 0:
        return {"key": None, "rows": 0, "bytes": 0, "keeper_partitions": []}
    current = StoreSpec(task.current_url, task.s3).open()
    entry = write_parquet(current, task.match_key, rows.to_arrow(), row_group_size=1 << 16)
    return {"key": task.match_key, "rows": rows.height, "bytes": entry["bytes"], "keeper_partitions": sorted(rows["keeper_partition"].unique().to_list())}


# --- clustering (columnar) ---------------------------------------------------------------------


def connected_components(nodes: pl.Series, edges: pl.DataFrame) -> pl.DataFrame:
    """(node, label) with label = the smallest node of the node's component.

    Iterative min-label propagation over both edge directions, each round followed by pointer
    jumping (label := label of label), as joins and group-bys."""
    labels = pl.DataFrame({"node": nodes}).unique().with_columns(label=pl.col("node"))
    links = pl.concat([edges.select(src="u", dst="v"), edges.select(src="v", dst="u")]).unique()
    for _ in range(MAX_COMPONENT_ITERATIONS):
        proposed = (
            links.join(labels, left_on="dst", right_on="node").group_by("src").agg(pl.col("label").min().alias("proposal"))
        )
        updated = labels.join(proposed, left_on="node", right_on="src", how="left").with_columns(
            label=pl.min_horizontal("label", "proposal")
        ).select("node", "label")
        jumped = updated.join(updated.rename({"node": "label", "label": "label_of_label"}), on="label", how="left").with_columns(
            label=pl.min_horizontal("label", "label_of_label")
        ).select("node", "label")
        changed = jumped.join(labels, on="node", suffix="_before").filter(pl.col("label") != pl.col("label_before")).height
        labels = jumped
        if changed == 0:
            return labels.sort("node")
    raise RuntimeError(f"connected components did not converge in {MAX_COMPONENT_ITERATIONS} rounds")


PairFilter = Callable[[pl.DataFrame], np.ndarray]
# Candidate pairs per verification task (each task reads the texts of its pairs' documents).
VERIFY_PAIRS_PER_TASK = 1 << 15
EDGE_SCHEMA = {"u": pl.Int64, "v": pl.Int64}
KEEPER_ID_SCHEMA = {"node": pl.Int64, "keeper_id": pl.String}


def keeper_order(keeper_partitions: list[str], ref: PartitionRef) -> list[str]:
    """The keeper partitions in global order, then `ref`: a node's partition ordinal is its index here."""
    ordered = sorted(set(keeper_partitions), key=lambda key: PartitionRef(*key.split("/")).sort_key())
    for key in ordered:
        if PartitionRef(*key.split("/")).sort_key() >= ref.sort_key():
            raise ValueError(f"band index names keeper partition {key}, which is not before {ref.key}")
    return [*ordered, ref.key]


def bucket_edges(current_bands: pl.DataFrame, matches: pl.DataFrame, partitions: list[str], anchors: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Edges of the (band, hash) groups of these rows, and the keeper ids of the earlier nodes in them.

    current_bands: band, hash, doc of the current partition (partitions[-1]); matches: MATCH_SCHEMA rows.
    anchors 0 (no verification): each member linked to its group's first (smallest) node. anchors K > 0
    (pairs to verify): each member paired with each of its group's K smallest nodes before it, only pairs
    with a current document. Groups are independent, so rows may be split by band among tasks."""
    floor = (len(partitions) - 1) * PARTITION_UNIT
    ordinals = pl.DataFrame({"keeper_partition": partitions[:-1], "ordinal": list(range(len(partitions) - 1))}, schema={"keeper_partition": pl.String, "ordinal": pl.Int64})
    earlier = matches.join(ordinals, on="keeper_partition").with_columns(node=pl.col("ordinal") * PARTITION_UNIT + pl.col("keeper_doc"))
    if earlier.height != matches.height:
        raise ValueError("matched rows name a keeper partition missing from the partition order")
    current = current_bands.select("band", "hash", node=pl.lit(floor, pl.Int64) + pl.col("doc"))
    members = pl.concat([current, earlier.select("band", "hash", "node")]).unique()
    if not anchors:
        group_min = members.group_by("band", "hash").agg(pl.col("node").min().alias("first"))
        edges = members.join(group_min, on=["band", "hash"]).filter(pl.col("node") != pl.col("first")).select(u="first", v="node")
    else:
        first_nodes = members.filter(pl.col("node").rank("ordinal").over("band", "hash") <= anchors).select("band", "hash", u="node")
        edges = first_nodes.join(members.select("band", "hash", v="node"), on=["band", "hash"]).filter(
            (pl.col("u") < pl.col("v")) & (pl.col("v") >= floor)
        ).select("u", "v")
    edges = edges.unique().sort("u", "v")
    in_edges = pl.concat([edges["u"], edges["v"]]).unique().to_frame("node")
    keeper_ids = earlier.select("node", "keeper_id").unique().join(in_edges, on="node", how="semi").sort("node")
    return edges.cast(EDGE_SCHEMA), keeper_ids.cast(KEEPER_ID_SCHEMA)


def locate_pairs(edges: pl.DataFrame, partitions: list[str]) -> pl.DataFrame:
    """(u_partition, u_doc, v_partition, v_doc) of each (u, v) node pair, in the same order."""
    names = pl.Series(partitions, dtype=pl.String)
    u_ordinal = (edges["u"] // PARTITION_UNIT).to_numpy()
    v_ordinal = (edges["v"] // PARTITION_UNIT).to_numpy()
    return pl.DataFrame(
        {
            "u_partition": names.gather(u_ordinal), "u_doc": edges["u"] % PARTITION_UNIT,
            "v_partition": names.gather(v_ordinal), "v_doc": edges["v"] % PARTITION_UNIT,
        }
    )


def resolve_clusters(
    ref: PartitionRef, indexed: pl.Series, doc_ids: pl.DataFrame, edges: pl.DataFrame, keeper_ids: pl.DataFrame, partitions: list[str]
) -> pl.DataFrame:
    """Keeper and cluster size of each indexed document of `ref` from the linking edges: connected
    components (`connected_components`, over the edges' nodes only; a document without edges is its own
    cluster of one), the component's smallest node is its keeper."""
    floor = (len(partitions) - 1) * PARTITION_UNIT
    nodes = pl.concat([edges["u"], edges["v"]]).unique()
    components = connected_components(nodes, edges) if edges.height else pl.DataFrame(schema={"node": pl.Int64, "label": pl.Int64})
    sizes = components.group_by("label").agg(pl.len().cast(pl.Int64).alias("cluster_size"))
    names = pl.DataFrame({"ordinal": list(range(len(partitions))), "keeper_partition": partitions}, schema={"ordinal": pl.Int64, "keeper_partition": pl.String})
    earlier_keepers = keeper_ids.select(
        label="node", ordinal=pl.col("node") // PARTITION_UNIT, keeper_doc=pl.col("node") % PARTITION_UNIT, keeper_id="keeper_id"
    ).join(names, on="ordinal").select("label", "keeper_partition", "keeper_doc", "keeper_id")
    current_keepers = doc_ids.select(
        label=pl.lit(floor, pl.Int64) + pl.col("doc"), keeper_partition=pl.lit(ref.key), keeper_doc=pl.col("doc"), keeper_id=pl.col("doc_id")
    )
    keepers = pl.concat([earlier_keepers, current_keepers])
    return (
        indexed.unique().to_frame("doc")
        .with_columns(node=pl.lit(floor, pl.Int64) + pl.col("doc"))
        .join(components, on="node", how="left")
        .with_columns(label=pl.coalesce("label", "node"))
        .join(sizes, on="label", how="left")
        .with_columns(pl.col("cluster_size").fill_null(1))
        .join(keepers, on="label", how="left")
        .select("doc", "keeper_partition", "keeper_doc", "keeper_id", "cluster_size")
        .sort("doc")
    )


def cluster_partition(
    ref: PartitionRef,
    current_bands: pl.DataFrame,
    doc_ids: pl.DataFrame,
    matches: pl.DataFrame,
    pair_filter: PairFilter | None = None,
    anchors: int = DedupSettings().verify_anchors,
) -> pl.DataFrame:
    """Keeper and cluster size of every indexed document of `ref` (see the module docstring), in memory:
    the same steps `deduplicate_partition` runs as tasks (`bucket_edges`, verification, `resolve_clusters`).

    current_bands: band, hash, doc; doc_ids: doc, doc_id; matches: MATCH_SCHEMA rows of earlier partitions.
    pair_filter (optional): given candidate pairs (u_partition, u_doc, v_partition, v_doc), which to link;
    without it every member of a bucket is linked (to the bucket's first member); with it, the pairs are each
    member with the bucket's first `anchors` members."""
    partitions = keeper_order(matches["keeper_partition"].to_list(), ref)
    edges, keeper_ids = bucket_edges(current_bands, matches, partitions, anchors if pair_filter is not None else 0)
    if pair_filter is not None and edges.height:
        edges = edges.filter(pl.Series(pair_filter(locate_pairs(edges, partitions)), dtype=pl.Boolean))
    return resolve_clusters(ref, current_bands["doc"], doc_ids, edges, keeper_ids, partitions)


@dataclass(frozen=True)
class EdgeTask:
    """Candidate edges of some bands of the partition being deduplicated (`band_edges`)."""

    output_url: str  # deduped folder of the current partition: its bands-*.parquet and the matched rows
    band_keys: tuple[str, ...]
    match_keys: tuple[str, ...]  # MATCHES_FOLDER files (MATCH_SCHEMA rows sorted by band)
    bands: tuple[int, ...]
    partitions: tuple[str, ...]  # keeper_order: node ordinals
    anchors: int  # 0: no verification; else pairs with the bucket's first `anchors` members (see bucket_edges)
    s3: S3Settings = field(default_factory=S3Settings)


def _read_bands(store: Store, key: str, bands: tuple[int, ...]) -> pa.Table:
    """The rows of `bands` of a Parquet file sorted by band: row groups of other bands are skipped."""
    with local_copy(store, key) as path:
        table = pq.read_table(path, filters=[("band", "in", list(bands))])
        return table if store.local_path(key) is not None else table.combine_chunks()


def band_edges(task: EdgeTask) -> dict[str, pa.Table]:
    """Read the current partition's band rows and the matched earlier rows of `task.bands` from storage;
    return their (u, v) edges and the keeper ids of the earlier nodes in them (`bucket_edges`)."""
    store = StoreSpec(task.output_url, task.s3).open()
    current = pl.concat(
        [pl.from_arrow(_read_bands(store, key, task.bands)).cast({"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64}) for key in task.band_keys]
        or [pl.DataFrame(schema={"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64})]
    )
    matches = pl.concat(
        [pl.from_arrow(_read_bands(store, key, task.bands)).cast(MATCH_SCHEMA) for key in task.match_keys]
        or [pl.DataFrame(schema=MATCH_SCHEMA)]
    )
    edges, keeper_ids = bucket_edges(current, matches, list(task.partitions), task.anchors)
    return {"edges": edges.to_arrow(), "keeper_ids": keeper_ids.to_arrow()}


@dataclass(frozen=True)
class VerifyTask:
    """Candidate pairs to check on their texts (`verify_pairs`)."""

    root_url: str  # the storage root (cleaned partitions are read under it)
    pairs: pa.Table  # u_partition, u_doc, v_partition, v_doc
    settings: DedupSettings
    min_jaccard: float
    s3: S3Settings = field(default_factory=S3Settings)
    shingle_folders: tuple[tuple[str, str], ...] = ()  # partition -> sidecar folder (the unpublished current one)


def verify_pairs(task: VerifyTask) -> np.ndarray:
    """Which pairs reach `min_jaccard` (ExactJaccardFilter): a boolean per pair, in order."""
    store = StoreSpec(task.root_url, task.s3).open()
    return ExactJaccardFilter(store, task.settings, task.min_jaccard, dict(task.shingle_folders))(pl.from_arrow(task.pairs))


def shingle_sets(texts: list[str], settings: DedupSettings) -> list[np.ndarray]:
    """Each document's set of shingle hashes (sorted unique uint32; the MinHash input)."""
    hashes, counts = MinHasher.from_settings(settings).shingle_hashes(texts)
    return [np.unique(chunk) for chunk in np.split(hashes, np.cumsum(counts)[:-1])] if len(texts) else []


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    if not len(a) and not len(b):
        return 1.0
    common = len(np.intersect1d(a, b, assume_unique=True))
    return common / (len(a) + len(b) - common)


# Shingles looked up per block of pairs in `pair_jaccard` (bounds its temporary arrays to ~25 MB).
_JACCARD_BLOCK = 1 << 19
# Characters of candidate texts shingled at once when verifying (the tokenizer's arrays grow with it).
_SHINGLE_BATCH_CHARS = 1 << 21


@dataclass(frozen=True)
class ShingleSets:
    """The shingle-hash sets of many documents as one sorted array of `document << 32 | hash` keys."""

    keys: np.ndarray  # uint64, sorted: document index, then hash
    offsets: np.ndarray  # int64, len(documents) + 1: document i's keys are keys[offsets[i]:offsets[i + 1]]

    @classmethod
    def of(cls, texts: list[str], settings: DedupSettings) -> ShingleSets:
        hasher = MinHasher.from_settings(settings)
        blocks: list[np.ndarray] = [np.empty(0, np.uint64)]
        start = 0
        while start < len(texts):  # batches of ~_SHINGLE_BATCH_CHARS: the tokenizer's arrays stay bounded
            stop, chars = start + 1, len(texts[start])
            while stop < len(texts) and chars + len(texts[stop]) <= _SHINGLE_BATCH_CHARS:
                chars += len(texts[stop])
                stop += 1
            blocks.append(_set_keys(start, *hasher.shingle_hashes(texts[start:stop])))
            start = stop
        return cls.from_keys(np.concatenate(blocks), len(texts))

    @classmethod
    def from_keys(cls, keys: np.ndarray, documents: int) -> ShingleSets:
        """From sorted unique keys (blocks of `_set_keys` in document order)."""
        offsets = np.searchsorted(keys >> np.uint64(32), np.arange(documents + 1, dtype=np.uint64)).astype(np.int64)
        return cls(keys, offsets)

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)


def _set_keys(first_document: int, hashes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sorted unique `document << 32 | hash` keys of a batch of documents' shingle hashes."""
    documents = np.repeat(np.arange(first_document, first_document + len(counts), dtype=np.uint64), counts)
    keys = np.sort((documents << np.uint64(32)) | hashes.astype(np.uint64))
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys


def pair_jaccard(sets: ShingleSets, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Jaccard similarity of the shingle sets of documents a[i] and b[i], for all pairs at once.

    Every shingle of the smaller set of a pair is looked up in the other document's keys with one
    `searchsorted` over all pairs (blockwise): O(sum of the smaller sets x log), no Python per pair,
    each document shingled once whatever the number of pairs it is in."""
    sizes = sets.sizes()
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    swap = sizes[a] > sizes[b]
    small, large = np.where(swap, b, a), np.where(swap, a, b)
    common = np.zeros(len(a), dtype=np.int64)
    lengths = sizes[small]
    ends = np.cumsum(lengths)
    start = 0
    while start < len(a):
        stop = max(start + 1, int(np.searchsorted(ends, ends[start] - lengths[start] + _JACCARD_BLOCK, side="right")))
        block_lengths = lengths[start:stop]
        total = int(block_lengths.sum())
        if total:
            pair = np.repeat(np.arange(start, stop), block_lengths)
            within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(block_lengths) - block_lengths, block_lengths)
            hashes = sets.keys[sets.offsets[small[pair]] + within] & np.uint64(0xFFFFFFFF)
            query = (large[pair].astype(np.uint64) << np.uint64(32)) | hashes
            found = sets.keys[np.minimum(np.searchsorted(sets.keys, query), len(sets.keys) - 1)] == query
            common[start:stop] = np.bincount(pair - start, weights=found, minlength=stop - start).astype(np.int64)
        start = stop
    union = sizes[a] + sizes[b] - common
    return np.where(union > 0, common / np.maximum(union, 1), 1.0)


def read_texts(store: Store, documents: pl.DataFrame) -> list[str]:
    """Texts of (partition, doc) rows from the cleaned partitions, in the rows' order; reads only the part
    files that hold them, one at a time."""
    located = documents.with_row_index("position").with_columns(part=pl.col("doc") // (1 << ROW_BITS), row=pl.col("doc") % (1 << ROW_BITS))
    texts: list[str | None] = [None] * documents.height
    for (partition, part), group in located.group_by(["partition", "part"], maintain_order=True):
        source, snapshot = partition.split("/", 1)
        prefix = partition_prefix(CLEANED, PartitionRef(source, snapshot))
        manifest = read_manifest(store, prefix)
        if manifest is None:
            raise FileNotFoundError(f"{store.uri(prefix)} has no manifest: its texts are needed to verify near duplicates")
        column = read_parquet_file(store, f"{prefix}/{manifest['files'][part]['key']}", columns=["text"]).column("text")
        for position, text in zip(group["position"].to_list(), column.take(group["row"].to_arrow()).to_pylist(), strict=True):
            texts[position] = text
    return texts  # type: ignore[return-value]


def _read_shingle_rows(store: Store, key: str, docs: list[int]) -> pa.Table:
    """Rows of a shingle sidecar for `docs`: a sidecar holds every document of its part in order, in row
    groups of SHINGLE_ROW_GROUP, so only the row groups holding them are read."""
    rows = np.asarray(docs, dtype=np.int64) & ((1 << ROW_BITS) - 1)
    groups = np.unique(rows // SHINGLE_ROW_GROUP).tolist()
    with local_copy(store, key) as path:
        parquet = pq.ParquetFile(path)
        if groups and groups[-1] >= parquet.num_row_groups:
            return SHINGLES_SCHEMA.empty_table()
        table = parquet.read_row_groups(groups)
    first_rows = np.asarray(groups, dtype=np.int64) * SHINGLE_ROW_GROUP  # part row of each read group's first row
    group_of_row = np.searchsorted(first_rows, rows, side="right") - 1
    read_offsets = np.concatenate([[0], np.cumsum([parquet.metadata.row_group(g).num_rows for g in groups])])[:-1]
    positions = read_offsets[group_of_row] + rows - first_rows[group_of_row]
    if len(positions) and positions.max() >= table.num_rows:  # not this part's sidecar
        return SHINGLES_SCHEMA.empty_table()
    return table.take(pa.array(positions))


def read_shingle_sets(
    store: Store, documents: pl.DataFrame, settings: DedupSettings, shingle_folders: dict[str, str] | None = None
) -> tuple[ShingleSets, int]:
    """ShingleSets of (partition, doc) rows sorted by (partition, doc), document i = row i, and how many
    documents were shingled from their texts. A partition's sets come from its `shingles-*.parquet`
    sidecar (in `shingle_folders[partition]`, else in its deduped manifest's band index when built with
    these MinHash settings); without one, from its cleaned texts."""
    shingle_folders = shingle_folders or {}
    located = documents.with_row_index("index").with_columns(part=pl.col("doc") // (1 << ROW_BITS))
    blocks: list[np.ndarray] = [np.empty(0, np.uint64)]
    from_texts = 0
    sidecars: dict[str, tuple[str, frozenset[str] | None] | None] = {}  # partition -> its folder and files, read once
    for (partition, part), group in located.group_by(["partition", "part"], maintain_order=True):
        indexes = group["index"].to_numpy().astype(np.uint64)
        if partition not in sidecars:
            sidecars[partition] = _shingle_sidecars(store, partition, settings, shingle_folders)
        folder, names = sidecars[partition] or (None, frozenset())
        name = f"{SHINGLES_PREFIX}{part:05d}.parquet"
        key = f"{folder}/{name}" if folder is not None and (names is None or name in names) else None
        table = _read_shingle_rows(store, key, group["doc"].to_list()) if key is not None else None
        if table is not None and table.num_rows == group.height and table.column("doc").to_pylist() == group["doc"].to_list():
            column = table.column("shingles").combine_chunks()
            hashes = column.flatten().to_numpy().astype(np.uint64)
            lengths = pc.list_value_length(column).to_numpy()
            blocks.append((np.repeat(indexes, lengths) << np.uint64(32)) | hashes)
            continue
        sets = ShingleSets.of(read_texts(store, group.select("partition", "doc")), settings)
        from_texts += group.height
        blocks.append((indexes[(sets.keys >> np.uint64(32)).astype(np.int64)] << np.uint64(32)) | (sets.keys & np.uint64(0xFFFFFFFF)))
    # sorted: groups hold increasing indexes, each set sorted
    return ShingleSets.from_keys(np.concatenate(blocks), documents.height), from_texts


def _shingle_sidecars(
    store: Store, partition: str, settings: DedupSettings, shingle_folders: dict[str, str]
) -> tuple[str, frozenset[str] | None] | None:
    """Where a partition's shingle sidecars are and which exist (None: any part's, for the unpublished
    current partition), or None when its band index has none built with these MinHash settings."""
    if partition in shingle_folders:
        return shingle_folders[partition], None
    source, snapshot = partition.split("/", 1)
    prefix = partition_prefix(DEDUPED, PartitionRef(source, snapshot))
    index = (read_manifest(store, prefix) or {}).get("band_index") or {}
    if index.get("minhash") != minhash_identity(settings) or not index.get("shingles"):
        return None
    return prefix, frozenset(index["shingles"])


class ExactJaccardFilter:
    """Links a candidate pair only if the Jaccard similarity of the two documents' shingle sets (32-bit
    shingle hashes, so exact up to hash collisions) reaches `min_jaccard`. The sets are read from the
    partitions' shingle sidecars (`read_shingle_sets`; the texts only where a partition has none), and
    all pairs are compared at once (`pair_jaccard`). `shingle_folders`: partition -> folder of its
    sidecars for partitions not published yet (the one being deduplicated)."""

    def __init__(self, store: Store, settings: DedupSettings, min_jaccard: float, shingle_folders: dict[str, str] | None = None) -> None:
        self.store = store
        self.settings = settings
        self.min_jaccard = min_jaccard
        self.shingle_folders = dict(shingle_folders or {})
        self.shingled_from_texts = 0

    def __call__(self, pairs: pl.DataFrame) -> np.ndarray:
        wanted = (
            pl.concat([pairs.select(partition="u_partition", doc="u_doc"), pairs.select(partition="v_partition", doc="v_doc")])
            .unique()
            .sort("partition", "doc")
            .with_row_index("index")
        )
        sets, from_texts = read_shingle_sets(self.store, wanted.select("partition", "doc"), self.settings, self.shingle_folders)
        self.shingled_from_texts += from_texts
        located = pairs.with_row_index("pair").join(
            wanted.rename({"partition": "u_partition", "doc": "u_doc", "index": "a"}), on=["u_partition", "u_doc"]
        ).join(wanted.rename({"partition": "v_partition", "doc": "v_doc", "index": "b"}), on=["v_partition", "v_doc"]).sort("pair")
        return pair_jaccard(sets, located["a"].to_numpy(), located["b"].to_numpy()) >= self.min_jaccard


# --- one partition ----------------------------------------------------------------------------


def _exact_decisions(store: Store, ref: PartitionRef, earlier: list[PartitionRef], tables: list[pa.Table]) -> list[tuple[str, str] | None]:
    """For each document of the partition in order: (first copy's doc_id, its partition) or None if first."""
    all_hashes = pa.concat_arrays([t.column("text_hash").combine_chunks() for t in tables]) if tables else pa.array([], pa.string())
    unique_hashes = pc.unique(all_hashes)
    first_earlier: dict[str, tuple[str, str]] = {}  # only hashes of this partition: bounded by it
    for other in earlier:
        other_prefix = partition_prefix(CLEANED, other)
        other_manifest = read_manifest(store, other_prefix)
        if other_manifest is None:
            continue
        for entry in other_manifest["files"]:
            table = read_parquet_file(store, f"{other_prefix}/{entry['key']}", columns=["doc_id", "text_hash"])
            matches = table.filter(pc.is_in(table.column("text_hash"), value_set=unique_hashes))
            for doc_id, digest in zip(matches.column("doc_id").to_pylist(), matches.column("text_hash").to_pylist(), strict=True):
                first_earlier.setdefault(digest, (doc_id, other.key))
    seen_here: dict[str, str] = {}
    decisions: list[tuple[str, str] | None] = []
    for table in tables:
        for doc_id, digest in zip(table.column("doc_id").to_pylist(), table.column("text_hash").to_pylist(), strict=True):
            if digest in first_earlier:
                decisions.append(first_earlier[digest])
            elif digest in seen_here:
                decisions.append((seen_here[digest], ref.key))
            else:
                seen_here[digest] = doc_id
                decisions.append(None)
    return decisions


def _index_bytes(store: Store, other: PartitionRef) -> int:
    manifest = read_manifest(store, partition_prefix(DEDUPED, other)) or {}
    index = set(manifest.get("band_index", {}).get("files", []))
    # A missing index is re-signed from the texts: count those, the real work then.
    if not index:
        cleaned = read_manifest(store, partition_prefix(CLEANED, other)) or {}
        return sum(entry["bytes"] for entry in cleaned.get("files", []))
    return sum(entry["bytes"] for entry in manifest.get("side_files", []) if entry["key"] in index)


def _usable_band_index(store: Store, other: PartitionRef, settings: DedupSettings) -> tuple[str, ...]:
    manifest = read_manifest(store, partition_prefix(DEDUPED, other))
    index = (manifest or {}).get("band_index")
    if not index or index.get("minhash") != minhash_identity(settings):
        return ()
    return tuple(index["files"])


def _remove_empty_folder(store: Store, key: str) -> None:
    """A local folder left empty by deleting its files (object stores have no folders)."""
    local = store.local_path(key)
    if local is not None and os.path.isdir(local) and not os.listdir(local):
        os.rmdir(local)


def _cluster_with_tasks(
    store: Store,
    ref: PartitionRef,
    output_prefix: str,
    band_keys: tuple[str, ...],
    match_keys: tuple[str, ...],
    doc_ids: pl.DataFrame,
    partitions: list[str],
    settings: DedupSettings,
    s3: S3Settings,
    executor: Executor,
) -> pl.DataFrame:
    """`cluster_partition` over storage: edges per band and verification in executor tasks, then the
    connected components over the union of the edges in one more executor task (`cluster_components`)."""
    verify = settings.verify_min_jaccard
    output_url = store.uri(output_prefix)
    anchors = 0 if verify is None else settings.verify_anchors
    tasks = [EdgeTask(output_url, band_keys, match_keys, (band,), tuple(partitions), anchors, s3) for band in range(settings.bands)]
    results = executor.map(band_edges, tasks)
    edges = pl.concat([pl.from_arrow(r["edges"]) for r in results]).cast(EDGE_SCHEMA).unique().sort("u", "v")
    keeper_ids = pl.concat([pl.from_arrow(r["keeper_ids"]) for r in results]).cast(KEEPER_ID_SCHEMA).unique().sort("node")
    if verify is not None and edges.height:
        located = locate_pairs(edges, partitions).to_arrow()
        chunks = [
            VerifyTask(store.uri(), located.slice(start, VERIFY_PAIRS_PER_TASK), settings, verify, s3, ((ref.key, output_prefix),))
            for start in range(0, located.num_rows, VERIFY_PAIRS_PER_TASK)
        ]
        edges = edges.filter(pl.Series(np.concatenate(executor.map(verify_pairs, chunks)), dtype=pl.Boolean))
    # Every indexed document has a row in every band: band 0's documents are the indexed ones.
    indexed = pl.concat(
        [pl.from_arrow(_read_bands(store, f"{output_prefix}/{key}", (0,)).select(["doc"])) for key in band_keys]
        or [pl.DataFrame(schema={"doc": pl.Int64})]
    )
    task = ComponentsTask(ref.source, ref.snapshot, indexed.to_arrow(), doc_ids.to_arrow(), edges.to_arrow(), keeper_ids.to_arrow(), tuple(partitions))
    return pl.from_arrow(executor.map(cluster_components, [task])[0])


@dataclass(frozen=True)
class ComponentsTask:
    """The connected components of one partition's verified edges (`cluster_components`)."""

    source: str
    snapshot: str
    indexed: pa.Table  # doc
    doc_ids: pa.Table  # doc, doc_id
    edges: pa.Table  # u, v
    keeper_ids: pa.Table  # node, keeper_id
    partitions: tuple[str, ...]


def cluster_components(task: ComponentsTask) -> pa.Table:
    """`resolve_clusters` as an executor task: on Ray it runs on a cluster worker, not in the Dagster run's
    process (a single task of the local pool runs in this process)."""
    return resolve_clusters(
        PartitionRef(task.source, task.snapshot), pl.from_arrow(task.indexed)["doc"], pl.from_arrow(task.doc_ids),
        pl.from_arrow(task.edges), pl.from_arrow(task.keeper_ids), list(task.partitions),
    ).to_arrow()


def _recorded_signatures(
    store: Store, ref: PartitionRef, cleaned_files: list[dict[str, Any]], output_url: str, settings: DedupSettings, s3: S3Settings
) -> list[RecordedTask]:
    """One signing task per cleaned part, with its completion record (sluice.tasks): identity = the part's
    digest + the dedup settings; a re-run reuses the verified band (and shingle) files of finished tasks."""
    cleaned_url = store.uri(partition_prefix(CLEANED, ref))
    records_url = store.uri(records_prefix(SIGNATURES_STAGE, ref))
    jobs = []
    for index, entry in enumerate(cleaned_files):
        task = SignatureTask(cleaned_url, entry["key"], index, output_url, settings, s3)
        jobs.append(
            RecordedTask(
                signature_part, task, f"{ref.key}/{entry['key']}", task_digest(SIGNATURES_STAGE, task, [entry["sha256"]]),
                records_url, record_key(index), (("bands", output_url), ("shingles", output_url)), s3,
            )
        )
    return jobs


def deduplicate_partition(
    store: Store,
    ref: PartitionRef,
    output_prefix: str,
    s3: S3Settings | None = None,
    settings: DedupSettings | None = None,
    executor: Executor | None = None,
) -> DedupResult:
    settings = settings or DedupSettings()
    executor = executor or Executor()
    s3 = s3 or S3Settings()
    cleaned_prefix = partition_prefix(CLEANED, ref)
    manifest = read_manifest(store, cleaned_prefix)
    if manifest is None:
        raise FileNotFoundError(f"{store.uri(cleaned_prefix)} has no manifest: materialize cleaned_documents for {ref.key} first")
    parts = [entry["key"] for entry in manifest["files"]]
    if len(parts) >= 1 << (PARTITION_SHIFT - ROW_BITS):
        raise ValueError(f"{ref.key} has {len(parts)} cleaned parts; at most {(1 << (PARTITION_SHIFT - ROW_BITS)) - 1} are supported")
    # Ids and hashes are held for the whole partition; texts are streamed part by part.
    tables = [read_parquet_file(store, f"{cleaned_prefix}/{key}", columns=["doc_id", "text_hash"]) for key in parts]
    documents_in = sum(t.num_rows for t in tables)
    earlier = earlier_partitions(store, ref)
    exact = _exact_decisions(store, ref, earlier, tables)

    doc_positions = np.concatenate(
        [(np.int64(part) << ROW_BITS) | np.arange(t.num_rows, dtype=np.int64) for part, t in enumerate(tables)]
    ) if tables else np.empty(0, np.int64)
    doc_ids = pl.DataFrame(
        {"doc": doc_positions, "doc_id": [d for t in tables for d in t.column("doc_id").to_pylist()]},
        schema={"doc": pl.Int64, "doc_id": pl.String},
    )

    side_files: list[dict[str, Any]] = []
    band_index = None
    recomputed: list[str] = []
    fuzzy: dict[int, tuple[str, int, str, int]] = {}  # doc -> keeper; only this partition's removed docs
    signature_tasks = None
    sizes_by_doc: dict[int, int] = {}
    if settings.fuzzy:
        output_url = store.uri(output_prefix)
        signed = executor.map(run_recorded, _recorded_signatures(store, ref, manifest["files"], output_url, settings, s3))
        signature_tasks = TaskCounts.of(signed)
        band_entries = [entry["bands"] for entry in signed]
        shingle_entries = [entry["shingles"] for entry in signed if entry["shingles"] is not None]
        band_keys = tuple(entry["key"] for entry in band_entries)
        match_tasks = []
        for other in earlier:
            other_manifest = read_manifest(store, partition_prefix(CLEANED, other))
            if other_manifest is None:
                continue
            index_keys = _usable_band_index(store, other, settings)
            if not index_keys:
                recomputed.append(other.key)
            match_tasks.append(
                MatchTask(
                    output_url, band_keys, other.key, store.uri(partition_prefix(DEDUPED, other)), index_keys,
                    store.uri(partition_prefix(CLEANED, other)), tuple(e["key"] for e in other_manifest["files"]), settings, s3,
                    match_key=f"{MATCHES_FOLDER}/earlier-{len(match_tasks):05d}.parquet",
                )
            )
        input_bytes = sum(_index_bytes(store, other) for other in earlier) + sum(entry["bytes"] for entry in band_entries)
        if input_bytes < INLINE_BELOW_BYTES:
            # Small: cheaper than starting worker processes; the same steps in memory (no matched-row files).
            keys = current_keys(match_tasks[0]) if match_tasks else None
            matches = [frame for frame in (matched_rows(task, keys) for task in match_tasks) if frame.height]
            current_bands = pl.concat(
                [pl.from_arrow(read_parquet_file(store, f"{output_prefix}/{key}")) for key in band_keys]
                or [pl.DataFrame(schema={"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64})]
            )
            verify = settings.verify_min_jaccard
            pair_filter = None if verify is None else ExactJaccardFilter(store, settings, verify, {ref.key: output_prefix})
            labels = cluster_partition(
                ref, current_bands, doc_ids, pl.concat(matches or [pl.DataFrame(schema=MATCH_SCHEMA)]), pair_filter, settings.verify_anchors
            )
        else:
            try:
                matched = executor.map(match_earlier, match_tasks)
                match_keys = tuple(entry["key"] for entry in matched if entry["key"])
                partitions = keeper_order([key for entry in matched for key in entry["keeper_partitions"]], ref)
                labels = _cluster_with_tasks(store, ref, output_prefix, band_keys, match_keys, doc_ids, partitions, settings, s3, executor)
            finally:  # the matched rows are only needed while clustering (also written by failed runs' tasks)
                store.delete([f"{output_prefix}/{task.match_key}" for task in match_tasks])
                _remove_empty_folder(store, f"{output_prefix}/{MATCHES_FOLDER}")
        clusters = labels.join(doc_ids, on="doc").select("doc", "doc_id", "keeper_partition", "keeper_doc", "keeper_id").sort("doc")
        clusters_entry = write_parquet(store, f"{output_prefix}/{CLUSTERS_FILE}", clusters.to_arrow().cast(CLUSTERS_SCHEMA), row_group_size=1 << 16)
        side_files.extend([*band_entries, *shingle_entries, clusters_entry])
        band_index = {"files": list(band_keys), "labels": CLUSTERS_FILE, "minhash": minhash_identity(settings)}
        if shingle_entries:
            band_index["shingles"] = [entry["key"] for entry in shingle_entries]
        for doc, keeper_partition, keeper_doc, keeper_id, size in labels.iter_rows():
            sizes_by_doc[doc] = size
            if not (keeper_partition == ref.key and keeper_doc == doc):
                fuzzy[doc] = (keeper_partition, keeper_doc, keeper_id, size)

    removed_rows: list[dict[str, Any]] = []
    keep_masks: list[list[bool]] = []
    removed_against: Counter[str] = Counter()
    removed_against_snapshot: Counter[str] = Counter()
    cluster_sizes: Counter[int] = Counter()
    clusters_counted: set[str] = set()
    removed_exact = removed_fuzzy = removed_within = 0
    index = 0
    for part, table in enumerate(tables):
        mask = []
        for row, (doc_id, digest) in enumerate(zip(table.column("doc_id").to_pylist(), table.column("text_hash").to_pylist(), strict=True)):
            doc = (part << ROW_BITS) | row
            exact_of = exact[index]
            index += 1
            size = sizes_by_doc.get(doc)
            if exact_of is not None:
                kind, (keeper_id, keeper_partition) = "exact", exact_of
                cluster_id = fuzzy[doc][2] if doc in fuzzy else keeper_id
                removed_exact += 1
            elif doc in fuzzy:
                keeper_partition, _, keeper_id, size = fuzzy[doc]
                kind, cluster_id = "fuzzy", keeper_id
                removed_fuzzy += 1
            else:
                mask.append(True)
                continue
            mask.append(False)
            if keeper_partition == ref.key:
                removed_within += 1
            else:
                removed_against[keeper_partition] += 1
            removed_against_snapshot[keeper_partition.split("/", 1)[1]] += 1
            if size is not None and cluster_id not in clusters_counted:
                clusters_counted.add(cluster_id)
                cluster_sizes[size] += 1
            removed_rows.append(
                {
                    "doc_id": doc_id,
                    "source": ref.source,
                    "snapshot": ref.snapshot,
                    "text_hash": digest,
                    "kind": kind,
                    "duplicate_of": keeper_id,
                    "duplicate_of_partition": keeper_partition,
                    "cluster_id": cluster_id,
                    "cluster_size": size,
                }
            )
        keep_masks.append(mask)

    files = []
    documents_out = 0
    for part_index, (key, mask) in enumerate(zip(parts, keep_masks, strict=True)):
        table = read_parquet_file(store, f"{cleaned_prefix}/{key}")
        kept = table.filter(pa.array(mask, pa.bool_())) if table.num_rows else table
        documents_out += kept.num_rows
        files.append(write_parquet(store, f"{output_prefix}/part-{part_index:05d}.parquet", kept))
    removed_entry = write_parquet(store, f"{output_prefix}/removed.parquet", pa.Table.from_pylist(removed_rows, schema=REMOVED_SCHEMA))
    return DedupResult(
        files=files,
        side_files=[removed_entry, *side_files],
        band_index=band_index,
        documents_in=documents_in,
        documents_out=documents_out,
        removed_exact=removed_exact,
        removed_fuzzy=removed_fuzzy,
        removed_within_partition=removed_within,
        removed_against=dict(sorted(removed_against.items())),
        removed_against_snapshot=dict(sorted(removed_against_snapshot.items())),
        cluster_sizes=dict(sorted(cluster_sizes.items())),
        deduplicated_against=[other.key for other in earlier],
        recomputed_band_indexes=recomputed,
        signature_tasks=signature_tasks,
        task_records=record_listing(SIGNATURES_STAGE, ref, range(len(parts))) if settings.fuzzy else None,
    )
