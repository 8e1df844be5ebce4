"""`export_split`: one split of a built mix, written to a destination folder in one format, published last."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from typing import Any

from sluice.export.mds import INDEX, MDSShards
from sluice.export.parquet import ParquetShards
from sluice.export.samples import DocIdTable, ExportError, iter_blocks
from sluice.export.shard_writer import ShardWriter
from sluice.export.webdataset import WebDatasetShards
from sluice.io.layout import MANIFEST, _remove_tree, write_manifest
from sluice.io.storage import StorageError, Store, local_temp_dir
from sluice.loader import IGNORE_INDEX, MixedTokens
from sluice.mix import ShardTable, mix_prefix

FORMAT = "sluice-export"
VERSION = 1
WRITERS: dict[str, type[ShardWriter]] = {"parquet": ParquetShards, "webdataset": WebDatasetShards, "mds": MDSShards}
FORMATS = tuple(WRITERS)
SHARD_BYTES = 1 << 27
# Files an export writes into its folder; any other file there means the folder is not an export's.
OWN_FILES = re.compile(r"(part-\d{5,}\.parquet|shard-\d{6,}\.tar|shard\.\d{5,}\.mds|index\.json|_manifest\.json)")
COLUMNS = {
    "sample_id": "the sample's index in the mix split (stream tokens [sample_id * L, sample_id * L + L + 1))",
    "input_ids": "int32 [L] token ids",
    "labels": "int32 [L]: input_ids shifted by one (label j = token j + 1); -100 where masked",
    "cu_seqlens": "int32 [segments + 1]: 0, the start of each further document inside the sample, L",
    "doc_ids": "string [segments]: the document id (tokenized_shards .docs.parquet) of each segment",
}


def export_split(
    store: Store,
    mix: str,
    split: str,
    fmt: str,
    destination: Store,
    seed: int | None = None,
    shard_bytes: int = SHARD_BYTES,
    mask_document_boundaries: bool = False,
    cache_bytes: int = 2 << 30,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Write `split` of mix `mix` (built in `store`) as `fmt` shards under `destination`/<split>/.

    Rows are the training loader's samples in its order at world size 1, epoch 0, with `seed` (default: the
    mix's seed, as the loader's); the same mix, seed and settings give the same bytes. Returns the export
    manifest, written last as <split>/_manifest.json, plus `uri`: where the split's folder is.
    """
    if fmt not in WRITERS:
        raise ExportError(f"unknown export format {fmt!r}; formats are {', '.join(FORMATS)}")
    manifest_key = f"{mix_prefix(mix)}/{MANIFEST}"
    if not store.exists(manifest_key):
        raise ExportError(f"{store.uri(manifest_key)} does not exist: materialize mixed_dataset[{mix}] first")
    raw = store.read_bytes(manifest_key)
    mix_manifest = json.loads(raw)
    splits = mix_manifest.get("splits", {})
    if split not in splits:
        raise ExportError(f"mix {mix!r} has no split {split!r}; its splits are {sorted(splits)}")
    if int(splits[split]["samples"]) == 0:
        raise ExportError(f"mix {mix!r} has no complete {split} sample (fewer than sequence_length + 1 tokens; validation_share 0?)")
    _check_destination(destination, split)
    scratch = local_temp_dir()
    try:
        # pread: one pass over the whole split; memory maps would leave every page read in this process's RSS
        data = MixedTokens(store, mix, cache_dir=os.path.join(scratch, "cache"), split=split, cache_bytes=cache_bytes, read_mode="pread")
        index_entry = next(e for e in mix_manifest["side_files"] if f"{e.get('prefix')}/{e['key']}" == splits[split]["index"])
        if data.index_sha256 != index_entry["sha256"]:
            raise ExportError(f"mix {mix!r} was rebuilt while the export started; run it again")
        seed = int(mix_manifest["seed"]) if seed is None else int(seed)
        info = _describe(mix_manifest, hashlib.sha256(raw).hexdigest(), data, fmt, split, seed, shard_bytes, mask_document_boundaries)
        # Withdraw a previous export's index and manifest first: while shards are replaced, no reader sees a
        # complete export mixing old and new ones.
        destination.delete([key for key in (f"{split}/{INDEX}", f"{split}/{MANIFEST}") if destination.exists(key)])
        doc_ids = DocIdTable(store, ShardTable(store, mix_manifest).all(), scratch, scratch=scratch)
        writer = WRITERS[fmt](destination, split, scratch, shard_bytes, info)
        repeated = [0]
        for block in iter_blocks(data, seed, doc_ids, mask_document_boundaries, on_repeat=lambda n: repeated.__setitem__(0, repeated[0] + n)):
            shards = len(writer.entries)
            writer.add(block)
            if log is not None and len(writer.entries) > shards:
                log(f"  {len(writer.entries)} shards, {writer.entries[-1]['key']} done; {int(block.rows[-1]) + 1} of {info['samples']} samples")
        files = writer.close()
        extra = []
        if isinstance(writer, MDSShards):
            destination.write_bytes(f"{split}/{INDEX}", writer.index())
            extra = [INDEX]
        manifest = {
            **info,
            "files": files,
            "extra_keys": extra,
            "checks": {"written_samples": sum(entry["rows"] for entry in files), "repeated_documents_in_a_sample": repeated[0]},
        }
        write_manifest(destination, split, manifest)
        return {**manifest, "uri": destination.uri(split)}  # (not in the file: the same export gives the same bytes anywhere)
    finally:
        _remove_tree(scratch)


def _check_destination(destination: Store, split: str) -> None:
    """Refuse a folder holding files no export writes (publishing deletes files its manifest does not list)."""
    try:
        existing = destination.list_files(split)
    except StorageError as error:
        raise ExportError(f"{destination.uri(split)}: cannot list the destination ({error})") from error
    foreign = [key for key in existing if not OWN_FILES.fullmatch(key[len(split) + 1 :])]
    if foreign:
        raise ExportError(
            f"{destination.uri(split)} holds files that are not a sluice export (e.g. {destination.uri(foreign[0])}); "
            "export into an empty folder or one an earlier export wrote"
        )


def _describe(mix_manifest: dict[str, Any], mix_version: str, data: MixedTokens, fmt: str, split: str, seed: int, shard_bytes: int,
              mask: bool) -> dict[str, Any]:
    """What the export holds: written into every format's metadata (Parquet schema, the manifest)."""
    length = int(mix_manifest["sequence_length"])
    vocab = int(mix_manifest["vocab_size"])
    if vocab > 1 << 31:
        raise ExportError(f"vocabulary of {vocab} ids does not fit int32 token columns")
    return {
        "format": FORMAT,
        "version": VERSION,
        "export_format": fmt,
        "mix": mix_manifest["mix"],
        "split": split,
        "mix_version": mix_version,  # SHA-256 of the mix's _manifest.json
        "index_sha256": data.index_sha256,
        "tokenizer_sha256": mix_manifest["tokenizer_sha256"],
        "vocab_size": vocab,
        "eos_id": mix_manifest.get("eos_id"),
        "sequence_length": length,
        "samples": len(data),
        "tokens": len(data) * length,
        "order": {"seed": seed, "epoch": 0, "rank": 0, "world_size": 1, "block_size": 1,
                  "rule": "row r is the r-th sample the training loader yields at world size 1 in epoch 0 with this seed"},
        "mask_document_boundaries": mask,
        "ignore_index": IGNORE_INDEX,
        "columns": COLUMNS,
        "shard_bytes": shard_bytes,
    }
