"""Manifests that publish a partition together with its side datasets."""

from __future__ import annotations

import hashlib
import os

from sluice.io.layout import (
    PartitionRef,
    entry_key,
    partition_prefix,
    read_manifest,
    sha256_file,
    side_prefix,
    write_manifest,
)
from sluice.io.storage import open_store


def test_manifest_publishes_side_folders_and_removes_their_stale_files(tmp_path):
    store = open_store(str(tmp_path))
    ref = PartitionRef("web", "2026-01")
    prefix = partition_prefix("cleaned_documents", ref)
    side = side_prefix("cleaned_dropped", ref)
    other_side = side_prefix("cleaned_dropped", PartitionRef("web", "2026-02"))
    for key in (f"{prefix}/part-00000.parquet", f"{prefix}/part-00001.parquet", f"{side}/dropped-00000.parquet",
                f"{side}/dropped-00001.parquet", f"{other_side}/dropped-00000.parquet"):
        store.write_bytes(key, b"x")
    manifest = {
        "files": [{"key": "part-00000.parquet"}],
        "side_files": [{"key": "dropped-00000.parquet", "prefix": side}],
    }
    write_manifest(store, prefix, manifest)

    assert read_manifest(store, prefix) == manifest
    # Unlisted files go, in the primary folder and in the side folder the manifest names; nothing else moves.
    assert store.list_files(prefix) == [f"{prefix}/_manifest.json", f"{prefix}/part-00000.parquet"]
    assert store.list_files(side) == [f"{side}/dropped-00000.parquet"]
    assert store.list_files(other_side) == [f"{other_side}/dropped-00000.parquet"]
    assert entry_key(prefix, manifest["side_files"][0]) == f"{side}/dropped-00000.parquet"
    assert entry_key(prefix, manifest["files"][0]) == f"{prefix}/part-00000.parquet"


def test_sha256_file_is_the_sha256_of_the_bytes(tmp_path):
    """Around hashlib.file_digest's read buffer (256 KiB) and the former 1 MiB reads, and empty."""
    for size in (0, 1, (1 << 18) - 1, 1 << 18, (1 << 18) + 1, (1 << 20) + 7, 3 << 20):
        path = tmp_path / f"file-{size}"
        data = os.urandom(size)
        path.write_bytes(data)
        assert sha256_file(str(path)) == hashlib.sha256(data).hexdigest()
