"""Build a real mix (sluice.mix.build_mix over shards written by sluice.tokens.shards.ShardWriter) for loader tests.

Documents hold distinct, recognizable tokens; `stream_oracle` rebuilds the mix's token stream by plain
concatenation of the ranges (independent of the loader), and `range_offsets_oracle` the document boundaries.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sluice.config import MixSettings
from sluice.io.layout import PartitionRef, partition_prefix, sha256_file, side_prefix
from sluice.io.storage import Store
from sluice.mix import build_mix
from sluice.tokens.shards import BINARY_DATASET, ShardWriter, binary_folder, write_urls

EOS = 0
VOCAB = 50_000


def write_partition(
    store: Store, source: str, snapshot: str, shards: int, docs_per_shard: int, rng: np.random.Generator, doc_lengths: tuple[int, int] = (3, 200)
) -> None:
    """One tokenized partition as the asset lays it out: .docs.parquet + manifest in tokenized_shards/, the
    .bin / .idx / .urls files in the side folder tokenized_binary/ (the manifest's binary_prefix)."""
    ref = PartitionRef(source, snapshot)
    prefix, binary_prefix = partition_prefix("tokenized_shards", ref), side_prefix(BINARY_DATASET, ref)
    folder, binary = store.local_path(prefix), store.local_path(binary_prefix)
    assert folder is not None and binary is not None, "mix fixtures are built on a local store (upload them for S3 tests)"
    os.makedirs(folder, exist_ok=True)
    os.makedirs(binary, exist_ok=True)
    files, side_files, shard_entries = [], [], []
    for number in range(shards):
        writer = ShardWriter(binary, f"shard-{number:05d}", VOCAB)
        for _ in range(docs_per_shard):
            length = int(rng.integers(*doc_lengths))
            body = rng.integers(1, VOCAB, size=length - 1)
            writer.add(np.append(body, EOS))
        writer.close()
        docs_path = os.path.join(folder, f"{writer.name}.docs.parquet")
        doc_ids = [f"{source}/{snapshot}/{writer.name}#{i}" for i in range(writer.documents)]
        pq.write_table(pa.table({"doc_id": doc_ids}), docs_path)  # doc_hash and language are derived by the mix
        urls_path = os.path.join(binary, f"{writer.name}.urls")
        write_urls(urls_path, [fixture_url(source, writer.name, i) for i in range(writer.documents)])
        files.append({"key": os.path.basename(docs_path), "rows": None, "bytes": os.path.getsize(docs_path), "sha256": sha256_file(docs_path)})
        for path in (writer.bin_path, writer.idx_path, urls_path):
            side_files.append({"key": os.path.basename(path), "rows": None, "bytes": os.path.getsize(path), "sha256": sha256_file(path), "prefix": binary_prefix})
        shard_entries.append({"name": writer.name, "documents": writer.documents, "tokens": writer.tokens})
    manifest = {
        "format": "sluice-tokens", "version": 1, "dtype": "uint16", "vocab_size": VOCAB, "eos_id": EOS,
        "tokenizer_sha256": "test", "documents": sum(s["documents"] for s in shard_entries),
        "tokens": sum(s["tokens"] for s in shard_entries), "files": files, "shards": shard_entries,
        "binary_prefix": binary_prefix, "side_files": side_files,
    }
    store.write_bytes(f"{prefix}/_manifest.json", json.dumps(manifest).encode())


def fixture_url(source: str, shard: str, doc: int) -> str | None:
    """The URL the fixture gives a document: hosts on a few domains (one in 7 documents has none)."""
    if doc % 7 == 3:
        return None
    host = ("www.alpha.example", "beta.example", "news.beta.example", "gamma.test")[doc % 4]
    return f"https://{host}/{source}/{shard}/page-{doc}.html"


def build_test_mix(
    store: Store, mix: str = "test", sequence_length: int = 64, token_budget: int = 40_000, shards: int = 3, docs_per_shard: int = 60, seed: int = 11,
    doc_lengths: tuple[int, int] = (3, 200), validation_share: float = 0.0,
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    write_partition(store, "web", "2026-01", shards, docs_per_shard, rng, doc_lengths)
    write_partition(store, "reference", "2026-01", shards, docs_per_shard, rng, doc_lengths)
    settings = MixSettings(weights={"web": 0.6, "reference": 0.4}, token_budget=token_budget, sequence_length=sequence_length, seed=seed, max_epochs=4,
                           validation_share=validation_share)

    return build_mix(store, mix, settings)


def read_ranges(store: Store, mix: str = "test", split: str = "train"):
    """(shard, start, length) of a split's ranges, from its Parquet view (not the binary index the loader reads)."""
    table = pq.read_table(store.local_path(f"mixed_dataset/mix={mix}/{split}.parquet"))
    return (table.column(c).to_numpy() for c in ("shard", "start", "length"))


def mix_shards(store: Store, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The mix's shard table read whole with pyarrow (the oracle of `sluice.mix.ShardTable`'s row-group reads)."""
    entry = manifest["shard_table"]
    return pq.read_table(store.local_path(f"{entry['prefix']}/{entry['key']}")).to_pylist()


def stream_oracle(store: Store, mix: str = "test", split: str = "train") -> np.ndarray:
    """The mix's token stream: its ranges' tokens concatenated."""
    manifest = json.loads(store.read_bytes(f"mixed_dataset/mix={mix}/_manifest.json"))
    shard_tokens = [np.fromfile(store.local_path(f"{binary_folder(s, s['prefix'])}/{s['name']}.bin"), dtype="<u2") for s in mix_shards(store, manifest)]
    shard_ids, starts, lengths = read_ranges(store, mix, split)
    pieces = [shard_tokens[s][b : b + n] for s, b, n in zip(shard_ids.tolist(), starts.tolist(), lengths.tolist(), strict=True)]
    return np.concatenate(pieces).astype(np.int64)


def range_offsets_oracle(store: Store, mix: str = "test") -> np.ndarray:
    """Stream offsets where each range (document) starts, plus the end."""
    _, _, lengths = read_ranges(store, mix)
    return np.concatenate([[0], np.cumsum(lengths)])
