"""The global dedup index: canonical LSM layout, probes of earlier partitions only, bounded reads, migration."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
from collections import Counter

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

import sluice.dedup as dedup
import sluice.dedup.signatures as signatures_module
from benchmarks.dedup_oracle import edit, write_all
from sluice.config import DedupSettings
from sluice.dedup.index import DedupIndex, IndexEntry, partition_rows, partition_table
from sluice.dedup.schemas import DEDUPED
from sluice.io.layout import (
    PartitionRef,
    partition_prefix,
    read_manifest,
    read_parquet_file,
    write_manifest,
    write_parquet,
)
from sluice.io.storage import LocalStore, open_store
from tests.conftest import tree_digest


def synthetic(count: int, docs: int = 6, seed: int = 0) -> list[tuple[PartitionRef, list[list[tuple[str, str]]]]]:
    """`count` partitions (2 sources x count/2 snapshots) of short texts; some repeat an earlier text exactly
    or with an edit."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(400)]
    texts: list[str] = []
    partitions = []
    for index in range(count):
        ref = PartitionRef(("alpha", "beta")[index % 2], f"s{index // 2:04d}")
        part = []
        for row in range(docs):
            if texts and row == 0:
                text = rng.choice(texts)
            elif texts and row == 1:
                text = edit(rng.choice(texts), 40)
            else:
                text = " ".join(rng.choice(words) for _ in range(120))
            texts.append(text)
            part.append((f"{ref.key}#{row}", text))
        partitions.append((ref, [part]))
    return partitions


def index_all(store, partitions, order, settings: DedupSettings) -> None:
    for ref, _ in partitions:
        dedup.sign_partition(store, ref, settings)
    for position in order:
        dedup.index_partition(store, partitions[position][0], settings)


SMALL = DedupSettings(index_shards=4, index_max_deltas=3, index_fanout=2)


def test_layout_is_the_same_whatever_the_insertion_order(tmp_path):
    partitions = synthetic(11)
    digests = []
    for trial, order in enumerate([list(range(11)), list(reversed(range(11))), random.Random(3).sample(range(11), 11)]):
        store = open_store(str(tmp_path / f"t{trial}"))
        write_all(store, partitions)
        index_all(store, partitions, order, SMALL)
        index_all(store, partitions, order[:4], SMALL)  # re-indexing the same signatures changes nothing
        digests.append(tree_digest(store.uri("dedup_index")))
    assert digests[0] == digests[1] == digests[2]
    manifest = DedupIndex(open_store(str(tmp_path / "t0")), SMALL).manifest()
    # 11 = 3 batches of 3 + 2 deltas; 3 batches = 0b11: a level-1 run of 2 batches, a level-0 run of 1
    assert [(run["level"], len(run["members"])) for run in manifest["runs"]] == [(1, 6), (0, 3)] and len(manifest["deltas"]) == 2
    ordered = sorted((ref.key for ref, _ in partitions), key=lambda key: key.split("/")[::-1])
    assert manifest["runs"][0]["members"] == ordered[:6] and sorted(manifest["deltas"], key=lambda key: key.split("/")[::-1]) == ordered[9:]
    run = pq.ParquetFile(open_store(str(tmp_path / "t0")).local_path(f"{DedupIndex(open_store(str(tmp_path / 't0')), SMALL).prefix}/{manifest['runs'][0]['files']['bands']['key']}"))
    ranges = [run.metadata.row_group(g).column(0).statistics for g in range(run.num_row_groups)]
    assert all(dedup.index.shard_of(np.array([s.min]), 4)[0] == dedup.index.shard_of(np.array([s.max]), 4)[0] for s in ranges)  # no group straddles two hash ranges


def all_rows(store, partitions, table: str) -> pl.DataFrame:
    frames = []
    for ref, _ in partitions:
        frames.append(partition_rows(signatures_module.read_signatures(store, ref), ref)[table])
    return pl.concat(frames)


class RangedStore(LocalStore):
    """A local store that, like S3, has no local paths for the index: its probes go by ranged reads,
    which are counted (`ranges`: (key, bytes) per read_range); whole reads of an index file are refused."""

    def __init__(self, url: str, spec, without_key_files: bool = False) -> None:
        super().__init__(url, spec)
        self.ranges: list[tuple[str, int]] = []
        self.without_key_files = without_key_files

    def local_path(self, key: str) -> str | None:
        return None if key.startswith("dedup_index/") else super().local_path(key)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        if self.without_key_files and key.endswith(".keys"):
            raise AssertionError("a format-1 run has no key file")
        data = super().read_range(key, start, length)
        self.ranges.append((key, len(data)))
        return data

    def open_read(self, key: str):
        assert not key.endswith((".parquet", ".keys", ".rows")) or not key.startswith("dedup_index/"), f"a whole read of {key}"
        return super().open_read(key)


@pytest.mark.parametrize("via", ["key file", "key file, no row file", "key column", "ranged", "ranged key column"])
@pytest.mark.parametrize("row_group", [7, 1 << 14])
@pytest.mark.parametrize("table", ["bands", "exact"])
def test_a_probe_returns_exactly_the_matching_rows_of_earlier_partitions(tmp_path, monkeypatch, table, row_group, via):
    """Against all rows filtered by hand; with row groups of 7 rows the probe finds the matching rows (by
    binary search in the memory-mapped key file, or, where that is not local, in the key column), then
    gathers them from the memory-mapped row file (every column but doc_id) or reads only the row groups
    holding matches. `ranged`: as on S3, by ranged reads of the footer, the key file (or key column) of the
    candidate row groups and the row groups holding matches. A probe for some columns returns those
    columns of the same rows."""
    monkeypatch.setattr(dedup.index, "ROW_GROUP", row_group)
    real = LocalStore.local_path
    if via == "key column":
        monkeypatch.setattr(LocalStore, "local_path", lambda store, key: None if key.endswith(".keys") else real(store, key))
    if via == "key file, no row file":
        monkeypatch.setattr(LocalStore, "local_path", lambda store, key: None if key.endswith(".rows") else real(store, key))
    if via == "ranged key column":  # the runs of a format-1 index have no key file (nor row file, nor recorded sizes)
        real_read_run = dedup.index.read_run
        monkeypatch.setattr(
            dedup.index, "read_run",
            lambda store, key, probe_keys=None, keys_file=None, size=None, footer=None, rows_file=None, *rest: real_read_run(store, key, probe_keys, None, None, None, None, *rest),
        )
    partitions = synthetic(13)
    store = open_store(str(tmp_path / "store"))
    write_all(store, partitions)
    index_all(store, partitions, list(range(13)), SMALL)
    rows = all_rows(store, partitions, table)
    if via.startswith("ranged"):
        store = RangedStore(store.url, store.spec, without_key_files=via == "ranged key column")
    index = DedupIndex(store, SMALL)
    match = ["key", "band"] if table == "bands" else ["key", "lo"]
    for position in (0, 5, 9, 12, 13):  # first, inside runs, after the runs, the one delta, after everything
        ref = partitions[min(position, 12)][0]
        keys = partition_rows(signatures_module.read_signatures(store, ref), ref)[table].select(match)
        ref = ref if position < 13 else PartitionRef("zeta", "s9999")
        found = index.probe(table, keys, ref)
        named = rows.join(partition_table(ref.key for ref, _ in partitions), on="part")
        before = named.filter((pl.col("snapshot") < ref.snapshot) | ((pl.col("snapshot") == ref.snapshot) & (pl.col("source") < ref.source)))
        expected = before.join(keys, on=match, how="semi").select(found.columns)
        assert found.equals(expected.sort([*match, "snapshot", "source", "doc"]))
        assert position == 0 or found.height > 0
        fixed = [*match, "part", "doc"]
        assert index.probe(table, keys, ref, columns=fixed).equals(found.select(*fixed, "partition", "snapshot", "source"))


class CountingStore(LocalStore):
    """A local store counting the files it is asked to open, read, list or write."""

    def __init__(self, url: str, spec) -> None:
        super().__init__(url, spec)
        self.calls: Counter[str] = Counter()

    def local_path(self, key: str) -> str | None:
        self.calls["open"] += 1
        return super().local_path(key)

    def read_bytes(self, key: str) -> bytes:
        self.calls["read"] += 1
        return super().read_bytes(key)

    def exists(self, key: str) -> bool:
        self.calls["exists"] += 1
        return super().exists(key)


def test_coalesce_merges_close_ranges_then_the_closest_up_to_a_count():
    coalesce = dedup.index.coalesce
    assert coalesce([(0, 10), (15, 20), (100, 110)], hole=5, most=8) == [(0, 20), (100, 110)]
    assert coalesce([(50, 60), (0, 10), (5, 12), (30, 31)], hole=0, most=8) == [(0, 12), (30, 31), (50, 60)]
    # at most `most` ranges: the widest gaps stay open
    assert coalesce([(0, 1), (10, 11), (100, 101), (103, 104), (1000, 1001)], hole=0, most=3) == [(0, 11), (100, 104), (1000, 1001)]
    assert coalesce([(i * 10, i * 10 + 1) for i in range(100)], hole=0, most=1) == [(0, 991)]
    assert coalesce([], hole=0, most=2) == []


def test_a_ranged_probe_makes_a_constant_number_of_reads_and_reads_few_bytes_for_few_keys(tmp_path, monkeypatch):
    """As on S3: per run a probe reads the footer, the key file's rows of the candidate row groups and
    the row groups holding matches, at most 1 + 2 x MAX_RANGES ranged reads whatever the run's size; a
    probe of one document's keys reads a small part of a large run, less still without doc_id."""
    monkeypatch.setattr(dedup.index, "ROW_GROUP", 64)
    settings = DedupSettings(index_shards=4, index_max_deltas=4, index_fanout=8)
    partitions = synthetic(32, docs=12)
    store = open_store(str(tmp_path / "store"))
    write_all(store, partitions)
    index_all(store, partitions, list(range(32)), settings)
    ranged = RangedStore(store.url, store.spec)
    index = DedupIndex(ranged, settings)
    manifest = index.manifest()
    assert [len(run["members"]) for run in manifest["runs"]] == [32]
    ref = partitions[-1][0]
    signatures = signatures_module.read_signatures(store, ref)
    for table, match in (("bands", ["key", "band"]), ("exact", ["key", "lo"])):
        keys = partition_rows(signatures, ref)[table].select(match)
        ranged.ranges.clear()
        whole = index.probe(table, keys, None, manifest)
        assert whole.height >= keys.height  # the partition itself is indexed: each of its keys matches
        assert len(ranged.ranges) <= 1 + 2 * dedup.index.MAX_RANGES
        one = index.probe(table, keys.head(1), None, manifest)
        assert one.height >= 1
        ranged.ranges.clear()
        index.probe(table, keys.head(1), None, manifest)
        run = manifest["runs"][0]["files"][table]
        read = sum(size for _, size in ranged.ranges)
        assert len(ranged.ranges) <= 3 and read < (run["bytes"] + run["keys"]["bytes"]) / 2, ([(k[-10:], n) for k, n in ranged.ranges], run)
        # without doc_id (a trace's cluster search): the same rows, and no byte of the doc_id column
        fixed = [*match, "part", "doc"]
        ranged.ranges.clear()
        some = index.probe(table, keys, None, manifest, columns=fixed)
        assert some.equals(whole.select(*fixed, "partition", "snapshot", "source"))
        assert len(ranged.ranges) <= 1 + 2 * dedup.index.MAX_RANGES
        if table == "exact":
            ranged.ranges.clear()
            index.probe(table, keys.head(1), None, manifest, columns=fixed)
            assert sum(size for _, size in ranged.ranges) < read


def test_probe_reads_a_bounded_number_of_files_whatever_the_history(tmp_path):
    """The files a probe opens: the manifest, each run and delta before the probing partition (and its key
    file); the runs are the base-fanout digits of the batches, so their count grows as log(history)."""
    settings = DedupSettings(index_shards=4, index_max_deltas=2, index_fanout=4)
    for count, runs in ((9, 1), (41, 2), (129, 1)):  # 4 = 10, 20 = 110, 64 = 1000 batches in base 4
        partitions = synthetic(count, seed=count, docs=2)
        store = open_store(str(tmp_path / f"n{count}"))
        write_all(store, partitions)
        index_all(store, partitions, list(range(count)), settings)
        ref = partitions[-1][0]
        counting = CountingStore(store.url, store.spec)
        keys = partition_rows(signatures_module.read_signatures(store, ref), ref)["bands"].select("key", "band")
        counting.calls.clear()
        DedupIndex(counting, settings).probe("bands", keys, ref)
        assert len(DedupIndex(store, settings).manifest()["runs"]) == runs
        assert counting.calls == Counter(read=1, open=2 * runs)  # manifest; each run's key and row files, no Parquet file (the one delta is the last partition's)


def test_each_row_is_rewritten_a_logarithmic_number_of_times(tmp_path):
    """Indexing 64 partitions one by one (2 per batch, fanout 2: 32 batches, 6 levels) writes each row at most
    once as a delta and once per level; a two-level base + deltas layout would rewrite the base every 2
    partitions (16 times a row on average)."""
    settings = DedupSettings(index_shards=2, index_max_deltas=2, index_fanout=2)
    partitions = synthetic(64, seed=5, docs=2)
    store = open_store(str(tmp_path / "store"))
    write_all(store, partitions)
    written = 0
    for ref, _ in partitions:
        dedup.sign_partition(store, ref, settings)
        written += dedup.index_partition(store, ref, settings)["rewritten_rows"]
    total = sum(partition_rows(signatures_module.read_signatures(store, ref), ref)[t].height for ref, _ in partitions for t in ("exact", "bands"))
    assert total < written <= (1 + 6) * total

def test_reindexing_a_changed_partition_replaces_its_rows(tmp_path):
    partitions = synthetic(7)
    store = open_store(str(tmp_path / "store"))
    write_all(store, partitions)
    index_all(store, partitions, list(range(7)), SMALL)
    ref, parts = partitions[1]  # a base member
    changed = [[(doc_id, text + " appended words") for doc_id, text in parts[0]]]
    write_all(store, [(ref, changed)])
    dedup.sign_partition(store, ref, SMALL)
    dedup.index_partition(store, ref, SMALL)
    after = PartitionRef("zeta", "s9999")
    keys = all_rows(store, [(ref, changed)], "exact").select("key", "lo")
    assert DedupIndex(store, SMALL).probe("exact", keys, after).height == len(changed[0])
    fresh = open_store(str(tmp_path / "fresh"))
    write_all(fresh, [*partitions[:1], (ref, changed), *partitions[2:]])
    index_all(fresh, [*partitions[:1], (ref, changed), *partitions[2:]], list(range(7)), SMALL)
    assert tree_digest(store.uri("dedup_index")) == tree_digest(fresh.uri("dedup_index"))


def test_a_probe_with_a_manifest_made_stale_by_a_compaction_retries(tmp_path):
    partitions = synthetic(6)
    store = open_store(str(tmp_path / "store"))
    write_all(store, partitions)
    index_all(store, partitions, list(range(5)), SMALL)
    index = DedupIndex(store, SMALL)
    stale = index.manifest()
    index_all(store, partitions, [5], SMALL)  # 6 = 2 x 3: a new base; the files `stale` names are deleted
    ref = partitions[5][0]
    keys = partition_rows(signatures_module.read_signatures(store, ref), ref)["exact"].select("key", "lo")
    assert index.probe("exact", keys, ref, manifest=stale).equals(index.probe("exact", keys, ref))


def test_first_copies_are_the_earliest_in_the_global_order(tmp_path):
    store = open_store(str(tmp_path / "store"))
    text = "the same text in three partitions " * 5
    partitions = [(PartitionRef(source, snapshot), [[(f"{source}-{snapshot}", text)]]) for source, snapshot in (("b", "s1"), ("a", "s2"), ("a", "s1"))]
    write_all(store, partitions)
    index_all(store, partitions, [0, 1, 2], DedupSettings())
    table = signatures_module.read_signatures(store, partitions[1][0])["text_hash"].to_arrow()
    first = DedupIndex(store, DedupSettings()).first_copies(table, PartitionRef("z", "s9"))
    assert first["doc_id"].to_list() == ["a-s1"]
    assert DedupIndex(store, DedupSettings()).first_copies(table, PartitionRef("a", "s1")).height == 0


def test_insert_many_compacts_once(tmp_path, monkeypatch):
    partitions = synthetic(10)
    store = open_store(str(tmp_path / "store"))
    write_all(store, partitions)
    entries = []
    for ref, _ in partitions:
        manifest = dedup.sign_partition(store, ref, SMALL).manifest
        entries.append(IndexEntry(ref, signatures_module.signatures_digest(manifest), lambda ref=ref: partition_rows(signatures_module.read_signatures(store, ref), ref), manifest["documents"]))
    compactions = []
    real = dedup.index.build_run
    monkeypatch.setattr(dedup.index, "build_run", lambda task: compactions.append(task.table) or real(task))
    DedupIndex(store, SMALL).insert_many(entries)
    assert Counter(compactions) == {"exact": 3, "bands": 3}  # 10 = 3 batches (2 runs) + 1 delta, each written once
    one_by_one = open_store(str(tmp_path / "one_by_one"))
    write_all(one_by_one, partitions)
    index_all(one_by_one, partitions, list(range(10)), SMALL)
    assert tree_digest(store.uri("dedup_index")) == tree_digest(one_by_one.uri("dedup_index"))


def make_legacy(store, refs: list[PartitionRef], settings: DedupSettings) -> None:
    """Rewrite the new datasets of these (deduplicated) partitions in the layout of earlier versions: band
    files, shingle sidecars, clusters.parquet and removed.parquet inside deduped_documents."""
    for ref in refs:
        prefix = partition_prefix(DEDUPED, ref)
        manifest = read_manifest(store, prefix)
        signatures = signatures_module.read_signatures(store, ref)
        side = []
        for part in range(len(read_manifest(store, partition_prefix("cleaned_documents", ref))["files"])):
            rows = signatures_module.signature_band_rows(signatures.filter(pl.col("doc") // (1 << 24) == part))
            side.append(write_parquet(store, f"{prefix}/bands-{part:05d}.parquet", rows.to_arrow().cast(signatures_module.BAND_ROWS_SCHEMA)))
            shingles = read_parquet_file(store, f"{partition_prefix('dedup_shingles', ref)}/shingles-{part:05d}.parquet")
            side.append(write_parquet(store, f"{prefix}/shingles-{part:05d}.parquet", shingles, row_group_size=128))
        clusters = pl.from_arrow(read_parquet_file(store, f"{partition_prefix('dedup_clusters', ref)}/clusters.parquet"))
        removed = read_parquet_file(store, f"{partition_prefix('deduped_removed', ref)}/removed.parquet")
        roots = dedup.resolve_roots(store, clusters.select("doc", partition=pl.lit(ref.key)))  # earlier versions stored each document's kept one
        keepers = clusters.select("doc", "doc_id").join(roots, on="doc").select(
            "doc", "doc_id", keeper_partition="root_partition", keeper_doc="root_doc", keeper_id="root_id"
        )
        side.append(write_parquet(store, f"{prefix}/clusters.parquet", keepers.to_arrow()))
        side.append(write_parquet(store, f"{prefix}/removed.parquet", removed))
        parts = len(side) // 2 - 1
        manifest["side_files"] = side
        manifest["band_index"] = {
            "files": [f"bands-{p:05d}.parquet" for p in range(parts)], "shingles": [f"shingles-{p:05d}.parquet" for p in range(parts)],
            "labels": "clusters.parquet", "minhash": {k: v for k, v in settings.model_dump().items() if k in ("ngram_size", "bands", "rows_per_band", "seed", "hash_function", "verify_min_jaccard", "verify_anchors")},
        }
        write_manifest(store, prefix, manifest)
    for folder in ("dedup_signatures", "dedup_shingles", "dedup_index", "dedup_clusters", "deduped_removed"):
        shutil.rmtree(store.uri(folder))


def test_a_store_with_per_partition_band_files_is_compacted_on_first_use(tmp_path, monkeypatch):
    """Earlier partitions deduplicated by a version with per-partition band indexes: the first indexing
    adopts their band files and sidecars into the global index (no MinHash of their texts), and the new
    partition's outputs are what a store built by this version gives."""
    partitions = synthetic(6, docs=8, seed=7)
    settings = DedupSettings()
    reference = open_store(str(tmp_path / "reference"))
    write_all(reference, partitions)
    dedup.deduplicate_in_order(reference, settings=settings)
    legacy = open_store(str(tmp_path / "legacy"))
    write_all(legacy, partitions[:5])
    dedup.deduplicate_in_order(legacy, settings=settings)
    make_legacy(legacy, [ref for ref, _ in partitions[:5]], settings)
    write_all(legacy, partitions[5:])
    signed: list[int] = []
    original = signatures_module.band_hashes
    monkeypatch.setattr(signatures_module, "band_hashes", lambda texts, *a, **k: signed.append(len(texts)) or original(texts, *a, **k))
    result = dedup.deduplicate_partition(legacy, partitions[5][0], settings=settings)
    assert signed == [8]  # the new partition only
    assert sorted(DedupIndex(legacy, settings).manifest()["partitions"]) == sorted(ref.key for ref, _ in partitions)
    expected = read_parquet_file(reference, f"{partition_prefix('deduped_removed', partitions[5][0])}/removed.parquet")
    assert result.removed.num_rows > 0 and result.removed.drop_columns(["source", "snapshot"]).equals(expected)  # the file: no Hive columns


@pytest.mark.parametrize("crash_at", ["_publish", "_sweep"])
def test_a_writer_killed_mid_insert_leaves_nothing_a_rerun_does_not_fix(tmp_path, monkeypatch, crash_at):
    """Killed after writing its runs but before the manifest (the old index stays visible), or after the
    manifest but before deleting what it replaced: indexing again ends in the same bytes as without a crash."""
    partitions = synthetic(6)
    clean = open_store(str(tmp_path / "clean"))
    write_all(clean, partitions)
    index_all(clean, partitions, list(range(6)), SMALL)
    store = open_store(str(tmp_path / "crashed"))
    write_all(store, partitions)
    index_all(store, partitions, list(range(5)), SMALL)
    before = DedupIndex(store, SMALL).manifest()
    real = getattr(DedupIndex, crash_at)

    def killed(self, manifest):
        if crash_at == "_sweep":
            return None  # the manifest is published, nothing replaced is deleted
        raise KeyboardInterrupt  # before the manifest

    monkeypatch.setattr(DedupIndex, crash_at, killed)
    with pytest.raises(KeyboardInterrupt) if crash_at == "_publish" else contextlib.nullcontext():
        index_all(store, partitions, [5], SMALL)  # the 6th partition: a compaction (6 = 2 x 3)
    after_crash = DedupIndex(store, SMALL).manifest()
    assert (after_crash == before) == (crash_at == "_publish")
    assert tree_digest(store.uri("dedup_index")) != tree_digest(clean.uri("dedup_index"))  # leftovers
    monkeypatch.setattr(DedupIndex, crash_at, real)
    index_all(store, partitions, [5], SMALL)
    assert tree_digest(store.uri("dedup_index")) == tree_digest(clean.uri("dedup_index"))


def test_an_index_of_the_two_level_format_is_re_laid_out_by_the_next_insert(tmp_path):
    """Format 1 (a base of shard files holding the first partitions, and deltas): the next insert writes the
    leveled layout a fresh index of the same partitions has, byte for byte."""
    partitions = synthetic(8)
    store = open_store(str(tmp_path / "store"))
    write_all(store, partitions)
    index_all(store, partitions, list(range(7)), SMALL)
    index = DedupIndex(store, SMALL)
    manifest = index.manifest()
    runs = manifest.pop("runs")
    manifest.update(format=1, base={"members": [key for run in runs for key in run["members"]], "files": {
        table: [{**run["files"][table], "shard": shard} for shard, run in enumerate(runs)] for table in ("exact", "bands")
    }})
    store.write_bytes(f"{index.prefix}/_manifest.json", json.dumps(manifest).encode())
    assert index.probe("exact", all_rows(store, partitions[:1], "exact").select("key", "lo"), partitions[7][0]).height > 0  # format 1 still probed
    index_all(store, partitions, [7], SMALL)
    fresh = open_store(str(tmp_path / "fresh"))
    write_all(fresh, partitions)
    index_all(fresh, partitions, list(range(8)), SMALL)
    assert index.manifest()["format"] == 2
    assert tree_digest(store.uri("dedup_index")) == tree_digest(fresh.uri("dedup_index"))
