"""Mixes: exact token targets by weight, deterministic, epoch cap enforced, validation and decontamination,
copies of an upsampled document never in one sample, and the binary index equal to its documented layout.

Oracles are independent of the builder: documents are traced back through the shards' own `.idx` offsets
and `.docs.parquet` tables, and the index file is read with numpy from the layout in `sluice.mix.index`."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from sluice.io.layout import PartitionRef, partition_prefix, write_manifest
from sluice.mix import MixError, build_mix, mix_prefix, targets
from sluice.tokens.shards import DOCS_SCHEMA, ShardWriter
from tests.support.mix_fixture import mix_shards


def test_targets_split_budget_exactly_by_weight():
    wanted = targets({"a": 0.7, "b": 0.2, "c": 0.1}, 1001)
    assert sum(wanted.values()) == 1001
    assert wanted == {"a": 701, "b": 200, "c": 100}


# --- whole mixes over tokenized partitions written to a local store -------------------------------------

def write_partition(store, source, snapshot, documents, vocab_size=1000, tokenizer="tok-a", shards=1):
    """A tokenized_shards partition of `documents`: list of (doc_id, language, n_tokens), split over `shards`
    shards; token i of a document is a value derived from its position in the list."""
    prefix = partition_prefix("tokenized_shards", PartitionRef(source, snapshot))
    folder = tempfile.mkdtemp()
    files, entries = [], []
    bounds = np.linspace(0, len(documents), shards + 1).astype(int)
    for number in range(shards):
        name = f"shard-00000-{number:02d}"
        part = documents[bounds[number] : bounds[number + 1]]
        writer = ShardWriter(folder, name, vocab_size)
        for index, (_, _, n_tokens) in enumerate(part, start=int(bounds[number])):
            writer.add(np.full(n_tokens - 1, index % (vocab_size - 1), np.int64), eos_id=vocab_size - 1)
        writer.close()
        docs = pa.table(
            {
                "doc_id": [d[0] for d in part],
                "doc_hash": pa.array([xxhash.xxh3_64_intdigest(d[0].encode()) for d in part], pa.uint64()),
                "language": pa.array([d[1] for d in part], pa.string()).dictionary_encode(),
            },
            schema=DOCS_SCHEMA,
        )
        pq.write_table(docs, os.path.join(folder, f"{name}.docs.parquet"))
        for file in (f"{name}.bin", f"{name}.idx", f"{name}.docs.parquet"):
            files.append({"key": file, "bytes": os.path.getsize(os.path.join(folder, file)), "sha256": "-"})
            store.put_file(os.path.join(folder, file), f"{prefix}/{file}")
        entries.append({"name": name, "documents": len(part), "tokens": writer.tokens})
    write_manifest(
        store,
        prefix,
        {
            "dtype": "uint16", "vocab_size": vocab_size, "eos_id": vocab_size - 1, "tokenizer_sha256": tokenizer,
            "documents": len(documents), "tokens": sum(e["tokens"] for e in entries), "files": files, "shards": entries,
        },
    )


@pytest.fixture
def store(tmp_path):
    from sluice.io.storage import open_store

    return open_store(str(tmp_path / "data"))


def reader(store):
    return lambda key: store.local_path(key)


def mix_settings(**values):
    from sluice.config import MixSettings

    return MixSettings(**{"token_budget": 20_000, "sequence_length": 64, "seed": 5, **values})


def read_split(store, manifest, split):
    return pq.read_table(store.local_path(f"{mix_prefix(manifest['mix'])}/{manifest['splits'][split]['parquet']}"))


def traced(store, manifest, ranges) -> dict[str, np.ndarray]:
    """Per range, re-derived from the shards: document index (last .idx offset <= start), doc_id, language
    and source, and whether the range stays inside its document."""
    shard_ids, starts, lengths = (ranges.column(c).to_numpy() for c in ("shard", "start", "length"))
    documents = np.zeros(len(shard_ids), np.int64)
    doc_ids = np.empty(len(shard_ids), object)
    languages = np.empty(len(shard_ids), object)
    inside = np.zeros(len(shard_ids), bool)
    shards = mix_shards(store, manifest)
    for shard_id in np.unique(shard_ids):
        shard = shards[shard_id]
        offsets = np.fromfile(store.local_path(f"{shard['prefix']}/{shard['name']}.idx"), "<u8").astype(np.int64)
        docs = pq.read_table(store.local_path(f"{shard['prefix']}/{shard['name']}.docs.parquet"))
        mask = shard_ids == shard_id
        found = np.searchsorted(offsets, starts[mask], side="right") - 1
        documents[mask] = found
        inside[mask] = (starts[mask] == offsets[found]) & (lengths[mask] <= offsets[found + 1] - offsets[found]) & (lengths[mask] > 0)
        doc_ids[mask] = np.asarray(docs.column("doc_id").to_pylist(), object)[found]
        languages[mask] = np.asarray(docs.column("language").cast(pa.string()).to_pylist(), object)[found]
    sources = np.array([shards[s]["source"] for s in shard_ids.tolist()], object)
    return {"document": documents, "doc_id": doc_ids, "language": languages, "source": sources, "inside": inside, "length": lengths}


def shares(traced_ranges, component_of) -> dict[str, float]:
    names = np.array([component_of(s, lang) for s, lang in zip(traced_ranges["source"], traced_ranges["language"], strict=True)], object)
    total = traced_ranges["length"].sum()
    return {name: float(traced_ranges["length"][names == name].sum() / total) for name in set(names.tolist())}


def test_skewed_sources_realize_their_token_weights(store):
    # 'big' has 40x the tokens of 'small'; the mix asks for 30 % small, so small repeats 2x.
    write_partition(store, "big", "s1", [(f"b{i}", "en", 400) for i in range(100)])
    write_partition(store, "small", "s1", [(f"s{i}", "en", 100) for i in range(30)])
    manifest = build_mix(store, "skewed", mix_settings(weights={"big": 0.7, "small": 0.3}, max_epochs=3))
    ranges = traced(store, manifest, read_split(store, manifest, "train"))
    assert ranges["inside"].all()  # every range is a document or its head
    assert int(ranges["length"].sum()) == manifest["tokens"] == 20_000
    realized = shares(ranges, lambda source, _: source)
    assert realized == pytest.approx({"big": 0.7, "small": 0.3}, abs=0.01)
    assert manifest["checks"]["realized_shares"] == pytest.approx(realized, abs=1e-12)
    small = next(row for row in manifest["sources"] if row["component"] == "small")
    assert small["epochs"] == pytest.approx(6000 / 3000)
    copies = np.unique(ranges["doc_id"][ranges["source"] == "small"], return_counts=True)[1]
    assert set(copies.tolist()) == {2}  # two whole epochs: every small document exactly twice


def test_a_fractional_epoch_takes_a_seeded_subset_and_cuts_the_last_document(store):
    write_partition(store, "web", "s1", [(f"w{i}", "en", 30 + i % 17) for i in range(300)])
    available = sum(30 + i % 17 for i in range(300))
    budget = int(available * 2.5) + 7
    first = build_mix(store, "a", mix_settings(weights={"web": 1.0}, token_budget=budget, max_epochs=3))
    again = build_mix(store, "b", mix_settings(weights={"web": 1.0}, token_budget=budget, max_epochs=3))
    other = build_mix(store, "c", mix_settings(weights={"web": 1.0}, token_budget=budget, max_epochs=3, seed=6))
    ranges = traced(store, first, read_split(store, first, "train"))
    assert int(ranges["length"].sum()) == budget
    counts = np.unique(ranges["doc_id"], return_counts=True)[1]
    assert set(counts.tolist()) == {2, 3} and 0.4 < (counts == 3).mean() < 0.6  # half the documents a third time
    full = ranges["length"] == np.array([30 + int(doc[1:]) % 17 for doc in ranges["doc_id"]])
    assert (~full).sum() <= 1  # at most one range is cut
    same = read_split(store, again, "train")
    assert same.select(["shard", "start", "length"]).equals(read_split(store, first, "train").select(["shard", "start", "length"]))
    assert not read_split(store, other, "train").column("start").equals(read_split(store, first, "train").column("start"))


def test_upsampling_cap_error_names_the_source(store):
    write_partition(store, "big", "s1", [(f"b{i}", "en", 400) for i in range(100)])
    write_partition(store, "small", "s1", [(f"s{i}", "en", 100) for i in range(10)])  # 1000 tokens
    with pytest.raises(MixError, match=r"source 'small'.*6000 tokens.*1000.*6\.00 epochs.*max_epochs=4"):
        build_mix(store, "capped", mix_settings(weights={"big": 0.7, "small": 0.3}))


def test_validation_split_is_disjoint_from_training_and_stable_across_seeds(store):
    write_partition(store, "web", "s1", [(f"w{i}", "en", 50) for i in range(400)], shards=3)
    manifest = build_mix(store, "val", mix_settings(weights={"web": 1.0}, validation_share=0.1))
    train = set(traced(store, manifest, read_split(store, manifest, "train"))["doc_id"].tolist())
    validation_ranges = traced(store, manifest, read_split(store, manifest, "validation"))
    validation = set(validation_ranges["doc_id"].tolist())
    assert train and validation and not train & validation
    assert 20 <= len(validation) <= 60  # ~10 % of 400 documents, by hash
    # Each held-out document appears once, whole.
    assert len(validation_ranges["doc_id"]) == len(validation) and set(validation_ranges["length"].tolist()) == {50}
    # The check's values: every validation id hash is below every training one.
    assert manifest["checks"]["validation_max_doc_hash"] < manifest["checks"]["training_min_doc_hash"]
    # Another seed shuffles differently but holds out the same documents.
    other = build_mix(store, "val2", mix_settings(weights={"web": 1.0}, validation_share=0.1, seed=99))
    assert set(traced(store, other, read_split(store, other, "validation"))["doc_id"].tolist()) == validation


def test_flagged_documents_are_removed_from_both_splits(store):
    write_partition(store, "web", "s1", [(f"w{i}", "en", 50) for i in range(200)])
    flagged = pa.table({"doc_id": ["w7", "w123", "not-in-any-shard"], "matched_ngrams": [3, 1, 2]})
    seen = []

    def flags(ref):
        seen.append(ref.key)
        return flagged

    manifest = build_mix(store, "clean", mix_settings(weights={"web": 1.0}, validation_share=0.2), flags=flags)
    used = set(traced(store, manifest, read_split(store, manifest, "train"))["doc_id"].tolist())
    used |= set(traced(store, manifest, read_split(store, manifest, "validation"))["doc_id"].tolist())
    assert seen == ["web/s1"]
    assert {"w7", "w123"}.isdisjoint(used) and len(used) == 198  # every other document is used by one split
    assert manifest["decontamination"]["removed_documents"] == 2
    assert sum(row["contaminated_documents"] for row in manifest["sources"]) == 2
    assert manifest["checks"]["flagged_in_index"] == 0 and manifest["checks"]["flagged_documents"] == 2
    removed = pq.read_table(store.local_path("mixed_contaminated/mix=clean/contaminated.parquet"))
    assert removed.column("doc_id").to_pylist() == ["w123", "w7"] and removed.column("matched_ngrams").to_pylist() == [1, 3]


def test_language_components_are_weighted_separately(store):
    docs = [(f"w{i}", "en" if i % 4 else "de", 80) for i in range(400)]  # 3:1 en:de
    write_partition(store, "web", "s1", docs)
    manifest = build_mix(store, "langs", mix_settings(weights={"web:en": 0.5, "web:de": 0.5}))
    ranges = traced(store, manifest, read_split(store, manifest, "train"))
    assert shares(ranges, lambda source, language: f"{source}:{language}") == pytest.approx({"web:en": 0.5, "web:de": 0.5}, abs=0.01)


def test_mixing_refuses_shards_of_another_tokenizer(store):
    write_partition(store, "web", "s1", [(f"w{i}", "en", 50) for i in range(400)], tokenizer="aaaa")
    with pytest.raises(MixError, match="re-materialize tokenized_shards"):
        build_mix(store, "m", mix_settings(weights={"web": 1.0}), tokenizer_sha256="bbbb")
    write_partition(store, "other", "s1", [(f"o{i}", "en", 50) for i in range(400)], tokenizer="cccc")
    with pytest.raises(MixError, match="same tokenizer"):
        build_mix(store, "m", mix_settings(weights={"web": 0.5, "other": 0.5}))


def test_same_inputs_give_the_same_index_bytes(store):
    from pathlib import Path

    write_partition(store, "web", "s1", [(f"w{i}", "en", 30 + i % 17) for i in range(300)])
    settings = mix_settings(weights={"web": 1.0}, validation_share=0.05, token_budget=25_000, max_epochs=3)
    build_mix(store, "a", settings)
    build_mix(store, "b", settings)
    indexes = [("mixed_index", f"{split}.idx") for split in ("train", "validation")] + [("mixed_index", "shards.parquet")]
    for folder, name in [("mixed_dataset", f"{split}.parquet") for split in ("train", "validation")] + indexes:
        assert Path(store.local_path(f"{folder}/mix=a/{name}")).read_bytes() == Path(store.local_path(f"{folder}/mix=b/{name}")).read_bytes()


def index_by_layout(path: str) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
    """Header, records and sample table read with numpy from the layout documented in sluice.mix.index."""
    header_type = np.dtype([("magic", "S8"), ("version", "<u4"), ("record_bytes", "<u4"), ("ranges", "<u8"), ("tokens", "<u8"),
                            ("sequence_length", "<u8"), ("samples", "<u8"), ("records_at", "<u8"), ("samples_at", "<u8")])
    record_type = np.dtype([("offset", "<u8"), ("start", "<u8"), ("shard", "<u4"), ("doc", "<u4"), ("length", "<u4"), ("component", "<u2"), ("copy", "<u2")])
    header = np.fromfile(path, header_type, count=1)[0]
    assert header["magic"] == b"SLUICEMX" and header["version"] == 1 and header["record_bytes"] == 32
    records = np.memmap(path, record_type, "r", offset=int(header["records_at"]), shape=(int(header["ranges"]),))
    samples = np.memmap(path, "<u8", "r", offset=int(header["samples_at"]), shape=(int(header["samples"]) + 1,))
    return {name: int(header[name]) for name in ("ranges", "tokens", "sequence_length", "samples")}, np.array(records), np.array(samples)


def test_the_index_file_holds_the_ranges_in_its_documented_layout(store):
    write_partition(store, "web", "s1", [(f"w{i}", "en" if i % 3 else "fr", 20 + i % 90) for i in range(500)], shards=4)
    manifest = build_mix(store, "lay", mix_settings(weights={"web:en": 0.6, "web:fr": 0.4}, token_budget=30_000, validation_share=0.1, max_epochs=3))
    for split in ("train", "validation"):
        header, records, samples = index_by_layout(store.local_path(manifest["splits"][split]["index"]))
        table = read_split(store, manifest, split)
        assert header["ranges"] == table.num_rows == manifest["splits"][split]["ranges_count"]
        assert header["tokens"] == manifest["splits"][split]["tokens"] == int(records["length"].sum())
        assert header["samples"] == manifest["splits"][split]["samples"] == (header["tokens"] - 1) // 64
        for name in ("offset", "shard", "doc", "start", "length", "copy"):
            assert np.array_equal(records[name].astype(np.int64), table.column(name).to_numpy().astype(np.int64)), name
        components = np.array(manifest["components"], object)[records["component"]]
        assert components.tolist() == table.column("component").cast(pa.string()).to_pylist()
        # offsets are the running sum of lengths; doc is the range's document in its shard
        assert np.array_equal(records["offset"].astype(np.int64), np.concatenate([[0], np.cumsum(records["length"].astype(np.int64))[:-1]]))
        assert np.array_equal(records["doc"].astype(np.int64), traced(store, manifest, table)["document"])
        # sample s's entry is the record holding token s*L
        points = np.arange(header["samples"] + 1) * 64
        holders = np.searchsorted(records["offset"].astype(np.int64), points, side="right") - 1
        assert np.array_equal(samples.astype(np.int64), holders)


def same_sample_copies(records: np.ndarray, sequence_length: int) -> int:
    """Oracle: for every sample window [s*L, s*L + L], how many documents appear in it more than once."""
    offsets = records["offset"].astype(np.int64)
    ends = offsets + records["length"].astype(np.int64)
    samples = (int(ends[-1]) - 1) // sequence_length
    repeated = 0
    for sample in range(samples):
        begin, last = sample * sequence_length, sample * sequence_length + sequence_length
        inside = (offsets <= last) & (ends > begin)
        keys = list(zip(records["shard"][inside].tolist(), records["doc"][inside].tolist(), strict=True))
        repeated += len(keys) - len(set(keys))
    return repeated


def test_copies_of_an_upsampled_document_never_share_a_sample(store):
    """A small source repeated almost four times next to a large one, with documents shorter than a sample:
    a random interleaving puts two copies of some document into one sample (issue 18 found 2 of 115 adjacent
    range pairs identical in the demo mix); the mix must not."""
    write_partition(store, "big", "s1", [(f"b{i}", "en", 40 + i % 50) for i in range(300)])
    write_partition(store, "small", "s1", [(f"s{i}", "en", 20 + i % 30) for i in range(12)])  # ~400 tokens
    small_tokens = sum(20 + i % 30 for i in range(12))
    for seed in range(4):
        settings = mix_settings(weights={"big": 0.9, "small": 0.1}, token_budget=int(small_tokens * 3.9 / 0.1), max_epochs=4, seed=seed, sequence_length=256)
        manifest = build_mix(store, f"copies{seed}", settings)
        _, records, _ = index_by_layout(store.local_path(manifest["splits"]["train"]["index"]))
        assert same_sample_copies(records, 256) == 0
        assert manifest["checks"]["copies_in_one_sample"] == 0


def test_an_impossible_separation_fails_the_check_instead_of_hiding_it(store):
    """One 30-token document repeated 4 times in a 120-token mix of 256-token samples cannot be kept apart."""
    write_partition(store, "tiny", "s1", [("t0", "en", 30)])
    manifest = build_mix(store, "cramped", mix_settings(weights={"tiny": 1.0}, token_budget=120, max_epochs=4, sequence_length=64))
    _, records, _ = index_by_layout(store.local_path(manifest["splits"]["train"]["index"]))
    assert same_sample_copies(records, 64) > 0 and manifest["checks"]["copies_in_one_sample"] > 0


def test_each_component_is_spread_evenly_over_the_stream(store):
    """Upsampled and fractional epochs are placed by key, not appended: every tenth of the stream holds each
    component at about its weight."""
    write_partition(store, "big", "s1", [(f"b{i}", "en", 20) for i in range(20_000)])
    write_partition(store, "small", "s1", [(f"s{i}", "en", 20) for i in range(2000)])
    # big: 0.75 of its documents once; small: 2.5 epochs (two whole, half a third). ~20,000 ranges, so a tenth's
    # share of small has a standard deviation of ~0.01: 0.04 is four of them.
    manifest = build_mix(store, "even", mix_settings(weights={"big": 0.75, "small": 0.25}, token_budget=400_000, max_epochs=3))
    ranges = read_split(store, manifest, "train")
    offsets, lengths = ranges.column("offset").to_numpy(), ranges.column("length").to_numpy()
    shards = mix_shards(store, manifest)
    small = np.array([shards[s]["source"] == "small" for s in ranges.column("shard").to_pylist()])
    tenth = offsets * 10 // manifest["tokens"]
    for part in range(10):
        mine = tenth == part
        assert lengths[mine & small].sum() / lengths[mine].sum() == pytest.approx(0.25, abs=0.04)


def test_the_split_stream_is_its_ranges_concatenated(store):
    from sluice.mix import iter_split_tokens

    write_partition(store, "web", "s1", [(f"w{i}", "en", 30 + i % 17) for i in range(300)])
    manifest = build_mix(store, "exp", mix_settings(weights={"web": 1.0}, token_budget=5000))
    stream = np.concatenate(list(iter_split_tokens(store, manifest, "train", reader(store))))
    # The stream, independently: each range's tokens from the shard files, in the Parquet view's order.
    ranges = read_split(store, manifest, "train")
    shard = mix_shards(store, manifest)[0]
    tokens = np.fromfile(store.local_path(f"{shard['prefix']}/{shard['name']}.bin"), "<u2")
    expected = np.concatenate([tokens[a : a + n] for a, n in zip(ranges.column("start").to_pylist(), ranges.column("length").to_pylist(), strict=True)])
    assert len(stream) == 5000 and np.array_equal(stream, expected)


def test_the_mix_is_a_parquet_dataset(store):
    """mixed_dataset/ reads as one Hive-partitioned dataset (mix from the folder, split as a column)."""
    import polars as pl

    write_partition(store, "web", "s1", [(f"w{i}", "en", 40) for i in range(300)])
    build_mix(store, "one", mix_settings(weights={"web": 1.0}, token_budget=4000, validation_share=0.1))
    build_mix(store, "two", mix_settings(weights={"web": 1.0}, token_budget=6000))
    frame = pl.scan_parquet(store.local_path("mixed_dataset") + "/**/*.parquet", hive_partitioning=True).collect()
    tokens = frame.filter(pl.col("split") == "train").group_by("mix").agg(pl.col("length").sum()).sort("mix")
    assert tokens.rows() == [("one", 4000), ("two", 6000)]


def test_many_small_buckets_give_the_same_ranges_and_keep_copies_apart_across_bucket_edges(store, monkeypatch):
    """The external sort with buckets of 37 ranges (copies near a bucket edge are checked against the ranges
    already written) gives the same ranges as one bucket, the index still matches its Parquet view, and no
    document repeats inside a sample."""
    import sluice.mix.order

    write_partition(store, "big", "s1", [(f"b{i}", "en", 40 + i % 50) for i in range(300)], shards=2)
    write_partition(store, "small", "s1", [(f"s{i}", "en", 20 + i % 30) for i in range(12)])
    small_tokens = sum(20 + i % 30 for i in range(12))
    settings = mix_settings(weights={"big": 0.9, "small": 0.1}, token_budget=int(small_tokens * 3.9 / 0.1), max_epochs=8, sequence_length=256, validation_share=0.1)
    whole = build_mix(store, "whole", settings)
    monkeypatch.setattr(sluice.mix.order, "BUCKET_ROWS", 37)
    pieces = build_mix(store, "pieces", settings)
    for split in ("train", "validation"):
        one, many = read_split(store, whole, split), read_split(store, pieces, split)
        assert many.num_rows > 37  # several buckets
        key = ["shard", "doc", "copy", "length"]
        assert sorted(one.select(key).to_pylist(), key=str) == sorted(many.select(key).to_pylist(), key=str)
        _, records, _ = index_by_layout(store.local_path(pieces["splits"][split]["index"]))
        assert np.array_equal(records["doc"].astype(np.int64), many.column("doc").to_numpy())
        assert same_sample_copies(records, 256) == 0
    assert pieces["checks"]["copies_in_one_sample"] == 0
