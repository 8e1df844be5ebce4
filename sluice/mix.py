"""Token-weighted data mixes over tokenized shards, written as an index (no copy of the tokens).

A mix gives each source a share of a token budget. For each source, documents are visited in a seeded
permutation (a fresh one per epoch) and taken until the source's target is met; the last document is
cut so the target is met exactly. A source may repeat up to `max_epochs` times; a weight that would need
more fails with `MixError` naming the source. The selected document ranges of all sources are then
interleaved by one more seeded permutation. Same shards + same config -> byte-identical index.

Output (under `<root>/mixed_dataset/<mix>/`):
    ranges.parquet   one row per selected range: shard (int32, into the manifest's `shards`),
                     start (int64, token offset inside that shard's .bin), length (int64)
    _manifest.json   shards, sources table (weight, target, tokens, realized share, epochs), dtype, seed,
                     sequence_length; the token stream is the ranges concatenated, and training sample i
                     is stream[i*L : i*L + L + 1] (inputs and shifted labels), L = sequence_length.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.config import MixSettings
from sluice.layout import list_partitions, partition_prefix, read_manifest, write_manifest, write_parquet
from sluice.storage import Store

TOKENIZED = "tokenized_shards"
RANGES_SCHEMA = pa.schema([("shard", pa.int32()), ("start", pa.int64()), ("length", pa.int64())])


class MixError(ValueError):
    """A mix that cannot be built as configured (missing data, weight beyond the epoch cap, tokenizer mismatch)."""


@dataclass
class SourceDocs:
    name: str
    shard_ids: np.ndarray  # int32
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())


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


def collect_shards(store: Store, sources: list[str], idx_reader) -> tuple[list[dict[str, Any]], dict[str, SourceDocs], dict[str, Any]]:
    """Every tokenized shard of the named sources, in global partition order, with document ranges.

    `idx_reader(key)` returns the uint64 offsets of one shard's .idx file.
    """
    shards: list[dict[str, Any]] = []
    per_source: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {name: [] for name in sources}
    info: dict[str, Any] = {}
    for ref in list_partitions(store, TOKENIZED):
        if ref.source not in per_source:
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
            offsets = idx_reader(f"{prefix}/{shard['name']}.idx")
            shard_id = len(shards)
            shards.append({"id": shard_id, "prefix": prefix, "name": shard["name"], "source": ref.source, "partition": ref.key})
            starts = offsets[:-1].astype(np.int64)
            lengths = np.diff(offsets).astype(np.int64)
            per_source[ref.source].append((np.full(len(starts), shard_id, np.int32), starts, lengths))
    docs = {}
    for name, pieces in per_source.items():
        if pieces:
            docs[name] = SourceDocs(name, *(np.concatenate([p[i] for p in pieces]) for i in range(3)))
        else:
            docs[name] = SourceDocs(name, np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64))
    return shards, docs, info


def select_source(docs: SourceDocs, target: int, seed: int, max_epochs: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Pick document ranges of one source adding up to exactly `target` tokens; returns epochs used."""
    if target == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0
    available = docs.tokens
    if available == 0:
        raise MixError(f"source {docs.name!r} has no tokenized documents, but the mix needs {target} tokens of it")
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


def build_mix(store: Store, mix_name: str, settings: MixSettings, idx_reader) -> dict[str, Any]:
    sources = sorted(settings.weights)
    shards, docs, info = collect_shards(store, sources, idx_reader)
    if not shards:
        raise MixError(f"mix {mix_name!r}: no tokenized shards exist for sources {sources}; materialize tokenized_shards first")
    targets = _targets(settings.weights, settings.token_budget)
    selected = []
    table_rows = []
    total_weight = sum(settings.weights.values())
    for name in sources:
        shard_ids, starts, lengths, epochs = select_source(docs[name], targets[name], settings.seed, settings.max_epochs)
        selected.append((shard_ids, starts, lengths))
        table_rows.append(
            {
                "source": name,
                "weight": settings.weights[name] / total_weight,
                "target_tokens": targets[name],
                "available_tokens": docs[name].tokens,
                "available_documents": len(docs[name].lengths),
                "selected_ranges": len(lengths),
                "epochs": round(epochs, 4),
            }
        )
    shard_ids = np.concatenate([s[0] for s in selected])
    starts = np.concatenate([s[1] for s in selected])
    lengths = np.concatenate([s[2] for s in selected])
    order = np.random.default_rng([settings.seed, 0x6D6978]).permutation(len(lengths))
    shard_ids, starts, lengths = shard_ids[order], starts[order], lengths[order]
    total_tokens = int(lengths.sum())
    prefix = f"mixed_dataset/{mix_name}"
    ranges_entry = write_parquet(
        store,
        f"{prefix}/ranges.parquet",
        pa.table({"shard": shard_ids, "start": starts, "length": lengths}, schema=RANGES_SCHEMA),
        row_group_size=1 << 16,
    )
    manifest = {
        "format": "sluice-mix",
        "version": 1,
        "mix": mix_name,
        "seed": settings.seed,
        "sequence_length": settings.sequence_length,
        "token_budget": settings.token_budget,
        "tokens": total_tokens,
        "samples": max(0, (total_tokens - 1) // settings.sequence_length),
        **info,
        "shards": shards,
        "sources": table_rows,
        "files": [ranges_entry],
    }
    write_manifest(store, prefix, manifest)
    return manifest


def realized_shares(manifest: dict[str, Any], ranges: pa.Table) -> dict[str, float]:
    """Token share of each source, recomputed from the written index."""
    shard_source = np.array([shard["source"] for shard in manifest["shards"]], dtype=object)
    shard_ids = ranges.column("shard").to_numpy()
    lengths = ranges.column("length").to_numpy()
    total = lengths.sum()
    shares = {row["source"]: 0.0 for row in manifest["sources"]}
    if total == 0:
        return shares
    for name in shares:
        mask = shard_source[shard_ids] == name
        shares[name] = float(lengths[mask].sum() / total)
    return shares
