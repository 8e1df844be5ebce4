"""Build one mix: scan its sources' shards, plan each component, write both splits' indexes, publish."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.config import MixSettings, split_weight_key
from sluice.io.layout import _remove_tree, named_prefix, sha256_file, write_manifest, write_parquet
from sluice.io.storage import Store, local_temp_dir
from sluice.mix.order import KeyedBuckets, SplitStats, emit_copies, emit_validation, write_split
from sluice.mix.plan import HIST_BITS, ComponentPlan, MixError, plan_component, settle_cut, targets
from sluice.mix.scan import FlagReader, Scan, iter_spill, scan_sources
from sluice.mix.shard_table import SHARD_TABLE

MIXED = "mixed_dataset"
INDEX = "mixed_index"
CONTAMINATED = "mixed_contaminated"
BLOCKED = "mixed_blocked"
FORMAT = "sluice-mix"
VERSION = 4  # 4: the shards are a Parquet table beside the indexes (`sluice.mix.shard_table`), not a manifest list
SPLITS = ("train", "validation")
CONTAMINATED_SCHEMA = pa.schema(
    [("doc_id", pa.string()), ("source", pa.string()), ("partition", pa.string()), ("matched_ngrams", pa.int64())]
)
BLOCKED_SCHEMA = pa.schema(
    [("doc_id", pa.string()), ("source", pa.string()), ("partition", pa.string()), ("rule", pa.string()), ("entry", pa.string()), ("tokens", pa.int64())]
)


def mix_prefix(mix: str) -> str:
    """The mix's folder in the `mixed_dataset` dataset (its manifest and Parquet ranges)."""
    return named_prefix(MIXED, "mix", mix)


def index_prefix(mix: str) -> str:
    """The folder of the mix's binary indexes (side dataset `mixed_index`)."""
    return named_prefix(INDEX, "mix", mix)


def _plans(scan: Scan, settings: MixSettings) -> list[ComponentPlan]:
    wanted = targets(settings.weights, settings.token_budget)
    plans = []
    for index, name in enumerate(scan.components.names):
        plan = plan_component(
            name, wanted[name], int(scan.available_tokens[index]), int(scan.available_documents[index]), scan.token_hist[index], scan.count_hist[index]
        )
        plan.check(settings.max_epochs)
        plans.append(plan)
    boundary = {index: plan.boundary_bin for index, plan in enumerate(plans) if plan.boundary_bin >= 0}
    if boundary:
        pieces: dict[int, list[np.ndarray]] = {index: [] for index in boundary}
        for chunk in iter_spill(scan.train_path):
            bins = (chunk["u"] >> np.uint64(64 - HIST_BITS)).astype(np.int64)
            for index, bin_number in boundary.items():
                pieces[index].append(chunk[(chunk["component"] == index) & (bins == bin_number)])
        for index, parts in pieces.items():
            docs = np.concatenate(parts)
            settle_cut(plans[index], scan.token_hist[index], scan.count_hist[index], docs["u"], docs["shard"], docs["doc"], docs["length"])
    return plans


def _write_splits(scan: Scan, plans: list[ComponentPlan], settings: MixSettings, folder: str) -> dict[str, SplitStats]:
    flagged = scan.flagged()
    blocked = scan.blocked_documents()
    stats = {}
    train = KeyedBuckets(folder, "train", sum(plan.ranges for plan in plans))
    for chunk in iter_spill(scan.train_path):
        train.add(emit_copies(plans, chunk))
    validation = KeyedBuckets(folder, "validation", scan.validation_documents)
    for chunk in iter_spill(scan.validation_path):
        validation.add(emit_validation(chunk, settings.seed))
    os.remove(scan.train_path)
    os.remove(scan.validation_path)
    for split, buckets in (("train", train), ("validation", validation)):
        tokens = settings.token_budget if split == "train" else int(scan.validation_tokens.sum())
        stats[split] = write_split(
            buckets, split, os.path.join(folder, f"{split}.idx"), os.path.join(folder, f"{split}.parquet"), tokens,
            settings.sequence_length, scan.components.names, flagged, separate=split == "train", blocked=blocked,
        )
    return stats


def build_mix(
    store: Store,
    mix_name: str,
    settings: MixSettings,
    tokenizer_sha256: str | None = None,
    flags: FlagReader | None = None,
    decontamination: dict[str, Any] | None = None,
    blocked: FlagReader | None = None,
    blocklist: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build and publish the index of one mix; returns its manifest (with the values its checks compare).

    `tokenizer_sha256`: the current tokenizer; shards from another one are refused.
    `flags(ref)`: the documents of a tokenized partition flagged by decontamination for this mix (doc_id,
    matched_ngrams); they are left out of both splits.
    `blocked(ref)`: the documents of a partition the training blocklist matches (doc_id, rule, entry), left
    out of both splits as if they had never been crawled; `blocklist` describes the list (its sha256).
    """
    folder = local_temp_dir()
    try:
        scan = scan_sources(store, settings, folder, flags, blocked=blocked)
        if not scan.shards:
            raise MixError(f"mix {mix_name!r}: no tokenized shards exist for sources {settings.sources}; materialize tokenized_shards first")
        if tokenizer_sha256 is not None and scan.info["tokenizer_sha256"] != tokenizer_sha256:
            raise MixError(
                f"mix {mix_name!r}: the shards were tokenized with tokenizer {scan.info['tokenizer_sha256'][:16]}... but the "
                f"current tokenizer is {tokenizer_sha256[:16]}...; re-materialize tokenized_shards before mixing"
            )
        plans = _plans(scan, settings)
        stats = _write_splits(scan, plans, settings, folder)
        return _publish(store, mix_name, settings, scan, plans, stats, folder, decontamination, blocklist)
    finally:
        _remove_tree(folder)


def _publish(store: Store, mix_name: str, settings: MixSettings, scan: Scan, plans: list[ComponentPlan], stats: dict[str, SplitStats], folder: str,
             decontamination: dict[str, Any] | None, blocklist: dict[str, Any] | None = None) -> dict[str, Any]:
    """Publish the splits' files and the removed-document side files, then the mix manifest over them."""
    files, side_files, splits = _publish_splits(store, mix_name, settings, stats, folder)
    shard_table = _publish_shard_table(store, mix_name, scan)
    side_files.append({key: shard_table[key] for key in ("key", "rows", "bytes", "sha256", "prefix")})
    contaminated, blocked = _removed_tables(scan)
    for name, table, dataset in (("contaminated", contaminated, CONTAMINATED), ("blocked", blocked, BLOCKED)):
        removed_prefix = named_prefix(dataset, "mix", mix_name)
        side_files.append({**write_parquet(store, f"{removed_prefix}/{name}.parquet", table), "prefix": removed_prefix})
    by_rule: dict[str, int] = {}
    for rule in blocked.column("rule").to_pylist():
        by_rule[rule] = by_rule.get(rule, 0) + 1
    train, validation = stats["train"], stats["validation"]
    shares = {name: (int(train.component_tokens[index]) / train.tokens if train.tokens else 0.0) for index, name in enumerate(scan.components.names)}
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "mix": mix_name,
        "seed": settings.seed,
        "sequence_length": settings.sequence_length,
        "token_budget": settings.token_budget,
        "validation_share": settings.validation_share,
        "max_epochs": settings.max_epochs,
        "tokens": splits["train"]["tokens"],
        "samples": splits["train"]["samples"],
        **scan.info,
        "components": scan.components.names,
        "splits": splits,
        "shard_table": shard_table,  # the shards the index's records name, one row per shard id
        "sources": _source_rows(settings, scan, plans, train, shares),
        "decontamination": {**(decontamination or {}), "removed_documents": contaminated.num_rows},
        # The blocklist version this build applied and what it removed (documents and their tokens, both splits).
        "blocklist": {**(blocklist or {"sha256": None}), "removed_documents": blocked.num_rows,
                      "removed_tokens": int(pc.sum(blocked.column("tokens")).as_py() or 0), "removed_by_rule": by_rule},
        # Values gathered while writing the indexes, which the mixed_dataset checks compare.
        "checks": {
            "realized_shares": shares,
            "training_min_doc_hash": train.doc_hash_min,
            "validation_max_doc_hash": validation.doc_hash_max,
            "training_documents": scan.train_documents,
            "validation_documents": scan.validation_documents,
            "flagged_in_index": train.flagged_in_index + validation.flagged_in_index,
            "blocked_in_index": train.blocked_in_index + validation.blocked_in_index,
            "blocked_documents": len(scan.blocked_documents()),
            "flagged_documents": len(scan.flagged()),
            "copies_in_one_sample": train.copies_in_one_sample,
        },
        "files": files,
        "side_files": side_files,
    }
    write_manifest(store, mix_prefix(mix_name), manifest)
    return manifest


def _publish_splits(
    store: Store, mix_name: str, settings: MixSettings, stats: dict[str, SplitStats], folder: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each split's `.parquet` (the mix folder) and `.idx` (its index side folder): (files, side files,
    the manifest's `splits` table)."""
    prefix, side = mix_prefix(mix_name), index_prefix(mix_name)
    files, side_files, splits = [], [], {}
    for split in SPLITS:
        split_stats = stats[split]
        for name, target_prefix, group in ((f"{split}.parquet", prefix, files), (f"{split}.idx", side, side_files)):
            path = os.path.join(folder, name)
            entry = {"key": name, "rows": split_stats.ranges, "bytes": os.path.getsize(path), "sha256": sha256_file(path)}
            if target_prefix != prefix:
                entry["prefix"] = target_prefix
            store.put_file(path, f"{target_prefix}/{name}")
            group.append(entry)
        splits[split] = {
            "index": f"{side}/{split}.idx",
            "parquet": f"{split}.parquet",
            "ranges_count": split_stats.ranges,
            "tokens": split_stats.tokens,
            "samples": max(0, (split_stats.tokens - 1) // settings.sequence_length),
        }
    return files, side_files, splits


def _publish_shard_table(store: Store, mix_name: str, scan: Scan) -> dict[str, Any]:
    """The mix's shard table (`sluice.mix.shard_table`) in its index side folder; returns its manifest entry."""
    path, prefix = scan.shards.path, index_prefix(mix_name)
    tokens = scan.shards.close()
    entry = {"key": SHARD_TABLE, "prefix": prefix, "rows": len(scan.shards), "row_group": scan.shards.row_group, "tokens": tokens,
             "bytes": os.path.getsize(path), "sha256": sha256_file(path)}
    store.put_file(path, f"{prefix}/{SHARD_TABLE}")
    return entry


def _removed_tables(scan: Scan) -> tuple[pa.Table, pa.Table]:
    """The documents removed as contaminated (by doc_id, partition) and as blocklisted (by partition, doc_id)."""
    rows = pa.concat_tables(scan.contaminated_rows).sort_by([("doc_id", "ascending"), ("partition", "ascending")]) if scan.contaminated_rows else None
    contaminated = rows.select(CONTAMINATED_SCHEMA.names).cast(CONTAMINATED_SCHEMA) if rows is not None else CONTAMINATED_SCHEMA.empty_table()
    rows = pa.concat_tables(scan.blocked_rows).sort_by([("partition", "ascending"), ("doc_id", "ascending")]) if scan.blocked_rows else None
    blocked = rows.select(BLOCKED_SCHEMA.names).cast(BLOCKED_SCHEMA) if rows is not None else BLOCKED_SCHEMA.empty_table()
    return contaminated, blocked


def _source_rows(settings: MixSettings, scan: Scan, plans: list[ComponentPlan], train: SplitStats, shares: dict[str, float]) -> list[dict[str, Any]]:
    """Per component (source, or source and language): its weight, target, what it had and what it got."""
    total_weight = sum(settings.weights.values())
    return [
        {
            "component": plan.name,
            "source": split_weight_key(plan.name)[0],
            "language": split_weight_key(plan.name)[1],
            "weight": settings.weights[plan.name] / total_weight,
            "target_tokens": plan.target,
            "available_tokens": plan.available_tokens,
            "available_documents": plan.available_documents,
            "selected_ranges": plan.ranges,
            "tokens": int(train.component_tokens[index]),
            "realized_share": shares[plan.name],
            "epochs": round(plan.epochs, 4),
            "validation_documents": int(scan.validation_docs[index]),
            "validation_tokens": int(scan.validation_tokens[index]),
            "contaminated_documents": int(scan.contaminated[index]),
            "blocked_documents": int(scan.blocked[index]),
            "blocked_tokens": int(scan.blocked_tokens[index]),
        }
        for index, plan in enumerate(plans)
    ]
