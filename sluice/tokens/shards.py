"""Tokenized shards: a flat token file, a document index and a manifest; readable with numpy alone.

    shard-NNNNN.bin   token ids, little-endian, uint16 when vocab_size <= 65536 else uint32;
                      documents back to back, each followed by the EOS id
    shard-NNNNN.idx   uint64 little-endian, documents + 1 entries: token offsets, idx[0] = 0;
                      document i is bin[idx[i]:idx[i+1]] (EOS included), so access is O(1)
    shard-NNNNN.docs.parquet   per document, in the same order: doc_id (lineage, decontamination),
                      doc_hash (uint64 xxh3_64 of doc_id: the validation split), language (lid.176 code);
                      row groups of DOCS_ROW_GROUP documents, so one document's row is one small read
    shard-NNNNN.urls  the documents' URLs (skip lists by URL / domain, `sluice.loader.skip`): uint64
                      little-endian offsets, documents + 1 entries, then the UTF-8 bytes; URL i is
                      bytes[offsets[i]:offsets[i+1]] counted from the end of the offsets (empty: none)
    _manifest.json    {"format": "sluice-tokens", "version": 1, "dtype", "vocab_size", "eos_id",
                       "tokenizer_sha256", "documents", "tokens",
                       "files": [{key, rows, bytes, sha256}]  (the .docs.parquet files),
                       "binary_prefix": folder of the .bin / .idx / .urls files,
                       "side_files": [{key, rows, bytes, sha256, prefix}]  (those files),
                       "shards": [{name, documents, tokens, part, first_row}]}
                      part / first_row: the deduplicated part file (index in its manifest's files) the shard's
                      documents come from, and the row there of its first document (document i of the shard
                      is row first_row + i), so a document's text is found without a search

    tokens = np.memmap("shard-00000.bin", dtype="<u2"); idx = np.fromfile("shard-00000.idx", "<u8")

Where: the `.docs.parquet` files and the manifest in `tokenized_shards/source=<s>/snapshot=<n>/` (a Parquet
dataset of one schema, DOCS_SCHEMA), the `.bin`, `.idx` and `.urls` files in the side folder
`tokenized_binary/source=<s>/snapshot=<n>/` (BINARY_DATASET), named by the manifest's `binary_prefix`.
Shards written before that split have no `binary_prefix`: their binary files sit beside the manifest
(`binary_folder`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

DOCS_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("doc_hash", pa.uint64(), nullable=False),
        pa.field("language", pa.dictionary(pa.int32(), pa.string())),
    ]
)



DOCS_ROW_GROUP = 8192


def doc_hashes(doc_ids: list[str]) -> pa.Array:
    """The `doc_hash` column: xxh3_64 of each UTF-8 document id."""
    return pa.array([xxhash.xxh3_64_intdigest(doc_id.encode("utf-8")) for doc_id in doc_ids], pa.uint64())


BINARY_DATASET = "tokenized_binary"  # side dataset of the .bin / .idx / .urls files


def binary_folder(entry: dict[str, Any], prefix: str) -> str:
    """Root-relative folder of a shard's .bin / .idx / .urls files: the `binary_prefix` of its partition's
    manifest (or of a mix manifest's shard entry), else the partition folder `prefix` itself."""
    return entry.get("binary_prefix") or prefix


FORMAT_NAME = "sluice-tokens"
FORMAT_VERSION = 1


class ShardError(RuntimeError):
    """A shard that does not match its manifest (size, checksum, tokenizer); the message names the file."""


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def dtype_name(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


class ShardWriter:
    """Accumulates documents' token ids into one shard's .bin and .idx files in a local folder."""

    def __init__(self, folder: str, name: str, vocab_size: int) -> None:
        self.name = name
        self.dtype = token_dtype(vocab_size)
        self.bin_path = os.path.join(folder, f"{name}.bin")
        self.idx_path = os.path.join(folder, f"{name}.idx")
        self._bin = open(self.bin_path, "wb")  # noqa: SIM115 - closed in close()
        self.offsets = [0]

    @property
    def tokens(self) -> int:
        return self.offsets[-1]

    @property
    def documents(self) -> int:
        return len(self.offsets) - 1

    def add(self, ids: np.ndarray, eos_id: int | None = None) -> None:
        """Append one document's ids (and, if given, the EOS id after them)."""
        self._bin.write(np.ascontiguousarray(ids, dtype=self.dtype).tobytes())
        size = len(ids)
        if eos_id is not None:
            self._bin.write(np.asarray([eos_id], dtype=self.dtype).tobytes())
            size += 1
        self.offsets.append(self.offsets[-1] + size)

    def close(self) -> None:
        self._bin.close()
        np.asarray(self.offsets, dtype="<u8").tofile(self.idx_path)


def sha256_path(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class ShardView:
    """A memory-mapped shard: `doc(i)` returns document i's token ids (EOS included)."""

    name: str
    tokens: np.ndarray
    offsets: np.ndarray

    @classmethod
    def open(cls, bin_path: str, idx_path: str, dtype: str, name: str | None = None) -> ShardView:
        label = name or bin_path
        offsets = np.fromfile(idx_path, dtype="<u8")
        expected = int(offsets[-1]) * np.dtype(dtype).itemsize if len(offsets) else 0
        actual = os.path.getsize(bin_path)
        if len(offsets) == 0 or offsets[0] != 0 or actual != expected:
            raise ShardError(f"{label}: token file holds {actual} bytes but its index says {expected}; the shard is truncated or corrupt")
        tokens = np.memmap(bin_path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r") if actual else np.zeros(0, dtype)
        return cls(label, tokens, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def doc(self, index: int) -> np.ndarray:
        return self.tokens[self.offsets[index] : self.offsets[index + 1]]


def verify_files(folder_files: dict[str, str], manifest: dict[str, Any]) -> list[str]:
    """Check each listed file's SHA-256; returns messages naming the files that do not match."""
    problems = []
    for entry in manifest.get("files", []):
        path = folder_files.get(entry["key"])
        if path is None:
            problems.append(f"{entry['key']}: missing")
            continue
        if os.path.getsize(path) != entry["bytes"]:
            problems.append(f"{path}: {os.path.getsize(path)} bytes, manifest says {entry['bytes']}")
        elif sha256_path(path) != entry["sha256"]:
            problems.append(f"{path}: checksum mismatch (corrupt)")
    return problems


def write_urls(path: str, urls: list[str | None]) -> None:
    """A shard's `.urls` file (format in the module docstring)."""
    encoded = [(url or "").encode("utf-8", "surrogatepass") for url in urls]
    offsets = np.zeros(len(encoded) + 1, dtype="<u8")
    np.cumsum([len(item) for item in encoded], out=offsets[1:])
    with open(path, "wb") as handle:
        handle.write(offsets.tobytes())
        handle.write(b"".join(encoded))


class UrlFile:
    """Reads documents' URLs from a shard's `.urls` file with two small preads each."""

    def __init__(self, path: str, documents: int, name: str | None = None) -> None:
        self.path = path
        self.name = name or path
        self.documents = documents
        self.base = 8 * (documents + 1)
        self._fd = -1
        self._fd = os.open(path, os.O_RDONLY)
        if os.fstat(self._fd).st_size < self.base:
            self.close()
            raise ShardError(f"{self.name}: shorter than the offsets of its {documents} documents; the file is truncated or corrupt")

    def get(self, docs: np.ndarray | list[int]) -> list[str | None]:
        out: list[str | None] = []
        for doc in np.asarray(docs, dtype=np.int64).tolist():
            if not 0 <= doc < self.documents:
                raise IndexError(f"{self.name}: document {doc} outside [0, {self.documents})")
            begin, end = np.frombuffer(os.pread(self._fd, 16, 8 * doc), "<u8").tolist()
            raw = os.pread(self._fd, end - begin, self.base + begin) if end > begin else b""
            out.append(raw.decode("utf-8", "surrogatepass") or None)
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()
