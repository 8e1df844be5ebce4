"""Perplexity: lmplz trains deterministically, the scorer's perplexity matches KenLM's per-word scores (an
independent sum), in-domain text scores lower than shuffled words, buckets follow the cut-offs, the step drops
by threshold and bucket, and the cut-off sample does not depend on reading order."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from sluice.clean.steps import Document
from sluice.clean.steps.perplexity import (
    SeededSample,
    bucket,
    default_lmplz_path,
    load_model,
    perplexity,
    quantile_cutoffs,
    text_line,
    train_arpa,
)
from sluice.config import PerplexitySettings

if not default_lmplz_path().is_file():
    if os.environ.get("CI"):
        raise RuntimeError(f"lmplz is missing at {default_lmplz_path()} (make setup builds it)")
    pytest.skip("lmplz not built (python -m sluice.clean.steps.perplexity build-lmplz)", allow_module_level=True)

TOPICS = ["river", "mill", "market", "winter", "garden", "bridge", "bread", "wool", "hills", "town"]


def prose(rng: random.Random, sentences: int = 12) -> str:
    out = []
    for _ in range(sentences):
        a, b, c = rng.sample(TOPICS, 3)
        out.append(f"The {a} near the {b} was described in the chronicle, and the {c} grew around it.")
    return " ".join(out)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("lm") / "en.arpa"
    train_arpa([text_line(prose(rng)) for _ in range(40)], str(path), order=3)
    return str(path)


def test_training_is_deterministic(tmp_path, model_path):
    rng = random.Random(0)
    again = tmp_path / "again.arpa"
    sizes = train_arpa([text_line(prose(rng)) for _ in range(40)], str(again), order=3)
    assert sizes["documents"] == 40
    digest = lambda p: hashlib.sha256(Path(p).read_bytes()).hexdigest()  # noqa: E731
    assert digest(again) == digest(model_path)
    assert "\\data\\" in Path(model_path).read_text(encoding="utf-8")[:200]  # an ARPA file


def test_perplexity_matches_kenlm_word_scores_and_separates_in_domain_text(model_path):
    model = load_model(model_path)
    line = text_line(prose(random.Random(99), 4))
    log10 = sum(score for score, _, _ in model.full_scores(line, bos=True, eos=True))
    words = len(line.split()) + 1  # and </s>
    assert perplexity(model, line) == pytest.approx(10 ** (-log10 / words), rel=1e-5)  # float32 scores
    shuffled = line.split()
    random.Random(1).shuffle(shuffled)
    assert perplexity(model, " ".join(shuffled)) > 3 * perplexity(model, line)
    assert text_line("Price: 1299 Euro, 2 Days!") == "price : 0000 euro , 0 days !"


def test_buckets_and_the_scorer_step(model_path):
    assert quantile_cutoffs([1.0, 2.0, 3.0, 4.0], (1 / 3, 2 / 3)) == pytest.approx((2.0, 3.0))
    assert [bucket(v, (2.0, 3.0)) for v in (1.0, 2.0, 2.5, 3.0, 3.1)] == ["head", "head", "middle", "middle", "tail"]
    from sluice.clean.steps.perplexity import PerplexityScorer

    good = Document.from_text(prose(random.Random(5), 6), language="en")
    words = good.text.split()
    random.Random(2).shuffle(words)
    bad = Document.from_text(" ".join(words), language="en")
    other = Document.from_text("Der Fluss fließt an der alten Mühle vorbei.", language="de")
    models = {"en": {"key": "en.arpa", "cutoffs": [0.0, 0.0]}}
    fetched = []

    def fetch(key):
        fetched.append(key)
        return model_path

    scorer = PerplexityScorer(PerplexitySettings(enabled=True), models, fetch)
    for doc in (good, bad):
        assert scorer.apply(doc) is None and doc.values.get("perplexity") > 1 and doc.values.get("perplexity_bucket") == "tail"
    assert scorer.apply(other) is None and other.values.get("perplexity") is None  # no German model: not scored
    assert fetched == ["en.arpa"]  # fetched once, on first use
    cut = (good.values.get("perplexity") + bad.values.get("perplexity")) / 2
    strict = PerplexityScorer(PerplexitySettings(enabled=True, max_perplexity=cut), models, fetch)
    assert strict.apply(good) is None and strict.apply(bad).reason == "high_perplexity"
    tail = PerplexityScorer(PerplexitySettings(enabled=True, drop_buckets=("tail",)), {"en": {"key": "k", "cutoffs": [good.values.get("perplexity"), cut]}}, fetch)
    assert tail.apply(good) is None and good.values.get("perplexity_bucket") == "head"
    assert tail.apply(bad).reason == "perplexity_tail"


def test_cutoff_sample_is_seeded_bounded_and_order_independent():
    items = [(f"d{i}", f"text {i}") for i in range(100)]
    forward, backward = SeededSample(10, 3), SeededSample(10, 3)
    for doc_id, text in items:
        forward.add("en", doc_id, text)
    for doc_id, text in reversed(items):
        backward.add("en", doc_id, text)
    assert forward.items("en") == backward.items("en") and len(forward.items("en")) == 10
    other = SeededSample(10, 4)
    for doc_id, text in items:
        other.add("en", doc_id, text)
    assert other.items("en") != forward.items("en") and forward.items("de") == []
