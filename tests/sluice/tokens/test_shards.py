"""The token shard format: round trip, dtype switch at the vocabulary boundary, corruption detected."""

from __future__ import annotations

import numpy as np
import pytest

from sluice.tokens.shards import ShardError, ShardView, ShardWriter, dtype_name, sha256_path, verify_files


def write_shard(folder, vocab_size, documents):
    writer = ShardWriter(str(folder), "shard-00000-00", vocab_size)
    for doc in documents:
        writer.add(np.asarray(doc))
    writer.close()
    return writer


def test_round_trip_and_numpy_only_reading(tmp_path):
    docs = [[5, 6, 7, 0], [8, 0], [9, 10, 11, 12, 0]]
    writer = write_shard(tmp_path, 1000, docs)
    tokens = np.memmap(writer.bin_path, dtype="<u2", mode="r")
    offsets = np.fromfile(writer.idx_path, dtype="<u8")
    assert offsets.tolist() == [0, 4, 6, 11]
    assert [tokens[offsets[i] : offsets[i + 1]].tolist() for i in range(3)] == docs
    view = ShardView.open(writer.bin_path, writer.idx_path, "uint16")
    assert len(view) == 3 and view.doc(2).tolist() == docs[2]


@pytest.mark.parametrize(("vocab_size", "dtype", "itemsize"), [(65536, "uint16", 2), (65537, "uint32", 4)])
def test_dtype_switches_at_the_vocabulary_boundary(tmp_path, vocab_size, dtype, itemsize):
    assert dtype_name(vocab_size) == dtype
    top = vocab_size - 1
    writer = write_shard(tmp_path, vocab_size, [[top, 0]])
    assert (tmp_path / "shard-00000-00.bin").stat().st_size == 2 * itemsize
    assert ShardView.open(writer.bin_path, writer.idx_path, dtype).doc(0).tolist() == [top, 0]


def test_truncated_shard_fails_naming_the_file(tmp_path):
    writer = write_shard(tmp_path, 1000, [[1, 2, 3, 0]])
    with open(writer.bin_path, "r+b") as handle:
        handle.truncate(4)
    with pytest.raises(ShardError, match="shard-00000-00.bin"):
        ShardView.open(writer.bin_path, writer.idx_path, "uint16")


def test_corrupted_byte_fails_its_checksum(tmp_path):
    writer = write_shard(tmp_path, 1000, [[1, 2, 3, 0]])
    manifest = {"files": [{"key": "shard-00000-00.bin", "bytes": 8, "sha256": sha256_path(writer.bin_path)}]}
    files = {"shard-00000-00.bin": writer.bin_path}
    assert verify_files(files, manifest) == []
    with open(writer.bin_path, "r+b") as handle:
        handle.seek(3)
        handle.write(b"\xff")
    problems = verify_files(files, manifest)
    assert len(problems) == 1 and "shard-00000-00.bin" in problems[0] and "checksum" in problems[0]
