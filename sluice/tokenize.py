"""Tokenizer training and tokenization of deduplicated documents into shards (`sluice.shards`).

The tokenizer is a HF `tokenizers` byte-level BPE trained on chosen sources, or any `tokenizer.json`.
Its SHA-256 (of the canonical JSON) goes into every shard manifest, and mixing refuses shards from
another tokenizer.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.config import S3Settings
from sluice.layout import _remove_tree, sha256_file
from sluice.shards import (
    DOCS_SCHEMA,
    FORMAT_NAME,
    FORMAT_VERSION,
    ShardWriter,
    doc_hashes,
    dtype_name,
    token_dtype,
)
from sluice.storage import StoreSpec, local_temp_dir

ENCODE_BATCH = 1024  # documents per encode_batch call: large enough for the tokenizer's thread pool


def train_bpe(texts: Iterator[str], vocab_size: int, eos_token: str) -> Any:
    """Train a byte-level BPE. Deterministic for the same texts in the same order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[eos_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def tokenizer_sha256(tokenizer_json: str) -> str:
    return hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest()


def load_tokenizer(json_text: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(json_text)


@dataclass(frozen=True)
class TokenizeTask:
    input_url: str  # deduped partition folder
    input_key: str  # part file
    output_url: str  # tokenized partition folder
    part: int
    tokenizer_json: str
    eos_token: str
    max_shard_tokens: int = 1 << 28
    s3: S3Settings = field(default_factory=S3Settings)


def tokenize_part(task: TokenizeTask) -> dict[str, Any]:
    """Encode one deduplicated part into one or more shards `shard-PPPPP-SS` (bounded by max_shard_tokens)."""
    tokenizer = load_tokenizer(task.tokenizer_json)
    eos_id = tokenizer.token_to_id(task.eos_token)
    if eos_id is None:
        raise ValueError(f"the tokenizer has no token {task.eos_token!r} (tokenizer.eos_token)")
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    input_store = StoreSpec(task.input_url, task.s3).open()
    output_store = StoreSpec(task.output_url, task.s3).open()
    scratch = local_temp_dir()
    shards: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    lengths: list[int] = []
    text_bytes = 0
    try:
        path = input_store.fetch(task.input_key, scratch)
        out_dir = os.path.join(scratch, "out")
        os.makedirs(out_dir)
        writer: ShardWriter | None = None
        doc_ids: list[str] = []
        languages: list[str | None] = []

        def finish(current: ShardWriter) -> None:
            current.close()
            ids_path = os.path.join(out_dir, f"{current.name}.docs.parquet")
            docs = pa.table(
                {
                    "doc_id": pa.array(doc_ids, pa.string()),
                    "doc_hash": doc_hashes(doc_ids),
                    "language": pa.array(languages, pa.string()).dictionary_encode(),
                },
                schema=DOCS_SCHEMA,
            )
            pq.write_table(docs, ids_path, compression="zstd")
            for local in (current.bin_path, current.idx_path, ids_path):
                key = os.path.basename(local)
                files.append({"key": key, "rows": None, "bytes": os.path.getsize(local), "sha256": sha256_file(local)})
                output_store.put_file(local, key)
            shards.append({"name": current.name, "documents": current.documents, "tokens": current.tokens})

        parquet = pq.ParquetFile(path)
        has_language = "language" in parquet.schema_arrow.names
        columns = ["doc_id", "text", "language"] if has_language else ["doc_id", "text"]
        dtype = token_dtype(vocab_size)
        for batch in parquet.iter_batches(batch_size=ENCODE_BATCH, columns=columns):
            texts = batch.column("text").to_pylist()
            ids = batch.column("doc_id").to_pylist()
            batch_languages = batch.column("language").to_pylist() if has_language else [None] * len(ids)
            # encode_batch_fast skips the character offsets, which shards do not need.
            encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
            for doc_id, language, encoding in zip(ids, batch_languages, encodings, strict=True):
                tokens = np.asarray(encoding.ids, dtype=dtype)
                size = len(tokens) + 1  # EOS
                if writer is not None and writer.tokens + size > task.max_shard_tokens and writer.documents:
                    finish(writer)
                    writer, doc_ids, languages = None, [], []
                if writer is None:
                    writer = ShardWriter(out_dir, f"shard-{task.part:05d}-{len(shards):02d}", vocab_size)
                writer.add(tokens, eos_id)
                doc_ids.append(doc_id)
                languages.append(language)
                lengths.append(size)
            text_bytes += int(pc.sum(pc.binary_length(batch.column("text"))).as_py() or 0)
        if writer is not None:
            finish(writer)
    finally:
        _remove_tree(scratch)
    return {
        "shards": shards,
        "files": files,
        "documents": len(lengths),
        "tokens": int(sum(lengths)),
        "text_bytes": text_bytes,
        "lengths": lengths,
        "vocab_size": vocab_size,
        "eos_id": eos_id,
        "dtype": dtype_name(vocab_size),
    }


def shard_manifest(results: list[dict[str, Any]], tokenizer_hash: str, vocab_size: int, eos_id: int) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "dtype": dtype_name(vocab_size),
        "vocab_size": vocab_size,
        "eos_id": eos_id,
        "tokenizer_sha256": tokenizer_hash,
        "documents": sum(r["documents"] for r in results),
        "tokens": sum(r["tokens"] for r in results),
        "files": [entry for r in results for entry in r["files"]],
        "shards": [shard for r in results for shard in r["shards"]],
    }
