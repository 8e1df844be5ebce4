"""Global dedup: exact + near duplicates, incremental over persisted band indexes == one batch."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import sluice.dedup as dedup
from sluice.clean import CLEANED_SCHEMA, text_hash
from sluice.config import DedupSettings
from sluice.layout import (
    PartitionRef,
    list_partitions,
    partition_prefix,
    read_manifest,
    read_parquet_file,
    write_manifest,
    write_parquet,
)
from sluice.minhash import MAX_HASH32, MinHasher, shingles
from sluice.storage import Store, open_store
from sluice.tasks import records_prefix
from tests.sluice.test_minhash import sample_texts

ORDER = [PartitionRef("reference", "2026-01"), PartitionRef("web", "2026-01"), PartitionRef("reference", "2026-02"), PartitionRef("web", "2026-02")]


def edit(text: str, every: int = 100, word: str = "edited") -> str:
    """A near duplicate: every `every`-th word replaced (about 5 % of 5-gram shingles change)."""
    words = text.split()
    return " ".join(word if i % every == every - 1 else w for i, w in enumerate(words))


def write_cleaned(store: Store, ref: PartitionRef, parts: Sequence[Sequence[tuple[str, str]]]) -> None:
    prefix = partition_prefix("cleaned_documents", ref)
    files = []
    for index, docs in enumerate(parts):
        rows = [
            {
                "doc_id": doc_id, "source": ref.source, "snapshot": ref.snapshot, "url": None,
                "fetch_date": datetime(2026, 1, 1, tzinfo=UTC), "text": text, "language": "en",
                "language_score": 1.0, "n_chars": len(text), "text_hash": text_hash(text),
                "pii_redactions": 0, "quality_score": None,
            }
            for doc_id, text in docs
        ]
        files.append(write_parquet(store, f"{prefix}/part-{index:05d}.parquet", pa.Table.from_pylist(rows, schema=CLEANED_SCHEMA)))
    write_manifest(store, prefix, {"asset": "cleaned_documents", "files": files})


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Cleaned partitions cut from the sample texts, with planted exact and near duplicates:
    across sources, across snapshots, inside one partition, and a chain across three partitions."""
    texts = [t for t in sample_texts() if len(t.split()) > 400][:40]
    store = open_store(str(tmp_path_factory.mktemp("planted")))
    parts = {
        ORDER[0]: [[(f"r1-{i}", texts[i]) for i in range(0, 10)]],
        ORDER[1]: [
            [(f"w1-{i}", texts[i]) for i in range(10, 18)] + [("w1-near-r1-0", edit(texts[0]))],
            [("w1-exact-r1-1", texts[1]), ("w1-near-w1-10", edit(texts[10], word="changed")), ("w1-x", texts[18])],
        ],
        ORDER[2]: [[(f"r2-{i}", texts[i]) for i in range(19, 26)] + [("r2-near-w1-11", edit(texts[11], 80))]],
        ORDER[3]: [
            [(f"w2-{i}", texts[i]) for i in range(26, 34)] + [("w2-near-r2-near", edit(edit(texts[11], 80), 90, "again"))],
            [("w2-exact-w1-12", texts[12].upper()), ("w2-empty", "... !!! ..."), ("w2-near-r1-2", edit(texts[2], 70))],
        ],
    }
    for ref, content in parts.items():
        write_cleaned(store, ref, content)
    return store


def run_incremental(store: Store, settings: DedupSettings | None = None, executor=None) -> dict[str, dedup.DedupResult]:
    results = {}
    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("deduped_documents", ref)
        result = dedup.deduplicate_partition(store, ref, prefix, settings=settings or DedupSettings(), executor=executor)
        write_manifest(
            store,
            prefix,
            {"files": result.files, "side_files": result.side_files, **({"band_index": result.band_index} if result.band_index else {})},
        )
        results[ref.key] = result
    return results


def deduped_view(store: Store) -> tuple[set[str], dict[str, tuple[str, str]]]:
    kept, removed = set(), {}
    for ref in list_partitions(store, "deduped_documents"):
        prefix = partition_prefix("deduped_documents", ref)
        for entry in read_manifest(store, prefix)["files"]:
            kept.update(read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["doc_id"]).column("doc_id").to_pylist())
        for row in read_parquet_file(store, f"{prefix}/removed.parquet").to_pylist():
            removed[row["doc_id"]] = (row["kind"], row["duplicate_of"])
    return kept, removed


def exact_jaccard(a: str, b: str, ngram_size: int = 5) -> float:
    """Brute force: Jaccard of the two documents' sets of shingle strings (no hashing)."""
    sa, sb = set(shingles(a, ngram_size)), set(shingles(b, ngram_size))
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def one_batch(store: Store, settings: DedupSettings | None = None) -> tuple[set[str], dict[str, str]]:
    """Reference: every cleaned document at once in global order; exact by hash; union-find over pairs
    sharing a (band, hash) (with `verify_min_jaccard`: pairs of a member with one of the bucket's first
    `verify_anchors` members, linked only if their brute-force Jaccard reaches the bound);
    a document is kept when it is the first of its hash and the first of its component."""
    settings = settings or DedupSettings()
    ids, hashes, texts = [], [], []
    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("cleaned_documents", ref)
        for entry in read_manifest(store, prefix)["files"]:
            table = read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["doc_id", "text_hash", "text"])
            ids += table.column("doc_id").to_pylist()
            hashes += table.column("text_hash").to_pylist()
            texts += table.column("text").to_pylist()
    hasher = MinHasher.from_settings(settings)
    signatures = hasher.signatures(texts)
    bands = hasher.band_hashes(signatures)
    parent = list(range(len(ids)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    buckets: dict[tuple[int, int], list[int]] = {}
    for i in range(len(ids)):
        if (signatures[i] == MAX_HASH32).all():
            continue
        for band, value in enumerate(bands[i].tolist()):
            buckets.setdefault((band, value), []).append(i)
    bound = settings.verify_min_jaccard
    # With verification, each member is paired with the bucket's first `verify_anchors` members.
    anchors = len(ids) if bound is None else settings.verify_anchors
    linked = {(i, j) for members in buckets.values() for i in sorted(members)[:anchors] for j in members if i < j}
    for i, j in sorted(linked):
        if bound is None or exact_jaccard(texts[i], texts[j], settings.ngram_size) >= bound:
            a, b = find(i), find(j)
            parent[max(a, b)] = min(a, b)
    seen: set[str] = set()
    kept, kinds = set(), {}
    for i, doc_id in enumerate(ids):
        if hashes[i] in seen:
            kinds[doc_id] = "exact"
        elif find(i) != i:
            kinds[doc_id] = "fuzzy"
        else:
            kept.add(doc_id)
        seen.add(hashes[i])
    return kept, kinds


def test_incremental_equals_one_batch_on_sample_with_planted_duplicates(planted):
    run_incremental(planted)
    kept, removed = deduped_view(planted)
    batch_kept, batch_kinds = one_batch(planted)
    assert kept == batch_kept
    assert {doc_id: kind for doc_id, (kind, _) in removed.items()} == batch_kinds
    # The planted ones, with the document each duplicates.
    assert removed["w1-near-r1-0"] == ("fuzzy", "r1-0")
    assert removed["w1-exact-r1-1"] == ("exact", "r1-1")
    assert removed["w1-near-w1-10"] == ("fuzzy", "w1-10")
    assert removed["r2-near-w1-11"] == ("fuzzy", "w1-11")
    assert removed["w2-near-r2-near"] == ("fuzzy", "w1-11")  # chain: resolved to the cluster's kept document
    assert removed["w2-exact-w1-12"] == ("exact", "w1-12")  # exact after normalization (case-folded)
    assert removed["w2-near-r1-2"] == ("fuzzy", "r1-2")
    assert "w2-empty" in kept  # no words: never a near-duplicate candidate
    # Every fuzzy duplicate points at a document that is in the deduplicated output.
    assert all(target in kept for kind, target in removed.values() if kind == "fuzzy")


def test_side_output_and_counts(planted):
    texts = cleaned_texts(planted)
    # Besides the planted ones, the sample itself holds two LSH candidates: w1-15 and w2-33, the same
    # untranslated chapter as r1-3 with other surroundings, below the default bound of 0.8 (verified
    # away); without verification both go (a shared LSH bucket is enough).
    natural = {doc: exact_jaccard(texts[doc], texts["r1-3"]) for doc in ("w1-15", "w2-33")}
    assert all(0.7 < value < 0.8 for value in natural.values()), natural
    lsh_only = run_incremental(planted, DedupSettings(verify_min_jaccard=None))
    assert (lsh_only["web/2026-02"].removed_exact, lsh_only["web/2026-02"].removed_fuzzy) == (1, 3)
    assert lsh_only["web/2026-01"].cluster_sizes == {2: 4}
    results = run_incremental(planted)
    last = results["web/2026-02"]
    # planted: one exact (w2-exact-w1-12), two near (w2-near-r2-near, w2-near-r1-2), all kept copies in 2026-01
    assert (last.removed_exact, last.removed_fuzzy) == (1, 2)
    assert last.removed_against_snapshot == {"2026-01": 3}
    assert last.removed_against == {"reference/2026-01": 1, "web/2026-01": 2}
    assert last.documents_in == last.documents_out + 3
    table = read_parquet_file(planted, f"{partition_prefix('deduped_documents', ORDER[3])}/removed.parquet")
    assert table.schema == dedup.REMOVED_SCHEMA
    rows = {row["doc_id"]: row for row in table.to_pylist()}
    chain = rows["w2-near-r2-near"]
    assert chain["duplicate_of_partition"] == "web/2026-01" and chain["cluster_id"] == "w1-11"
    assert chain["cluster_size"] >= 2
    # w1-near-r1-0, w1-exact-r1-1, w1-near-w1-10 (w1-15 is not a near duplicate of r1-3 at 0.8, see above)
    assert results["web/2026-01"].cluster_sizes == {2: 3}


@pytest.mark.parametrize("verify", [0.8, None])
def test_no_two_kept_documents_are_linked(planted, verify):
    """LSH only: no two kept documents share a band bucket. Verified: those that do are below the bound."""
    run_incremental(planted, DedupSettings(verify_min_jaccard=verify))
    kept, _ = deduped_view(planted)
    rows = []
    for ref in list_partitions(planted, "deduped_documents"):
        prefix = partition_prefix("deduped_documents", ref)
        clusters = pl.from_arrow(read_parquet_file(planted, f"{prefix}/{dedup.CLUSTERS_FILE}"))
        for key in read_manifest(planted, prefix)["band_index"]["files"]:
            bands = pl.from_arrow(read_parquet_file(planted, f"{prefix}/{key}")).join(clusters, on="doc")
            rows.append(bands.filter(pl.col("doc_id").is_in(sorted(kept))).select("band", "hash", "doc_id"))
    index = pl.concat(rows)
    assert index.height > 0
    shared = index.join(index, on=["band", "hash"], suffix="_b").filter(pl.col("doc_id") < pl.col("doc_id_b"))
    pairs = set(shared.select("doc_id", "doc_id_b").iter_rows())
    if verify is None:
        assert not pairs
    else:
        texts = cleaned_texts(planted)
        assert pairs  # the sample's w1-15 and r1-3 (J ~0.77) stay side by side
        assert all(exact_jaccard(texts[a], texts[b]) < verify for a, b in pairs)


def test_later_partitions_read_band_indexes_instead_of_resigning(planted, monkeypatch):
    run_incremental(planted)  # every partition has its band index now
    signed: list[int] = []
    original = dedup.band_table

    def counting(texts, part, settings, shingle_sink=None):
        signed.append(len(texts))
        return original(texts, part, settings, shingle_sink)

    monkeypatch.setattr(dedup, "band_table", counting)
    last = ORDER[3]
    # Its own signing tasks' completion records go, so it signs again (sluice.tasks would reuse them).
    planted.delete(planted.list_files(records_prefix("dedup_signatures", last)))
    result = dedup.deduplicate_partition(planted, last, partition_prefix("deduped_documents", last))
    cleaned = read_manifest(planted, partition_prefix("cleaned_documents", last))["files"]
    assert signed == [entry["rows"] for entry in cleaned]  # only this partition's own parts were signed
    assert result.recomputed_band_indexes == []


def test_index_built_with_other_settings_is_recomputed_with_the_same_result(planted):
    run_incremental(planted)
    kept_default, _ = deduped_view(planted)
    other = DedupSettings(seed=5)
    last = ORDER[3]
    result = dedup.deduplicate_partition(planted, last, partition_prefix("deduped_documents", last), settings=other)
    assert result.recomputed_band_indexes == [ref.key for ref in ORDER[:3]]
    run_incremental(planted, other)
    kept_other, _ = deduped_view(planted)
    assert kept_other == one_batch(planted, other)[0]
    assert len(kept_default ^ kept_other) <= 2  # another seed: the same planted duplicates, up to LSH chance


def cleaned_texts(store: Store) -> dict[str, str]:
    texts = {}
    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("cleaned_documents", ref)
        for entry in read_manifest(store, prefix)["files"]:
            table = read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["doc_id", "text"])
            texts.update(zip(table.column("doc_id").to_pylist(), table.column("text").to_pylist(), strict=True))
    return texts


def test_exact_verification_links_only_pairs_above_the_bound(planted):
    texts = cleaned_texts(planted)

    def similarity(a: str, b: str) -> float:
        sa, sb = dedup.shingle_sets([texts[a], texts[b]], DedupSettings())
        return dedup.jaccard(sa, sb)

    run_incremental(planted, DedupSettings(verify_min_jaccard=None))
    _, unverified = deduped_view(planted)
    assert DedupSettings().verify_min_jaccard == 0.8  # verification is on by default
    run_incremental(planted)
    kept, verified = deduped_view(planted)
    fuzzy = {doc: target for doc, (kind, target) in verified.items() if kind == "fuzzy"}
    assert fuzzy and all(similarity(doc, target) >= 0.8 for doc, target in fuzzy.items())
    # LSH-only removals whose similarity to the kept document is below the bound stay now.
    below = [doc for doc, (kind, target) in unverified.items() if kind == "fuzzy" and similarity(doc, target) < 0.8]
    assert below and all(doc in kept for doc in below)
    assert {"w1-near-r1-0", "w1-near-w1-10", "r2-near-w1-11", "w2-near-r1-2"} <= set(fuzzy)


def test_pair_jaccard_equals_brute_force(monkeypatch):
    texts = [t for t in sample_texts() if len(t.split()) > 50][:12]
    texts += [edit(texts[0]), edit(texts[0], 7), "", "only three words"]
    a, b = np.triu_indices(len(texts), 1)
    expected = np.array([exact_jaccard(texts[i], texts[j]) for i, j in zip(a, b, strict=True)])
    sets = dedup.ShingleSets.of(texts, DedupSettings())
    assert np.allclose(dedup.pair_jaccard(sets, a, b), expected)
    assert np.allclose(dedup.pair_jaccard(sets, b, a), expected)  # either side may be the smaller set
    monkeypatch.setattr(dedup, "_JACCARD_BLOCK", 100)  # many blocks, pairs split at block ends
    assert np.allclose(dedup.pair_jaccard(sets, a, b), expected)
    monkeypatch.setattr(dedup, "_SHINGLE_BATCH_CHARS", 3000)  # texts shingled in several batches
    batched = dedup.ShingleSets.of(texts, DedupSettings())
    assert np.array_equal(batched.keys, sets.keys) and np.array_equal(batched.offsets, sets.offsets)
    near = expected[(a == 0) & (b == 12)]  # texts[0] and its edited copy: a near duplicate, not an exact one
    assert 0.8 < near[0] < 1.0


class RecordingPool:
    """A process pool that records which stage functions it ran, with how many tasks."""

    backend = "local"

    def __init__(self, workers: int) -> None:
        from sluice.compute import LocalPoolExecutor

        self.pool = LocalPoolExecutor(workers)
        self.stages: list[tuple[str, int]] = []

    def map(self, fn, tasks):
        self.stages.append((fn.__name__, len(tasks)))
        return self.pool.map(fn, tasks)


@pytest.mark.parametrize("verify", [0.8, None])
def test_process_pool_gives_byte_identical_outputs(planted, monkeypatch, verify):
    from tests.conftest import tree_digest

    settings = DedupSettings(verify_min_jaccard=verify)
    run_incremental(planted, settings)
    inline = tree_digest(planted.uri("deduped_documents"))
    last = ORDER[3]  # two cleaned parts (two signature tasks), three earlier indexes (three match tasks)
    prefix = partition_prefix("deduped_documents", last)
    # The sample is below the inline threshold: only signing (recorded tasks, sluice.tasks) runs in the pool.
    small = RecordingPool(2)
    dedup.deduplicate_partition(planted, last, prefix, settings=settings, executor=small)
    assert small.stages == [("run_recorded", 2)]
    # Above it: matching, edges per band and verification in worker processes.
    monkeypatch.setattr(dedup, "INLINE_BELOW_BYTES", 0)
    pool = RecordingPool(2)
    result = dedup.deduplicate_partition(planted, last, prefix, settings=settings, executor=pool)
    expected = [("run_recorded", 2), ("match_earlier", 3), ("band_edges", settings.bands)] + ([("verify_pairs", 1)] if verify else [])
    expected.append(("cluster_components", 1))
    assert pool.stages == expected
    write_manifest(planted, prefix, {"files": result.files, "side_files": result.side_files, "band_index": result.band_index})
    assert tree_digest(planted.uri("deduped_documents")) == inline
    assert any(name.endswith("bands-00001.parquet") for name in inline)
    assert not any(dedup.MATCHES_FOLDER in name for name in inline)  # the matched rows are deleted
    assert not (Path(planted.uri(prefix)) / dedup.MATCHES_FOLDER).exists()


def test_fuzzy_off_is_exact_only(planted):
    results = run_incremental(planted, DedupSettings(fuzzy=False))
    assert sum(r.removed_fuzzy for r in results.values()) == 0
    assert sum(r.removed_exact for r in results.values()) == 2
    assert all(r.band_index is None for r in results.values())


def test_connected_components_min_label():
    edges = pl.DataFrame({"u": [5, 4, 3, 2, 10, 12], "v": [4, 3, 2, 1, 11, 11]}, schema={"u": pl.Int64, "v": pl.Int64})
    nodes = pl.Series("node", [1, 2, 3, 4, 5, 10, 11, 12, 20], dtype=pl.Int64)
    labels = dedup.connected_components(nodes, edges)
    assert dict(labels.iter_rows()) == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 10: 10, 11: 10, 12: 10, 20: 20}


def test_kept_documents_are_never_removed_by_a_later_bridge():
    """a (earlier) and c (later) are not candidates; b, later still, resembles both. b is removed as a
    duplicate of a; c, kept when its partition ran, stays kept (its cluster id stays c)."""
    ref_b = PartitionRef("web", "2026-03")
    current = pl.DataFrame({"band": [0, 1], "hash": [7, 9], "doc": [0, 0]}, schema={"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64})
    doc_ids = pl.DataFrame({"doc": [0], "doc_id": ["b"]}, schema={"doc": pl.Int64, "doc_id": pl.String})
    matches = pl.DataFrame(
        {"band": [0, 1], "hash": [7, 9], "keeper_partition": ["web/2026-01", "web/2026-02"], "keeper_doc": [3, 0], "keeper_id": ["a", "c"]},
        schema=dedup.MATCH_SCHEMA,
    )
    labels = dedup.cluster_partition(ref_b, current, doc_ids, matches)
    assert labels.to_dicts() == [{"doc": 0, "keeper_partition": "web/2026-01", "keeper_doc": 3, "keeper_id": "a", "cluster_size": 3}]


def test_verification_pairs_each_member_with_the_buckets_anchors_only():
    """With verification, a bucket's members are paired with its first `verify_anchors` members (linear in
    the bucket), not all pairs; members are linked only where the pair filter says."""
    ref = PartitionRef("web", "2026-01")
    size, anchors = 70, 3
    current = pl.DataFrame({"band": [0] * size, "hash": [7] * size, "doc": list(range(size))}, schema={"band": pl.UInt8, "hash": pl.UInt64, "doc": pl.Int64})
    doc_ids = pl.DataFrame({"doc": list(range(size)), "doc_id": [f"d{i}" for i in range(size)]}, schema={"doc": pl.Int64, "doc_id": pl.String})
    asked: list[tuple[int, int]] = []

    def odd_docs_with_the_first(pairs: pl.DataFrame) -> np.ndarray:  # only d0 -- odd document pairs verify
        asked.extend(zip(pairs["u_doc"].to_list(), pairs["v_doc"].to_list(), strict=True))
        return ((pairs["u_doc"] == 0) & (pairs["v_doc"] % 2 == 1)).to_numpy()

    labels = dedup.cluster_partition(ref, current, doc_ids, pl.DataFrame(schema=dedup.MATCH_SCHEMA), odd_docs_with_the_first, anchors)
    assert sorted(asked) == sorted((u, v) for u in range(anchors) for v in range(u + 1, size))
    keepers = dict(zip(labels["doc"].to_list(), labels["keeper_id"].to_list(), strict=True))
    assert keepers == {i: "d0" if i % 2 == 1 or i == 0 else f"d{i}" for i in range(size)}
    assert labels.filter(pl.col("doc") == 0)["cluster_size"].item() == 1 + size // 2


def test_band_rows_skip_documents_without_words():
    table = dedup.band_table(["", "some words here and there and more words", "?!"], part=3, settings=DedupSettings())
    docs = np.unique(table.column("doc").to_numpy())
    assert docs.tolist() == [(3 << dedup.ROW_BITS) | 1]
    assert table.num_rows == 14


def test_dedup_config_errors_name_key_and_allowed_values(make_config):
    from sluice.config import ConfigError, load_config

    with pytest.raises(ConfigError) as error:
        load_config(make_config(dedup={"hash_function": "md5"}))
    assert "dedup.hash_function" in str(error.value) and "'poly' or 'sha1'" in str(error.value)
    with pytest.raises(ConfigError) as error:
        load_config(make_config(dedup={"bandz": 4}))
    assert "dedup.bandz" in str(error.value)
    assert load_config(make_config()).dedup == DedupSettings()  # sluice.yaml states the defaults


def test_verification_reads_earlier_shingle_sets_from_sidecars_not_texts(planted, tmp_path, monkeypatch):
    """Signing publishes each part's shingle sets (`shingles-*.parquet`, listed in the band index); later
    partitions verify against earlier documents from those, so no text is re-read or re-shingled, and the
    result is the same as from the texts (an earlier partition without sidecars falls back to its texts)."""
    import shutil

    store = open_store(str(shutil.copytree(planted.root, tmp_path / "store")))
    texts_read: list[int] = []
    real_read_texts = dedup.read_texts
    monkeypatch.setattr(dedup, "read_texts", lambda s, documents: texts_read.append(documents.height) or real_read_texts(s, documents))
    results = run_incremental(store)
    assert texts_read == [] and sum(r.removed_fuzzy for r in results.values()) > 0
    last = list_partitions(store, "deduped_documents")[-1]
    prefix = partition_prefix("deduped_documents", last)
    manifest = read_manifest(store, prefix)
    assert manifest["band_index"]["shingles"] and all(store.exists(f"{prefix}/{key}") for key in manifest["band_index"]["shingles"])
    sidecar = read_parquet_file(store, f"{prefix}/{manifest['band_index']['shingles'][0]}")
    cleaned_prefix = partition_prefix("cleaned_documents", last)
    first_text = read_parquet_file(store, f"{cleaned_prefix}/{read_manifest(store, cleaned_prefix)['files'][0]['key']}", columns=["text"]).column("text")[0].as_py()
    assert sidecar.column("shingles")[0].as_py() == dedup.shingle_sets([first_text], DedupSettings())[0].tolist()
    expected_removed = read_parquet_file(store, f"{prefix}/removed.parquet")

    # Earlier partitions deduplicated without sidecars (e.g. by an older version): the texts are used.
    for ref in list_partitions(store, "deduped_documents")[:-1]:
        earlier_prefix = partition_prefix("deduped_documents", ref)
        earlier = read_manifest(store, earlier_prefix)
        earlier["band_index"].pop("shingles")
        write_manifest(store, earlier_prefix, earlier)
    result = dedup.deduplicate_partition(store, last, prefix, settings=DedupSettings())
    assert texts_read and sum(texts_read) > 0
    assert read_parquet_file(store, f"{prefix}/removed.parquet").equals(expected_removed)
    assert result.removed_fuzzy == results[last.key].removed_fuzzy
