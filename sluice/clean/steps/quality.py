"""Model-based quality filter: a fastText classifier that scores how much a text looks like a reference source.

Training (the `quality_model` asset): positives are the documents of `quality_model.positive_source` (a
curated source), negatives a seeded random sample of the raw documents of every other source; both go
through the same decode + extraction steps as cleaning (no filters), so the model sees texts as the
cleaning chain does. The sample is chosen by the smallest xxhash of `seed:doc_id` before anything is
extracted (sluice.clean.models.training: deterministic, independent of the order the files are read in, its cost
bounded by `max_negatives`); training is single-threaded with a fixed seed, so the same raw data and
settings give the same model.

Model file: fastText's binary format (`model.bin`, loadable with `fasttext.load_model`), labels `__label__hq`
(like the reference) and `__label__lq`. Input lines: the first `max_chars` characters, lower-cased, whitespace
collapsed to single spaces. A document's score is the model's probability of `__label__hq`.

Use (`cleaning.quality_threshold`, per source like every cleaning setting): null = not used; a number =
score every document reaching the step into the `quality_score` column and drop those below it
(`low_quality_score`); 0 scores without dropping.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import xxhash

from sluice.clean.steps import Document, Drop, Step
from sluice.config import QualityModelSettings

POSITIVE = "__label__hq"
NEGATIVE = "__label__lq"
MODEL_FILE = "model.bin"


def model_line(text: str, max_chars: int) -> str:
    return " ".join(text[:max_chars].lower().split())


def split_by_text(lines: list[tuple[str, str]], seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, held out): about 1 in 5 lines held out, chosen by a seeded hash of the line's text, so copies
    of a page (a crawl holds many) are always on the same side and never inflate the held-out accuracy. The
    training lines are shuffled (seeded); all are trained on when the hash holds out every one."""
    held = [xxhash.xxh3_64_intdigest(f"{seed}:{text}".encode()) % 5 == 0 for _, text in lines]
    train = [line for line, out in zip(lines, held, strict=True) if not out]
    held_out = [line for line, out in zip(lines, held, strict=True) if out]
    if not train:
        train, held_out = held_out, []
    random.Random(seed).shuffle(train)
    return train, held_out


def train_model(positives: Iterable[str], negatives: Iterable[str], path: str, settings: QualityModelSettings) -> dict[str, float]:
    """Train on the lines `split_by_text` keeps for training, write the model to `path`, return held-out accuracy."""
    import fasttext

    lines = [(POSITIVE, t) for t in positives] + [(NEGATIVE, t) for t in negatives]
    lines = [(label, model_line(text, settings.max_chars)) for label, text in lines]
    train, held_out = split_by_text([(label, text) for label, text in lines if text], settings.seed)
    with tempfile.TemporaryDirectory() as scratch:
        data = os.path.join(scratch, "train.txt")
        with open(data, "w", encoding="utf-8") as out:
            for label, text in train:
                out.write(f"{label} {text}\n")
        fasttext.FastText.eprint = lambda *args, **kwargs: None
        model = fasttext.train_supervised(
            input=data,
            epoch=settings.epochs,
            lr=settings.learning_rate,
            wordNgrams=settings.word_ngrams,
            dim=settings.dim,
            minCount=1,
            thread=1,  # single-threaded: the same data gives the same model
            seed=settings.seed,
            verbose=0,
        )
    model.save_model(path)
    correct = sum(1 for label, text in held_out if model.predict(text, k=1)[0][0] == label)
    return {"held_out": len(held_out), "held_out_accuracy": correct / len(held_out) if held_out else 0.0, "trained_on": len(train)}


class QualityScorer(Step):
    """Scores with the trained model (`quality_score`) and drops below the threshold."""

    name = "quality_model"
    measured = False  # (a model: not run on documents dropped before it)
    reasons = ("low_quality_score",)
    columns = (pa.field("quality_score", pa.float32()),)  # P(like the reference); null when not used

    def __init__(self, model_path: str, threshold: float, max_chars: int) -> None:
        import fasttext

        fasttext.FastText.eprint = lambda *args, **kwargs: None
        self.model = fasttext.load_model(model_path)
        self.threshold = threshold
        self.max_chars = max_chars

    def score(self, text: str) -> float:
        labels, probabilities = self.model.predict(model_line(text, self.max_chars), k=2)
        for label, probability in zip(labels, probabilities, strict=True):
            if label == POSITIVE:
                return float(min(1.0, probability))
        return 0.0

    def apply(self, doc: Document) -> Drop | None:
        score = doc.values["quality_score"] = self.score(doc.text or "")
        if score < self.threshold:
            return Drop("low_quality_score", f"{score!r} < {self.threshold}")
        return None

    def count_kept(self, doc: Document, stats: Any) -> None:
        if "quality_score" in doc.values:
            stats.quality_scores.add(doc.values["quality_score"])
