"""Lineage probes: rows by position read only their row group; the dedup-cluster adapter reads both layouts."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.io.layout import PartitionRef, partition_prefix
from sluice.io.storage import open_store
from sluice.mix.lineage import DocId, RowReader, dedup_cluster, shard_part

REF = PartitionRef("web", "2026-01")


def test_doc_ids_parse():
    doc = DocId.parse("web/2026-01/sub/dir/file.warc.gz#17")
    assert (doc.source, doc.snapshot, doc.file, doc.ordinal) == ("web", "2026-01", "2026-01/sub/dir/file.warc.gz", 17)
    for bad in ("web", "web/2026-01/file", "web/2026-01/file#x", "/2026/f#1"):
        with pytest.raises(ValueError):
            DocId.parse(bad)


def test_rows_by_position_read_one_row_group(tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"i": list(range(10_000)), "s": [f"row {i}" for i in range(10_000)]}), path, row_group_size=1000)
    reader = RowReader(open_store(str(tmp_path)))
    reads = []
    original = pq.ParquetFile.read_row_groups
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", lambda self, groups, **kw: reads.append(list(groups)) or original(self, groups, **kw))
    assert reader.rows("t.parquet", [4321, 17, 4999], ["s"]).column("s").to_pylist() == ["row 4321", "row 17", "row 4999"]
    assert reads == [[0, 4]]
    assert reader.rows_in_range("t.parquet", "i", 2500, 2502, ["s"]).column("s").to_pylist() == ["row 2500", "row 2501", "row 2502"]
    assert reads[-1] == [2]
    with pytest.raises(IndexError):
        reader.rows("t.parquet", [10_000])


def test_shard_part_from_the_manifest_or_the_name():
    manifest = {"shards": [{"name": "shard-00003-00", "documents": 5}, {"name": "shard-00003-01", "documents": 7}, {"name": "shard-00004-00", "documents": 2}]}
    assert shard_part({"name": "x", "part": 9, "first_row": 40}, manifest) == (9, 40)
    assert shard_part(manifest["shards"][1], manifest) == (3, 5)
    assert shard_part(manifest["shards"][2], manifest) == (4, 0)


def write(store, key, table, row_group_size=2):
    path = store.local_path(key)
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return {"key": key.rsplit("/", 1)[1], "rows": table.num_rows}


def test_dedup_cluster_with_the_deduped_side_files(tmp_path):
    store = open_store(str(tmp_path))
    prefix = partition_prefix("deduped_documents", REF)
    doc = lambda part, row: (part << 24) | row  # noqa: E731
    clusters = pa.table({
        "doc": [doc(0, 0), doc(0, 1), doc(1, 0), doc(1, 1), doc(1, 2)],
        "doc_id": ["a", "b", "c", "d", "e"],
        "keeper_partition": ["web/2026-01"] * 5, "keeper_doc": [doc(0, 0), doc(0, 1), doc(1, 0), doc(1, 0), doc(1, 0)],
        "keeper_id": ["a", "b", "c", "c", "c"],
    })
    removed = pa.table({"doc_id": ["d", "e"], "cluster_id": ["c", "c"], "cluster_size": [3, 3]})
    entries = [write(store, f"{prefix}/clusters.parquet", clusters), write(store, f"{prefix}/removed.parquet", removed)]
    store.write_bytes(f"{prefix}/_manifest.json", json.dumps({"files": [], "side_files": entries}).encode())
    reader = RowReader(store)
    assert dedup_cluster(reader, REF, 1, "c")["cluster_size"] == 3
    single = dedup_cluster(reader, REF, 0, "b")
    assert (single["cluster_id"], single["cluster_size"]) == ("b", 1)
    assert dedup_cluster(reader, REF, 1, "c")["scope"] == "as web/2026-01 was deduplicated"


def test_dedup_cluster_with_a_clusters_dataset(tmp_path):
    store = open_store(str(tmp_path))
    prefix = partition_prefix("dedup_clusters", REF)
    doc = lambda part, row: (part << 24) | row  # noqa: E731
    clusters = pa.table({
        "doc": [doc(0, 0), doc(2, 0), doc(2, 1)], "doc_id": ["a", "b", "c"], "kind": [None, None, "fuzzy"],
        "parent_partition": ["web/2026-01"] * 3, "parent_doc": [doc(0, 0), doc(2, 0), doc(2, 0)], "cluster_size": [1, 4, 4],
    })
    entry = write(store, f"{prefix}/clusters.parquet", clusters)
    store.write_bytes(f"{prefix}/_manifest.json", json.dumps({"files": [entry]}).encode())
    found = dedup_cluster(RowReader(store), REF, 2, "b")
    assert (found["cluster_id"], found["cluster_size"], found["layout"]) == ("b", 4, "dedup_clusters")


@pytest.mark.parametrize("row_group", [1, 3, 7, 1000])
def test_kept_doc_reads_the_kth_undecided_document_of_a_part(tmp_path, row_group):
    """kept_doc (row-group null counts, one group read) equals a filter over the whole file (brute force)."""
    import numpy as np

    from sluice.mix.lineage import kept_doc

    rng = np.random.default_rng(row_group)
    docs = np.concatenate([(part << 24) + np.arange(size) for part, size in ((0, 11), (1, 17), (2, 5))]).astype(np.int64)
    kinds = [None if keep else "exact" for keep in rng.random(len(docs)) < 0.6]
    path = tmp_path / "clusters.parquet"
    pq.write_table(pa.table({"doc": docs, "kind": pa.array(kinds, pa.string())}), path, row_group_size=row_group)
    parquet = pq.ParquetFile(path)
    for part in range(3):
        low, high = part << 24, ((part + 1) << 24) - 1
        expected = [int(d) for d, k in zip(docs, kinds, strict=True) if k is None and low <= d <= high]
        assert [kept_doc(parquet, low, high, k) for k in range(len(expected) + 2)] == expected + [None, None]
