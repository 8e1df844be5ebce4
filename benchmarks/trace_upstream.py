"""A synthetic upstream for benchmarks/loader_scale.py's mixes, so that a trace's per-document probes hit data.

    build(root, mix_root, settings)  # root/: every dataset a trace reads, for every document of the mix

`mix_root` (`.bench_data/loader_scale/docs=N`, read-only) holds a mix of N documents in shards of 262,144
documents, all of one partition. Here each shard becomes a partition of its own (`synthetic/sNNN`, so
10^7 documents are 39 partitions) with the datasets of the real graph, written by the same writers and in
the same layouts: `raw_documents` (one input file per partition, its records in ordinal order),
`deduped_documents` (cleaned schema; the shard's document i is row i), `dedup_signatures`,
`dedup_clusters` and the global `dedup_index` (built by `DedupIndex.insert_many`, default settings: 16
hash-range shards, 14 bands), the shards' `.docs.parquet`, and a copy of the mix manifest naming them (the
token files and the mix index are symlinks). Texts are short English-like lines (seeded); in every odd
partition each 97th document is an exact copy of the same row of the partition before (a cluster of two
across partitions, the same at every scale). A structure of the real sizes, not a dedup result: the copies
stay in the shards.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.clean import CLEANED_SCHEMA
from sluice.config import DedupSettings
from sluice.dedup.index import DedupIndex, IndexEntry, partition_rows
from sluice.dedup.schemas import CLUSTERS_SCHEMA, minhash_identity, signatures_schema
from sluice.dedup.signatures import signatures_digest
from sluice.ingest import RAW_SCHEMA
from sluice.layout import MANIFEST, PartitionRef, partition_prefix, write_parquet
from sluice.storage import Store, open_store

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


def partition_columns(index: int, count: int, bands: int) -> dict[str, pa.Array]:
    """Every column of one partition's documents (seeded by its index); copies of partition index - 1."""
    rng = np.random.default_rng(index)
    rows = pa.array(np.arange(count, dtype=np.int64))
    ordinal = pc.cast(rows, pa.string())
    key = f"synthetic/s{index:03d}"
    hashes, band_keys = hex_strings(rng, count), rng.integers(0, 1 << 63, size=(count, bands), dtype=np.int64).view(np.uint64)
    if index % 2:  # copies: the same hash and bands as the same row of the partition before
        earlier = partition_columns_core(index - 1, count, bands)
        copied = np.arange(0, count, COPY_EVERY)
        hashes = pc.if_else(pa.array(np.isin(np.arange(count), copied)), earlier["text_hash"], hashes)
        band_keys[copied] = earlier["bands"][copied]
    text = joined(pa.array(SENTENCES).take(pa.array(rng.integers(0, len(SENTENCES), count))), " Page ", ordinal, " of ", key, ".")
    return {
        "rows": rows, "doc_id": joined(f"{key}/{ONE_FILE}#", ordinal), "url": joined(f"https://s{index:03d}.example/page/", ordinal),
        "text": text, "text_hash": hashes, "bands": band_keys, "ordinal": ordinal,
    }


def partition_columns_core(index: int, count: int, bands: int) -> dict[str, np.ndarray | pa.Array]:
    """The hashes and bands of a partition as `partition_columns` draws them (before its own copies)."""
    rng = np.random.default_rng(index)
    return {"text_hash": hex_strings(rng, count), "bands": rng.integers(0, 1 << 63, size=(count, bands), dtype=np.int64).view(np.uint64)}


def write_json(store: Store, key: str, value: dict) -> None:
    store.write_bytes(key, json.dumps(value, indent=1, sort_keys=True).encode())


def write_partition(store: Store, ref: PartitionRef, index: int, count: int, settings: DedupSettings) -> tuple[pa.Table, str]:
    """raw, deduplicated, signatures and clusters of one partition; returns (signatures, their digest)."""
    c = partition_columns(index, count, settings.bands)
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
    entry = write_parquet(store, f"{partition_prefix('deduped_documents', ref)}/part-00000.parquet", cleaned)
    write_json(store, f"{partition_prefix('deduped_documents', ref)}/{MANIFEST}", {"asset": "deduped_documents", "files": [entry], "side_files": []})
    schema = signatures_schema(settings.bands)
    bands = pa.FixedSizeListArray.from_arrays(pa.array(c["bands"].reshape(-1)), settings.bands)
    signatures = pa.Table.from_arrays([c["rows"], c["doc_id"], c["text_hash"], bands], schema=schema)
    entry = write_parquet(store, f"{partition_prefix('dedup_signatures', ref)}/part-00000.parquet", signatures)
    manifest = {"asset": "dedup_signatures", "files": [entry], "minhash": minhash_identity(settings), "documents": count}
    write_json(store, f"{partition_prefix('dedup_signatures', ref)}/{MANIFEST}", manifest)
    write_json(store, f"{partition_prefix('dedup_clusters', ref)}/{MANIFEST}", {"asset": "dedup_clusters", "files": [clusters(store, ref, index, c)]})
    return signatures, signatures_digest(manifest)


def clusters(store: Store, ref: PartitionRef, index: int, c: dict) -> dict:
    count = len(c["rows"])
    copied = np.zeros(count, dtype=bool)
    if index % 2:
        copied[::COPY_EVERY] = True
    before = f"synthetic/s{index - 1:03d}"
    before_ids = joined(f"{before}/{ONE_FILE}#", c["ordinal"])
    table = pa.Table.from_pydict({
        "doc": c["rows"], "doc_id": c["doc_id"], "kind": pc.if_else(pa.array(copied), "exact", pa.scalar(None, pa.string())),
        "parent_partition": pc.if_else(pa.array(copied), before, ref.key), "parent_doc": c["rows"],
        "exact_of_partition": pc.if_else(pa.array(copied), before, pa.scalar(None, pa.string())),
        "exact_of_id": pc.if_else(pa.array(copied), before_ids, pa.scalar(None, pa.string())),
        "cluster_size": pa.array(np.where(copied, 2, 1)),
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


def build(root: Path, mix_root: Path, settings: DedupSettings | None = None, log=print) -> Path:
    """Write the upstream of the mix at `mix_root` under `root` (skipped when `root/.complete` exists)."""
    if (root / ".complete").exists():
        return root
    settings = settings or DedupSettings()
    store = open_store(str(root))
    manifest = json.loads((mix_root / "mixed_dataset/mix=scale" / MANIFEST).read_text())
    shards, entries = [], []
    index = DedupIndex(store, settings)
    for number, shard in enumerate(manifest["shards"]):
        ref = PartitionRef("synthetic", f"s{number:03d}")
        signatures, digest = write_partition(store, ref, number, int(shard["documents"]), settings)
        shards.append(link_shard(root, mix_root, shard, ref, signatures.column("doc_id")))
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
    (root / ".complete").write_text("")
    return root


def _polars(table: pa.Table):
    import polars as pl

    return pl.from_arrow(table)
