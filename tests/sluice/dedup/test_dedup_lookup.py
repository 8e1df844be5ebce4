"""The global cluster of a document by index probes (`sluice.dedup.lookup`) against independent oracles.

Oracle: all-pairs brute force over every document of every partition (Jaccard of word 5-gram shingle
strings >= 0.8, or the same normalized text), union-find; a document's cluster is its component and the
cluster's id its first document in the global order. On the planted partitions incremental dedup equals
one batch (tests/sluice/dedup/test_dedup.py), so components and published clusters agree.
"""

from __future__ import annotations

from itertools import combinations

import pytest

import sluice.dedup as dedup
from benchmarks.dedup_oracle import make_chain, stored_partitions, write_all
from sluice.clean import normalize_for_hash
from sluice.config import DedupSettings
from sluice.dedup.index import DedupIndex
from sluice.dedup.lookup import global_cluster, global_clusters
from sluice.dedup.minhash import shingles
from sluice.dedup.schemas import CLUSTERS
from sluice.io.layout import PartitionRef, list_partitions, partition_prefix, read_parquet_file
from sluice.io.storage import Store, open_store
from tests.sluice.dedup.test_dedup import REFS, planted_partitions
from tests.sluice.dedup.test_minhash import sample_texts


def reference_components(store: Store, bound: float = 0.8) -> dict[str, list[str]]:
    """doc_id -> the doc_ids of its component, in the global order (brute force over all pairs)."""
    ordered = sorted(stored_partitions(store), key=lambda item: item[0].sort_key())
    docs = [(doc_id, text) for _, parts in ordered for part in parts for doc_id, text in part]
    sets = [set(shingles(text, 5)) for _, text in docs]
    norms = [normalize_for_hash(text) for _, text in docs]
    parent = list(range(len(docs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in combinations(range(len(docs)), 2):
        if norms[i] == norms[j] or (sets[i] and sets[j] and len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= bound):
            a, b = find(i), find(j)
            parent[max(a, b)] = min(a, b)
    members: dict[int, list[str]] = {}
    for i, (doc_id, _) in enumerate(docs):
        members.setdefault(find(i), []).append(doc_id)
    return {doc_id: group for group in members.values() for doc_id in group}


def positions(store: Store) -> dict[str, tuple[PartitionRef, int]]:
    """doc_id -> (partition, dedup position), from the published clusters files."""
    out = {}
    for ref in list_partitions(store, CLUSTERS):
        table = read_parquet_file(store, f"{partition_prefix(CLUSTERS, ref)}/clusters.parquet", columns=["doc", "doc_id"])
        out.update({doc_id: (ref, doc) for doc, doc_id in zip(table.column("doc").to_pylist(), table.column("doc_id").to_pylist(), strict=True)})
    return out


@pytest.fixture(scope="module")
def long_texts() -> list[str]:
    return [t for t in sample_texts() if len(t.split()) > 400][:40]


@pytest.fixture(scope="module")
def planted(tmp_path_factory, long_texts) -> Store:
    store = open_store(str(tmp_path_factory.mktemp("planted")))
    write_all(store, planted_partitions(long_texts))
    dedup.deduplicate_in_order(store, settings=DedupSettings())
    return store


def test_every_documents_global_cluster_is_its_component_across_all_partitions(planted):
    components = reference_components(planted)
    assert any(len({doc.split("-")[0] for doc in group}) > 1 for group in components.values())  # copies across partitions
    for doc_id, (ref, doc) in positions(planted).items():
        found = global_cluster(planted, DedupSettings(), ref, doc)
        assert found is not None and found.complete and found.undecided == 0
        assert (found.cluster_id, found.size) == (components[doc_id][0], len(components[doc_id])), doc_id


def test_searched_together_the_clusters_are_the_same(planted):
    """What a batch trace does: every document's cluster in one search (one probe per table and round)."""
    components = reference_components(planted)
    where = positions(planted)
    found = global_clusters(planted, DedupSettings(), list(where.values()))
    assert {doc_id: (f.cluster_id, f.size) for doc_id, f in zip(where, found, strict=True)} == {
        doc_id: (components[doc_id][0], len(components[doc_id])) for doc_id in where
    }


def test_the_planted_copies_are_counted_where_they_were_removed(planted):
    where = positions(planted)
    ref, doc = where["w1-11"]  # kept in web/2026-01; an edit removed by reference/2026-02, an edit of that by web/2026-02
    found = global_cluster(planted, DedupSettings(), ref, doc)
    assert (found.cluster_id, found.size, found.partitions) == ("w1-11", 3, 3)
    own = read_parquet_file(planted, f"{partition_prefix(CLUSTERS, ref)}/clusters.parquet").to_pylist()
    assert next(row for row in own if row["doc_id"] == "w1-11")["cluster_size"] == 1  # what its own partition saw


@pytest.fixture(scope="module")
def chain(long_texts) -> dict[str, str]:
    return make_chain(max(long_texts, key=lambda t: len(t.split())))


@pytest.mark.parametrize(("order", "expected"), [("KXC", {"K": 3, "X": 3, "C": 3}), ("KCX", {"K": 2, "C": 1, "X": 2})])
def test_chains_and_bridges_in_three_partitions(tmp_path, chain, order, expected):
    """K-X-C one partition each: one cluster of 3, though K and C share no link. K, C, then X (a bridge): C
    was kept when its partition ran and stays a cluster of its own; X is in K's (documented in sluice.dedup)."""
    store = open_store(str(tmp_path))
    write_all(store, [(REFS[i], [[(name, chain[name])]]) for i, name in enumerate(order)])
    dedup.deduplicate_in_order(store)
    where = positions(store)
    for name, size in expected.items():
        found = global_cluster(store, DedupSettings(), *where[name])
        assert (found.size, found.cluster_id) == (size, "C" if size == 1 else "K"), name


def test_a_partition_indexed_but_not_clustered_counts_apart(tmp_path, chain):
    store = open_store(str(tmp_path))
    write_all(store, [(REFS[0], [[("K", chain["K"])]]), (REFS[1], [[("copy", chain["K"])]])])
    settings = DedupSettings()
    dedup.deduplicate_in_order(store, settings=settings)
    write_all(store, [(REFS[2], [[("late", chain["K"])]])])
    dedup.sign_partition(store, REFS[2], settings)
    dedup.index_partition(store, REFS[2], settings)
    assert REFS[2].key in DedupIndex(store, settings).manifest()["partitions"]
    found = global_cluster(store, settings, *positions(store)["K"])
    assert (found.size, found.undecided) == (2, 1)
    assert global_cluster(store, settings, REFS[2], 0) is None  # not clustered: no decision to report


def test_the_search_stops_at_the_limit_with_a_lower_bound(planted):
    ref, doc = positions(planted)["w1-11"]
    found = global_cluster(planted, DedupSettings(), ref, doc, limit=1)
    assert not found.complete and found.size == 1


def test_the_files_read_are_bounded_by_shards_and_deltas_not_partitions(tmp_path, long_texts, monkeypatch):
    """Each round probes each table once, reading at most (leveled runs + max_deltas) run files (fewer
    runs than hash-range shards here), however many partitions are indexed: 3 or 11 partitions, the same bound."""
    import sluice.dedup.index as index_module

    settings = DedupSettings(index_shards=2, index_max_deltas=2)
    reads: list[str] = []
    real = index_module.read_run
    monkeypatch.setattr(index_module, "read_run", lambda store, key, *rest: reads.append(key) or real(store, key, *rest))
    for count in (3, 11):
        store = open_store(str(tmp_path / f"p{count}"))
        refs = [PartitionRef("web", f"2026-{month:02d}") for month in range(1, count + 1)]
        write_all(store, [(ref, [[(f"{ref.snapshot}-{i}", long_texts[(i + n) % 3]) for i in range(2)]]) for n, ref in enumerate(refs)])
        dedup.deduplicate_in_order(store, settings=settings)
        reads.clear()
        found = global_cluster(store, settings, refs[0], 0)
        assert found.size == sum(1 for n in range(count) for i in range(2) if (i + n) % 3 == 0)  # the copies of long_texts[0]
        assert found.size > 1 and found.partitions == found.size
        assert 0 < len(reads) <= found.rounds * 2 * (settings.index_shards + settings.index_max_deltas), (count, len(reads))
