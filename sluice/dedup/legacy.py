"""Migration from the per-partition band indexes of earlier versions.

Before the global index, each `deduped_documents` partition held its own band index (`bands-NNNNN.parquet`:
band, hash, doc), shingle sidecars (`shingles-NNNNN.parquet`), `clusters.parquet` (each document's kept
document) and `removed.parquet`, listed under `band_index` in its manifest. Signing such a partition adopts
those files instead of re-reading and re-hashing its texts (`adopt_legacy_signatures`), and the first
`index_partition` on a store without a global index compacts every such partition into it at once and
writes its `dedup_clusters` from its kept documents (`migrate_legacy_store`), so new partitions are
deduplicated against the old ones right away.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from sluice.config import DedupSettings, S3Settings
from sluice.dedup.schemas import (
    CLEANED,
    CLUSTERS,
    CLUSTERS_FILE,
    CLUSTERS_SCHEMA,
    DEDUPED,
    SHINGLE_ROW_GROUP,
    SHINGLES,
    SIGNATURES,
    cluster_identity,
    doc_positions,
    minhash_identity,
    signatures_schema,
)
from sluice.dedup.signatures import current_signatures, publish_signatures, read_signatures, signatures_digest
from sluice.io.layout import (
    PartitionRef,
    list_partitions,
    partition_prefix,
    read_manifest,
    read_parquet_file,
    side_prefix,
    write_manifest,
    write_parquet,
)
from sluice.io.storage import Store
from sluice.runtime.compute import Executor

LEGACY_KEYS = ("ngram_size", "bands", "rows_per_band", "seed", "hash_function")


def legacy_band_index(store: Store, ref: PartitionRef, settings: DedupSettings, parts: int) -> dict[str, Any] | None:
    """The legacy band index of a deduped partition, when it was built with these MinHash settings and has
    band files and shingle sidecars for every cleaned part."""
    if not settings.fuzzy:
        return None
    manifest = read_manifest(store, partition_prefix(DEDUPED, ref)) or {}
    index = manifest.get("band_index") or {}
    identity = minhash_identity(settings)
    if not index or any(index.get("minhash", {}).get(key) != identity[key] for key in LEGACY_KEYS):
        return None
    bands = [f"bands-{part:05d}.parquet" for part in range(parts)]
    shingles = [f"shingles-{part:05d}.parquet" for part in range(parts)]
    if index.get("files") != bands or index.get("shingles") != shingles:
        return None
    return index


def adopt_legacy_signatures(store: Store, ref: PartitionRef, settings: DedupSettings, cleaned: dict[str, Any]) -> dict[str, Any]:
    """Write and publish `ref`'s signatures and shingle sidecars from its legacy band index (no MinHash
    computed); returns the signatures manifest. The partition must have a usable legacy index."""
    parts = [entry["key"] for entry in cleaned["files"]]
    legacy = partition_prefix(DEDUPED, ref)
    files, side_files = [], []
    for part, key in enumerate(parts):
        ids = read_parquet_file(store, f"{partition_prefix(CLEANED, ref)}/{key}", columns=["doc_id", "text_hash"])
        rows = pl.from_arrow(read_parquet_file(store, f"{legacy}/bands-{part:05d}.parquet"))
        docs = doc_positions(part, ids.num_rows)
        matrix = np.zeros((ids.num_rows, settings.bands), dtype=np.uint64)
        has_words = np.zeros(ids.num_rows, dtype=bool)
        if rows.height:  # type: ignore[union-attr]
            row = (rows["doc"].to_numpy() - docs[0]) if len(docs) else rows["doc"].to_numpy()  # type: ignore[index]
            matrix[row, rows["band"].to_numpy().astype(np.int64)] = rows["hash"].to_numpy()  # type: ignore[index]
            has_words[row] = True
        bands = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1), pa.uint64()), settings.bands, mask=pa.array(~has_words))
        table = pa.Table.from_arrays([pa.array(docs, pa.int64()), ids.column("doc_id"), ids.column("text_hash"), bands], schema=signatures_schema(settings.bands))
        files.append(write_parquet(store, f"{partition_prefix(SIGNATURES, ref)}/part-{part:05d}.parquet", table, row_group_size=4096))
        sidecar = read_parquet_file(store, f"{legacy}/shingles-{part:05d}.parquet")
        entry = write_parquet(store, f"{side_prefix(SHINGLES, ref)}/shingles-{part:05d}.parquet", sidecar, row_group_size=SHINGLE_ROW_GROUP)
        side_files.append({**entry, "prefix": side_prefix(SHINGLES, ref)})
    return publish_signatures(store, ref, settings, cleaned, files, side_files, {"origin": "adopted"})


def migrate_legacy_store(store: Store, settings: DedupSettings, executor: Executor | None = None, s3: S3Settings | None = None) -> list[str]:
    """Sign (by adoption) and index, in one compaction, every partition that has a legacy band index;
    returns their keys. Run once, by the first `index_partition` of a store without an index (a partition
    signed since keeps its signatures). Signing itself knows nothing of older layouts."""
    from sluice.dedup.index import DedupIndex, IndexEntry, partition_rows

    entries = []
    for ref in list_partitions(store, DEDUPED):
        cleaned = read_manifest(store, partition_prefix(CLEANED, ref))
        if cleaned is None or legacy_band_index(store, ref, settings, len(cleaned["files"])) is None:
            continue
        manifest = current_signatures(store, ref, settings, cleaned) or adopt_legacy_signatures(store, ref, settings, cleaned)

        def rows(ref: PartitionRef = ref, manifest: dict[str, Any] = manifest) -> dict[str, pl.DataFrame]:
            return partition_rows(read_signatures(store, ref, manifest), ref)

        entries.append(IndexEntry(ref, signatures_digest(manifest), rows, manifest["documents"]))
        if read_manifest(store, partition_prefix(CLUSTERS, ref)) is None:
            adopt_legacy_clusters(store, ref, settings, cleaned)
    if entries:
        DedupIndex(store, settings, s3).insert_many(entries, executor)
    return [entry.ref.key for entry in entries]


def adopt_legacy_clusters(store: Store, ref: PartitionRef, settings: DedupSettings, cleaned: dict[str, Any]) -> bool:
    """Write `ref`'s `dedup_clusters` from its legacy `clusters.parquet` (parent = the kept document, a root)
    and `removed.parquet` (kinds, first copies), when they were built with these dedup settings."""
    from sluice.dedup.clusters import CLUSTER_ROW_GROUP

    legacy = partition_prefix(DEDUPED, ref)
    index = legacy_band_index(store, ref, settings, len(cleaned["files"])) or {}
    identity = index.get("minhash", {})
    if identity.get("verify_min_jaccard") != settings.verify_min_jaccard or identity.get("verify_anchors") != settings.verify_anchors:
        return False
    ids = pl.concat(
        [
            pl.DataFrame({"doc": doc_positions(part, table.num_rows), "doc_id": table.column("doc_id").to_pylist()}, schema={"doc": pl.Int64, "doc_id": pl.String})
            for part, table in enumerate(read_parquet_file(store, f"{partition_prefix(CLEANED, ref)}/{e['key']}", columns=["doc_id"]) for e in cleaned["files"])
        ]
        or [pl.DataFrame(schema={"doc": pl.Int64, "doc_id": pl.String})]
    )
    keepers = pl.from_arrow(read_parquet_file(store, f"{legacy}/{CLUSTERS_FILE}", columns=["doc", "keeper_partition", "keeper_doc"]))
    removed = pl.from_arrow(read_parquet_file(store, f"{legacy}/removed.parquet", columns=["doc_id", "kind", "duplicate_of", "duplicate_of_partition", "cluster_size"]))
    exact = pl.col("kind") == "exact"
    table = (
        ids.join(keepers, on="doc", how="left")  # type: ignore[arg-type]
        .join(removed, on="doc_id", how="left")  # type: ignore[arg-type]
        .select(
            "doc",
            "doc_id",
            "kind",
            parent_partition=pl.coalesce("keeper_partition", pl.lit(ref.key)),
            parent_doc=pl.coalesce("keeper_doc", "doc"),
            exact_of_partition=pl.when(exact).then("duplicate_of_partition"),
            exact_of_id=pl.when(exact).then("duplicate_of"),
            cluster_size=pl.col("cluster_size").fill_null(1) if settings.fuzzy else pl.lit(None, pl.Int64),
        )
        .sort("doc")
    )
    prefix = partition_prefix(CLUSTERS, ref)
    entry = write_parquet(store, f"{prefix}/{CLUSTERS_FILE}", table.to_arrow().cast(CLUSTERS_SCHEMA), row_group_size=CLUSTER_ROW_GROUP)
    write_manifest(store, prefix, {"asset": CLUSTERS, "partition": {"source": ref.source, "snapshot": ref.snapshot}, "files": [entry], "settings": cluster_identity(settings), "documents": table.height, "origin": "adopted"})
    return True
