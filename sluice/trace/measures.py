"""Why the filters kept a document: every filter statistic recomputed from its text, beside its threshold.

The cleaning filters (`sluice.filters`, length, language, code share, toxicity, perplexity, quality model)
return keep or drop and stop at the first failed rule; a trace wants the value of every rule and how close it
came. `measure_document` replays the chain on a document's raw record: charset decoding and extraction as
cleaning did, then each rule's statistic on the text that rule saw (Gopher and C4 on the extracted text,
FineWeb and the final length on the text C4 kept), with the settings cleaning applies to the document's
source and language. Values recorded by cleaning (language score, code share, toxicity, perplexity, quality
score) are compared with their thresholds as recorded. Each `Measure` says whether the rule keeps the
document and whether the value is within `margin` (relative) of the threshold.

The statistics follow the filters' code rule for rule (tests check that a measure fails exactly when the
filter drops); the text replay is checked too: the replayed text must equal the cleaned text before PII
redaction (`replay_matches`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from sluice.config import CleaningSettings
from sluice.steps import Document

KEEPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}


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
    from sluice.extract import DecodeText, ExtractHtml

    doc = Document(
        doc_id=raw.get("doc_id") or "", source=raw.get("source") or "", snapshot=raw.get("snapshot") or "", url=raw.get("url"),
        fetch_date=raw.get("fetch_date"), content_type=raw.get("content_type") or "text/plain", content=raw.get("content") or b"",
        charset=raw.get("charset"),
    )
    steps = [DecodeText(), ExtractHtml(settings.extraction)]
    if settings.fix_mojibake:
        from sluice.extract import FixMojibake

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
        from sluice.toxicity import ToxicityFilter

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


def _words(doc: Document, multilingual: bool) -> tuple[list[str], Any, int]:
    from sluice.words import PUNCTUATION

    words = doc.tokens(multilingual)
    counts = doc.token_counts(multilingual)
    symbols = PUNCTUATION.intersection(counts)
    return words, counts, len(words) - sum(counts[p] for p in symbols)


def _gopher_quality(measures: Measures, doc: Document, settings: CleaningSettings, multilingual: bool) -> None:
    from sluice.words import PUNCTUATION, STOP_WORDS

    s, add = settings.gopher_quality, measures.add
    text = doc.text or ""
    words, counts, n_non_symbol = _words(doc, multilingual)
    n_words = len(words)
    add("gopher_quality", "words", n_non_symbol, s.min_doc_words or None, ">=")
    add("gopher_quality", "words", n_non_symbol, s.max_doc_words or None, "<=")
    if n_non_symbol == 0:
        return
    spaceless = multilingual and doc.mostly_spaceless()
    if not spaceless:
        symbols = PUNCTUATION.intersection(counts)
        mean = (sum(map(len, words)) - sum(len(p) * counts[p] for p in symbols)) / n_non_symbol
        add("gopher_quality", "mean_word_length", mean, s.min_avg_word_length or None, ">=")
        add("gopher_quality", "mean_word_length", mean, s.max_avg_word_length or None, "<=")
    if s.max_symbol_word_ratio:
        add("gopher_quality", "hashes_per_word", text.count("#") / n_words, s.max_symbol_word_ratio, "<=")
        add("gopher_quality", "ellipses_per_word", (text.count("...") + text.count("…")) / n_words, s.max_symbol_word_ratio, "<=")
    lines = text.splitlines() or [""]
    if s.max_bullet_lines_ratio:
        bullets = sum(1 for line in lines if line.lstrip().startswith(("•", "-"))) / len(lines)
        add("gopher_quality", "bullet_lines", bullets, s.max_bullet_lines_ratio, "<=")
    if s.max_ellipsis_lines_ratio:
        ellipsis = sum(1 for line in lines if line.rstrip().endswith(("...", "…"))) / len(lines)
        add("gopher_quality", "ellipsis_lines", ellipsis, s.max_ellipsis_lines_ratio, "<=")
    if s.max_non_alpha_words_ratio:
        from sluice.filters import _alpha_share

        add("gopher_quality", "words_with_a_letter", _alpha_share(text, counts, n_words, s.alpha_words), s.max_non_alpha_words_ratio, ">=")
    if s.min_stop_words:
        if s.stop_words is not None:
            stop_words, spaceless = frozenset(s.stop_words), False
        else:
            stop_words = STOP_WORDS["en"] if not multilingual else STOP_WORDS.get(doc.language)
        if stop_words is not None and not spaceless:
            add("gopher_quality", "stop_words", sum(counts[w] for w in stop_words.intersection(counts)), s.min_stop_words, ">=")


def _gopher_repetition(measures: Measures, doc: Document, settings: CleaningSettings, multilingual: bool) -> None:
    from sluice.filters import (
        _LINE_BREAKS,
        _PARAGRAPH_BREAK,
        GopherRepetitionFilter,
        _duplicates,
        _ngram_keys,
        _span_chars,
        _top_ngram,
    )

    s, add = settings.gopher_repetition, measures.add
    text = doc.text or ""
    length = len(text) or 1
    paragraphs = _PARAGRAPH_BREAK.split(text.strip())
    dup, dup_chars = _duplicates(paragraphs)
    add("gopher_repetition", "dup_para_frac", dup / len(paragraphs), s.dup_para_frac or None, "<=")
    add("gopher_repetition", "dup_para_char_frac", dup_chars / length, s.dup_para_char_frac or None, "<=")
    lines = _LINE_BREAKS.split(text)
    dup, dup_chars = _duplicates(lines)
    add("gopher_repetition", "dup_line_frac", dup / len(lines), s.dup_line_frac or None, "<=")
    add("gopher_repetition", "dup_line_char_frac", dup_chars / length, s.dup_line_char_frac or None, "<=")
    words = doc.tokens(multilingual)
    if not words:
        return
    scale = 2 if multilingual and doc.mostly_spaceless() else 1
    ids = np.fromiter(map(hash, words), dtype=np.int64, count=len(words)).view(np.uint64)
    for n, threshold in sorted(s.top_n_grams.items()):
        span = n * scale
        if len(words) < span:
            continue
        top, at = _top_ngram(_ngram_keys(ids, span))
        chars = (_span_chars(words, at, span) + (span - 1 if scale == 1 else 0)) * top
        add("gopher_repetition", f"top_{n}_gram_char_frac", chars / length, threshold, "<=")
    for n, threshold in sorted(s.dup_n_grams.items()):
        span = n * scale
        if len(words) < span:
            continue
        chars = GopherRepetitionFilter._repeated_ngram_chars(_ngram_keys(ids, span), words, span)
        add("gopher_repetition", f"duplicated_{n}_gram_char_frac", chars / length, threshold, "<=")


def _c4(measures: Measures, doc: Document, settings: CleaningSettings, multilingual: bool) -> None:
    """C4's statistics; leaves the lines C4 keeps as the document's text (what FineWeb then sees)."""
    from sluice.filters import C4QualityFilter

    step = C4QualityFilter(settings.c4, multilingual)
    before = doc.text or ""
    lines_in = sum(1 for line in before.splitlines() if line.strip())
    drop = step.apply(doc)
    s = settings.c4
    if drop is not None:  # not what cleaning did for a kept document: the trace says so (replay_matches)
        measures.add("c4", "dropped", 1, 0, "==")
        return
    kept = (doc.text or "").split("\n") if doc.text else []
    if s.min_num_sentences != -1:
        # C4 counts 1 + the sentence ends inside each kept line
        sentences = sum(1 + len(step.sentence_end.findall(line)) for line in kept)
        measures.add("c4", "sentences", sentences, s.min_num_sentences, ">=")
    measures.items.append(_info("c4", "lines_removed", lines_in - len(kept)))


def _info(step: str, rule: str, value: float) -> Measure:
    return Measure(step, rule, float(value), float("nan"), "info", True, False)


def _fineweb(measures: Measures, doc: Document, settings: CleaningSettings, multilingual: bool) -> None:
    from sluice.filters import FineWebQualityFilter, _duplicates

    step = FineWebQualityFilter(settings.fineweb_quality, multilingual)
    s, add = settings.fineweb_quality, measures.add
    text = doc.text or ""
    lines = text.split("\n")
    ratio = sum(1 for line in lines if line.endswith(step.stop_chars)) / len(lines)
    if not (ratio == 0 and s.line_punct_exclude_zero):
        add("fineweb_quality", "line_punct_ratio", ratio, s.line_punct_thr, ">")
    short = s.short_line_length
    if multilingual and doc.mostly_spaceless():
        short = max(1, short // 3)
    add("fineweb_quality", "short_line_ratio", sum(1 for line in lines if len(line) <= short) / len(lines), s.short_line_thr, "<")
    non_empty = [line for line in lines if line.strip()]
    chars = len(text) - text.count("\n")
    add("fineweb_quality", "char_dup_ratio", _duplicates(non_empty)[1] / chars if chars else 0.0, s.char_duplicates_ratio, "<")
    n_words = len(doc.tokens(multilingual))
    add("fineweb_quality", "newlines_per_word", text.count("\n") / n_words if n_words else float("inf"), s.new_line_ratio, "<=")
