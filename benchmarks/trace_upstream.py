"""A synthetic upstream for benchmarks/loader_scale.py's mixes, so that a trace's per-document probes hit data.

    build(root, mix_root, settings)  # root/: every dataset a trace reads, for every document of the mix

`mix_root` (`.bench_data/loader_scale/docs=N`, read-only) holds a mix of N documents in shards of 262,144
documents, all of one partition. Here each shard becomes a partition of its own (`synthetic/sNNN`, so
10^7 documents are 39 partitions) with the datasets of the real graph, written by the same writers and in
the same layouts: `raw_documents` (one input file per partition, its records in ordinal order),
`deduped_documents` (cleaned schema; the shard's document i is its row i), `dedup_signatures`,
`dedup_clusters` and the global `dedup_index` (built by `DedupIndex.insert_many`, default settings: 16
hash-range shards, 14 bands), the shards' `.docs.parquet`, and a copy of the mix manifest naming them (the
token files and the mix index are symlinks). Texts are short English-like lines (seeded); in every odd
partition a copy follows each 97th document, an exact duplicate (text hash and bands) of the same shard row of
the partition before: `dedup_clusters` removes it, `deduped_documents` and the shard do not hold it (clusters
of two across partitions, the same at every scale). A structure of the real sizes, not a dedup run.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.clean import CLEANED_SCHEMA
from sluice.config import DedupSettings
from sluice.dedup.index import FORMAT, DedupIndex, IndexEntry, partition_rows
from sluice.dedup.schemas import CLUSTERS_SCHEMA, minhash_identity, signatures_schema
from sluice.dedup.signatures import signatures_digest
from sluice.ingest.raw import RAW_SCHEMA
from sluice.io.layout import MANIFEST, PartitionRef, partition_prefix, write_parquet
from sluice.io.storage import Store, open_store

SENTENCES = [
    "The committee met on Tuesday to discuss the budget for the coming year and agreed on most items.",
    "Rain is expected across the northern region tonight, with clearer skies by the afternoon.",
    "She opened the old book and found a letter that had been written more than fifty years ago.",
    "Local farmers say the harvest was better than last season thanks to a mild and wet spring.",
    "The museum will extend its opening hours during the summer holidays for families and schools.",
    "Engineers inspected the bridge after the storm and reported only minor damage to the railings.",
    "A new study suggests that regular walks improve both sleep quality and mood in older adults.",
    "The team scored twice in the second half and moved up to third place in the league table.",
]
COPY_EVERY = 97
ONE_FILE = "crawl-00000.warc.gz"


def hex_strings(rng: np.random.Generator, count: int) -> pa.Array:
    """`count` random 32-digit hex strings (text hashes), built without a Python loop."""
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[rng.integers(0, 16, size=(count, 32))]
    offsets = np.arange(count + 1, dtype=np.int32) * 32
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets.tobytes()), pa.py_buffer(digits.tobytes()))


STRING = pa.string()


def repeat(value: object, count: int, kind: pa.DataType) -> pa.Array:
    return pa.array(np.full(count, value)).cast(kind)


def joined(*parts: pa.Array | str) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def layout(index: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(shard row each cleaned row belongs to, which rows are copies): in an odd partition a copy follows
    every COPY_EVERY-th document; the shard holds the other rows, in order."""
    copies = 1 + (np.arange(count) % COPY_EVERY == 0) if index % 2 else np.ones(count, np.int64)
    source_row = np.repeat(np.arange(count), copies)
    return source_row, np.r_[False, source_row[1:] == source_row[:-1]]


def draws(index: int, rows: int, bands: int) -> tuple[pa.Array, np.ndarray, np.random.Generator]:
    """A partition's random text hashes and band keys (seeded by its index)."""
    rng = np.random.default_rng(index)
    return hex_strings(rng, rows), rng.integers(0, 1 << 63, size=(rows, bands), dtype=np.int64).view(np.uint64), rng


def partition_columns(index: int, count: int, bands: int) -> dict:
    """Every column of one partition's cleaned documents; a copy has the hash and bands of the same shard row
    of the partition before (an even one: there, cleaned row = shard row)."""
    source_row, is_copy = layout(index, count)
    rows = len(source_row)
    hashes, band_keys, rng = draws(index, rows, bands)
    key = f"synthetic/s{index:03d}"
    if index % 2:
        earlier_hashes, earlier_bands, _ = draws(index - 1, count, bands)
        hashes = pc.if_else(pa.array(is_copy), earlier_hashes.take(pa.array(source_row)), hashes)
        band_keys[is_copy] = earlier_bands[source_row[is_copy]]
    ordinal = pc.cast(pa.array(np.arange(rows, dtype=np.int64)), pa.string())
    text = joined(pa.array(SENTENCES).take(pa.array(rng.integers(0, len(SENTENCES), rows))), " Page ", ordinal, " of ", key, ".")
    return {
        "rows": pa.array(np.arange(rows, dtype=np.int64)), "doc_id": joined(f"{key}/{ONE_FILE}#", ordinal),
        "url": joined(f"https://s{index:03d}.example/page/", ordinal), "text": text, "text_hash": hashes, "bands": band_keys,
        "ordinal": ordinal, "source_row": source_row, "is_copy": is_copy,
    }


def write_json(store: Store, key: str, value: dict) -> None:
    store.write_bytes(key, json.dumps(value, indent=1, sort_keys=True).encode())


def write_partition(store: Store, ref: PartitionRef, index: int, count: int, settings: DedupSettings) -> tuple[pa.Table, str]:
    """raw, deduplicated, signatures and clusters of one partition; returns (signatures, their digest)."""
    c = partition_columns(index, count, settings.bands)
    count = len(c["rows"])
    date = pa.array(np.full(count, int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)), pa.timestamp("ms", tz="UTC"))
    const = lambda value, kind=STRING: repeat(value, count, kind)  # noqa: E731
    raw = pa.Table.from_pydict({
        "doc_id": c["doc_id"], "url": c["url"], "fetch_date": date, "content_type": const("text/plain"), "content": pc.cast(c["text"], pa.binary()),
        "charset": const("utf-8"), "content_hash": c["text_hash"], "file": const(f"{ref.snapshot}/{ONE_FILE}"), "ordinal": c["rows"],
        "source_id": joined("<urn:uuid:", c["ordinal"], ">"),
    }, schema=RAW_SCHEMA)
    entry = write_parquet(store, f"{partition_prefix('raw_documents', ref)}/part-00000.parquet", raw)
    write_json(store, f"{partition_prefix('raw_documents', ref)}/{MANIFEST}", {"asset": "raw_documents", "files": [entry], "input_files": [f"{ref.snapshot}/{ONE_FILE}"]})
    cleaned = pa.Table.from_pydict({
        "doc_id": c["doc_id"], "url": c["url"], "fetch_date": date, "text": c["text"], "language": const("en"), "language_score": const(0.95, pa.float32()),
        "n_chars": pc.utf8_length(c["text"]).cast(pa.int64()), "text_hash": c["text_hash"], "pii_redactions": const(0, pa.int32()),
        "quality_score": const(0.7, pa.float32()), "code_share": const(0.0, pa.float32()), "toxicity_score": const(0.0, pa.float32()),
        "toxic_terms": const(0, pa.int32()), "perplexity": const(300.0, pa.float32()), "perplexity_bucket": const("middle"),
    }, schema=CLEANED_SCHEMA)
    entry = write_parquet(store, f"{partition_prefix('deduped_documents', ref)}/part-00000.parquet", cleaned.filter(pc.invert(pa.array(c["is_copy"]))))
    write_json(store, f"{partition_prefix('deduped_documents', ref)}/{MANIFEST}", {"asset": "deduped_documents", "files": [entry], "side_files": []})
    schema = signatures_schema(settings.bands)
    bands = pa.FixedSizeListArray.from_arrays(pa.array(c["bands"].reshape(-1)), settings.bands)
    signatures = pa.Table.from_arrays([c["rows"], c["doc_id"], c["text_hash"], bands], schema=schema)
    entry = write_parquet(store, f"{partition_prefix('dedup_signatures', ref)}/part-00000.parquet", signatures)
    manifest = {"asset": "dedup_signatures", "files": [entry], "minhash": minhash_identity(settings), "documents": signatures.num_rows}
    write_json(store, f"{partition_prefix('dedup_signatures', ref)}/{MANIFEST}", manifest)
    write_json(store, f"{partition_prefix('dedup_clusters', ref)}/{MANIFEST}", {"asset": "dedup_clusters", "files": [clusters(store, ref, index, c)]})
    return signatures, signatures_digest(manifest)


def clusters(store: Store, ref: PartitionRef, index: int, c: dict) -> dict:
    """The partition's `dedup_clusters`: the copies are exact duplicates of the partition before."""
    copied = pa.array(c["is_copy"])
    before = f"synthetic/s{index - 1:03d}"
    before_ids = joined(f"{before}/{ONE_FILE}#", pc.cast(pa.array(c["source_row"]), pa.string()))
    none = pa.scalar(None, pa.string())
    table = pa.Table.from_pydict({
        "doc": c["rows"], "doc_id": c["doc_id"], "kind": pc.if_else(copied, "exact", none),
        "parent_partition": pc.if_else(copied, before, ref.key), "parent_doc": pc.if_else(copied, pa.array(c["source_row"]), c["rows"]),
        "exact_of_partition": pc.if_else(copied, before, none), "exact_of_id": pc.if_else(copied, before_ids, none),
        "cluster_size": pa.array(np.where(c["is_copy"], 2, 1)),
    }, schema=CLUSTERS_SCHEMA)
    return write_parquet(store, f"{partition_prefix('dedup_clusters', ref)}/clusters.parquet", table)


def link_shard(root: Path, mix_root: Path, shard: dict, ref: PartitionRef, doc_ids: pa.Array) -> dict:
    """The shard's token files (symlinks) and its .docs.parquet under the partition's folder; its new entry."""
    folder = root / partition_prefix("tokenized_shards", ref)
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in (".bin", ".idx"):
        link = folder / f"{shard['name']}{suffix}"
        if not link.exists():
            os.symlink(mix_root / shard["prefix"] / f"{shard['name']}{suffix}", link)
    docs = pa.table({"doc_id": doc_ids, "language": pa.array(np.full(len(doc_ids), "en"))})
    write_parquet(open_store(str(root)), f"{partition_prefix('tokenized_shards', ref)}/{shard['name']}.docs.parquet", docs)
    return {**shard, "prefix": partition_prefix("tokenized_shards", ref), "partition": ref.key, "source": ref.source, "part": 0, "first_row": 0}


# Written into `.complete`: an upstream built by an older version (another index layout: format 1, no
# `.rows` files) is rebuilt rather than measured as if it were the current one.
BUILD_VERSION = f"index format {FORMAT}, .rows files"


def build(root: Path, mix_root: Path, settings: DedupSettings | None = None, log=print) -> Path:
    """Write the upstream of the mix at `mix_root` under `root` (skipped when `root/.complete` says it was
    built by this version; an older build is removed and rebuilt)."""
    marker = root / ".complete"
    if marker.exists() and marker.read_text() == BUILD_VERSION:
        return root
    if root.exists():
        log(f"  upstream: {root} was built by another version: rebuilt")
        shutil.rmtree(root)
    settings = settings or DedupSettings()
    store = open_store(str(root))
    manifest = json.loads((mix_root / "mixed_dataset/mix=scale" / MANIFEST).read_text())
    shards, entries = [], []
    index = DedupIndex(store, settings)
    for number, shard in enumerate(manifest["shards"]):
        ref = PartitionRef("synthetic", f"s{number:03d}")
        signatures, digest = write_partition(store, ref, number, int(shard["documents"]), settings)
        kept = signatures.column("doc_id").filter(pc.invert(pa.array(layout(number, int(shard["documents"]))[1])))
        shards.append(link_shard(root, mix_root, shard, ref, kept))
        frame = signatures
        entries.append(IndexEntry(ref, digest, lambda frame=frame, ref=ref: partition_rows(_polars(frame), ref), frame.num_rows))
        if len(entries) == settings.index_max_deltas or number == len(manifest["shards"]) - 1:
            index.insert_many(entries)  # one base compaction per max_deltas partitions, as a graph run would
            entries = []
        log(f"  upstream: partition {number + 1}/{len(manifest['shards'])}")
    (root / "mixed_index").mkdir(exist_ok=True)
    if not (root / "mixed_index/mix=scale").exists():
        os.symlink(mix_root / "mixed_index/mix=scale", root / "mixed_index/mix=scale")
    write_json(store, f"mixed_dataset/mix=scale/{MANIFEST}", {**manifest, "shards": shards})
    marker.write_text(BUILD_VERSION)
    return root


def _polars(table: pa.Table):
    import polars as pl

    return pl.from_arrow(table)
