"""The quality classifier: a deterministic negative sample, a model that separates the classes, the scorer step."""

from __future__ import annotations

import hashlib
import random

import pyarrow as pa
import xxhash

from sluice.clean.models.training import (
    RawRow,
    extract_rows,
    extracted_raw_documents,
    raw_rows,
    seeded_sample,
)
from sluice.clean.steps import Document
from sluice.clean.steps.quality import QualityScorer, split_by_text, train_model
from sluice.config import QualityModelSettings
from sluice.io.layout import PartitionRef, partition_prefix, write_manifest, write_parquet
from sluice.io.storage import open_store

TOPICS = ["river", "mill", "market", "winter", "garden", "travellers", "hills", "bread", "wool", "bridge"]


def curated(rng: random.Random) -> str:
    words = rng.sample(TOPICS, 4)
    return (
        f"The {words[0]} near the {words[1]} was described carefully in the chronicle. "
        f"Historians agree that the {words[2]} and the {words[3]} shaped the town for centuries."
    )


def spam(rng: random.Random) -> str:
    offers = ["cheap", "casino", "bonus", "click", "win", "free", "deal", "best", "now", "prize"]
    return " ".join(rng.choice(offers) for _ in range(25)) + " !!! buy now"


def test_negative_sample_is_seeded_and_order_independent():
    """The `size` smallest seeded id hashes (oracle: every key computed and sorted), whatever the order."""
    rows = [RawRow(("2026-01", "web"), f"part-{i // 10:05d}.parquet", i % 10, f"doc-{i}", PartitionRef("web", "2026-01")) for i in range(50)]
    forward, backward = seeded_sample(rows, 5, 7), seeded_sample(reversed(rows), 5, 7)
    oracle = sorted(sorted(rows, key=lambda r: xxhash.xxh3_64_intdigest(f"7:{r.doc_id}".encode()))[:5])
    assert forward == backward == oracle and len(forward) == 5
    assert seeded_sample(rows, 5, 8) != forward
    assert seeded_sample(rows, 100, 7) == sorted(rows)


def test_only_the_chosen_rows_are_extracted_and_they_equal_a_full_extraction(tmp_path):
    """extract_rows (row groups holding the chosen rows only) against extracting the whole partition."""
    store = open_store(str(tmp_path))
    ref = PartitionRef("web", "2026-01")
    prefix = partition_prefix("raw_documents", ref)
    files = []
    for part in range(2):
        ids = [f"p{part}-{row}" for row in range(30)]
        pages = [("<html><body><p>" + f"Page {doc_id} about the river and the mill. " * 20 + "</p></body></html>").encode() for doc_id in ids]
        pages[3] = b""  # does not extract
        table = pa.table({
            "doc_id": ids, "url": [f"https://example.com/{i}" for i in ids], "content_type": ["text/html"] * 30,
            "content": pages, "charset": ["utf-8"] * 30,
        })
        files.append(write_parquet(store, f"{prefix}/part-{part:05d}.parquet", table, row_group_size=7))
    write_manifest(store, prefix, {"asset": "raw_documents", "files": files})
    rows = list(raw_rows(store, [ref]))
    assert [row.doc_id for row in rows] == [f"p{part}-{row}" for part in range(2) for row in range(30)]
    chosen = seeded_sample(rows, 12, 0) + [rows[3]]  # and one that does not extract
    chosen = sorted(set(chosen))
    extracted = {row.doc_id: doc.text for row, doc in extract_rows(store, chosen)}
    full = {doc.doc_id: doc.text for _, doc in extracted_raw_documents(store, [ref])}
    assert extracted == {row.doc_id: full[row.doc_id] for row in chosen if row.doc_id in full}
    assert "p0-3" not in extracted and len(extracted) == len(chosen) - 1


def test_model_separates_classes_and_training_is_deterministic(tmp_path):
    rng = random.Random(0)
    positives = [curated(rng) for _ in range(150)]
    negatives = [spam(rng) for _ in range(150)]
    settings = QualityModelSettings(epochs=20)
    first, second = tmp_path / "a.bin", tmp_path / "b.bin"
    scores = train_model(positives, negatives, str(first), settings)
    train_model(positives, negatives, str(second), settings)
    assert scores["held_out_accuracy"] >= 0.9
    assert hashlib.sha256(first.read_bytes()).hexdigest() == hashlib.sha256(second.read_bytes()).hexdigest()

    step = QualityScorer(str(first), 0.5, settings.max_chars)
    good = Document.from_text(curated(random.Random(99)))
    bad = Document.from_text(spam(random.Random(99)))
    assert step.apply(good) is None and good.values.get("quality_score") > 0.5
    drop = step.apply(bad)
    assert drop is not None and drop.reason == "low_quality_score" and bad.values.get("quality_score") < 0.5
    assert QualityScorer(str(first), 0.0, settings.max_chars).apply(bad) is None  # 0 scores without dropping


def test_copies_of_a_page_are_never_on_both_sides_of_the_held_out_split():
    """The crawl repeats pages (mirrors, re-crawls): a random line split put copies in both the training and
    the held-out set, so held-out accuracy measured memory. The split is by text."""
    rng = random.Random(3)
    pages = [f"page {i} " + " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(20)) for i in range(200)]
    lines = [("__label__hq" if i % 2 else "__label__lq", page) for i, page in enumerate(pages)]
    lines += [lines[i] for i in range(0, 200, 3)]  # one copy of every third page
    train, held_out = split_by_text(lines, seed=0)
    assert sorted(train + held_out) == sorted(lines)
    assert not {text for _, text in train} & {text for _, text in held_out}
    assert 0.1 < len(held_out) / len(lines) < 0.3
    assert split_by_text(lines, seed=0) == (train, held_out) and split_by_text(lines, seed=1) != (train, held_out)


def test_perplexity_cutoff_candidates_are_each_languages_smallest_hashes(tmp_path):
    """add_cutoff_candidates against the oracle: every document extracted, per language its smallest id hashes
    (the common language fills its sample exactly; the rare one keeps only its documents among the candidates)."""
    from sluice.clean.models.training import add_cutoff_candidates
    from sluice.clean.steps.perplexity import SeededSample

    store = open_store(str(tmp_path))
    ref = PartitionRef("web", "2026-01")
    prefix = partition_prefix("raw_documents", ref)
    ids = [f"d{i}" for i in range(120)]
    language = {doc_id: "rare" if i % 10 == 0 else "common" for i, doc_id in enumerate(ids)}
    pages = [(f"<html><body><p>{language[doc_id]} " + f"text of {doc_id} about the river. " * 15 + "</p></body></html>").encode() for doc_id in ids]
    table = pa.table({"doc_id": ids, "url": ids, "content_type": ["text/html"] * 120, "content": pages, "charset": ["utf-8"] * 120})
    write_manifest(store, prefix, {"asset": "raw_documents", "files": [write_parquet(store, f"{prefix}/part-00000.parquet", table, row_group_size=16)]})
    sample = SeededSample(5, 3)
    assert add_cutoff_candidates(store, [ref], sample, lambda text: text.split()[0], 40, 3) == 40
    key = {doc_id: xxhash.xxh3_64_intdigest(f"3:{doc_id}".encode()) for doc_id in ids}
    threshold = sorted(key.values())[39]
    for name in ("common", "rare"):
        own = sorted((doc_id for doc_id in ids if language[doc_id] == name), key=key.get)
        expected = sorted(own[:5] if name == "common" else [d for d in own if key[d] <= threshold][:5])
        assert sorted(doc_id for _, doc_id, _ in sample.heaps[name]) == expected and len(sample.items(name)) == len(expected)
