"""The two cleaning steps defined here (the others live with their subject: sluice.clean.steps.extract, sluice.clean.steps.filters,
sluice.clean.steps.codeshare, sluice.clean.steps.toxicity, sluice.clean.steps.perplexity, sluice.clean.steps.urlfilter, sluice.clean.steps.pii): the length bounds and
fastText language identification with its keep list and per-language minimum scores."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sluice.clean.steps import Document, Drop, Step
from sluice.clean.steps.filters import Limit, Rule, RuleFilter, first_drop


class LengthFilter(RuleFilter):
    """The extracted text's characters within [min_chars, max_chars] (a rule table of two rules)."""

    name = "length"
    reasons = ("too_short", "too_long")

    def __init__(self, min_chars: int, max_chars: int) -> None:
        self.min_chars = min_chars
        self.max_chars = max_chars
        self.limits = {"too_short": ("characters", min_chars, ">="), "too_long": ("characters", max_chars, "<=")}

    def rules(self, doc: Document, every: bool = False) -> Iterator[Rule]:
        length = len(doc.text or "")
        yield self.rule("too_short", length, "{} < {} characters", (length, self.min_chars))
        yield self.rule("too_long", length, "{} > {} characters", (length, self.max_chars))

    def definition(self) -> Any:
        return None  # the characters of the text (its bounds are the thresholds)


def language_limits(keep: Iterable[str], min_score: float, min_scores: dict[str, float], language: str) -> dict[str, Limit]:
    """The language rules for a document identified as `language`: one of the kept languages (all when none
    are listed), with at least its minimum score (`min_scores`, else `min_score`)."""
    return {
        "language_not_kept": ("language", frozenset(keep) or None, "in"),
        "low_language_score": ("score", min_scores.get(language, min_score), ">="),
    }


class LanguageFilter(Step):
    """fastText lid.176; keeps the configured languages (all when none) above the minimum score
    (per language where `min_language_scores` names it). Language and score stay on the document."""

    name = "language"
    reasons = ("language_not_kept", "low_language_score")
    on_routed = True  # routed documents get their language too (a drop is ignored for them)
    outcome = False  # (its language and score are recorded instead)

    def __init__(
        self,
        languages: tuple[str, ...],
        min_score: float,
        model_path: str | None,
        min_scores: dict[str, float] | None = None,
    ) -> None:
        from sluice.clean.models.langid import LanguageIdentifier

        self.languages = set(languages)
        self.min_score = min_score
        self.min_scores = dict(min_scores or {})
        self.identifier = LanguageIdentifier(model_path)

    def rules(self, doc: Document) -> Iterator[Rule]:
        """The language rules (`language_limits`) on the identified language and score."""
        limits = language_limits(self.languages, self.min_score, self.min_scores, doc.language)
        language, score = doc.language, doc.language_score
        kept, (score_name, threshold, score_keep_if) = limits["language_not_kept"], limits["low_language_score"]
        yield Rule(kept[0], language, kept[1], kept[2], "language_not_kept", "{} ({:.2f})", (language, score))
        yield Rule(score_name, score, threshold, score_keep_if, "low_language_score", "{} {:.2f} < {}", (language, score, threshold))

    def apply(self, doc: Document) -> Drop | None:
        # The text's chunks are split once, here, and kept for the word tokens of the filters after.
        doc.language, doc.language_score = self.identifier.predict(doc.text or "", doc.chunks())
        if doc.attributes is not None:
            doc.attributes["language.language"] = doc.language
            doc.attributes["language.score"] = doc.language_score
        return first_drop(self.rules(doc))

    def measure(self, doc: Document) -> None:
        self.apply(doc)

    def attribute_names(self) -> set[str]:
        return {"language.language", "language.score"}

    def count(self, doc: Document, drop: Drop | None, stats: Any) -> None:
        stats.languages_in[doc.language] += 1  # every identified document, kept or not
