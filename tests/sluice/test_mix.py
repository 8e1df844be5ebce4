"""Mix selection: exact token targets by weight, deterministic, epoch cap enforced."""

from __future__ import annotations

import numpy as np
import pytest

from sluice.mix import MixError, SourceDocs, _targets, select_source


def docs(name, lengths):
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return SourceDocs(name, np.zeros(len(lengths), np.int32), starts, lengths)


def test_targets_split_budget_exactly_by_weight():
    targets = _targets({"a": 0.7, "b": 0.2, "c": 0.1}, 1001)
    assert sum(targets.values()) == 1001
    assert targets == {"a": 701, "b": 200, "c": 100}


def test_selection_meets_target_exactly_and_is_deterministic():
    source = docs("web", [100, 250, 30, 400, 75] * 20)
    first = select_source(source, 3333, seed=7, max_epochs=2)
    again = select_source(source, 3333, seed=7, max_epochs=2)
    other = select_source(source, 3333, seed=8, max_epochs=2)
    assert int(first[2].sum()) == 3333
    assert all(np.array_equal(x, y) for x, y in zip(first[:3], again[:3], strict=True))
    assert not np.array_equal(first[1], other[1])
    # Every range lies inside its document.
    by_start = dict(zip(source.starts.tolist(), source.lengths.tolist(), strict=True))
    assert all(0 < length <= by_start[start] for start, length in zip(first[1].tolist(), first[2].tolist(), strict=True))


def test_skewed_source_is_upsampled_within_the_epoch_cap():
    small = docs("small", [10] * 10)  # 100 tokens
    _, _, lengths, epochs = select_source(small, 250, seed=1, max_epochs=3)
    assert int(lengths.sum()) == 250 and epochs == pytest.approx(2.5)


def test_weight_beyond_the_epoch_cap_is_a_clear_error():
    small = docs("small", [10] * 10)
    with pytest.raises(MixError, match=r"source 'small'.*400 tokens.*100.*4\.00 epochs.*max_epochs=3"):
        select_source(small, 400, seed=1, max_epochs=3)


# --- whole mixes over tokenized partitions written to a local store -------------------------------------

def write_partition(store, source, snapshot, documents, vocab_size=1000, tokenizer="tok-a"):
    """A tokenized_shards partition of `documents`: list of (doc_id, language, n_tokens); token i of a
    document is a value derived from its position in the list (so ranges can be traced back)."""
    import os
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    from sluice.layout import PartitionRef, partition_prefix, write_manifest
    from sluice.shards import DOCS_SCHEMA, ShardWriter

    prefix = partition_prefix("tokenized_shards", PartitionRef(source, snapshot))
    folder = tempfile.mkdtemp()
    writer = ShardWriter(folder, "shard-00000-00", vocab_size)
    for number, (_, _, n_tokens) in enumerate(documents):
        writer.add(np.full(n_tokens - 1, number % (vocab_size - 1), np.int64), eos_id=vocab_size - 1)
    writer.close()
    import xxhash

    docs = pa.table(
        {
            "doc_id": [d[0] for d in documents],
            "doc_hash": pa.array([xxhash.xxh3_64_intdigest(d[0].encode()) for d in documents], pa.uint64()),
            "language": pa.array([d[1] for d in documents], pa.string()).dictionary_encode(),
        },
        schema=DOCS_SCHEMA,
    )
    pq.write_table(docs, os.path.join(folder, "shard-00000-00.docs.parquet"))
    files = []
    for name in ("shard-00000-00.bin", "shard-00000-00.idx", "shard-00000-00.docs.parquet"):
        files.append({"key": name, "bytes": os.path.getsize(os.path.join(folder, name)), "sha256": "-"})
        store.put_file(os.path.join(folder, name), f"{prefix}/{name}")
    write_manifest(
        store,
        prefix,
        {
            "dtype": "uint16",
            "vocab_size": vocab_size,
            "eos_id": vocab_size - 1,
            "tokenizer_sha256": tokenizer,
            "documents": len(documents),
            "tokens": writer.tokens,
            "files": files,
            "shards": [{"name": "shard-00000-00", "documents": len(documents), "tokens": writer.tokens}],
        },
    )


@pytest.fixture
def store(tmp_path):
    from sluice.storage import open_store

    return open_store(str(tmp_path / "data"))


def reader(store):
    return lambda key: store.local_path(key)


def mix_settings(**values):
    from sluice.config import MixSettings

    return MixSettings(**{"token_budget": 20_000, "sequence_length": 64, "seed": 5, **values})


def read_split(store, manifest, split):
    import pyarrow.parquet as pq

    return pq.read_table(store.local_path(f"mixed_dataset/{manifest['mix']}/{manifest['splits'][split]['ranges']}"))


def document_keys(store, manifest, ranges):
    keys = set()
    for shard_id, start in zip(ranges.column("shard").to_pylist(), ranges.column("start").to_pylist(), strict=True):
        shard = manifest["shards"][shard_id]
        offsets = np.fromfile(store.local_path(f"{shard['prefix']}/{shard['name']}.idx"), "<u8").astype(np.int64)
        keys.add((shard_id, int(np.searchsorted(offsets, start, side="right") - 1)))
    return keys


def test_skewed_sources_realize_their_token_weights(store):
    from sluice.mix import build_mix, realized_shares

    # 'big' has 40x the tokens of 'small'; the mix asks for 30 % small, so small repeats ~2x.
    write_partition(store, "big", "s1", [(f"b{i}", "en", 400) for i in range(100)])
    write_partition(store, "small", "s1", [(f"s{i}", "en", 100) for i in range(30)])
    settings = mix_settings(weights={"big": 0.7, "small": 0.3}, max_epochs=3)
    manifest = build_mix(store, "skewed", settings, reader(store))
    shares = realized_shares(manifest, read_split(store, manifest, "train"))
    assert manifest["tokens"] == 20_000
    assert abs(shares["small"] - 0.3) <= 0.01 and abs(shares["big"] - 0.7) <= 0.01
    small = next(row for row in manifest["sources"] if row["component"] == "small")
    assert small["epochs"] == pytest.approx(6000 / 3000)


def test_upsampling_cap_error_names_the_source(store):
    from sluice.mix import MixError, build_mix

    write_partition(store, "big", "s1", [(f"b{i}", "en", 400) for i in range(100)])
    write_partition(store, "small", "s1", [(f"s{i}", "en", 100) for i in range(10)])  # 1000 tokens
    with pytest.raises(MixError, match=r"source 'small'.*6000 tokens.*1000.*6\.00 epochs.*max_epochs=4"):
        build_mix(store, "capped", mix_settings(weights={"big": 0.7, "small": 0.3}), reader(store))


def test_validation_split_is_disjoint_from_training_and_stable_across_seeds(store):
    from sluice.mix import build_mix

    write_partition(store, "web", "s1", [(f"w{i}", "en", 50) for i in range(400)])
    settings = mix_settings(weights={"web": 1.0}, validation_share=0.1)
    manifest = build_mix(store, "val", settings, reader(store))
    train = document_keys(store, manifest, read_split(store, manifest, "train"))
    validation = document_keys(store, manifest, read_split(store, manifest, "validation"))
    assert train and validation and not train & validation
    assert 20 <= len(validation) <= 60  # ~10 % of 400 documents, by hash
    # Each held-out document appears once, whole.
    ranges = read_split(store, manifest, "validation")
    assert ranges.num_rows == len(validation) and set(ranges.column("length").to_pylist()) == {50}
    # Another seed shuffles differently but holds out the same documents.
    other = build_mix(store, "val2", mix_settings(weights={"web": 1.0}, validation_share=0.1, seed=99), reader(store))
    assert document_keys(store, other, read_split(store, other, "validation")) == validation


def test_contaminated_documents_are_removed_from_both_splits(store):
    from sluice.mix import build_mix

    write_partition(store, "web", "s1", [(f"w{i}", "en", 50) for i in range(200)])
    planted = [{"doc_id": f"w{i}", "source": "web", "partition": "web/s1", "matched_ngrams": 3} for i in (7, 123)]
    manifest = build_mix(store, "clean", mix_settings(weights={"web": 1.0}, validation_share=0.2), reader(store), contaminated=planted)
    used = document_keys(store, manifest, read_split(store, manifest, "train")) | document_keys(store, manifest, read_split(store, manifest, "validation"))
    assert {(0, 7), (0, 123)}.isdisjoint(used)
    assert len(used) == 198  # every other document is used by one split
    assert manifest["decontamination"]["removed_documents"] == 2
    assert sum(row["contaminated_documents"] for row in manifest["sources"]) == 2


def test_language_components_are_weighted_separately(store):
    from sluice.mix import build_mix, realized_shares

    docs = [(f"w{i}", "en" if i % 4 else "de", 80) for i in range(400)]  # 3:1 en:de
    write_partition(store, "web", "s1", docs)
    settings = mix_settings(weights={"web:en": 0.5, "web:de": 0.5})
    manifest = build_mix(store, "langs", settings, reader(store))
    shares = realized_shares(manifest, read_split(store, manifest, "train"), reader(store))
    assert shares == pytest.approx({"web:en": 0.5, "web:de": 0.5}, abs=0.01)


def test_mixing_refuses_shards_of_another_tokenizer(store):
    from sluice.mix import MixError, build_mix

    write_partition(store, "web", "s1", [(f"w{i}", "en", 50) for i in range(400)], tokenizer="aaaa")
    with pytest.raises(MixError, match="re-materialize tokenized_shards"):
        build_mix(store, "m", mix_settings(weights={"web": 1.0}), reader(store), tokenizer_sha256="bbbb")
    write_partition(store, "other", "s1", [(f"o{i}", "en", 50) for i in range(400)], tokenizer="cccc")
    with pytest.raises(MixError, match="same tokenizer"):
        build_mix(store, "m", mix_settings(weights={"web": 0.5, "other": 0.5}), reader(store))


def test_same_inputs_give_the_same_index_bytes(store):
    from sluice.mix import build_mix

    write_partition(store, "web", "s1", [(f"w{i}", "en", 30 + i % 17) for i in range(300)])
    settings = mix_settings(weights={"web": 1.0}, validation_share=0.05)
    build_mix(store, "a", settings, reader(store))
    build_mix(store, "b", settings, reader(store))
    for name in ("ranges.parquet", "validation_ranges.parquet"):
        from pathlib import Path

        assert Path(store.local_path(f"mixed_dataset/a/{name}")).read_bytes() == Path(store.local_path(f"mixed_dataset/b/{name}")).read_bytes()


def test_export_writes_the_token_stream_as_parquet_sequences(store, tmp_path):
    import pyarrow.parquet as pq

    from sluice.mix import build_mix, export_sequences, iter_split_tokens
    from sluice.storage import open_store

    write_partition(store, "web", "s1", [(f"w{i}", "en", 30 + i % 17) for i in range(300)])
    manifest = build_mix(store, "exp", mix_settings(weights={"web": 1.0}, token_budget=5000), reader(store))
    out = open_store(str(tmp_path / "export"))
    result = export_sequences(store, "exp", "train", out, "train.parquet", reader(store), rows_per_group=7)
    stream = np.concatenate(list(iter_split_tokens(store, manifest, "train", reader(store))))
    table = pq.read_table(out.local_path("train.parquet"))
    assert result["rows"] == table.num_rows == 5000 // 64
    assert result["tokens_left_out"] == 5000 % 64
    rows = np.asarray(table.column("input_ids").to_pylist())
    assert np.array_equal(rows.reshape(-1), stream[: rows.size])

    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset("parquet", data_files=out.local_path("train.parquet"), split="train", cache_dir=str(tmp_path / "hf"))
    assert len(loaded) == table.num_rows and loaded[3]["input_ids"] == rows[3].tolist()
