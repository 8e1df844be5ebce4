"""The mix index file at scale: a 10^7-range index written in chunks, probed at sampled positions against an
oracle built from the generated columns (searchsorted over the running offsets), and the loader reading
samples deep into it; the reader's pickled form holds no arrays."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from sluice.io.layout import sha256_file
from sluice.mix.index import RECORD, MixIndex, MixIndexError, MixIndexWriter, write_index

RANGES = 10_000_000
SEQ = 2048
SHARD_TOKENS = 1 << 22
SHARDS = 4
MODULUS = 65_521  # token at position p of shard k is (p + 7k) % MODULUS: any read can be checked


def columns(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    length = rng.integers(1, 400, count, dtype=np.int64)
    return {
        "shard": rng.integers(0, SHARDS, count, dtype=np.int64),
        "start": rng.integers(0, SHARD_TOKENS - 400, count, dtype=np.int64),
        "doc": rng.integers(0, 1 << 30, count, dtype=np.int64),
        "length": length,
        "component": rng.integers(0, 3, count, dtype=np.int64),
        "copy": rng.integers(0, 4, count, dtype=np.int64),
    }


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """A 10^7-range index written in uneven chunks (sample-table entries cross chunk edges)."""
    folder = tmp_path_factory.mktemp("large_index")
    data = columns(RANGES)
    path = str(folder / "train.idx")
    writer = MixIndexWriter(path, RANGES, int(data["length"].sum()), SEQ)
    edges = [0, 1, 777_777, 3_000_001, 6_500_000, RANGES]
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        writer.append(*(data[name][a:b] for name in ("shard", "start", "doc", "length", "component", "copy")))
    writer.close()
    data["offset"] = np.concatenate([[0], np.cumsum(data["length"])[:-1]])
    data["end"] = data["offset"] + data["length"]
    return path, data


def oracle_records(data: dict[str, np.ndarray], begin: int, end: int) -> np.ndarray:
    """Indices of the ranges holding tokens [begin, end)."""
    first = int(np.searchsorted(data["end"], begin, side="right"))
    last = int(np.searchsorted(data["offset"], end, side="left"))
    return np.arange(first, last)


def test_sample_lookups_deep_in_a_large_index_match_the_oracle(large):
    path, data = large
    index = MixIndex(path)
    assert len(index) == RANGES and index.tokens == int(data["length"].sum())
    assert index.samples == (index.tokens - 1) // SEQ > 400_000
    rng = np.random.default_rng(1)
    samples = np.concatenate([[0, 1, index.samples - 1], rng.integers(0, index.samples, 2000)])
    records, counts = index.sample_records(samples)
    at = 0
    for sample, count in zip(samples.tolist(), counts.tolist(), strict=True):
        expected = oracle_records(data, sample * SEQ, sample * SEQ + SEQ + 1)
        got = records[at : at + count]
        at += count
        assert len(got) == len(expected)
        for name in ("offset", "shard", "start", "doc", "length", "component", "copy"):
            assert np.array_equal(got[name].astype(np.int64), data[name][expected]), (sample, name)
    mapped_records, mapped_counts = MixIndex(path, mapped=True).sample_records(samples)  # the memory-mapped reader agrees
    assert np.array_equal(mapped_counts, counts) and np.array_equal(mapped_records, records)
    # arbitrary token spans, including the tail after the last complete sample
    for begin in [*rng.integers(0, index.tokens - 5000, 200).tolist(), index.tokens - 3]:
        end = min(index.tokens, begin + int(rng.integers(1, 5000)))
        got = index.covering(begin, end)
        assert np.array_equal(got["offset"].astype(np.int64), data["offset"][oracle_records(data, begin, end)])
    picked = rng.integers(0, RANGES - 10, 100)
    for first in picked.tolist():
        assert np.array_equal(index.records(first, first + 10)["doc"].astype(np.int64), data["doc"][first : first + 10])


def test_a_pickled_index_is_its_path_and_header(large):
    path, _ = large
    index = MixIndex(path)
    index.sample_records(np.array([5]))  # opened in this process
    sent = pickle.dumps(index)
    assert len(sent) < 1024
    copy = pickle.loads(sent)
    assert np.array_equal(copy.sample_records(np.array([123_456]))[0], index.sample_records(np.array([123_456]))[0])


def test_a_truncated_or_foreign_index_is_refused(tmp_path):
    path = str(tmp_path / "x.idx")
    write_index(path, {"length": np.array([5, 7, 100]), "shard": np.zeros(3, np.int64), "start": np.zeros(3, np.int64)}, sequence_length=8)
    body = Path(path).read_bytes()
    with open(path, "wb") as handle:
        handle.write(body[:-3])
    with pytest.raises(MixIndexError, match="truncated or corrupt"):
        MixIndex(path)
    with open(path, "wb") as handle:
        handle.write(b"PAR1" + body[4:])
    with pytest.raises(MixIndexError, match="not a version-1 sluice mix index"):
        MixIndex(path)


def test_the_writer_refuses_a_plan_it_did_not_get(tmp_path):
    writer = MixIndexWriter(str(tmp_path / "y.idx"), 3, 30, 8)
    writer.append(*(np.zeros(2, np.int64) for _ in range(3)), np.array([10, 10]), np.zeros(2, np.int64), np.zeros(2, np.int64))
    with pytest.raises(MixIndexError, match="planned 3 / 30"):
        writer.close()


def synthetic_mix(root: str, data: dict[str, np.ndarray], index_path: str) -> None:
    """A mix manifest over SHARDS real shard files (token values computable from their position) and the given
    index, as `sluice.mix` lays them out."""
    prefix = "tokenized_shards/source=synthetic/snapshot=s1"
    os.makedirs(os.path.join(root, prefix), exist_ok=True)
    for shard in range(SHARDS):
        tokens = ((np.arange(SHARD_TOKENS, dtype=np.int64) + 7 * shard) % MODULUS).astype("<u2")
        tokens.tofile(os.path.join(root, prefix, f"shard-{shard}.bin"))
        np.array([0, SHARD_TOKENS], "<u8").tofile(os.path.join(root, prefix, f"shard-{shard}.idx"))
    folder = os.path.join(root, "mixed_index", "mix=big")
    os.makedirs(folder, exist_ok=True)
    os.replace(index_path, os.path.join(folder, "train.idx"))
    index = MixIndex(os.path.join(folder, "train.idx"))
    entry = {"key": "train.idx", "prefix": "mixed_index/mix=big", "bytes": os.path.getsize(index.path), "sha256": sha256_file(index.path)}
    manifest = {
        "format": "sluice-mix", "mix": "big", "seed": 1, "sequence_length": SEQ, "dtype": "uint16", "vocab_size": MODULUS,
        "splits": {"train": {"index": "mixed_index/mix=big/train.idx", "tokens": index.tokens, "samples": index.samples}},
        "shards": [{"id": k, "prefix": prefix, "name": f"shard-{k}", "tokens": SHARD_TOKENS} for k in range(SHARDS)], "side_files": [entry], "files": [],
    }
    os.makedirs(os.path.join(root, "mixed_dataset", "mix=big"), exist_ok=True)
    with open(os.path.join(root, "mixed_dataset", "mix=big", "_manifest.json"), "w") as handle:
        json.dump(manifest, handle)


def expected_window(data: dict[str, np.ndarray], sample: int) -> np.ndarray:
    begin, end = sample * SEQ, sample * SEQ + SEQ + 1
    pieces = []
    for index in oracle_records(data, begin, end).tolist():
        offset, length = int(data["offset"][index]), int(data["length"][index])
        first, last = max(begin, offset), min(end, offset + length)
        positions = int(data["start"][index]) + np.arange(first - offset, last - offset)
        pieces.append((positions + 7 * int(data["shard"][index])) % MODULUS)
    return np.concatenate(pieces)


def test_the_loader_resumes_deep_in_a_large_mix_and_reads_the_right_tokens(large, tmp_path):
    from sluice.io.storage import open_store
    from sluice.loader import MixedTokens, TrainingLoader

    path, data = large
    root = str(tmp_path / "store")
    linked = str(tmp_path / "train.idx")
    os.link(path, linked)
    synthetic_mix(root, data, linked)
    auto = MixedTokens(open_store(root), "big", cache_dir=str(tmp_path / "cache"), mmap_max_bytes=1 << 20)
    assert not auto.mapped  # larger than the map limit: read with pread
    mapped = MixedTokens(open_store(root), "big", cache_dir=str(tmp_path / "cache"), read_mode="mmap")
    for mix, position in ((auto, 0), (auto, 987_654 % len(auto)), (mapped, 987_654 % len(auto)), (auto, len(auto) - 9)):
        assert len(pickle.dumps(mix)) < 4096  # what a DataLoader worker receives
        loader = TrainingLoader(mix, 4, seed=3, prefetch_batches=0)
        loader.load_state_dict({"version": 1, "seed": 3, "epoch": 0, "position": position, "num_samples": len(mix), "block_size": 1})
        batch = next(iter(loader))
        for row, sample in enumerate(batch["sample_ids"].tolist()):
            window = expected_window(data, sample)
            assert np.array_equal(batch["input_ids"][row].numpy(), window[:-1])
            assert np.array_equal(batch["labels"][row].numpy(), window[1:])
        # cu_seqlens: a segment starts at each row start and at each range start inside a row's inputs
        bounds = set()
        for row, sample in enumerate(batch["sample_ids"].tolist()):
            starts = data["offset"][oracle_records(data, sample * SEQ, sample * SEQ + SEQ)] - sample * SEQ
            bounds |= {row * SEQ + max(0, int(s)) for s in starts}
        assert batch["cu_seqlens"].tolist() == [*sorted(bounds), 4 * SEQ]


def test_record_layout_is_32_bytes():
    assert RECORD.itemsize == 32
