"""The per-partition steps of deduplication, in the order they run, and the in-order driver.

1. `sign_partition` (`sluice.dedup.signatures`): hashes, band hashes and shingle sets of the cleaned texts.
2. `index_partition`: the partition's exact hashes and band keys into the global index (`sluice.dedup.index`).
3. `cluster_partition`: one task per band-hash range (`sluice.dedup.shuffle`) probes the index (partitions
   ordered before this one only) and writes its exact links and candidate pairs; the pairs are verified a
   pair bucket at a time and written as edges, then connected components of this partition's documents
   with the earlier documents they link to (in this process, or as star rounds of tasks above
   `EDGES_PER_TASK` edges: `sluice.dedup.stars`); publishes `dedup_clusters` (each document's decision
   and parent), part by part, one part range's labels at a time. Needs every earlier partition indexed.
4. `dedup_partition`: follow parents to each removed document's kept document and publish
   `deduped_documents` (kept documents) and `deduped_removed`. Needs every earlier partition clustered.

`deduplicate_in_order` runs all four for a list of partitions in the global order (the entry point for
scripts and benchmarks: `result.removed` holds every removed row).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from sluice.config import DedupSettings, S3Settings
from sluice.dedup import clusters as clusters_module
from sluice.dedup.candidates import (
    VerifyTask,
    verify_pairs,
    verify_slices,
)
from sluice.dedup.clusters import (
    CLUSTER_ROW_GROUP,
    cluster_rows_between,
    components,
    read_cluster_rows,
    resolve_roots,
)
from sluice.dedup.index import DedupIndex, IndexEntry, IndexIncomplete
from sluice.dedup.legacy import migrate_legacy_store
from sluice.dedup.schemas import (
    CLEANED,
    CLUSTERS,
    CLUSTERS_FILE,
    CLUSTERS_SCHEMA,
    DEDUPED,
    REMOVED,
    REMOVED_FILE,
    REMOVED_SCHEMA,
    ROW_BITS,
    SIGNATURES,
    PartitionOrdinals,
    cluster_identity,
    hash_halves,
    minhash_identity,
    order_of,
    shard_of,
)
from sluice.dedup.shuffle import (  # noqa: F401 (exact_links re-exported)
    EXACT_LINKS_SCHEMA,
    REMOVED_DOCS_SCHEMA,
    KeptCheckTask,
    RangeTask,
    both_ways,
    bucket_pairs,
    exact_links,
    kept_duplicates_in_range,
    part_bucket,
    range_pairs,
    read_buckets,
    write_bucketed,
)
from sluice.dedup.signatures import sign_partition, signatures_digest
from sluice.dedup.stars import label_table, read_labels, star_components
from sluice.io.layout import (
    PartitionRef,
    list_partitions,
    partition_prefix,
    read_manifest,
    read_parquet_file,
    required_manifest,
    side_prefix,
    write_manifest,
    write_parquet,
    write_parquet_groups,
)
from sluice.io.storage import Store, StoreSpec
from sluice.runtime.compute import Executor
from sluice.runtime.memory import releasing_memory


def earlier_partitions(store: Store, ref: PartitionRef) -> list[PartitionRef]:
    """The cleaned partitions ordered before `ref` (the default set a partition is deduplicated against)."""
    return [other for other in list_partitions(store, CLEANED) if other.sort_key() < ref.sort_key()]


def _signatures_manifest(store: Store, ref: PartitionRef, settings: DedupSettings) -> dict[str, Any]:
    prefix = partition_prefix(SIGNATURES, ref)
    manifest = read_manifest(store, prefix)
    if manifest is None or manifest.get("minhash") != minhash_identity(settings):
        raise FileNotFoundError(f"{store.uri(prefix)}: no signatures with these dedup settings: materialize dedup_signatures for {ref.key} first")
    return manifest


@releasing_memory
def index_partition(store: Store, ref: PartitionRef, settings: DedupSettings, executor: Executor | None = None, s3: S3Settings | None = None) -> dict[str, Any]:
    """Insert a signed partition into the global index (a no-op when indexed from the same signatures)."""
    manifest = _signatures_manifest(store, ref, settings)
    index = DedupIndex(store, settings, s3)
    current = index.manifest()
    migrated = []
    if not current["partitions"]:  # first use: compact the per-partition band files of an older version
        migrated = migrate_legacy_store(store, settings, executor, s3)
        current = index.manifest() if migrated else current
    # The build tasks read the partition's rows from its signatures, a hash range at a time.
    entry = IndexEntry(ref, signatures_digest(manifest), None, manifest["documents"], from_signatures=True)
    outcome = index.insert_many([entry], executor, current)
    return {**outcome, "documents": manifest["documents"], "index": store.uri(index.prefix), "migrated": migrated}


# --- step 3: clusters ----------------------------------------------------------------------------


@dataclass
class ClusterResult:
    manifest: dict[str, Any]
    documents: int
    removed_exact: int
    removed_fuzzy: int
    candidate_pairs: int
    linked_pairs: int
    indexed_before: int  # partitions ordered before this one in the index
    linked_partitions: list[str] = field(default_factory=list)  # earlier partitions holding a document linked here


@dataclass
class RangeOutputs:
    """What the range tasks and the pair buckets' verification wrote (`_range_reduce`): file keys and counts."""

    exact: list[str]  # exact links, cut by part range (EXACT_LINKS_SCHEMA)
    edges: list[str]  # graph edges (exact links and verified pairs), each under both nodes (PAIRS_FILE_SCHEMA)
    exact_links: int
    candidates: int
    linked: int  # verified pairs

    @property
    def edge_count(self) -> int:
        return self.exact_links + self.linked


def linked_key(ref: PartitionRef, bucket: int) -> str:
    return f"{partition_prefix(CLUSTERS, ref)}/linked-{bucket:05d}.parquet"


def _range_reduce(
    store: Store, ref: PartitionRef, partitions: list[str], ordinals: PartitionOrdinals, settings: DedupSettings, s3: S3Settings | None, executor: Executor
) -> RangeOutputs:
    """One task per band-hash range writes its exact links and candidate pairs (`sluice.dedup.shuffle`),
    then each pair bucket of every range is verified in turn and its linked pairs written as edges (this
    process holds one pair bucket at a time)."""
    tasks = [RangeTask(store.uri(), ref, number, settings, tuple(partitions), s3 or S3Settings()) for number in range(settings.band_ranges)]
    results = executor.map(range_pairs, tasks)
    keys = [result["key"] for result in results if result["key"] is not None]
    linked_keys, candidates, linked = [], 0, 0
    for bucket in range(settings.band_ranges if keys else 0):
        pairs = bucket_pairs(store, keys, bucket)
        candidates += pairs.height
        kept = _verified(pairs, ordinals, store, settings, s3, executor)
        linked += kept.height
        if kept.height:
            edges = both_ways(kept["u"].to_numpy(), kept["v"].to_numpy(), settings.band_ranges)
            linked_keys.append(write_bucketed(store, linked_key(ref, bucket), edges))
    return RangeOutputs(
        [r["exact"] for r in results if r["exact"]], [r["exact_edges"] for r in results if r["exact_edges"]] + linked_keys,
        sum(r["exact_rows"] for r in results), candidates, linked,
    )


def _verified(pairs: pl.DataFrame, ordinals: PartitionOrdinals, store: Store, settings: DedupSettings, s3: S3Settings | None, executor: Executor) -> pl.DataFrame:
    """The pairs whose exact Jaccard similarity reaches `verify_min_jaccard` (verification tasks)."""
    if settings.verify_min_jaccard is None or pairs.height == 0:
        return pairs
    # By earlier document: a task's documents (whose shingle sets it holds) are bounded (`verify_slices`).
    order = np.lexsort((pairs["u"].to_numpy(), pairs["v"].to_numpy()))
    u_nodes, v_nodes = pairs["u"].to_numpy()[order], pairs["v"].to_numpy()[order]
    u, v = ordinals.locate(u_nodes), ordinals.locate(v_nodes)
    located = pl.DataFrame({"u_partition": u["partition"], "u_doc": u["doc"], "v_partition": v["partition"], "v_doc": v["doc"]}).to_arrow()
    tasks = [
        VerifyTask(store.uri(), located.slice(start, stop - start), settings, settings.verify_min_jaccard, s3 or S3Settings())
        for start, stop in verify_slices(u_nodes, v_nodes)
    ]
    keep = np.zeros(pairs.height, dtype=bool)
    keep[order] = np.concatenate(executor.map(verify_pairs, tasks))
    return pairs.filter(pl.Series(keep, dtype=pl.Boolean))


@releasing_memory
def cluster_partition(
    store: Store,
    ref: PartitionRef,
    settings: DedupSettings | None = None,
    executor: Executor | None = None,
    s3: S3Settings | None = None,
    earlier: list[PartitionRef] | None = None,
) -> ClusterResult:
    """Decide every document of `ref` against the partitions ordered before it (see the package docstring)
    and publish `dedup_clusters`. `earlier`: the partitions that must be indexed (default: every cleaned
    partition ordered before `ref`); IndexIncomplete names those that are not. Holds the linked documents
    (exact links, verified pairs, their components) and one part's rows, not the partition's."""
    settings = settings or DedupSettings()
    executor = executor or Executor()
    signed = _signatures_manifest(store, ref, settings)
    settings = settings.for_partition(signed["documents"])  # its band-hash ranges, as at signing
    index = DedupIndex(store, settings, s3)
    manifest = index.manifest()
    missing = index.missing(earlier if earlier is not None else earlier_partitions(store, ref), manifest)
    if missing:
        raise IndexIncomplete(
            f"{ref.key} cannot be deduplicated yet: {len(missing)} partition(s) ordered before it are not in the dedup index "
            f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); materialize dedup_signatures and dedup_index for them first"
        )
    # Node ids over every partition before this one: the range tasks number documents alike.
    partitions = [ref.key, *(key for key in manifest["partitions"] if order_of(key) < ref.sort_key())]
    ordinals = PartitionOrdinals(partitions)
    outputs = _range_reduce(store, ref, partitions, ordinals, settings, s3, executor)
    labels_of, linked_partitions = _labels(store, ref, outputs, ordinals, len(signed["files"]), settings, s3, executor)
    prefix = partition_prefix(CLUSTERS, ref)
    kinds: Counter[str] = Counter()
    tables = _cluster_tables(store, ref, signed, ordinals, labels_of, outputs.exact, settings, kinds)
    entry = write_parquet_groups(store, f"{prefix}/{CLUSTERS_FILE}", regroup(tables, CLUSTER_ROW_GROUP, CLUSTERS_SCHEMA), CLUSTERS_SCHEMA, CLUSTER_ROW_GROUP)
    result_manifest = {
        "asset": CLUSTERS,
        "partition": {"source": ref.source, "snapshot": ref.snapshot},
        "files": [entry],
        "settings": cluster_identity(settings),
        "documents": entry["rows"],
        "removed": {"exact": kinds["exact"], "fuzzy": kinds["fuzzy"]},
        "indexed_before": sum(1 for key in manifest["partitions"] if order_of(key) < ref.sort_key()),
    }
    write_manifest(store, prefix, result_manifest)
    return ClusterResult(
        result_manifest, entry["rows"], kinds["exact"], kinds["fuzzy"], outputs.candidates, outputs.linked, result_manifest["indexed_before"], linked_partitions
    )


def _labels(
    store: Store, ref: PartitionRef, outputs: RangeOutputs, ordinals: PartitionOrdinals, parts: int, settings: DedupSettings, s3: S3Settings | None,
    executor: Executor,
) -> tuple[Callable[[int], pl.DataFrame], list[str]]:
    """(the (node, label, cluster_size) rows of `ref`'s linked documents of one part range, the earlier
    partitions holding a linked document). Components in this process up to `EDGES_PER_TASK` edges, else
    as star rounds of tasks (`sluice.dedup.stars`); the labels are the same."""
    buckets, ordinal = settings.band_ranges, ordinals.ordinal[ref.key]
    if outputs.edge_count > clusters_module.EDGES_PER_TASK:
        stars = star_components(store, partition_prefix(CLUSTERS, ref), outputs.edges, buckets, ordinal, parts, executor, s3)
        earlier = [ordinals.keys[o] for o in stars.ordinals if o != ordinal]
        return (lambda bucket: read_labels(store, stars.keys, bucket)), earlier
    tables = [read_parquet_file(store, key, columns=["u", "v"]) for key in outputs.edges]
    edges = pl.concat([pl.DataFrame(schema={"u": pl.Int64, "v": pl.Int64}), *(pl.from_arrow(t) for t in tables)]).filter(pl.col("u") < pl.col("v"))  # type: ignore[arg-type]
    nodes, labels = components(edges.to_numpy())
    graph = pl.DataFrame({"node": nodes, "label": labels}, schema={"node": pl.Int64, "label": pl.Int64})
    table = pl.from_arrow(label_table(graph.with_columns(cluster_size=pl.len().over("label").cast(pl.Int64)), ordinal, parts, buckets))
    earlier = sorted(set(ordinals.locate(nodes)["partition"].to_list()) - {ref.key}, key=order_of)
    return (lambda bucket: table.filter(pl.col("bucket") == bucket).drop("bucket")), earlier  # type: ignore[union-attr]


def regroup(tables: Iterable[pa.Table], rows: int, schema: pa.Schema) -> Iterator[pa.Table]:
    """The tables' rows again as tables of exactly `rows` rows (the last fewer; one empty table when there
    is no row): written one after another, the row groups of one table written with `row_group_size=rows`."""
    pending: list[pa.Table] = []
    held = given = 0
    for table in tables:
        pending.append(table.cast(schema))
        held += table.num_rows
        if held >= rows:
            whole = pa.concat_tables(pending)
            cut = held - held % rows
            for start in range(0, cut, rows):
                yield whole.slice(start, rows)
            given += cut
            pending, held = [whole.slice(cut)], held - cut
    if held or not given:
        yield pa.concat_tables(pending) if pending else schema.empty_table()


def _cluster_tables(
    store: Store, ref: PartitionRef, signed: dict[str, Any], ordinals: PartitionOrdinals, labels_of: Callable[[int], pl.DataFrame], exact_keys: list[str],
    settings: DedupSettings, kinds: Counter[str],
) -> Iterator[pa.Table]:
    """The rows of `dedup_clusters` (CLUSTERS_SCHEMA), one table per signed part in doc order; counts the
    kinds into `kinds`. Holds one part range's labels and exact links at a time. Parent = the document's
    component's smallest node."""
    floor = ordinals.ordinal[ref.key] << PartitionOrdinals.SHIFT
    prefix = partition_prefix(SIGNATURES, ref)
    parts, held = len(signed["files"]), None
    for part, entry in enumerate(signed["files"]):
        bucket = int(part_bucket(np.array([part << ROW_BITS]), parts, settings.band_ranges)[0])
        if bucket != held:
            graph = labels_of(bucket)
            exact = read_buckets(store, exact_keys, bucket, EXACT_LINKS_SCHEMA)
            exact_of, held = exact.select("doc", exact_of_partition="of_partition", exact_of_id="of_id"), bucket
        docs: pl.DataFrame = pl.from_arrow(read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["doc", "doc_id"]))  # type: ignore[assignment]
        table = _cluster_rows(docs, ordinals, floor, graph, exact_of, settings)
        kinds.update(table["kind"].drop_nulls().to_list())
        yield table.to_arrow()


def _cluster_rows(docs: pl.DataFrame, ordinals: PartitionOrdinals, floor: int, graph: pl.DataFrame, exact_of: pl.DataFrame, settings: DedupSettings) -> pl.DataFrame:
    """`dedup_clusters` rows of some documents (doc, doc_id) of the partition, sorted by doc; `graph`: the
    (node, label, cluster_size) of the linked ones."""
    docs = (
        docs.with_columns(node=pl.col("doc") + floor)
        .join(graph, on="node", how="left")
        .with_columns(label=pl.coalesce("label", "node"), cluster_size=pl.col("cluster_size").fill_null(1))
    )
    parents = ordinals.locate(docs["label"].to_numpy())
    docs = docs.with_columns(parent_partition=parents["partition"], parent_doc=parents["doc"]).join(exact_of, on="doc", how="left")
    kind = pl.when(pl.col("exact_of_id").is_not_null()).then(pl.lit("exact")).when(pl.col("label") != pl.col("node")).then(pl.lit("fuzzy"))
    size = pl.col("cluster_size") if settings.fuzzy else pl.lit(None, pl.Int64)
    return docs.select(
        "doc", "doc_id", kind.alias("kind"), "parent_partition", "parent_doc", "exact_of_partition", "exact_of_id", size.alias("cluster_size")
    ).sort("doc")


# --- step 4: outputs -----------------------------------------------------------------------------


@dataclass
class DedupResult:
    files: list[dict[str, Any]]
    side_files: list[dict[str, Any]]
    documents_in: int
    documents_out: int
    removed_exact: int
    removed_fuzzy: int
    removed_within_partition: int
    removed_against: dict[str, int] = field(default_factory=dict)  # earlier partition -> removed count
    removed_against_snapshot: dict[str, int] = field(default_factory=dict)  # snapshot of the kept copy -> removed
    cluster_sizes: dict[int, int] = field(default_factory=dict)  # size -> clusters with a document removed here
    band_index: None = None  # earlier versions listed a per-partition band index here; the index is global now
    kept_duplicates: tuple[int, dict[str, int]] = (0, {})  # `kept_duplicates` of the written parts (0, {} when dedup is right)
    removed_of: Any = None  # () -> the REMOVED_SCHEMA rows, read from the written file when asked
    kept_hashes_of: Any = None  # () -> text_hash of every kept document, read from the written parts when asked

    @property
    def removed(self) -> pa.Table:
        """Every removed row (REMOVED_SCHEMA), read from `deduped_removed` (not held by the step)."""
        return self.removed_of()

    @property
    def kept_hashes(self) -> pa.ChunkedArray:
        """text_hash of every kept document, in order (read from the published parts: the asset's check
        goes by hash range instead, `kept_duplicates`)."""
        return self.kept_hashes_of()


def removed_rows(store: Store, ref: PartitionRef, removed: pl.DataFrame, text_hashes: pl.DataFrame, parents: pl.DataFrame) -> pl.DataFrame:
    """REMOVED_SCHEMA rows of the removed documents of `ref` (`removed`: their dedup_clusters rows), their
    kept document resolved through parents (`parents`: doc, doc_id of their parents in `ref`)."""
    removed = removed.join(text_hashes, on="doc", how="left")
    here = removed.filter(pl.col("parent_partition") == ref.key).join(
        parents.select(parent_doc="doc", root_id="doc_id"), on="parent_doc"
    ).with_columns(root_partition=pl.col("parent_partition"))
    away = removed.filter(pl.col("parent_partition") != ref.key)
    roots = resolve_roots(store, away.select(partition="parent_partition", doc="parent_doc"))
    away = away.join(roots.select(parent_partition="partition", parent_doc="doc", root_partition="root_partition", root_id="root_id"), on=["parent_partition", "parent_doc"])
    columns = ["doc", "doc_id", "text_hash", "kind", "exact_of_partition", "exact_of_id", "root_partition", "root_id", "cluster_size"]
    resolved = pl.concat([here.select(columns), away.select(columns)]).sort("doc")
    exact = pl.col("kind") == "exact"
    return resolved.select(
        "doc_id",
        source=pl.lit(ref.source),
        snapshot=pl.lit(ref.snapshot),
        text_hash="text_hash",
        kind="kind",
        duplicate_of=pl.when(exact).then("exact_of_id").otherwise("root_id"),
        duplicate_of_partition=pl.when(exact).then("exact_of_partition").otherwise("root_partition"),
        cluster_id="root_id",
        cluster_size="cluster_size",
    )


REMOVED_ROW_GROUP = 4096  # rows per row group of `deduped_removed` (write_parquet's default, as before)
REMOVED_FILE_SCHEMA = pa.schema([f for f in REMOVED_SCHEMA if f.name not in ("source", "snapshot")])
SIZES_SCHEMA = pa.schema(
    [pa.field("bucket", pa.int32(), nullable=False), pa.field("cluster_id", pa.string()), pa.field("cluster_size", pa.int64())]
)


@releasing_memory
def dedup_partition(
    store: Store, ref: PartitionRef, settings: DedupSettings | None = None, executor: Executor | None = None, s3: S3Settings | None = None
) -> DedupResult:
    """Write the kept documents of `ref` (`deduped_documents` parts, not the manifest) and its removed rows
    (`deduped_removed`), from its `dedup_clusters` and those of the earlier partitions its parents name: one
    executor task per cleaned part (`dedup_part`: its kept part and its removed rows), the removed rows then
    copied into one file in doc order a row group at a time, and the cluster sizes counted by cluster-id
    hash range (`cluster_sizes_in_bucket`). Holds the removed documents' positions (for the kept-duplicates
    check, in files) and counters, not their rows."""
    settings = settings or DedupSettings()
    executor = executor or Executor()
    s3 = s3 or S3Settings()
    clusters_prefix = partition_prefix(CLUSTERS, ref)
    manifest = read_manifest(store, clusters_prefix)
    if manifest is None or manifest.get("settings") != cluster_identity(settings):
        raise FileNotFoundError(f"{store.uri(clusters_prefix)}: no clusters with these dedup settings: materialize dedup_clusters for {ref.key} first")
    cleaned = required_manifest(store, CLEANED, ref)
    settings = settings.for_partition(manifest["documents"])  # its hash ranges, as at signing and clustering
    clusters_key = f"{clusters_prefix}/{manifest['files'][0]['key']}"
    tasks = [DedupPartTask(store.uri(), ref, part, entry["key"], clusters_key, settings.band_ranges, s3) for part, entry in enumerate(cleaned["files"])]
    results = executor.map(dedup_part, tasks)
    key = f"{side_prefix(REMOVED, ref)}/{REMOVED_FILE}"
    # The file leaves out source and snapshot: they are its Hive partition folders (readers merging both fail).
    tables = (read_parquet_file(store, r["removed"]) for r in results if r["removed"])
    written = write_parquet_groups(store, key, regroup(tables, REMOVED_ROW_GROUP, REMOVED_FILE_SCHEMA), REMOVED_FILE_SCHEMA, REMOVED_ROW_GROUP)
    sizes = [r["sizes"] for r in results if r["sizes"]]
    size_tasks = [ClusterSizeTask(store.uri(), tuple(sizes), bucket, s3) for bucket in range(settings.band_ranges if sizes else 0)]
    cluster_sizes: Counter[int] = Counter()
    for counts in executor.map(cluster_sizes_in_bucket, size_tasks):
        cluster_sizes.update(counts)
    files = [result["file"] for result in results]
    result = _dedup_result(ref, files, [{**written, "prefix": side_prefix(REMOVED, ref)}], manifest["documents"], results, dict(sorted(cluster_sizes.items())))
    # The no-duplicates check here, while the removed positions' scratch files exist; then every scratch file goes.
    positions = [r["docs"] for r in results if r["docs"]]
    result.kept_duplicates = kept_duplicates(store, ref, positions, settings, s3, executor)
    store.delete([*(r["removed"] for r in results if r["removed"]), *sizes, *positions])
    result.removed_of = lambda: _read_removed(store, ref, key)
    result.kept_hashes_of = lambda: _kept_hashes(store, ref, files)
    return result


def _read_removed(store: Store, ref: PartitionRef, key: str) -> pa.Table:
    table = read_parquet_file(store, key)
    rows = table.num_rows
    table = table.append_column("source", pa.array([ref.source] * rows, pa.string())).append_column("snapshot", pa.array([ref.snapshot] * rows, pa.string()))
    return table.select(REMOVED_SCHEMA.names).cast(REMOVED_SCHEMA)


@dataclass(frozen=True)
class DedupPartTask:
    """Write one cleaned part's kept documents and its removed rows (`dedup_part`)."""

    root_url: str
    ref: PartitionRef
    part: int
    cleaned_key: str
    clusters_key: str  # the partition's dedup_clusters file (the part's rows are read by row group)
    buckets: int  # hash ranges of its scratch files (dedup.band_ranges: cluster ids, and text hashes for the check)
    s3: S3Settings = field(default_factory=S3Settings)

    @property
    def label(self) -> str:
        return f"{self.ref.key}/{self.cleaned_key}"


def dedup_part(task: DedupPartTask) -> dict[str, Any]:
    """The part's kept documents to its `deduped_documents` part and its removed rows (REMOVED_FILE_SCHEMA,
    doc order) and (cluster_id, cluster_size) rows, cut by cluster-id hash range, to scratch files beside
    `deduped_removed` (`dedup_partition` deletes them), and its removed positions cut by text-hash range for
    the no-duplicates check. Returns {"file", "removed", "sizes", "docs": those files (None when
    nothing is removed), and the counts `_dedup_result` folds}."""
    store = StoreSpec(task.root_url, task.s3).open()
    ref = task.ref
    low = np.int64(task.part) << ROW_BITS
    clusters = cluster_rows_between(store, task.clusters_key, int(low), int(low + (1 << ROW_BITS) - 1))
    removed = clusters.filter(pl.col("kind").is_not_null())
    table = read_parquet_file(store, f"{partition_prefix(CLEANED, ref)}/{task.cleaned_key}")
    docs = low | np.arange(table.num_rows, dtype=np.int64)
    keep = ~np.isin(docs, removed["doc"].to_numpy())
    kept = table.filter(pa.array(keep)) if table.num_rows else table
    entry = write_parquet(store, f"{partition_prefix(DEDUPED, ref)}/part-{task.part:05d}.parquet", kept)
    out = {"file": entry, "removed": None, "sizes": None, "docs": None, "kinds": {}, "within": 0, "against": {}, "snapshots": {}}
    if not removed.height:
        return out
    gone = table.filter(pa.array(~keep))
    prefix = side_prefix(REMOVED, ref)
    ranges = shard_of(hash_halves(gone.column("text_hash"))[0], task.buckets).astype(np.int32)  # the check's text-hash ranges
    out["docs"] = write_bucketed(store, f"{prefix}/removed-docs-part-{task.part:05d}.parquet", pa.table({"bucket": ranges, "doc": docs[~keep]}, schema=REMOVED_DOCS_SCHEMA))
    hashes = pl.DataFrame({"doc": docs[~keep], "text_hash": gone.column("text_hash").to_pylist()}, schema={"doc": pl.Int64, "text_hash": pl.String})
    here = removed.filter(pl.col("parent_partition") == ref.key)["parent_doc"].unique().to_numpy()
    parents = read_cluster_rows(store, ref.key, here) if len(here) else pl.DataFrame(schema={"doc": pl.Int64, "doc_id": pl.String})
    rows = removed_rows(store, ref, removed, hashes, parents)
    out["removed"] = f"{prefix}/removed-part-{task.part:05d}.parquet"
    write_parquet(store, out["removed"], rows.drop("source", "snapshot").to_arrow().cast(REMOVED_FILE_SCHEMA))
    sized = rows.filter(pl.col("cluster_size").is_not_null()).select("cluster_id", "cluster_size")
    if sized.height:
        # The counts do not depend on the cut, only on every copy of a cluster id landing in one range.
        bucket = (pl.col("cluster_id").hash(seed=0) % task.buckets).cast(pl.Int32).alias("bucket")
        sizes = sized.with_columns(bucket).select(SIZES_SCHEMA.names).to_arrow().cast(SIZES_SCHEMA)
        out["sizes"] = write_bucketed(store, f"{prefix}/sizes-part-{task.part:05d}.parquet", sizes)
    out.update(_part_counts(ref, rows))
    return out


def _part_counts(ref: PartitionRef, rows: pl.DataFrame) -> dict[str, Any]:
    """A part's removal counts: by kind, within the partition, by the kept copy's partition and snapshot."""
    against = rows.filter(pl.col("duplicate_of_partition") != ref.key)["duplicate_of_partition"].value_counts()
    snapshots = rows.with_columns(snapshot=pl.col("duplicate_of_partition").str.split("/").list.get(1))["snapshot"].value_counts()
    return {
        "kinds": dict(Counter(rows["kind"].to_list())), "within": rows.filter(pl.col("duplicate_of_partition") == ref.key).height,
        "against": dict(against.iter_rows()), "snapshots": dict(snapshots.iter_rows()),
    }


@dataclass(frozen=True)
class ClusterSizeTask:
    """The sizes of the clusters of one cluster-id hash range with a document removed here (`cluster_sizes_in_bucket`)."""

    root_url: str
    keys: tuple[str, ...]  # every part's sizes file
    bucket: int
    s3: S3Settings = field(default_factory=S3Settings)

    @property
    def label(self) -> str:
        return f"cluster sizes, hash range {self.bucket}"


def cluster_sizes_in_bucket(task: ClusterSizeTask) -> dict[int, int]:
    """{cluster size: clusters} of the range's distinct cluster ids (a cluster removed from several parts counts once)."""
    store = StoreSpec(task.root_url, task.s3).open()
    rows = read_buckets(store, list(task.keys), task.bucket, SIZES_SCHEMA)
    sizes = rows.group_by("cluster_id").agg(pl.col("cluster_size").max())["cluster_size"].value_counts()
    return dict(sizes.iter_rows())


def _kept_hashes(store: Store, ref: PartitionRef, files: list[dict[str, Any]]) -> pa.ChunkedArray:
    prefix = partition_prefix(DEDUPED, ref)
    columns = [read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["text_hash"]).column("text_hash") for entry in files]
    return pa.chunked_array([chunk for column in columns for chunk in column.chunks], pa.string())


def _dedup_result(ref: PartitionRef, files: list, side_files: list, documents_in: int, parts: list[dict[str, Any]], cluster_sizes: dict[int, int]) -> DedupResult:
    """The partition's result from its parts' counts (`dedup_part`)."""
    kinds, against, snapshots = Counter(), Counter(), Counter()
    for part in parts:
        kinds.update(part["kinds"])
        against.update(part["against"])
        snapshots.update(part["snapshots"])
    removed = sum(kinds.values())
    return DedupResult(
        files=files,
        side_files=side_files,
        documents_in=documents_in,
        documents_out=documents_in - removed,
        removed_exact=kinds["exact"],
        removed_fuzzy=kinds["fuzzy"],
        removed_within_partition=sum(part["within"] for part in parts),
        removed_against=dict(sorted(against.items())),
        removed_against_snapshot=dict(sorted(snapshots.items())),
        cluster_sizes=cluster_sizes,
    )


def remaining_exact_duplicates(store: Store, ref: PartitionRef, kept_hashes: pa.ChunkedArray, settings: DedupSettings, s3: S3Settings | None = None) -> tuple[int, dict[str, int]]:
    """Kept documents of `ref` whose text hash occurs twice among them, and per earlier partition those whose
    hash the index holds there (a probe, not a rescan of earlier outputs). Both are 0 when dedup is right."""
    unique = pl.Series(kept_hashes.to_numpy(zero_copy_only=False) if len(kept_hashes) else [], dtype=pl.String).unique()
    within = len(kept_hashes) - unique.len()
    first = DedupIndex(store, settings, s3).first_copies(unique.to_arrow(), ref)
    counts = first["partition"].value_counts().sort("partition")
    return within, dict(counts.iter_rows())


def kept_duplicates(
    store: Store, ref: PartitionRef, removed_keys: list[str], settings: DedupSettings, s3: S3Settings | None = None, executor: Executor | None = None
) -> tuple[int, dict[str, int]]:
    """What `remaining_exact_duplicates` counts, over the kept documents of `ref` (all but the removed ones
    in `removed_keys`, the files of `dedup_part` cut by text-hash range), one executor task per text-hash range
    (`sluice.dedup.shuffle.kept_duplicates_in_range`, reading its range's removed positions): no process
    holds the partition's hashes or its removed documents."""
    tasks = [KeptCheckTask(store.uri(), ref, number, settings, tuple(removed_keys), s3 or S3Settings()) for number in range(settings.band_ranges)]
    within, against = 0, Counter()
    for range_within, range_against in (executor or Executor()).map(kept_duplicates_in_range, tasks):
        within += range_within
        against.update(range_against)
    return within, dict(sorted(against.items()))


def publish_deduped(store: Store, ref: PartitionRef, result: DedupResult, extra: dict[str, Any] | None = None) -> None:
    """Write the deduped partition's manifest (publishing its parts and removed rows)."""
    manifest = {
        "asset": DEDUPED,
        "partition": {"source": ref.source, "snapshot": ref.snapshot},
        "files": result.files,
        "side_files": result.side_files,
        "documents": result.documents_out,
        # what the quality report draws (sluice.report): removals within this partition and against earlier ones
        "stats": {
            "documents_in": result.documents_in,
            "removed_exact": result.removed_exact,
            "removed_fuzzy": result.removed_fuzzy,
            "removed_within_partition": result.removed_within_partition,
            "removed_against": dict(sorted(result.removed_against.items())),
        },
        **(extra or {}),
    }
    write_manifest(store, partition_prefix(DEDUPED, ref), manifest)


# --- all steps -----------------------------------------------------------------------------------


def deduplicate_partition(
    store: Store,
    ref: PartitionRef,
    output_prefix: str | None = None,
    s3: S3Settings | None = None,
    settings: DedupSettings | None = None,
    executor: Executor | None = None,
) -> DedupResult:
    """Every step for one partition (signing and indexing skipped where already done with the same inputs),
    publishing all its outputs. The earlier partitions must have been deduplicated (see `deduplicate_in_order`).
    `output_prefix`, if given, must be the partition's `deduped_documents` folder (the argument order of
    earlier versions, kept for scripts)."""
    if output_prefix is not None and output_prefix != partition_prefix(DEDUPED, ref):
        raise ValueError(f"deduplicated partitions are written to {partition_prefix(DEDUPED, ref)}, not {output_prefix}")
    settings = settings or DedupSettings()
    executor = executor or Executor()
    sign_partition(store, ref, settings, executor, s3)
    index_partition(store, ref, settings, executor, s3)
    cluster_partition(store, ref, settings, executor, s3)
    result = dedup_partition(store, ref, settings, executor, s3)
    publish_deduped(store, ref, result)
    return result


@dataclass
class InOrderResult:
    partitions: dict[str, DedupResult]  # key -> result, in the global order

    @property
    def removed(self) -> pa.Table:
        """Every removed row (REMOVED_SCHEMA) of all partitions, in the global order."""
        return pa.concat_tables([result.removed for result in self.partitions.values()]) if self.partitions else REMOVED_SCHEMA.empty_table()


def deduplicate_in_order(
    store: Store,
    refs: list[PartitionRef] | None = None,
    settings: DedupSettings | None = None,
    executor: Executor | None = None,
    s3: S3Settings | None = None,
) -> InOrderResult:
    """Deduplicate these cleaned partitions (default: all) one after the other in the global order. The
    stable entry point for scripts and benchmarks: `.removed` is what the shipped algorithm removed."""
    refs = sorted(refs if refs is not None else list_partitions(store, CLEANED), key=PartitionRef.sort_key)
    return InOrderResult({ref.key: deduplicate_partition(store, ref, settings=settings, executor=executor, s3=s3) for ref in refs})
