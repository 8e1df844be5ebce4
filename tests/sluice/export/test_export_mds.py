"""The MDS export read back with MosaicML Streaming's own `StreamingDataset`, token for token against the
training loader. Streaming pins numpy 2.1.3 (sluice has numpy 2.4), so it runs in its own virtual
environment (`benchmarks.peers.peer_python`, installed on first use: slow suite), in a subprocess that
prints what it read. Its torchvision import needs a stand-in module (../shared/ENVIRONMENT.md)."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from sluice.export import export_split
from sluice.io.storage import open_store
from tests.sluice.export.test_export import SEQ, loader_rows, read_json
from tests.support.mix_fixture import build_test_mix

pytestmark = pytest.mark.slow

READER = """
import json, sys
from streaming import StreamingDataset

root, split = sys.argv[1], sys.argv[2]
dataset = StreamingDataset(local=root, split=split, shuffle=False, batch_size=1)
print(json.dumps({"samples": len(dataset)}))
for index in range(len(dataset)):
    sample = dataset[index]
    print(json.dumps({"sample_id": int(sample["sample_id"]), "doc_ids": sample["doc_ids"], "dtype": str(sample["input_ids"].dtype),
                      **{name: sample[name].tolist() for name in ("input_ids", "labels", "cu_seqlens")}}))
"""


def streaming_python(folder) -> tuple[str, dict[str, str]]:
    """The interpreter of the shared mosaicml-streaming environment (the loader benchmark's), and an
    environment whose PYTHONPATH holds the torchvision stand-in."""
    from benchmarks.loader import MOSAIC
    from benchmarks.peers import peer_python

    python = peer_python(*MOSAIC)
    stub = folder / "stub" / "torchvision"
    (stub / "transforms").mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "datasets.py").write_text("class VisionDataset:  # stand-in: streaming's vision datasets are not used\n    pass\n")
    (stub / "transforms" / "__init__.py").write_text("")
    (stub / "transforms" / "functional.py").write_text("def to_tensor(*args):\n    raise NotImplementedError\n")
    return str(python), {**os.environ, "PYTHONPATH": str(stub.parent)}


def test_streaming_dataset_reads_the_mds_export_as_the_loaders_stream(tmp_path):
    mix_root = str(tmp_path / "mix")
    build_test_mix(open_store(mix_root), sequence_length=SEQ, validation_share=0.1)
    out = str(tmp_path / "mds")
    for split in ("train", "validation"):
        export_split(open_store(mix_root), "test", split, "mds", open_store(out), shard_bytes=1 << 14)
    python, env = streaming_python(tmp_path)
    (tmp_path / "read_mds.py").write_text(READER)
    for split in ("train", "validation"):
        result = subprocess.run([python, str(tmp_path / "read_mds.py"), out, split], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        manifest = read_json(out, split, "_manifest.json")
        assert lines[0]["samples"] == manifest["samples"] and len(manifest["files"]) > 2
        rows = lines[1:]
        expected = loader_rows(mix_root, split, manifest["order"]["seed"], tmp_path)
        assert len(rows) == len(expected)
        for row, want in zip(rows, expected, strict=True):
            assert row["sample_id"] == want["sample_id"] and row["dtype"] == "int32"
            assert row["input_ids"] == want["input_ids"].tolist() and row["labels"] == want["labels"].tolist()
            assert row["cu_seqlens"] == want["cu_seqlens"].tolist()
            assert len(row["doc_ids"]) == len(row["cu_seqlens"]) - 1 == len(set(row["doc_ids"]))
        assert np.array_equal(sorted(row["sample_id"] for row in rows), np.arange(len(rows)))
