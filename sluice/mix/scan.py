"""One pass over the tokenized shards of a mix's sources: per-document columns to spill files, per-component totals.

Shards are read one at a time (their `.idx` offsets and `.docs.parquet` columns), in global partition order,
so memory is bounded by the largest shard. Each document is classified with numpy: its component (source, or
source and language), contaminated (flagged by the partition's decontamination output), held out for
validation, or training. Training and validation documents are appended to two local spill files (fixed-width
records, `SPILL`); per component the scan sums tokens and documents, and histograms the training documents'
draws (`sluice.mix.plan`), which is all the selection needs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.config import MixSettings, split_weight_key
from sluice.io.layout import PartitionRef, list_partitions, local_copy, partition_prefix, read_manifest
from sluice.io.storage import Store
from sluice.mix.plan import HIST_BINS, HIST_BITS, MixError, component_key, draws, validation_threshold
from sluice.mix.shard_table import SHARD_TABLE, ShardTableWriter
from sluice.tokens.shards import binary_folder, doc_hashes

TOKENIZED = "tokenized_shards"
SPILL = np.dtype(
    [
        ("u", "<u8"),
        ("doc_hash", "<u8"),
        ("start", "<u8"),
        ("shard", "<u4"),
        ("doc", "<u4"),
        ("length", "<u4"),
        ("component", "<u2"),
        ("pad", "<u2"),
    ]
)
U32_LIMIT = 1 << 32
# Flagged documents of one partition for this mix: a table with doc_id and matched_ngrams (may be empty).
FlagReader = Callable[[PartitionRef], pa.Table]


def read_docs_table(path: str, columns: list[str] | None = None) -> pa.Table:
    """A shard's `.docs.parquet`, with doc_hash and language derived for shards written before they existed."""
    present = pq.ParquetFile(path).schema_arrow.names
    wanted = columns or ["doc_id", "doc_hash", "language"]
    read = [name for name in wanted if name in present]
    if "doc_hash" in wanted and "doc_hash" not in present and "doc_id" not in read:
        read.append("doc_id")
    table = pq.ParquetFile(path).read(columns=read)
    if "doc_hash" in wanted and "doc_hash" not in present:
        table = table.append_column("doc_hash", doc_hashes(table.column("doc_id").to_pylist()))
    if "language" in wanted and "language" not in present:
        table = table.append_column("language", pa.nulls(table.num_rows, pa.string()))
    return table


@dataclass
class Components:
    """The mix's components (sorted weight keys) and, per source, how its documents map to them."""

    names: list[str]
    whole: dict[str, int]  # source -> component id, for sources weighted whole
    by_language: dict[str, dict[str, int]]  # source -> language -> component id

    @classmethod
    def of(cls, settings: MixSettings) -> Components:
        names = sorted(settings.weights)
        whole, by_language = {}, {}
        for index, name in enumerate(names):
            source, language = split_weight_key(name)
            if language is None:
                whole[source] = index
            else:
                by_language.setdefault(source, {})[language] = index
        return cls(names, whole, by_language)

    def codes(self, source: str, languages: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Component id of each document of `source` (-1: a language the mix does not weight)."""
        count = len(languages)
        if source in self.whole:
            return np.full(count, self.whole[source], np.int32)
        mapping = self.by_language.get(source, {})
        encoded = pc.dictionary_encode(languages.cast(pa.string()) if not pa.types.is_dictionary(languages.type) else languages)
        encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
        lookup = np.array([mapping.get(value, -1) for value in encoded.dictionary.to_pylist()] + [-1], np.int32)
        indices = encoded.indices.fill_null(len(lookup) - 1).to_numpy(zero_copy_only=False)
        return lookup[indices]


@dataclass
class Scan:
    """What the mix needs from one pass over its sources' shards."""

    components: Components
    folder: str
    shards: ShardTableWriter = field(init=False)  # the shard table, written as the scan goes (`sluice.mix.shard_table`)
    info: dict[str, Any] = field(default_factory=dict)
    train_documents: int = 0
    validation_documents: int = 0
    flagged_keys: list[np.ndarray] = field(default_factory=list)  # shard << 32 | doc of contaminated documents
    contaminated_rows: list[pa.Table] = field(default_factory=list)
    blocked_keys: list[np.ndarray] = field(default_factory=list)  # shard << 32 | doc of blocklisted documents
    blocked_rows: list[pa.Table] = field(default_factory=list)

    def __post_init__(self) -> None:
        count = len(self.components.names)
        self.available_tokens = np.zeros(count, np.int64)
        self.available_documents = np.zeros(count, np.int64)
        self.validation_tokens = np.zeros(count, np.int64)
        self.validation_docs = np.zeros(count, np.int64)
        self.contaminated = np.zeros(count, np.int64)
        self.blocked = np.zeros(count, np.int64)  # documents left out by the blocklist, per component
        self.blocked_tokens = np.zeros(count, np.int64)
        self.token_hist = np.zeros((count, HIST_BINS), np.int64)
        self.count_hist = np.zeros((count, HIST_BINS), np.int64)
        self.shards = ShardTableWriter(os.path.join(self.folder, SHARD_TABLE))
        self.train_path = os.path.join(self.folder, "train.spill")
        self.validation_path = os.path.join(self.folder, "validation.spill")

    def flagged(self) -> np.ndarray:
        return np.unique(np.concatenate(self.flagged_keys)) if self.flagged_keys else np.zeros(0, np.uint64)

    def blocked_documents(self) -> np.ndarray:
        return np.unique(np.concatenate(self.blocked_keys)) if self.blocked_keys else np.zeros(0, np.uint64)


def _check_tokenizer(store: Store, prefix: str, manifest: dict[str, Any], info: dict[str, Any]) -> None:
    for key in ("tokenizer_sha256", "dtype", "vocab_size", "eos_id"):
        if key in info and info[key] != manifest[key]:
            raise MixError(
                f"{store.uri(prefix)} was tokenized with {key}={manifest[key]!r} but other shards have "
                f"{info[key]!r}: re-materialize tokenized_shards so every source uses the same tokenizer"
            )
        info[key] = manifest[key]


def scan_sources(
    store: Store, settings: MixSettings, folder: str, flags: FlagReader | None = None, scratch: str | None = None, blocked: FlagReader | None = None
) -> Scan:
    """Classify every document of the mix's sources and spill training / validation documents to `folder`.
    `flags(ref)`: contaminated documents (doc_id, matched_ngrams); `blocked(ref)`: blocklisted documents
    (doc_id, rule, entry); both are left out of both splits and counted."""
    components = Components.of(settings)
    scan = Scan(components, folder)
    keys = np.array([component_key(settings.seed, name) for name in components.names] or [0], np.uint64)
    threshold = validation_threshold(settings.validation_share)
    sources = set(settings.sources)
    with open(scan.train_path, "wb") as train_out, open(scan.validation_path, "wb") as validation_out:
        for ref in list_partitions(store, TOKENIZED):
            if ref.source not in sources:
                continue
            prefix = partition_prefix(TOKENIZED, ref)
            manifest = read_manifest(store, prefix)
            if manifest is None:
                continue
            _check_tokenizer(store, prefix, manifest, scan.info)
            flagged = flags(ref) if flags is not None else None
            blocked_rows = blocked(ref) if blocked is not None else None
            if blocked_rows is not None and not blocked_rows.num_rows:
                blocked_rows = None
            need_ids = (flagged is not None and flagged.num_rows > 0) or blocked_rows is not None
            for shard in manifest["shards"]:
                shard_id = len(scan.shards)
                if shard_id >= U32_LIMIT:
                    raise MixError("a mix can index at most 2^32 shards")
                binary = binary_folder(manifest, prefix)
                scan.shards.append(
                    {"id": shard_id, "prefix": prefix, "binary_prefix": binary, "name": shard["name"], "source": ref.source, "partition": ref.key,
                     "documents": int(shard["documents"]), "tokens": int(shard["tokens"]),
                     **{key: int(shard[key]) for key in ("part", "first_row") if key in shard}}
                )
                with local_copy(store, f"{binary}/{shard['name']}.idx", scratch) as path:
                    offsets = np.fromfile(path, dtype="<u8")
                columns = ["doc_hash", "language"] + (["doc_id"] if need_ids else [])
                with local_copy(store, f"{prefix}/{shard['name']}.docs.parquet", scratch) as path:
                    docs = read_docs_table(path, columns)
                _classify(scan, ref, shard_id, offsets, docs, flagged, keys, threshold, train_out, validation_out, blocked_rows)
    return scan


def _classify(scan: Scan, ref: PartitionRef, shard_id: int, offsets: np.ndarray, docs: pa.Table, flagged: pa.Table | None,
              keys: np.ndarray, threshold: np.uint64, train_out, validation_out, blocked: pa.Table | None = None) -> None:
    count = len(offsets) - 1
    name = f"{ref.key}/shard {shard_id}"
    if docs.num_rows != count:
        raise MixError(f"{name}: {docs.num_rows} document ids but {count} documents")
    if count >= U32_LIMIT:
        raise MixError(f"{name}: more than 2^32 documents in one shard")
    lengths = np.diff(offsets).astype(np.int64)
    if count and lengths.max() >= U32_LIMIT:
        raise MixError(f"{name}: a document of 2^32 tokens or more")
    component = scan.components.codes(ref.source, docs.column("language"))
    doc_hash = docs.column("doc_hash").to_numpy().astype(np.uint64)
    contaminated = np.zeros(count, bool)
    if flagged is not None and flagged.num_rows:
        contaminated = pc.is_in(docs.column("doc_id"), value_set=flagged.column("doc_id")).to_numpy(zero_copy_only=False)
        if contaminated.any():
            where = np.flatnonzero(contaminated)
            scan.flagged_keys.append((np.uint64(shard_id) << np.uint64(32)) | where.astype(np.uint64))
            ids = docs.column("doc_id").take(pa.array(where))
            matches = flagged.select(["doc_id", "matched_ngrams"])
            rows = pa.table({"doc_id": ids}).join(matches, "doc_id", join_type="left outer")
            rows = rows.append_column("source", pa.array([ref.source] * rows.num_rows, pa.string()))
            scan.contaminated_rows.append(rows.append_column("partition", pa.array([ref.key] * rows.num_rows, pa.string())))
    weighted = component >= 0
    is_blocked = np.zeros(count, bool)
    if blocked is not None:
        is_blocked = pc.is_in(docs.column("doc_id"), value_set=blocked.column("doc_id")).to_numpy(zero_copy_only=False)
        if is_blocked.any():
            where = np.flatnonzero(is_blocked)
            scan.blocked_keys.append((np.uint64(shard_id) << np.uint64(32)) | where.astype(np.uint64))
            rows = pa.table({"doc_id": docs.column("doc_id").take(pa.array(where)), "tokens": pa.array(lengths[where], pa.int64())})
            rows = rows.join(blocked.select(["doc_id", "rule", "entry"]), "doc_id", join_type="left outer")
            rows = rows.append_column("source", pa.array([ref.source] * rows.num_rows, pa.string()))
            scan.blocked_rows.append(rows.append_column("partition", pa.array([ref.key] * rows.num_rows, pa.string())))
            mine = weighted & is_blocked
            np.add.at(scan.blocked, component[mine], 1)
            np.add.at(scan.blocked_tokens, component[mine], lengths[mine])
    excluded = contaminated | is_blocked
    held_out = doc_hash < threshold
    scan_components = len(scan.components.names)
    np.add.at(scan.contaminated, component[weighted & contaminated], 1)
    for mask, out, is_train in ((weighted & ~excluded & ~held_out, train_out, True), (weighted & ~excluded & held_out, validation_out, False)):
        where = np.flatnonzero(mask)
        records = np.zeros(len(where), SPILL)
        records["doc_hash"], records["start"], records["shard"] = doc_hash[where], offsets[where], shard_id
        records["doc"], records["length"], records["component"] = where, lengths[where], component[where]
        by_component_tokens = np.bincount(component[where], weights=lengths[where], minlength=scan_components).astype(np.int64)
        by_component_docs = np.bincount(component[where], minlength=scan_components)
        if is_train:
            records["u"] = draws(records["doc_hash"], keys[records["component"]])
            slot = records["component"].astype(np.int64) * (1 << HIST_BITS) + (records["u"] >> np.uint64(64 - HIST_BITS)).astype(np.int64)
            scan.token_hist += np.bincount(slot, weights=lengths[where], minlength=scan.token_hist.size).astype(np.int64).reshape(scan.token_hist.shape)
            scan.count_hist += np.bincount(slot, minlength=scan.count_hist.size).reshape(scan.count_hist.shape)
            scan.available_tokens += by_component_tokens
            scan.available_documents += by_component_docs
            scan.train_documents += len(where)
        else:
            scan.validation_tokens += by_component_tokens
            scan.validation_docs += by_component_docs
            scan.validation_documents += len(where)
        out.write(records.tobytes())


def iter_spill(path: str, chunk: int = 1 << 18):
    """Records of a spill file, `chunk` at a time."""
    with open(path, "rb") as handle:
        while True:
            block = np.fromfile(handle, SPILL, count=chunk)
            if not len(block):
                return
            yield block
