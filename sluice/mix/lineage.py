"""Where a document came from, found by probes: its shard row, deduplicated row, raw record, dedup cluster.

Every stage keeps the position of a document's input, so one document is found without a search:

    doc_id = "<source>/<snapshot>/<file>#<ordinal>"    (sluice.ingest.raw): the partition, the crawl file, the record
    raw part p       = the file's index in the raw partition manifest's `input_files` (one part per input
                       file); inside it rows are in increasing `ordinal` (row groups' statistics find it)
    cleaned part p, deduplicated part p      the same p (one task per part, in manifest order)
    tokenized shard  manifest entry `part`, `first_row`: document i of the shard is row first_row + i of
                     deduplicated part `part` (older manifests: the shard name `shard-PPPPP-SS` and the
                     documents of the part's earlier shards)
    dedup cluster    `dedup_cluster`: the clusters file of the document's partition, rows of part p only

Reads go to one row group of one file each (Parquet row-group statistics or row counts locate it): the cost
of tracing a document does not grow with the number of partitions or documents, only with the size of one
row group (files on S3 are downloaded whole, once per `RowReader`: bounded by one part file).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.config import DedupSettings
from sluice.io.layout import PartitionRef, entry_key, partition_prefix, read_manifest
from sluice.io.storage import Store, local_temp_dir

if TYPE_CHECKING:
    from sluice.dedup.lookup import GlobalCluster

RAW = "raw_documents"
CLEANED = "cleaned_documents"
DEDUPED = "deduped_documents"
TOKENIZED = "tokenized_shards"
DEDUP_CLUSTERS = "dedup_clusters"  # the clusters dataset of the global dedup index (issue 14), when present
ROW_BITS = 24  # dedup's document position: part << 24 | row of the cleaned part
_SHARD_NAME = re.compile(r"shard-(\d+)-(\d+)$")


@dataclass(frozen=True)
class DocId:
    source: str
    snapshot: str
    file: str  # the input file relative to the source location (snapshot/...), as the raw manifest lists it
    ordinal: int  # record / line / row number in that file

    @classmethod
    def parse(cls, doc_id: str) -> DocId:
        source, slash, rest = doc_id.partition("/")
        label, hash_mark, ordinal = rest.rpartition("#")
        snapshot = label.split("/", 1)[0]
        if not (slash and hash_mark and source and snapshot and ordinal.isdigit()):
            raise ValueError(f"{doc_id!r} is not a sluice document id (<source>/<snapshot>/<file>#<ordinal>)")
        return cls(source, snapshot, label, int(ordinal))

    @property
    def ref(self) -> PartitionRef:
        return PartitionRef(self.source, self.snapshot)


class RowReader:
    """Rows of Parquet files of a store by row group, with the manifests and open files cached for the
    life of the object (one trace). On S3 a file is downloaded once into a scratch folder (`close()`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._manifests: dict[str, dict[str, Any] | None] = {}
        self._files: dict[str, pq.ParquetFile] = {}
        self._scratch: str | None = None

    def close(self) -> None:
        self._files.clear()
        if self._scratch is not None:
            import shutil

            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> RowReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def manifest(self, prefix: str) -> dict[str, Any] | None:
        if prefix not in self._manifests:
            self._manifests[prefix] = read_manifest(self.store, prefix)
        return self._manifests[prefix]

    def parquet(self, key: str) -> pq.ParquetFile:
        parquet = self._files.get(key)
        if parquet is None:
            path = self.store.local_path(key)
            if path is None:
                self._scratch = self._scratch or local_temp_dir()
                folder = os.path.join(self._scratch, str(len(self._files)))
                os.makedirs(folder, exist_ok=True)
                path = self.store.fetch(key, folder)
            parquet = self._files[key] = pq.ParquetFile(path)
        return parquet

    def rows(self, key: str, rows: list[int], columns: list[str] | None = None) -> pa.Table:
        """Rows `rows` (in that order) of a Parquet file, reading only the row groups that hold them."""
        parquet = self.parquet(key)
        meta = parquet.metadata
        starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        wanted = np.asarray(rows, dtype=np.int64)
        if len(wanted) and (wanted.min() < 0 or wanted.max() >= starts[-1]):
            raise IndexError(f"{self.store.uri(key)}: rows {wanted.tolist()} outside [0, {int(starts[-1])})")
        group_of = np.searchsorted(starts, wanted, side="right") - 1
        groups = sorted(set(group_of.tolist()))
        columns = [c for c in columns if c in parquet.schema_arrow.names] if columns else None
        if not groups:
            empty = parquet.schema_arrow.empty_table()
            return empty.select(columns) if columns else empty
        table = parquet.read_row_groups(groups, columns=columns)
        # Row r of the file, in group g, is row (rows of the groups read before g) + r - starts[g] of `table`.
        sizes = np.diff(starts)[groups]
        read_at = dict(zip(groups, (np.cumsum(sizes) - sizes).tolist(), strict=True))
        take = [read_at[g] + r - int(starts[g]) for g, r in zip(group_of.tolist(), wanted.tolist(), strict=True)]
        return table.take(pa.array(take, pa.int64()))

    def rows_in_range(self, key: str, column: str, low: int, high: int, columns: list[str] | None = None) -> pa.Table:
        """Rows whose integer `column` is in [low, high], reading only the row groups whose statistics overlap."""
        parquet = self.parquet(key)
        meta = parquet.metadata
        index = parquet.schema_arrow.get_field_index(column)
        groups = []
        for number in range(meta.num_row_groups):
            stats = meta.row_group(number).column(index).statistics
            if stats is None or not stats.has_min_max or (stats.min <= high and stats.max >= low):
                groups.append(number)
        wanted = None if columns is None else sorted({*columns, column} & set(parquet.schema_arrow.names))
        if not groups:
            return parquet.schema_arrow.empty_table() if wanted is None else parquet.schema_arrow.empty_table().select(wanted)
        table = parquet.read_row_groups(groups, columns=wanted)
        values = table.column(column)
        return table.filter(pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high)))


# -- the tokenized shard -> deduplicated part -> raw part chain ---------------------------------------------------


def shard_part(shard: dict[str, Any], tokenized_manifest: dict[str, Any] | None) -> tuple[int, int]:
    """(deduplicated part, row of the shard's first document) of a tokenized shard manifest entry."""
    if "part" in shard and "first_row" in shard:
        return int(shard["part"]), int(shard["first_row"])
    match = _SHARD_NAME.search(shard["name"])
    if match is None or tokenized_manifest is None:
        raise ValueError(f"shard {shard['name']}: its manifest entry names no deduplicated part (re-materialize tokenized_shards)")
    part, number = int(match.group(1)), int(match.group(2))
    first_row = 0
    for other in tokenized_manifest["shards"]:
        other_match = _SHARD_NAME.search(other["name"])
        if other_match and int(other_match.group(1)) == part and int(other_match.group(2)) < number:
            first_row += int(other["documents"])
    return part, first_row


def raw_part(reader: RowReader, ref: PartitionRef, file_label: str) -> int | None:
    """Index of the raw part holding the records of input file `file_label` (None: not ingested)."""
    manifest = reader.manifest(partition_prefix(RAW, ref))
    if manifest is None:
        return None
    files = manifest.get("input_files") or []
    try:
        return files.index(file_label)
    except ValueError:
        return None


def part_key(reader: RowReader, asset: str, ref: PartitionRef, part: int) -> str | None:
    prefix = partition_prefix(asset, ref)
    manifest = reader.manifest(prefix)
    if manifest is None or not 0 <= part < len(manifest["files"]):
        return None
    return entry_key(prefix, manifest["files"][part])


def raw_record(reader: RowReader, doc: DocId, columns: list[str]) -> dict[str, Any] | None:
    """The raw row of a document (its crawl record), found by its file's part and its ordinal."""
    part = raw_part(reader, doc.ref, doc.file)
    key = None if part is None else part_key(reader, RAW, doc.ref, part)
    if key is None:
        return None
    rows = reader.rows_in_range(key, "ordinal", doc.ordinal, doc.ordinal, columns)
    return rows.to_pylist()[0] if rows.num_rows else None


def locate_in_partition(reader: RowReader, doc_ids: list[str]) -> dict[str, tuple[str, str, int]]:
    """doc_id -> (tokenized partition prefix, shard name, document index in the shard), for the documents
    that reached a tokenized shard. Reads the shards of each document's part only."""
    found: dict[str, tuple[str, str, int]] = {}
    wanted: dict[tuple[PartitionRef, int], set[str]] = {}
    for doc_id in doc_ids:
        try:
            doc = DocId.parse(doc_id)
        except ValueError:
            continue
        part = raw_part(reader, doc.ref, doc.file)
        if part is not None:
            wanted.setdefault((doc.ref, part), set()).add(doc_id)
    for (ref, part), ids in wanted.items():
        prefix = partition_prefix(TOKENIZED, ref)
        manifest = reader.manifest(prefix)
        if manifest is None:
            continue
        for shard in manifest["shards"]:
            try:
                shard_of_part = shard_part(shard, manifest)[0] == part
            except ValueError:
                shard_of_part = True  # an unnamed shard: look in it
            if not shard_of_part:
                continue
            docs = reader.parquet(f"{prefix}/{shard['name']}.docs.parquet").read(columns=["doc_id"]).column("doc_id")
            mask = pc.is_in(docs, value_set=pa.array(sorted(ids), pa.string()))
            for row in np.flatnonzero(mask.to_numpy(zero_copy_only=False)).tolist():
                found[docs[row].as_py()] = (prefix, shard["name"], row)
    return found


def locate_in_mix(reader: RowReader, mix_shards: Sequence[dict[str, Any]], doc_ids: list[str]) -> dict[str, list[tuple[int, int]]]:
    """doc_id -> [(shard id in the mix, document index)] for documents whose shard the mix reads (empty
    list: not in the mix's shards; `mix_shards`: the mix's shard table rows, `sluice.mix.ShardTable.all`).
    Whether the mix selected the document is in its index, not here."""
    shard_ids = {(shard["prefix"], shard["name"]): int(shard["id"]) for shard in mix_shards}
    out: dict[str, list[tuple[int, int]]] = {doc_id: [] for doc_id in doc_ids}
    for doc_id, (prefix, name, row) in locate_in_partition(reader, doc_ids).items():
        if (prefix, name) in shard_ids:
            out[doc_id].append((shard_ids[(prefix, name)], row))
    return out


# -- dedup clusters: one adapter over the layouts ----------------------------------------------------------------------


CLUSTER_COLUMNS = ["doc", "doc_id", "kind", "parent_partition", "parent_doc", "cluster_size"]


def cluster_row(reader: RowReader, ref: PartitionRef, part: int, doc_id: str, deduped_row: int | None = None) -> dict[str, Any] | None:
    """A document's row in its partition's `dedup_clusters` (None: no such dataset, or not in it).

    The clusters file is sorted by `doc = part << 24 | row of the cleaned part`. The deduplicated part is the
    cleaned part's documents without a decision (`kind` null), in order, so with `deduped_row` the document
    is found from row-group statistics and one row group (`kept_doc`); by `doc_id` otherwise, or when that
    row names another document."""
    low, high = part << ROW_BITS, ((part + 1) << ROW_BITS) - 1
    prefix = partition_prefix(DEDUP_CLUSTERS, ref)
    manifest = reader.manifest(prefix)
    if manifest is None or not manifest.get("files"):
        return None
    key = entry_key(prefix, manifest["files"][0])
    if deduped_row is not None:
        doc = kept_doc(reader.parquet(key), low, high, deduped_row)
        if doc is not None:
            rows = reader.rows_in_range(key, "doc", doc, doc, CLUSTER_COLUMNS).to_pylist()
            if rows and rows[0]["doc_id"] == doc_id:
                return rows[0]
    rows = reader.rows_in_range(key, "doc", low, high, CLUSTER_COLUMNS)
    match = rows.filter(pc.equal(rows.column("doc_id"), doc_id)).to_pylist()
    return match[0] if match else None


def kept_doc(parquet: pq.ParquetFile, low: int, high: int, kept_row: int) -> int | None:
    """`doc` of the `kept_row`-th document in [low, high] without a decision (`kind` null) of a clusters file.
    Row groups' statistics say how many such documents each holds (null count of `kind`), so only the row
    group holding it is read (and those straddling the range's ends). None: not found, or no statistics."""
    meta, names = parquet.metadata, parquet.schema_arrow.names
    at_doc, at_kind = names.index("doc"), names.index("kind")
    for group in range(meta.num_row_groups):
        docs, kinds = meta.row_group(group).column(at_doc).statistics, meta.row_group(group).column(at_kind).statistics
        if docs is None or not docs.has_min_max or kinds is None or not kinds.has_null_count:
            return None
        if docs.max < low or docs.min > high:
            continue
        if low <= docs.min and docs.max <= high and kinds.null_count <= kept_row:
            kept_row -= kinds.null_count
            continue
        table = parquet.read_row_group(group, columns=["doc", "kind"])
        values = table.column("doc").to_numpy()
        kept = values[pc.is_null(table.column("kind")).to_numpy(zero_copy_only=False) & (values >= low) & (values <= high)]
        if kept_row < len(kept):
            return int(kept[kept_row])
        kept_row -= len(kept)
    return None


def dedup_cluster(
    reader: RowReader, ref: PartitionRef, part: int, doc_id: str, settings: DedupSettings | None = None, deduped_row: int | None = None,
    found: GlobalCluster | None = None, row: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The deduplication cluster of a kept document: {cluster_id, cluster_size, scope, ...}.

    Two layouts: a `dedup_clusters` dataset (the global dedup index, `cluster_row`), else the deduplicated
    partition's side files of older versions (`clusters.parquet` naming each document's kept document,
    `removed.parquet` with the sizes of clusters that lost a document here). With `dedup_clusters` and the
    dedup settings (or `found`, searched already), the cluster is the global one (`scope` "global"): every
    indexed document whose decision leads to the same kept document, later partitions' copies included,
    found by probes of the dedup index (`sluice.dedup.lookup`). Otherwise the size counts the cluster as the
    document's partition saw it when it was deduplicated (`scope` says so). `row`: the document's
    `cluster_row`, if read already."""
    low, high = part << ROW_BITS, ((part + 1) << ROW_BITS) - 1
    row = cluster_row(reader, ref, part, doc_id, deduped_row) if row is None else row
    if row is not None:
        if found is None and settings is not None:
            from sluice.dedup.lookup import global_cluster

            found = global_cluster(reader.store, settings, ref, row["doc"])
        if found is not None:
            return global_fields(found)
        return {"cluster_id": doc_id if row.get("kind") is None else None, "cluster_size": row.get("cluster_size"),
                "parent": f"{row['parent_partition']}:{row['parent_doc']}", "layout": DEDUP_CLUSTERS, "scope": f"as {ref.key} was deduplicated"}
    deduped_prefix = partition_prefix(DEDUPED, ref)
    deduped = reader.manifest(deduped_prefix)
    if deduped is None:
        return {"cluster_id": None, "cluster_size": None, "layout": None, "scope": None}
    side = {entry["key"]: entry_key(deduped_prefix, entry) for entry in deduped.get("side_files", [])}
    cluster_id, size = doc_id, 1
    clusters_key = side.get("clusters.parquet")
    if clusters_key is not None:
        rows = reader.rows_in_range(clusters_key, "doc", low, high, ["doc", "doc_id", "keeper_id"])
        match = rows.filter(pc.equal(rows.column("doc_id"), doc_id)).to_pylist()
        if match:
            cluster_id = match[0]["keeper_id"]
    removed_key = side.get("removed.parquet")
    if removed_key is not None:
        removed = reader.parquet(removed_key).read(columns=["cluster_id", "cluster_size"])
        same = removed.filter(pc.equal(removed.column("cluster_id"), cluster_id))
        if same.num_rows:
            sizes = [s for s in same.column("cluster_size").to_pylist() if s is not None]
            size = max(sizes) if sizes else 1 + same.num_rows
    return {"cluster_id": cluster_id, "cluster_size": size, "layout": "deduped_documents side files", "scope": f"as {ref.key} was deduplicated"}


def global_fields(found: GlobalCluster) -> dict[str, Any]:
    """`dedup_cluster`'s answer from a global cluster (`sluice.dedup.lookup`)."""
    scope = f"global: {found.partitions} partition(s)" + ("" if found.complete else f", search stopped: at least {found.size}")
    if found.undecided:
        scope += f", {found.undecided} linked document(s) of partitions not clustered yet"
    return {"cluster_id": found.cluster_id, "cluster_size": found.size, "cluster_partition": found.cluster_partition,
            "layout": DEDUP_CLUSTERS, "scope": scope}


def absent_reason(reader: RowReader, doc_id: str) -> str:
    """Why a document id is in no tokenized shard: never ingested, dropped by cleaning (step, reason, detail;
    the dropped file of its part), removed by dedup (kind, duplicate of; its partition's removed list)."""
    try:
        doc = DocId.parse(doc_id)
    except ValueError as error:
        return str(error)
    part = raw_part(reader, doc.ref, doc.file)
    if part is None:
        return f"no raw input file {doc.file} in raw_documents {doc.ref.key}"
    key = part_key(reader, RAW, doc.ref, part)
    if key is None or not reader.rows_in_range(key, "ordinal", doc.ordinal, doc.ordinal, ["ordinal"]).num_rows:
        return f"record {doc.ordinal} of {doc.file} is not in raw_documents (quarantined or out of range)"
    cleaned_prefix = partition_prefix(CLEANED, doc.ref)
    cleaned = reader.manifest(cleaned_prefix) or {}
    dropped = [e for e in cleaned.get("side_files", []) if e["key"].startswith("dropped-") and e["key"].endswith(f"{part:05d}.parquet")]
    for entry in dropped:
        rows = reader.parquet(entry_key(cleaned_prefix, entry)).read(columns=["doc_id", "step", "reason", "detail"])
        match = rows.filter(pc.equal(rows.column("doc_id"), doc_id)).to_pylist()
        if match:
            return f"dropped by cleaning: step {match[0]['step']}, {match[0]['reason']} ({match[0]['detail'][:160]})"
    deduped_prefix = partition_prefix(DEDUPED, doc.ref)
    deduped = reader.manifest(deduped_prefix) or {}
    for entry in deduped.get("side_files", []):
        if entry["key"] == "removed.parquet":
            rows = reader.parquet(entry_key(deduped_prefix, entry)).read(columns=["doc_id", "kind", "duplicate_of", "cluster_size"])
            match = rows.filter(pc.equal(rows.column("doc_id"), doc_id)).to_pylist()
            if match:
                return f"removed by dedup: {match[0]['kind']} duplicate of {match[0]['duplicate_of']} (cluster of {match[0]['cluster_size'] or '?'})"
    return "kept by cleaning and dedup, but in no tokenized shard (tokenized_shards not materialized since?) or routed to another dataset"
