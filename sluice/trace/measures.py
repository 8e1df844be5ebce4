"""Why the filters kept a document: every filter statistic recomputed from its text, beside its threshold.

The cleaning filters (`sluice.clean.steps.filters`, length, language, code share, toxicity, perplexity, quality model)
return keep or drop and stop at the first failed rule; a trace wants the value of every rule and how close it
came. `measure_document` replays the chain on a document's raw record: charset decoding and extraction as
cleaning did, then each rule's statistic on the text that rule saw (Gopher and C4 on the extracted text,
FineWeb and the final length on the text C4 kept), with the settings cleaning applies to the document's
source and language. Values recorded by cleaning (language score, code share, toxicity, perplexity, quality
score) are compared with their thresholds as recorded. Each `Measure` says whether the rule keeps the
document and whether the value is within `margin` (relative) of the threshold.

Gopher quality, Gopher repetition and FineWeb are read from the filters' own rule tables
(`RuleFilter.rules`: each rule written once); the other steps' values come from the step or the cleaned
row. Tests check that a measure fails exactly when the filter drops; the text replay is checked too: the replayed text must equal the cleaned text before PII
redaction (`replay_matches`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from sluice.clean.steps import Document
from sluice.clean.steps.filters import KEEPS, Rule
from sluice.config import CleaningSettings


@dataclass
class Measure:
    step: str  # the cleaning step (gopher_quality, c4, ...)
    rule: str  # its statistic
    value: float
    threshold: float
    keep_if: str  # the document is kept when `value <keep_if> threshold`
    kept: bool
    near: bool  # within margin of the threshold (relative to it; absolute 1 for a threshold of 0)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}  # dataclasses.asdict deep-copies: 5x slower, same dict

    def describe(self) -> str:
        shown = f"{self.value:.4g}" if isinstance(self.value, float) else str(self.value)
        return f"{self.step}.{self.rule} {shown} (keep {self.keep_if} {self.threshold:g})"


FIELDS = tuple(field.name for field in fields(Measure))


class Measures:
    """Collects measures with one margin."""

    def __init__(self, margin: float) -> None:
        self.margin = margin
        self.items: list[Measure] = []

    def add(self, step: str, rule: str, value: float | None, threshold: float | None, keep_if: str) -> None:
        if value is None or threshold is None:
            return
        value = float(value)
        kept = KEEPS[keep_if](value, float(threshold))
        scale = abs(float(threshold)) or 1.0
        self.items.append(Measure(step, rule, value, float(threshold), keep_if, kept, abs(value - float(threshold)) <= self.margin * scale))


def replay_text(raw: dict[str, Any], settings: CleaningSettings) -> Document:
    """The document as cleaning saw it after extraction (charset decoding, HTML extraction, mojibake repair)."""
    from sluice.clean.steps.extract import DecodeText, ExtractHtml

    doc = Document(
        doc_id=raw.get("doc_id") or "", source=raw.get("source") or "", snapshot=raw.get("snapshot") or "", url=raw.get("url"),
        fetch_date=raw.get("fetch_date"), content_type=raw.get("content_type") or "text/plain", content=raw.get("content") or b"",
        charset=raw.get("charset"),
    )
    steps = [DecodeText(), ExtractHtml(settings.extraction)]
    if settings.fix_mojibake:
        from sluice.clean.steps.extract import FixMojibake

        steps.append(FixMojibake())
    try:
        for step in steps:
            if step.apply(doc) is not None:
                break
    finally:
        for step in steps:
            step.close()
    return doc


def measure_document(raw: dict[str, Any], cleaned: dict[str, Any], settings: CleaningSettings, margin: float = 0.1) -> dict[str, Any]:
    """Every rule's value and threshold for one kept document.

    raw: its raw row (content, content_type, charset, url, ...); cleaned: its cleaned row (language and the
    recorded scores); settings: the cleaning settings of its source (`CleaningSettings.for_source`)."""
    measures = Measures(margin)
    doc = replay_text(raw, settings)
    text = doc.text or ""
    language = cleaned.get("language") or "unknown"
    doc.language = language
    lang = settings.for_language(language)
    multilingual = lang.word_splitting == "multilingual"
    measures.add("length", "characters", len(text), settings.min_chars, ">=")
    measures.add("length", "characters", len(text), settings.max_chars, "<=")
    if settings.code_share.enabled:
        measures.add("code_share", "code_line_share", cleaned.get("code_share"), settings.code_share.max_share, "<=")
        measures.add("code_share", "code_line_share (route)", cleaned.get("code_share"), settings.code_share.route_above, "<=")
    threshold = settings.language_min_scores().get(language, settings.min_language_score)
    measures.add("language", f"score ({language})", cleaned.get("language_score"), threshold, ">=")
    if lang.gopher_quality.enabled:
        _gopher_quality(measures, doc, lang, multilingual)
    if lang.gopher_repetition.enabled:
        _gopher_repetition(measures, doc, lang, multilingual)
    if lang.c4.enabled:
        _c4(measures, doc, lang, multilingual)
    if lang.fineweb_quality.enabled:
        _fineweb(measures, doc, lang, multilingual)
    if lang.c4.enabled:
        measures.add("length_after_filters", "characters", len(doc.text or ""), lang.min_chars, ">=")
        measures.add("length_after_filters", "characters", len(doc.text or ""), lang.max_chars, "<=")
    if lang.toxicity.enabled and lang.toxicity.max_score is not None and cleaned.get("toxicity_score") is not None:
        # Dropped when at least min_terms listed terms besides the reporting terms occur and all listed terms
        # are more than max_score of the words: the binding rule is the score once the count is reached.
        from sluice.clean.steps.toxicity import ToxicityFilter

        scored = ToxicityFilter(lang.toxicity, multilingual).score(doc)
        dropping = scored[2] if scored is not None else 0
        if dropping >= lang.toxicity.min_terms:
            measures.add("toxicity", "terms_per_word", cleaned.get("toxicity_score"), lang.toxicity.max_score, "<=")
        else:
            measures.add("toxicity", "listed_terms", dropping, lang.toxicity.min_terms, "<")
    if lang.perplexity.enabled:
        measures.add("perplexity", "perplexity", cleaned.get("perplexity"), lang.perplexity.max_perplexity, "<=")
    measures.add("quality_model", "score", cleaned.get("quality_score"), lang.quality_threshold, ">=")
    return {
        "measures": measures.items,
        "replayed_text": doc.text or "",
        "extracted_chars": len(text),
    }


def _add_rules(measures: Measures, step: str, rules: Iterable[Rule]) -> None:
    """Every rule of a filter's table (sluice.clean.steps.filters.RuleFilter.rules), as the filter computes it."""
    for rule in rules:
        if rule.traced:
            measures.add(step, rule.statistic, rule.value, rule.threshold, rule.keep_if)


def _gopher_quality(measures: Measures, doc: Document, settings: CleaningSettings, multilingual: bool) -> None:
    from sluice.clean.steps.filters import GopherQualityFilter

    _add_rules(measures, "gopher_quality", GopherQualityFilter(settings.gopher_quality, multilingual).rules(doc))


def _gopher_repetition(measures: Measures, doc: Document, settings: CleaningSettings, multilingual: bool) -> None:
    from sluice.clean.steps.filters import GopherRepetitionFilter

    _add_rules(measures, "gopher_repetition", GopherRepetitionFilter(settings.gopher_repetition, multilingual).rules(doc, every=True))


def _c4(measures: Measures, doc: Document, settings: CleaningSettings, multilingual: bool) -> None:
    """C4's rules (its table, sluice.clean.steps.filters.C4QualityFilter.rules) and the lines it removed; leaves the
    lines C4 keeps as the document's text (what FineWeb then sees)."""
    from sluice.clean.steps.filters import C4QualityFilter

    step = C4QualityFilter(settings.c4, multilingual)
    c4 = step.lines(doc.text or "")
    _add_rules(measures, "c4", step.rules(doc, lines=c4))
    if c4.stop is None:
        c4.keep(doc)
    measures.items.append(_info("c4", "lines_removed", c4.lines_in - len(c4.kept)))


def _info(step: str, rule: str, value: float) -> Measure:
    return Measure(step, rule, float(value), float("nan"), "info", True, False)


def _fineweb(measures: Measures, doc: Document, settings: CleaningSettings, multilingual: bool) -> None:
    from sluice.clean.steps.filters import FineWebQualityFilter

    _add_rules(measures, "fineweb_quality", FineWebQualityFilter(settings.fineweb_quality, multilingual).rules(doc))
