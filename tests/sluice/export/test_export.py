"""Export of a mix split as Parquet, WebDataset and MDS: read back with pyarrow, HF `datasets` and the real
`webdataset` package (MosaicML Streaming's reader runs in its own environment: tests/sluice/export/test_export_mds.py),
compared token for token with the training loader's stream and with an independent oracle (the split's
ranges concatenated from the shard files, document ids from the shards' .docs.parquet)."""

from __future__ import annotations

import glob
import hashlib
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from sluice.export import FORMATS, ExportError, export_split
from sluice.export.mds import INDEX
from sluice.io.storage import open_store
from sluice.loader import IGNORE_INDEX, MixedTokens, TrainingLoader
from tests.conftest import tree_digest
from tests.support.mix_fixture import build_test_mix, mix_shards, stream_oracle

SEQ = 64
SMALL_SHARDS = 1 << 14  # several shards per export


@pytest.fixture(scope="module")
def mix_root(tmp_path_factory) -> str:
    """A mix whose `web` source is upsampled (1.33 epochs: copies exist) with a validation split."""
    root = str(tmp_path_factory.mktemp("mix_store"))
    manifest = build_test_mix(open_store(root), sequence_length=SEQ, validation_share=0.1)
    assert manifest["checks"]["copies_in_one_sample"] == 0
    assert max(row["epochs"] for row in manifest["sources"]) > 1
    return root


@pytest.fixture(scope="module")
def exports(mix_root, tmp_path_factory) -> dict[str, str]:
    """Every format, both splits, small shards: format -> export root."""
    roots = {}
    for fmt in FORMATS:
        roots[fmt] = str(tmp_path_factory.mktemp(f"export_{fmt}"))
        for split in ("train", "validation"):
            export_split(open_store(mix_root), "test", split, fmt, open_store(roots[fmt]), shard_bytes=SMALL_SHARDS)
    return roots


def read_bytes(*parts: str) -> bytes:
    with open(os.path.join(*parts), "rb") as handle:
        return handle.read()


def read_json(*parts: str):
    return json.loads(read_bytes(*parts))


def loader_rows(mix_root: str, split: str, seed: int, tmp_path, mask: bool = False) -> list[dict]:
    """What the training loader yields at world size 1, one epoch, one sample per batch."""
    data = MixedTokens(open_store(mix_root), "test", cache_dir=str(tmp_path / "cache"), split=split)
    loader = TrainingLoader(data, batch_size=1, seed=seed, num_epochs=1, prefetch_batches=0, mask_document_boundaries=mask)
    rows = []
    for batch in loader:
        rows.append(
            {
                "sample_id": int(batch["sample_ids"][0]),
                "input_ids": batch["input_ids"][0].numpy(),
                "labels": batch["labels"][0].numpy(),
                "cu_seqlens": batch["cu_seqlens"].numpy(),
                "position_ids": batch["position_ids"][0].numpy(),
            }
        )
    assert len(rows) == len(data)
    return rows


def oracle(mix_root: str, split: str) -> tuple[np.ndarray, list[tuple[int, int, str]]]:
    """The split's token stream and its ranges (stream offset, length, doc_id), from the Parquet view of the
    ranges and the shards' files (not the index or the loader)."""
    store = open_store(mix_root)
    manifest = json.loads(store.read_bytes("mixed_dataset/mix=test/_manifest.json"))
    ids = [pq.read_table(store.local_path(f"{s['prefix']}/{s['name']}.docs.parquet")).column("doc_id").to_pylist() for s in mix_shards(store, manifest)]
    table = pq.read_table(store.local_path(f"mixed_dataset/mix=test/{split}.parquet"))
    ranges = [(offset, length, ids[shard][doc]) for offset, length, shard, doc in zip(*(table.column(c).to_pylist() for c in ("offset", "length", "shard", "doc")), strict=True)]
    return stream_oracle(store, "test", split), ranges


def expected_segments(ranges: list[tuple[int, int, str]], sample_id: int) -> tuple[list[int], list[str]]:
    begin, end = sample_id * SEQ, sample_id * SEQ + SEQ
    inside = [(offset, doc_id) for offset, length, doc_id in ranges if offset < end and offset + length > begin]
    return [max(offset - begin, 0) for offset, _ in inside] + [SEQ], [doc_id for _, doc_id in inside]


def read_parquet(root: str, split: str) -> list[dict]:
    table = pq.read_table(os.path.join(root, split))  # the folder: pyarrow skips _manifest.json
    rows = table.select(["sample_id", "doc_ids"]).to_pylist()
    for name in ("input_ids", "labels", "cu_seqlens"):
        column = table.column(name).combine_chunks()
        offsets, values = column.offsets.to_numpy(), column.values.to_numpy()  # the stored int32 values
        for row, begin, end in zip(rows, offsets[:-1], offsets[1:], strict=True):
            row[name] = values[begin:end]
    return rows


def read_webdataset(root: str, split: str) -> list[dict]:
    import webdataset as wds

    urls = sorted(glob.glob(os.path.join(root, split, "shard-*.tar")))
    rows = []
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode():
        meta = sample["json"]
        rows.append({"sample_id": meta["sample_id"], "doc_ids": meta["doc_ids"], "key": sample["__key__"],
                     **{name: sample[f"{name}.npy"] for name in ("input_ids", "labels", "cu_seqlens")}})
    return rows


READERS = {"parquet": read_parquet, "webdataset": read_webdataset}


@pytest.mark.parametrize("fmt", ["parquet", "webdataset"])
@pytest.mark.parametrize("split", ["train", "validation"])
def test_export_read_back_with_its_library_is_the_loaders_stream(exports, mix_root, fmt, split, tmp_path):
    rows = READERS[fmt](exports[fmt], split)
    manifest = read_json(exports[fmt], split, "_manifest.json")
    expected = loader_rows(mix_root, split, manifest["order"]["seed"], tmp_path)
    assert len(rows) == len(expected) == manifest["samples"]
    for row, want in zip(rows, expected, strict=True):
        assert row["sample_id"] == want["sample_id"]
        assert row["input_ids"].dtype == np.int32 and np.array_equal(row["input_ids"], want["input_ids"])
        assert np.array_equal(row["labels"], want["labels"])
        assert np.array_equal(row["cu_seqlens"], want["cu_seqlens"])
        # position ids restart at every segment start: rebuilt from cu_seqlens, they are the loader's
        cu = row["cu_seqlens"]
        assert np.array_equal(np.concatenate([np.arange(b - a) for a, b in zip(cu[:-1], cu[1:], strict=True)]), want["position_ids"])
    if fmt == "webdataset":
        assert [row["key"] for row in rows] == [f"{i:012d}" for i in range(len(rows))]


@pytest.mark.parametrize("split", ["train", "validation"])
def test_rows_are_the_splits_stream_with_each_segments_document(exports, mix_root, split):
    """Independent oracle: sample s is stream[s*L : s*L + L] with labels shifted by one; its segments and
    their document ids are the ranges overlapping it."""
    stream, ranges = oracle(mix_root, split)
    rows = read_parquet(exports["parquet"], split)
    assert sorted(row["sample_id"] for row in rows) == list(range((len(stream) - 1) // SEQ))
    for row in rows:
        begin = row["sample_id"] * SEQ
        assert np.array_equal(row["input_ids"], stream[begin : begin + SEQ])
        assert np.array_equal(row["labels"], stream[begin + 1 : begin + SEQ + 1])
        cu, doc_ids = expected_segments(ranges, row["sample_id"])
        assert row["cu_seqlens"].tolist() == cu and row["doc_ids"] == doc_ids


def test_no_sample_holds_two_copies_of_one_document(exports, mix_root):
    """The mix repeats `web` documents (1.33 epochs); no exported training sequence holds one twice."""
    _, ranges = oracle(mix_root, "train")
    copies = len(ranges) - len({doc_id for _, _, doc_id in ranges})
    assert copies > 50  # the test mix does repeat documents
    for fmt in ("parquet", "webdataset"):
        for row in READERS[fmt](exports[fmt], "train"):
            assert len(row["doc_ids"]) == len(set(row["doc_ids"])), row["sample_id"]
    for fmt in FORMATS:
        manifest = read_json(exports[fmt], "train", "_manifest.json")
        assert manifest["checks"]["repeated_documents_in_a_sample"] == 0


def test_parquet_reads_with_hf_datasets_and_carries_the_metadata(exports, mix_root, tmp_path):
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(exports["parquet"], cache_dir=str(tmp_path / "hf"))  # both splits, from the folder names
    expected = read_parquet(exports["parquet"], "train")
    assert set(loaded) == {"train", "validation"} and len(loaded["train"]) == len(expected)
    for index in (0, 7, len(expected) - 1):
        row = loaded["train"][index]
        assert row["input_ids"] == expected[index]["input_ids"].tolist() and row["doc_ids"] == expected[index]["doc_ids"]
        assert row["labels"] == expected[index]["labels"].tolist() and row["cu_seqlens"] == expected[index]["cu_seqlens"].tolist()
    store = open_store(mix_root)
    raw = store.read_bytes("mixed_dataset/mix=test/_manifest.json")
    mix = json.loads(raw)
    part = sorted(glob.glob(os.path.join(exports["parquet"], "train", "*.parquet")))[0]
    meta = json.loads(pq.read_schema(part).metadata[b"sluice"])
    assert meta["mix"] == "test" and meta["split"] == "train" and meta["mix_version"] == hashlib.sha256(raw).hexdigest()
    assert meta["tokenizer_sha256"] == mix["tokenizer_sha256"] == "test"
    assert (meta["vocab_size"], meta["eos_id"], meta["sequence_length"]) == (50_000, 0, SEQ)
    assert meta["order"]["seed"] == mix["seed"] and meta["samples"] == mix["splits"]["train"]["samples"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_manifest_lists_every_file_with_its_digest_and_shards_stay_within_the_limit(exports, fmt):
    folder = os.path.join(exports[fmt], "train")
    manifest = read_json(folder, "_manifest.json")
    listed = {entry["key"]: entry for entry in manifest["files"]}
    present = set(os.listdir(folder)) - {"_manifest.json", INDEX}
    assert present == set(listed) and len(listed) > 2
    for name, entry in listed.items():
        data = read_bytes(folder, name)
        assert hashlib.sha256(data).hexdigest() == entry["sha256"] and len(data) == entry["bytes"]
        if fmt != "parquet":  # Parquet's limit is on the uncompressed rows; its files are smaller
            assert len(data) <= SMALL_SHARDS
    assert sum(entry["rows"] for entry in listed.values()) == manifest["samples"] == manifest["checks"]["written_samples"]
    assert manifest["tokens"] == manifest["samples"] * SEQ


def test_mds_shards_follow_the_documented_layout(exports):
    """A reader written from the layout in sluice/export/mds.py (MosaicML's own reader runs in the slow
    suite); its sample order and contents equal the Parquet export's."""
    folder = os.path.join(exports["mds"], "train")
    index = read_json(folder, INDEX)
    assert index["version"] == 2
    rows = []
    for shard in index["shards"]:
        assert shard["format"] == "mds" and shard["column_names"] == sorted(shard["column_names"])
        data = read_bytes(folder, shard["raw_data"]["basename"])
        assert len(data) == shard["raw_data"]["bytes"]
        count = int(np.frombuffer(data[:4], "<u4")[0])
        offsets = np.frombuffer(data[4 : 8 + 4 * count], "<u4")
        assert count == shard["samples"] and offsets[-1] == len(data)
        for begin, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            sample = data[begin:end]
            cu_size, ids_size = np.frombuffer(sample[:8], "<u4").tolist()
            cu = sample[8 : 8 + cu_size]
            ndim, code = cu[0] >> 2, cu[0] & 3
            assert ndim == 1
            shape_bytes = 1 << code
            rest = sample[8 + cu_size :]
            rows.append(
                {
                    "cu_seqlens": np.frombuffer(cu[1 + shape_bytes :], "<i4"),
                    "doc_ids": json.loads(rest[:ids_size]),
                    "input_ids": np.frombuffer(rest[ids_size : ids_size + 4 * SEQ], "<i4"),
                    "labels": np.frombuffer(rest[ids_size + 4 * SEQ : ids_size + 8 * SEQ], "<i4"),
                    "sample_id": int(np.frombuffer(rest[ids_size + 8 * SEQ :], "<i8")[0]),
                }
            )
    expected = read_parquet(exports["parquet"], "train")
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        assert row["sample_id"] == want["sample_id"] and row["doc_ids"] == want["doc_ids"]
        for name in ("input_ids", "labels", "cu_seqlens"):
            assert np.array_equal(row[name], want[name])


def test_same_mix_and_seed_give_the_same_bytes_and_another_seed_another_order(mix_root, tmp_path):
    store = open_store(mix_root)
    for fmt in FORMATS:
        first, second = str(tmp_path / f"{fmt}-a"), str(tmp_path / f"{fmt}-b")
        export_split(store, "test", "train", fmt, open_store(first), shard_bytes=SMALL_SHARDS)
        export_split(store, "test", "train", fmt, open_store(second), shard_bytes=SMALL_SHARDS)
        assert tree_digest(first) == tree_digest(second)
    other = str(tmp_path / "seed")
    export_split(store, "test", "train", "parquet", open_store(other), seed=99)
    default = read_parquet(str(tmp_path / "parquet-a"), "train")
    reseeded = read_parquet(other, "train")
    assert [r["sample_id"] for r in reseeded] != [r["sample_id"] for r in default]
    assert sorted(r["sample_id"] for r in reseeded) == sorted(r["sample_id"] for r in default)
    assert read_json(other, "train", "_manifest.json")["order"]["seed"] == 99


def test_masked_labels_are_the_loaders(mix_root, tmp_path):
    out = str(tmp_path / "masked")
    manifest = export_split(open_store(mix_root), "test", "train", "webdataset", open_store(out), mask_document_boundaries=True)
    rows = read_webdataset(out, "train")
    expected = loader_rows(mix_root, "train", manifest["order"]["seed"], tmp_path, mask=True)
    masked = 0
    for row, want in zip(rows, expected, strict=True):
        assert np.array_equal(row["labels"], want["labels"])
        # the label before each further document start is masked (and no token id is -100)
        assert (row["labels"][row["cu_seqlens"][1:-1] - 1] == IGNORE_INDEX).all()
        masked += int((row["labels"] == IGNORE_INDEX).sum())
    assert masked > 0 and manifest["mask_document_boundaries"] is True


def test_a_reexport_replaces_the_files_and_leaves_no_stale_ones(mix_root, tmp_path):
    out = open_store(str(tmp_path / "out"))
    export_split(open_store(mix_root), "test", "train", "mds", out, shard_bytes=SMALL_SHARDS)
    before = set(os.listdir(tmp_path / "out" / "train"))
    manifest = export_split(open_store(mix_root), "test", "train", "webdataset", out, shard_bytes=SMALL_SHARDS * 4)
    after = set(os.listdir(tmp_path / "out" / "train"))
    assert after == {entry["key"] for entry in manifest["files"]} | {"_manifest.json"}
    assert not after & (before - {"_manifest.json"})


def test_refuses_a_folder_holding_other_files(mix_root, tmp_path):
    (tmp_path / "out" / "train").mkdir(parents=True)
    mine = tmp_path / "out" / "train" / "notes.txt"
    mine.write_text("keep me")
    with pytest.raises(ExportError, match="not a sluice export"):
        export_split(open_store(mix_root), "test", "train", "parquet", open_store(str(tmp_path / "out")))
    assert mine.read_text() == "keep me"


def test_errors_name_what_is_missing(mix_root, tmp_path):
    store, out = open_store(mix_root), open_store(str(tmp_path / "out"))
    with pytest.raises(ExportError, match=r"materialize mixed_dataset\[nope\]"):
        export_split(store, "nope", "train", "parquet", out)
    with pytest.raises(ExportError, match="no split 'test'"):
        export_split(store, "test", "test", "parquet", out)
    with pytest.raises(ExportError, match="unknown export format 'csv'"):
        export_split(store, "test", "train", "csv", out)
