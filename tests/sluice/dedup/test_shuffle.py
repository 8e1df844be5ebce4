"""Dedup's shuffle (sluice.dedup.shuffle): candidate pairs per band-hash range, verified per pair bucket,
give what one frame over the whole partition gives, whatever the number of ranges."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest

import sluice.dedup as dedup
from benchmarks.dedup_oracle import stored_partitions, write_all
from sluice.config import DedupSettings
from sluice.dedup.candidates import candidate_pairs, first_members
from sluice.dedup.schemas import BANDS, CLUSTERS, CLUSTERS_FILE, HASHES, SIGNATURES, PartitionOrdinals
from sluice.dedup.shuffle import RangeTask, bucket_pairs, range_pairs
from sluice.dedup.signatures import read_signatures, signature_band_rows
from sluice.io.layout import MANIFEST, partition_prefix, read_manifest
from sluice.io.storage import open_store
from tests.sluice.dedup.test_dedup import ORDER, long_texts, planted, run_incremental  # noqa: F401 - module-scoped fixtures


def one_frame_pairs(store, ref, settings: DedupSettings, partitions: list[str]) -> set[tuple[int, int]]:
    """The candidate pairs of a partition as one frame over all its band rows (the step before the shuffle)."""
    current = signature_band_rows(read_signatures(store, ref)).with_columns(partition=pl.lit(ref.key))
    earlier = dedup.DedupIndex(store, settings).probe("bands", current.select("band", key="hash"), ref).rename({"key": "hash"})
    earlier = first_members(earlier, settings.verify_anchors).select("band", "hash", "partition", "doc")
    ordinals = PartitionOrdinals(partitions)
    members = ordinals.nodes(pl.concat([current.select("band", "hash", "partition", "doc"), earlier]))
    pairs = candidate_pairs(members, ordinals.ordinal[ref.key] << PartitionOrdinals.SHIFT, settings.verify_anchors)
    return set(pairs.iter_rows())


@pytest.mark.parametrize("ranges", [1, 4, 64])
def test_range_tasks_pair_what_one_frame_pairs(planted, tmp_path, ranges):  # noqa: F811
    settings = DedupSettings(band_ranges=ranges)
    store = open_store(str(tmp_path / "store"))
    write_all(store, stored_partitions(planted))
    run_incremental(store, settings)
    ref = ORDER[3]
    partitions = [key.key for key in ORDER]
    results = [range_pairs(RangeTask(store.uri(), ref, number, settings, tuple(partitions))) for number in range(ranges)]
    keys = [result["key"] for result in results if result["key"] is not None]
    shuffled = [bucket_pairs(store, keys, bucket) for bucket in range(ranges)]
    union = set().union(*(set(frame.iter_rows()) for frame in shuffled))
    expected = one_frame_pairs(store, ref, settings, partitions)
    assert union == expected and len(expected) >= 5  # cross-partition and within-partition pairs
    assert sum(frame.height for frame in shuffled) == len(expected)  # a pair is in one bucket only
    rows = signature_band_rows(read_signatures(store, ref)).height
    assert sum(result["band_rows"] for result in results) == rows
    if ranges > 1:
        assert max(result["band_rows"] for result in results) < rows  # no task held the partition's rows


@pytest.mark.parametrize("documents", [0, 1, 1_198_372, 1_198_373, 10**4, 10**6, 10**8, 3 * 10**9])
def test_automatic_ranges_are_the_fewest_that_keep_a_range_under_its_target_rows(documents):
    settings = DedupSettings()
    assert settings.band_ranges is None  # automatic by default
    expected = 16  # the lower bound; then doubled while a range would hold more than the target
    while documents * settings.bands > expected * settings.band_rows_per_range and expected < 4096:
        expected *= 2
    assert settings.ranges_for(documents) == expected
    assert settings.for_partition(documents).band_ranges == expected
    assert DedupSettings(band_ranges=8).ranges_for(documents) == 8  # a set value is kept


def test_decisions_do_not_depend_on_the_number_of_ranges(planted, tmp_path):  # noqa: F811
    outputs = []
    # 1, 16, 128 ranges set, and automatic ranges with a target of 4 band rows (so that they differ per partition).
    for name, settings in [("1", DedupSettings(band_ranges=1)), ("16", DedupSettings(band_ranges=16)),
                           ("128", DedupSettings(band_ranges=128)), ("auto", DedupSettings(band_rows_per_range=4))]:
        store = open_store(str(tmp_path / f"r{name}"))
        write_all(store, stored_partitions(planted))
        removed = run_incremental(store, settings)
        signed = [read_manifest(store, partition_prefix(SIGNATURES, ref)) for ref in ORDER]
        assert [m["band_ranges"] for m in signed] == [settings.ranges_for(m["documents"]) for m in signed]
        if name == "auto":
            assert len({m["band_ranges"] for m in signed}) > 1 and min(m["band_ranges"] for m in signed) > 16
        clusters = [store.read_bytes(f"{partition_prefix(CLUSTERS, ref)}/{CLUSTERS_FILE}") for ref in ORDER]
        outputs.append(([removed[ref.key].removed for ref in ORDER], clusters))
        names = sorted(key.rsplit("/", 1)[-1] for key in store.list_files(partition_prefix(CLUSTERS, ORDER[3])))
        assert names == sorted([CLUSTERS_FILE, MANIFEST])  # the range tasks' pair and exact files are gone once published
    for removed, clusters in outputs[1:]:
        assert clusters == outputs[0][1]
        assert all(a.equals(b) for a, b in zip(removed, outputs[0][0], strict=True))


def test_partitions_signed_without_range_sidecars_read_their_signatures(planted, tmp_path):  # noqa: F811
    """A store signed before the range sidecars (no dedup_bands, no dedup_hashes): clustering reads each
    range from the signature files and decides the same."""
    store = open_store(str(tmp_path / "store"))
    write_all(store, stored_partitions(planted))
    run_incremental(store)
    expected = [store.read_bytes(f"{partition_prefix(CLUSTERS, ref)}/{CLUSTERS_FILE}") for ref in ORDER]
    for ref in ORDER:
        prefix = partition_prefix(SIGNATURES, ref)
        manifest = read_manifest(store, prefix)
        sidecars = {partition_prefix(BANDS, ref), partition_prefix(HASHES, ref)}
        manifest["side_files"] = [entry for entry in manifest["side_files"] if entry["prefix"] not in sidecars]
        store.write_bytes(f"{prefix}/{MANIFEST}", json.dumps(manifest).encode())
        for folder in sidecars:
            shutil.rmtree(store.uri(folder))
    for ref in ORDER:
        dedup.cluster_partition(store, ref)
    assert [store.read_bytes(f"{partition_prefix(CLUSTERS, ref)}/{CLUSTERS_FILE}") for ref in ORDER] == expected


def test_regroup_cuts_tables_into_row_groups_of_the_given_size():
    """dedup_clusters is written part by part: regrouped, its row groups are those of one table written whole."""
    import pyarrow as pa

    from sluice.dedup.partition import regroup

    schema = pa.schema([pa.field("x", pa.int64())])
    tables = [pa.table({"x": list(range(start, stop))}, schema=schema) for start, stop in [(0, 3), (3, 3), (3, 11), (11, 12)]]
    out = list(regroup(iter(tables), 4, schema))
    assert [t.num_rows for t in out] == [4, 4, 4]
    assert pa.concat_tables(out).column("x").to_pylist() == list(range(12))
    assert [t.num_rows for t in regroup(iter(tables[:3]), 4, schema)] == [4, 4, 3]
    empty = list(regroup(iter([]), 4, schema))
    assert len(empty) == 1 and empty[0].num_rows == 0  # one empty row group, as pyarrow writes an empty table


@pytest.mark.parametrize("ranges", [1, 16])
def test_the_no_duplicates_check_by_range_counts_what_the_whole_check_counts(planted, tmp_path, ranges):  # noqa: F811
    import pyarrow as pa

    settings = DedupSettings(band_ranges=ranges)
    store = open_store(str(tmp_path / "store"))
    write_all(store, stored_partitions(planted))
    results = run_incremental(store, settings)
    for ref in ORDER:
        result = results[ref.key]
        assert result.kept_duplicates == dedup.remaining_exact_duplicates(store, ref, result.kept_hashes, settings) == (0, {})
        # Every removed document counted as kept: the removed copies' hashes are duplicates again.
        every = pa.chunked_array([result.kept_hashes, result.removed.column("text_hash")])
        whole = dedup.remaining_exact_duplicates(store, ref, every, settings)
        assert dedup.kept_duplicates(store, ref, [], settings) == whole
    assert whole != (0, {})  # the last partition holds exact copies of earlier documents


def test_a_partition_signed_without_range_sidecars_is_signed_again_to_the_same_signatures(planted, tmp_path):  # noqa: F811
    """The next signing of a partition signed by an earlier version adds the sidecars; its signature files
    (what the index's digest covers) come out the same bytes."""
    store = open_store(str(tmp_path / "store"))
    write_all(store, stored_partitions(planted))
    ref = ORDER[0]
    first = dedup.sign_partition(store, ref, DedupSettings())
    prefix = partition_prefix(SIGNATURES, ref)
    before = {entry["key"]: store.read_bytes(f"{prefix}/{entry['key']}") for entry in first.manifest["files"]}
    stripped = {**first.manifest, "side_files": [e for e in first.manifest["side_files"] if e["prefix"] not in (partition_prefix(BANDS, ref), partition_prefix(HASHES, ref))]}
    store.write_bytes(f"{prefix}/{MANIFEST}", json.dumps(stripped).encode())
    again = dedup.sign_partition(store, ref, DedupSettings())
    assert again.origin == "signed" and again.manifest["side_files"] == first.manifest["side_files"]
    assert {entry["key"]: store.read_bytes(f"{prefix}/{entry['key']}") for entry in again.manifest["files"]} == before
    assert dedup.sign_partition(store, ref, DedupSettings()).origin == "unchanged"
