"""The two cleaning steps defined here (the others live with their subject: sluice.clean.steps.extract, sluice.clean.steps.filters,
sluice.clean.steps.codeshare, sluice.clean.steps.toxicity, sluice.clean.steps.perplexity, sluice.clean.steps.urlfilter, sluice.clean.steps.pii): the length bounds and
fastText language identification with its keep list and per-language minimum scores."""

from __future__ import annotations

from typing import Any

from sluice.clean.steps import Document, Drop, Step


class LengthFilter(Step):
    name = "length"
    reasons = ("too_short", "too_long")

    def __init__(self, min_chars: int, max_chars: int) -> None:
        self.min_chars = min_chars
        self.max_chars = max_chars

    def apply(self, doc: Document) -> Drop | None:
        length = len(doc.text or "")
        if length < self.min_chars:
            return Drop("too_short", f"{length} < {self.min_chars} characters")
        if length > self.max_chars:
            return Drop("too_long", f"{length} > {self.max_chars} characters")
        return None


class LanguageFilter(Step):
    """fastText lid.176; keeps the configured languages (all when none) above the minimum score
    (per language where `min_language_scores` names it). Language and score stay on the document."""

    name = "language"
    reasons = ("language_not_kept", "low_language_score")
    on_routed = True  # routed documents get their language too (a drop is ignored for them)

    def __init__(
        self,
        languages: tuple[str, ...],
        min_score: float,
        model_path: str | None,
        min_scores: dict[str, float] | None = None,
    ) -> None:
        from sluice.langid import LanguageIdentifier

        self.languages = set(languages)
        self.min_score = min_score
        self.min_scores = dict(min_scores or {})
        self.identifier = LanguageIdentifier(model_path)

    def apply(self, doc: Document) -> Drop | None:
        # The text's chunks are split once, here, and kept for the word tokens of the filters after.
        doc.language, doc.language_score = self.identifier.predict(doc.text or "", doc.chunks())
        if self.languages and doc.language not in self.languages:
            return Drop("language_not_kept", f"{doc.language} ({doc.language_score:.2f})")
        threshold = self.min_scores.get(doc.language, self.min_score)
        if doc.language_score < threshold:
            return Drop("low_language_score", f"{doc.language} {doc.language_score:.2f} < {threshold}")
        return None

    def count(self, doc: Document, drop: Drop | None, stats: Any) -> None:
        stats.languages_in[doc.language] += 1  # every identified document, kept or not
