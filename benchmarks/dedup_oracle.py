"""Helpers of the dedup tests and benchmarks/dedup_history.py: cleaned partitions from texts, readers of the
outputs, and an independent oracle. (Beside the benchmarks, which use it too; tests import it from here.)

The oracle (`reference_removed`) knows nothing of MinHash, LSH, the index or the partition steps: for each
partition in the global order it takes every document of that partition and the earlier ones, links every
pair whose Jaccard similarity of word 5-gram shingle *strings* reaches the bound (all pairs, brute force)
and every pair with the same normalized text, and removes a document of that partition when its connected
component (union-find) holds an earlier document. That is "one batch over the partitions up to this one".
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import combinations

import pyarrow as pa
import pyarrow.parquet as pq

from sluice.clean import CLEANED_SCHEMA, normalize_for_hash, text_hash
from sluice.config import DedupSettings
from sluice.dedup.minhash import MAX_HASH32, MinHasher, shingles
from sluice.io.layout import (
    PartitionRef,
    entry_key,
    list_partitions,
    partition_prefix,
    read_manifest,
    read_parquet_file,
    write_manifest,
    write_parquet,
)
from sluice.io.storage import Store

Partitions = Sequence[tuple[PartitionRef, Sequence[Sequence[tuple[str, str]]]]]  # ref -> parts -> (doc_id, text)


def edit(text: str, every: int = 100, word: str = "edited") -> str:
    """A near duplicate: every `every`-th word replaced (about 5 % of 5-gram shingles change)."""
    words = text.split()
    return " ".join(word if i % every == every - 1 else w for i, w in enumerate(words))


def replace_block(text: str, start: int, length: int, tag: str) -> str:
    """`length` consecutive words from `start` replaced by unique tokens (changes about length + 4 shingles)."""
    words = text.split()
    return " ".join(f"{tag}{i}" if start <= i < start + length else w for i, w in enumerate(words))


def make_chain(text: str, words: int = 500) -> dict[str, str]:
    """K (the first `words` words of `text`), X = K with a block of words replaced, C = X with another block
    replaced, the blocks sized so that J(K, X) and J(X, C) lie in [0.81, 0.83] and J(K, C) < 0.7: a chain
    (K-X and X-C near duplicates at the 0.8 bound, K-C not)."""
    base = " ".join(text.split()[:words])
    for first in range(20, words // 3):
        x = replace_block(base, words // 8, first, "xedit")
        if 0.81 <= exact_jaccard(base, x) <= 0.83:
            break
    else:
        raise ValueError("no block length gives J(K, X) in [0.81, 0.83]")
    for second in range(20, words // 3):
        c = replace_block(x, words * 3 // 5, second, "cedit")
        if 0.81 <= exact_jaccard(x, c) <= 0.83 and exact_jaccard(base, c) < 0.7:
            return {"K": base, "X": x, "C": c}
    raise ValueError("no block length gives J(X, C) in [0.81, 0.83] with J(K, C) < 0.7")


def write_cleaned(store: Store, ref: PartitionRef, parts: Sequence[Sequence[tuple[str, str]]]) -> None:
    prefix = partition_prefix("cleaned_documents", ref)
    files = []
    for index, docs in enumerate(parts):
        rows = [
            {
                "doc_id": doc_id, "source": ref.source, "snapshot": ref.snapshot, "url": None,
                "fetch_date": datetime(2026, 1, 1, tzinfo=UTC), "text": text, "language": "en",
                "language_score": 1.0, "n_chars": len(text), "text_hash": text_hash(text),
                "pii_redactions": 0, "quality_score": None,
            }
            for doc_id, text in docs
        ]
        files.append(write_parquet(store, f"{prefix}/part-{index:05d}.parquet", pa.Table.from_pylist(rows, schema=CLEANED_SCHEMA)))
    write_manifest(store, prefix, {"asset": "cleaned_documents", "files": files})


def write_all(store: Store, partitions: Partitions) -> None:
    for ref, parts in partitions:
        write_cleaned(store, ref, parts)


def exact_jaccard(a: str, b: str, ngram_size: int = 5) -> float:
    """Brute force: Jaccard of the two documents' sets of shingle strings (no hashing)."""
    sa, sb = set(shingles(a, ngram_size)), set(shingles(b, ngram_size))
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def reference_removed(partitions: Partitions, bound: float = 0.8, ngram_size: int = 5) -> dict[str, str]:
    """doc_id -> "exact" | "fuzzy" for every document removed by one batch over its partition and the
    partitions before it (the partitions are taken in the global order, whatever order they are given in)."""
    ordered = sorted(partitions, key=lambda item: item[0].sort_key())
    docs = [(ref.key, doc_id, text) for ref, parts in ordered for part in parts for doc_id, text in part]
    sets = [set(shingles(text, ngram_size)) for _, _, text in docs]
    norms = [normalize_for_hash(text) for _, _, text in docs]
    linked: dict[int, list[int]] = {i: [] for i in range(len(docs))}
    for i, j in combinations(range(len(docs)), 2):
        similar = sets[i] and sets[j] and len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= bound
        if similar or norms[i] == norms[j]:
            linked[j].append(i)
    removed = {}
    for ref, _ in ordered:
        members = [i for i, doc in enumerate(docs) if (doc[0] == ref.key) or ordered_before(doc[0], ref)]
        parent = {i: i for i in members}
        for j in members:
            for i in linked[j]:
                a, b = _find(parent, i), _find(parent, j)
                parent[max(a, b)] = min(a, b)
        for i in members:
            if docs[i][0] == ref.key and _find(parent, i) != i:
                exact = any(norms[k] == norms[i] for k in members if k < i)
                removed[docs[i][1]] = "exact" if exact else "fuzzy"
    return removed


def _find(parent: dict[int, int], i: int) -> int:
    """Union-find root, the smallest member: the first document of the component in the global order."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def ordered_before(key: str, ref: PartitionRef) -> bool:
    source, snapshot = key.split("/", 1)
    return (snapshot, source) < ref.sort_key()


def deduped_view(store: Store) -> tuple[set[str], dict[str, tuple[str, str]]]:
    """Kept doc_ids, and removed doc_id -> (kind, duplicate_of), read from the published outputs."""
    kept, removed = set(), {}
    for ref in list_partitions(store, "deduped_documents"):
        prefix = partition_prefix("deduped_documents", ref)
        manifest = read_manifest(store, prefix)
        for entry in manifest["files"]:
            kept.update(read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["doc_id"]).column("doc_id").to_pylist())
        for entry in manifest["side_files"]:
            for row in read_parquet_file(store, entry_key(prefix, entry)).to_pylist():
                removed[row["doc_id"]] = (row["kind"], row["duplicate_of"])
    return kept, removed


def cleaned_texts(store: Store) -> dict[str, str]:
    texts = {}
    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("cleaned_documents", ref)
        for entry in read_manifest(store, prefix)["files"]:
            table = read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["doc_id", "text"])
            texts.update(zip(table.column("doc_id").to_pylist(), table.column("text").to_pylist(), strict=True))
    return texts


def stored_partitions(store: Store) -> list[tuple[PartitionRef, list[list[tuple[str, str]]]]]:
    """The cleaned partitions of a store as (ref, parts of (doc_id, text))."""
    out = []
    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("cleaned_documents", ref)
        parts = []
        for entry in read_manifest(store, prefix)["files"]:
            table = pq.read_table(store.local_path(f"{prefix}/{entry['key']}"), columns=["doc_id", "text"])
            parts.append(list(zip(table.column("doc_id").to_pylist(), table.column("text").to_pylist(), strict=True)))
        out.append((ref, parts))
    return out


def lsh_one_batch(store: Store, settings: DedupSettings | None = None) -> tuple[set[str], dict[str, str]]:
    """LSH replica (for LSH-specific claims): every cleaned document at once in global order; exact by hash; union-find over pairs
    sharing a (band, hash) (with `verify_min_jaccard`: pairs of a member with one of the bucket's first
    `verify_anchors` members, linked only if their brute-force Jaccard reaches the bound);
    a document is kept when it is the first of its hash and the first of its component."""
    settings = settings or DedupSettings()
    ids, hashes, texts = [], [], []
    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("cleaned_documents", ref)
        for entry in read_manifest(store, prefix)["files"]:
            table = read_parquet_file(store, f"{prefix}/{entry['key']}", columns=["doc_id", "text_hash", "text"])
            ids += table.column("doc_id").to_pylist()
            hashes += table.column("text_hash").to_pylist()
            texts += table.column("text").to_pylist()
    hasher = MinHasher.from_settings(settings)
    signatures = hasher.signatures(texts)
    bands = hasher.band_hashes(signatures)
    parent = list(range(len(ids)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    buckets: dict[tuple[int, int], list[int]] = {}
    for i in range(len(ids)):
        if (signatures[i] == MAX_HASH32).all():
            continue
        for band, value in enumerate(bands[i].tolist()):
            buckets.setdefault((band, value), []).append(i)
    bound = settings.verify_min_jaccard
    # With verification, each member is paired with the bucket's first `verify_anchors` members.
    anchors = len(ids) if bound is None else settings.verify_anchors
    linked = {(i, j) for members in buckets.values() for i in sorted(members)[:anchors] for j in members if i < j}
    for i, j in sorted(linked):
        if bound is None or exact_jaccard(texts[i], texts[j], settings.ngram_size) >= bound:
            a, b = find(i), find(j)
            parent[max(a, b)] = min(a, b)
    seen: set[str] = set()
    kept, kinds = set(), {}
    for i, doc_id in enumerate(ids):
        if hashes[i] in seen:
            kinds[doc_id] = "exact"
        elif find(i) != i:
            kinds[doc_id] = "fuzzy"
        else:
            kept.add(doc_id)
        seen.add(hashes[i])
    return kept, kinds
