"""Token-weighted data mixes over tokenized shards, written as an index (no copy of the tokens).

A mix gives each component -- a source (`web`) or a source's documents in one language (`web:en`) -- a
share of a token budget. Documents are split first: a share of each source's documents (chosen by a hash of
the document id, so the same ones for every mix and rebuild) is held out for validation, and documents that
share a word n-gram with a configured evaluation set are removed (`sluice.decontaminate`). For each
component, the training documents are visited in a seeded permutation (a fresh one per epoch) and taken
until its target is met; the last document is cut so the target is met exactly. A component may repeat up
to `max_epochs` times; a weight that would need more fails with `MixError` naming it. The selected ranges
of all components are interleaved by one more seeded permutation. Same shards + config -> same bytes.

Output (under `<root>/mixed_dataset/<mix>/`):
    ranges.parquet              training index, one row per selected range: shard (int32, into the
                                manifest's `shards`), start (int64, token offset in that shard's .bin),
                                length (int64)
    validation_ranges.parquet   validation index, same schema: every held-out document once
    contaminated.parquet        documents removed by decontamination: doc_id, source, partition, matched_ngrams
    _manifest.json              shards, components (weight, target, tokens, epochs, validation, removed),
                                splits {train, validation: {ranges, tokens, samples}}, dtype, seed, sequence_length
A split's token stream is its ranges concatenated; sample i is stream[i*L : i*L + L + 1] (inputs and labels
shifted by one), L = sequence_length. Every range is one document or the cut end of one, so the range
boundaries inside a sample are its document boundaries.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.config import MixSettings, split_weight_key
from sluice.layout import list_partitions, partition_prefix, read_manifest, write_manifest, write_parquet
from sluice.shards import doc_hashes
from sluice.storage import Store, local_temp_dir

TOKENIZED = "tokenized_shards"
MIXED = "mixed_dataset"
RANGES_SCHEMA = pa.schema([("shard", pa.int32()), ("start", pa.int64()), ("length", pa.int64())])
CONTAMINATED_SCHEMA = pa.schema(
    [("doc_id", pa.string()), ("source", pa.string()), ("partition", pa.string()), ("matched_ngrams", pa.int64())]
)
SPLIT_FILES = {"train": "ranges.parquet", "validation": "validation_ranges.parquet"}
_HASH_RANGE = float(1 << 64)


class MixError(ValueError):
    """A mix that cannot be built as configured (missing data, weight beyond the epoch cap, tokenizer mismatch)."""


@dataclass
class SourceDocs:
    """Document ranges of one mix component: which shard, where its tokens start, how many."""

    name: str
    shard_ids: np.ndarray  # int32
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())

    def subset(self, mask: np.ndarray) -> SourceDocs:
        return SourceDocs(self.name, self.shard_ids[mask], self.starts[mask], self.lengths[mask])


@dataclass
class SourceTable:
    """Every tokenized document of one source, with what the mix needs to split it."""

    docs: SourceDocs
    doc_hash: np.ndarray  # uint64, xxh3_64 of doc_id
    language: np.ndarray  # object: lid.176 code or None
    contaminated: np.ndarray  # bool


def _targets(weights: dict[str, float], budget: int) -> dict[str, int]:
    """Split the budget by weight, exactly (largest remainder), in a deterministic order."""
    total = sum(weights.values())
    names = sorted(weights)
    exact = {name: budget * weights[name] / total for name in names}
    targets = {name: int(np.floor(exact[name])) for name in names}
    leftover = budget - sum(targets.values())
    for name in sorted(names, key=lambda n: (-(exact[n] - targets[n]), n))[:leftover]:
        targets[name] += 1
    return targets


def read_docs_table(path: str) -> pa.Table:
    """A shard's `.docs.parquet`, with doc_hash and language derived for shards written before they existed."""
    table = pq.read_table(path)
    if "doc_hash" not in table.column_names:
        table = table.append_column("doc_hash", doc_hashes(table.column("doc_id").to_pylist()))
    if "language" not in table.column_names:
        table = table.append_column("language", pa.nulls(table.num_rows, pa.string()))
    return table


def collect_shards(
    store: Store,
    sources: list[str],
    file_reader: Callable[[str], str],
    contaminated_ids: set[str] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, SourceTable], dict[str, Any]]:
    """Every tokenized shard of the named sources, in global partition order, with its documents.

    `file_reader(key)` returns a local path of the file at `key` (fetching it if the store is remote).
    """
    shards: list[dict[str, Any]] = []
    pieces: dict[str, list[tuple[np.ndarray, ...]]] = {name: [] for name in sources}
    info: dict[str, Any] = {}
    flagged = pa.array(sorted(contaminated_ids or ()), pa.string())
    for ref in list_partitions(store, TOKENIZED):
        if ref.source not in pieces:
            continue
        prefix = partition_prefix(TOKENIZED, ref)
        manifest = read_manifest(store, prefix)
        if manifest is None:
            continue
        for key in ("tokenizer_sha256", "dtype", "vocab_size", "eos_id"):
            if key in info and info[key] != manifest[key]:
                raise MixError(
                    f"{store.uri(prefix)} was tokenized with {key}={manifest[key]!r} but other shards have "
                    f"{info[key]!r}: re-materialize tokenized_shards so every source uses the same tokenizer"
                )
            info[key] = manifest[key]
        for shard in manifest["shards"]:
            offsets = np.fromfile(file_reader(f"{prefix}/{shard['name']}.idx"), dtype="<u8")
            docs = read_docs_table(file_reader(f"{prefix}/{shard['name']}.docs.parquet"))
            if docs.num_rows != len(offsets) - 1:
                raise MixError(f"{store.uri(prefix)}/{shard['name']}: {docs.num_rows} document ids but {len(offsets) - 1} documents")
            shard_id = len(shards)
            shards.append({"id": shard_id, "prefix": prefix, "name": shard["name"], "source": ref.source, "partition": ref.key})
            contaminated = pc.is_in(docs.column("doc_id"), value_set=flagged).to_numpy(zero_copy_only=False)
            pieces[ref.source].append(
                (
                    np.full(len(offsets) - 1, shard_id, np.int32),
                    offsets[:-1].astype(np.int64),
                    np.diff(offsets).astype(np.int64),
                    docs.column("doc_hash").to_numpy(),
                    np.asarray(docs.column("language").cast(pa.string()).to_pylist(), dtype=object),
                    contaminated.astype(bool),
                )
            )
    tables = {}
    for name, parts in pieces.items():
        if parts:
            cols = [np.concatenate([p[i] for p in parts]) for i in range(6)]
        else:
            cols = [np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, object), np.zeros(0, bool)]
        tables[name] = SourceTable(SourceDocs(name, cols[0], cols[1], cols[2]), cols[3], cols[4], cols[5])
    return shards, tables, info


def validation_mask(doc_hash: np.ndarray, share: float) -> np.ndarray:
    """Documents held out for validation: those whose id hash falls in the first `share` of the hash range."""
    if share <= 0:
        return np.zeros(len(doc_hash), bool)
    return doc_hash < np.uint64(min(share * _HASH_RANGE, _HASH_RANGE - 1))


def select_source(docs: SourceDocs, target: int, seed: int, max_epochs: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Pick document ranges of one component adding up to exactly `target` tokens; returns epochs used."""
    if target == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0
    available = docs.tokens
    if available == 0:
        raise MixError(f"source {docs.name!r} has no tokenized training documents, but the mix needs {target} tokens of it")
    epochs_needed = target / available
    if epochs_needed > max_epochs:
        raise MixError(
            f"source {docs.name!r}: the weight asks for {target} tokens but it has {available}; that is "
            f"{epochs_needed:.2f} epochs, above max_epochs={max_epochs}. Lower its weight or the token budget, "
            "raise max_epochs, or add data"
        )
    shard_parts, start_parts, length_parts = [], [], []
    remaining = target
    epoch = 0
    source_key = zlib.crc32(docs.name.encode())
    while remaining > 0:
        order = np.random.default_rng([seed, source_key, epoch]).permutation(len(docs.lengths))
        lengths = docs.lengths[order]
        cumulative = np.cumsum(lengths)
        take = int(np.searchsorted(cumulative, remaining, side="left")) + 1
        take = min(take, len(order))
        chosen = order[:take]
        chosen_lengths = docs.lengths[chosen].copy()
        overshoot = int(chosen_lengths.sum()) - remaining
        if overshoot > 0:
            chosen_lengths[-1] -= overshoot  # cut the last document so the target is met exactly
        shard_parts.append(docs.shard_ids[chosen])
        start_parts.append(docs.starts[chosen])
        length_parts.append(chosen_lengths)
        remaining -= int(chosen_lengths.sum())
        epoch += 1
    return np.concatenate(shard_parts), np.concatenate(start_parts), np.concatenate(length_parts), epochs_needed


def _component_docs(table: SourceTable, key: str) -> np.ndarray:
    language = split_weight_key(key)[1]
    if language is None:
        return np.ones(len(table.doc_hash), bool)
    return table.language == language


def _write_ranges(store: Store, key: str, shard_ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    table = pa.table({"shard": shard_ids.astype(np.int32), "start": starts, "length": lengths}, schema=RANGES_SCHEMA)
    return write_parquet(store, key, table, row_group_size=1 << 16)


def build_mix(
    store: Store,
    mix_name: str,
    settings: MixSettings,
    file_reader: Callable[[str], str],
    tokenizer_sha256: str | None = None,
    contaminated: list[dict[str, Any]] | None = None,
    decontamination: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build and publish the index of one mix; returns its manifest.

    `tokenizer_sha256`: the current tokenizer; shards from another one are refused.
    `contaminated`: rows (doc_id, source, partition, matched_ngrams) of documents to remove.
    """
    sources = settings.sources
    contaminated = contaminated or []
    shards, tables, info = collect_shards(store, sources, file_reader, {row["doc_id"] for row in contaminated})
    if not shards:
        raise MixError(f"mix {mix_name!r}: no tokenized shards exist for sources {sources}; materialize tokenized_shards first")
    if tokenizer_sha256 is not None and info["tokenizer_sha256"] != tokenizer_sha256:
        raise MixError(
            f"mix {mix_name!r}: the shards were tokenized with tokenizer {info['tokenizer_sha256'][:16]}... but the "
            f"current tokenizer is {tokenizer_sha256[:16]}...; re-materialize tokenized_shards before mixing"
        )
    targets = _targets(settings.weights, settings.token_budget)
    total_weight = sum(settings.weights.values())
    train_parts, validation_parts, rows = [], [], []
    for key in sorted(settings.weights):
        table = tables[split_weight_key(key)[0]]
        in_component = _component_docs(table, key)
        removed = in_component & table.contaminated
        held_out = in_component & ~table.contaminated & validation_mask(table.doc_hash, settings.validation_share)
        training = in_component & ~table.contaminated & ~held_out
        train_docs = table.docs.subset(training)
        train_docs.name = key
        shard_ids, starts, lengths, epochs = select_source(train_docs, targets[key], settings.seed, settings.max_epochs)
        train_parts.append((shard_ids, starts, lengths))
        validation = table.docs.subset(held_out)
        validation_parts.append((validation.shard_ids, validation.starts, validation.lengths))
        rows.append(
            {
                "component": key,
                "source": split_weight_key(key)[0],
                "language": split_weight_key(key)[1],
                "weight": settings.weights[key] / total_weight,
                "target_tokens": targets[key],
                "available_tokens": train_docs.tokens,
                "available_documents": len(train_docs.lengths),
                "selected_ranges": len(lengths),
                "tokens": int(lengths.sum()),
                "realized_share": int(lengths.sum()) / settings.token_budget,
                "epochs": round(epochs, 4),
                "validation_documents": len(validation.lengths),
                "validation_tokens": validation.tokens,
                "contaminated_documents": int(removed.sum()),
            }
        )
    prefix = f"{MIXED}/{mix_name}"
    splits, files = {}, []
    for split, parts, salt in (("train", train_parts, 0x6D6978), ("validation", validation_parts, 0x76616C)):
        shard_ids, starts, lengths = (np.concatenate([p[i] for p in parts]) for i in range(3))
        order = np.random.default_rng([settings.seed, salt]).permutation(len(lengths))
        files.append(_write_ranges(store, f"{prefix}/{SPLIT_FILES[split]}", shard_ids[order], starts[order], lengths[order]))
        tokens = int(lengths.sum())
        splits[split] = {
            "ranges": SPLIT_FILES[split],
            "ranges_count": len(lengths),
            "tokens": tokens,
            "samples": max(0, (tokens - 1) // settings.sequence_length),
        }
    files.append(write_parquet(store, f"{prefix}/contaminated.parquet", pa.Table.from_pylist(contaminated, schema=CONTAMINATED_SCHEMA)))
    manifest = {
        "format": "sluice-mix",
        "version": 2,
        "mix": mix_name,
        "seed": settings.seed,
        "sequence_length": settings.sequence_length,
        "token_budget": settings.token_budget,
        "validation_share": settings.validation_share,
        "tokens": splits["train"]["tokens"],
        "samples": splits["train"]["samples"],
        **info,
        "splits": splits,
        "shards": shards,
        "sources": rows,
        "decontamination": {**(decontamination or {}), "removed_documents": len(contaminated)},
        "files": files,
    }
    write_manifest(store, prefix, manifest)
    return manifest


def range_documents(
    manifest: dict[str, Any], ranges: pa.Table, file_reader: Callable[[str], str], sources: set[str] | None = None
) -> np.ndarray:
    """Index, inside its shard, of the document each range belongs to, re-derived from the shards' .idx
    offsets (-1 for ranges of shards whose source is not in `sources`, when given)."""
    shard_ids = ranges.column("shard").to_numpy()
    starts = ranges.column("start").to_numpy()
    documents = np.full(len(shard_ids), -1, np.int64)
    for shard_id in np.unique(shard_ids):
        shard = manifest["shards"][shard_id]
        if sources is not None and shard["source"] not in sources:
            continue
        offsets = np.fromfile(file_reader(f"{shard['prefix']}/{shard['name']}.idx"), dtype="<u8").astype(np.int64)
        mask = shard_ids == shard_id
        # A cut range starts where its document starts, so the document is the last offset <= start.
        documents[mask] = np.searchsorted(offsets, starts[mask], side="right") - 1
    return documents


def range_components(manifest: dict[str, Any], ranges: pa.Table, file_reader: Callable[[str], str]) -> np.ndarray:
    """The mix component of every range, re-derived from the shards (source) and their document tables (language)."""
    shard_ids = ranges.column("shard").to_numpy()
    shard_source = np.array([shard["source"] for shard in manifest["shards"]], dtype=object)
    components = shard_source[shard_ids] if len(shard_ids) else np.zeros(0, object)
    by_language = {row["source"] for row in manifest["sources"] if row.get("language")}
    if not by_language:
        return components
    components = components.copy()
    documents = range_documents(manifest, ranges, file_reader, by_language)
    for shard_id in np.unique(shard_ids[documents >= 0]):
        shard = manifest["shards"][shard_id]
        languages = np.asarray(read_docs_table(file_reader(f"{shard['prefix']}/{shard['name']}.docs.parquet")).column("language").cast(pa.string()).to_pylist(), dtype=object)
        mask = shard_ids == shard_id
        components[mask] = [f"{shard['source']}:{language}" for language in languages[documents[mask]]]
    return components


def realized_shares(manifest: dict[str, Any], ranges: pa.Table, file_reader: Callable[[str], str] | None = None) -> dict[str, float]:
    """Token share of each mix component, recomputed from the written index."""
    shares = {row.get("component", row["source"]): 0.0 for row in manifest["sources"]}
    lengths = ranges.column("length").to_numpy()
    total = lengths.sum()
    if total == 0:
        return shares
    if file_reader is None:
        file_reader = _unavailable
    components = range_components(manifest, ranges, file_reader)
    for name in shares:
        shares[name] = float(lengths[components == name].sum() / total)
    return shares


def _unavailable(key: str) -> str:
    raise MixError(f"a file reader is needed to resolve languages ({key})")


def iter_split_tokens(store: Store, manifest: dict[str, Any], split: str, file_reader: Callable[[str], str]) -> Iterator[np.ndarray]:
    """The token stream of one split of a built mix, range by range (sequential, memory-mapped)."""
    if split not in manifest.get("splits", {"train": None}):
        raise MixError(f"mix {manifest['mix']!r} has no split {split!r}; splits are {sorted(manifest.get('splits', ['train']))}")
    prefix = f"{MIXED}/{manifest['mix']}"
    ranges_key = manifest.get("splits", {}).get(split, {}).get("ranges", SPLIT_FILES[split])
    dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
    tokens: dict[int, np.ndarray] = {}
    for batch in pq.ParquetFile(file_reader(f"{prefix}/{ranges_key}")).iter_batches(batch_size=1 << 16):
        for shard_id, start, length in zip(*(batch.column(n).to_numpy() for n in ("shard", "start", "length")), strict=True):
            if shard_id not in tokens:
                shard = manifest["shards"][shard_id]
                tokens[shard_id] = np.memmap(file_reader(f"{shard['prefix']}/{shard['name']}.bin"), dtype=dtype, mode="r")
            yield tokens[shard_id][start : start + length]


def export_sequences(
    store: Store,
    mix_name: str,
    split: str,
    destination: Store,
    key: str,
    file_reader: Callable[[str], str],
    rows_per_group: int = 1024,
) -> dict[str, Any]:
    """Write one split of a mix as Parquet rows of `sequence_length` token ids (`input_ids`, list<int32>).

    Row i is the split's token stream [i*L, (i+1)*L); the tail shorter than L is left out (and counted).
    Readable by any Parquet reader, e.g. `datasets.load_dataset("parquet", data_files=...)`.
    """
    manifest = read_manifest(store, f"{MIXED}/{mix_name}")
    if manifest is None:
        raise MixError(f"{store.uri(f'{MIXED}/{mix_name}')} has no manifest: materialize mixed_dataset[{mix_name}] first")
    length = int(manifest["sequence_length"])
    schema = pa.schema([("input_ids", pa.list_(pa.int32()))])
    scratch = local_temp_dir()
    path = os.path.join(scratch, "export.parquet")
    rows = 0
    try:
        with pq.ParquetWriter(path, schema, compression="zstd") as writer:
            # One row group's tokens are gathered in a fixed buffer (each token copied once).
            group_tokens = length * rows_per_group
            buffer = np.empty(group_tokens, np.int32)
            filled = 0
            for piece in iter_split_tokens(store, manifest, split, file_reader):
                offset = 0
                while offset < len(piece):
                    take = min(group_tokens - filled, len(piece) - offset)
                    buffer[filled : filled + take] = piece[offset : offset + take]
                    filled += take
                    offset += take
                    if filled == group_tokens:
                        writer.write_table(_sequence_table(buffer.copy(), length, schema))
                        rows += rows_per_group
                        filled = 0
            full = filled // length * length
            if full:
                writer.write_table(_sequence_table(buffer[:full].copy(), length, schema))
                rows += full // length
            leftover = filled - full
        destination.put_file(path, key)
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return {"uri": destination.uri(key), "rows": rows, "sequence_length": length, "tokens_left_out": int(leftover)}


def _sequence_table(tokens: np.ndarray, length: int, schema: pa.Schema) -> pa.Table:
    offsets = np.arange(0, len(tokens) + 1, length, dtype=np.int32)
    return pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))}, schema=schema)
