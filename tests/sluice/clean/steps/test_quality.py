"""The quality classifier: a deterministic negative sample, a model that separates the classes, the scorer step."""

from __future__ import annotations

import hashlib
import random

from sluice.clean.steps import Document
from sluice.clean.steps.quality import QualityScorer, TrainingSet, split_by_text, train_model
from sluice.config import QualityModelSettings

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
    settings = QualityModelSettings(max_negatives=5, seed=7)
    items = [(f"doc-{i}", f"text {i}") for i in range(50)]
    forward, backward = TrainingSet(), TrainingSet()
    for doc_id, text in items:
        forward.add(doc_id, text, False, settings)
    for doc_id, text in reversed(items):
        backward.add(doc_id, text, False, settings)
    assert forward.negatives == backward.negatives and len(forward.negatives) == 5
    other_seed = TrainingSet()
    for doc_id, text in items:
        other_seed.add(doc_id, text, False, QualityModelSettings(max_negatives=5, seed=8))
    assert other_seed.negatives != forward.negatives


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
