"""The cleaning chain: which steps run, in which order, with which settings (per source, and per language
after language ID), and the text caches those steps keep."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sluice.clean.steps import ByLanguage, Step
from sluice.clean.steps.length_language import LanguageFilter, LengthFilter
from sluice.config import CleaningSettings


def build_steps(
    settings: CleaningSettings,
    quality_model_path: str | None = None,
    quality_max_chars: int = 4000,
    perplexity_models: tuple[dict[str, dict], Any] | None = None,
) -> list[Step]:
    """The default chain: URL filter, charset + extraction, (training blocklist), length, code share, language ID, then per
    language: Gopher quality, Gopher repetition, C4, FineWeb quality, length again, toxicity, perplexity,
    quality model; then PII redaction on what is kept. `settings` are one source's settings
    (`CleaningSettings.for_source`); `perplexity_models` = (manifest entries by language, fetch(key) -> path)
    of the perplexity_model asset, needed when cleaning.perplexity is on."""
    from sluice.clean.steps.extract import DecodeText, ExtractHtml
    from sluice.clean.steps.pii import PIIRedactor
    from sluice.clean.steps.urlfilter import URLFilter

    steps: list[Step] = []
    if settings.url_blocklist:
        steps.append(URLFilter.from_file(settings.url_blocklist))
    steps += [DecodeText(), ExtractHtml(settings.extraction)]
    if settings.fix_mojibake:
        from sluice.clean.steps.extract import FixMojibake

        steps.append(FixMojibake())
    if settings.blocklist:
        from sluice.blocklist import BlocklistFilter

        steps.append(BlocklistFilter.from_file(settings.blocklist))
    steps.append(LengthFilter(settings.min_chars, settings.max_chars))
    if settings.code_share.enabled:
        from sluice.clean.steps.codeshare import CodeShare

        steps.append(CodeShare(settings.code_share))
    steps.append(
        LanguageFilter(settings.keep_languages, settings.min_language_score, settings.langid_model, settings.language_min_scores())
    )
    default = settings.for_language("")
    per_language = {code: settings.for_language(code) for code in sorted(settings.languages)}
    for keys, build in _language_steps(quality_model_path, quality_max_chars, perplexity_models):
        base = build(default)
        variants: dict[str, Step | None] = {}
        for code, language_settings in per_language.items():
            if any(getattr(language_settings, key) != getattr(default, key) for key in keys):
                variants[code] = build(language_settings)
        if variants and any(step is not None for step in (base, *variants.values())):
            steps.append(ByLanguage(base, variants))
        elif base is not None:
            steps.append(base)
    if settings.pii.enabled:
        steps.append(PIIRedactor(settings.pii))
    return steps


def _language_steps(quality_model_path: str | None, quality_max_chars: int, perplexity_models: Any) -> list[tuple[tuple[str, ...], Any]]:
    """The steps after language ID in chain order: (settings keys it reads, settings -> step or None)."""
    from sluice.clean.steps.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    def multilingual(s: CleaningSettings) -> bool:
        return s.word_splitting == "multilingual"

    def quality(s: CleaningSettings) -> Step | None:
        if s.quality_threshold is None:
            return None
        if not quality_model_path:
            raise ValueError("cleaning.quality_threshold is set but no quality model was given (materialize quality_model)")
        from sluice.clean.steps.quality import QualityScorer

        return QualityScorer(quality_model_path, s.quality_threshold, quality_max_chars)

    def toxicity(s: CleaningSettings) -> Step | None:
        from sluice.clean.steps.toxicity import ToxicityFilter

        return ToxicityFilter(s.toxicity, multilingual(s)) if s.toxicity.enabled else None

    def perplexity(s: CleaningSettings) -> Step | None:
        if not s.perplexity.enabled:
            return None
        if perplexity_models is None:
            raise ValueError("cleaning.perplexity is enabled but no perplexity model was given (materialize perplexity_model)")
        from sluice.clean.steps.perplexity import PerplexityScorer

        return PerplexityScorer(s.perplexity, *perplexity_models)

    # Gopher quality runs before Gopher repetition (datatrove's FineWeb example has them the other way
    # round): both read the same text and neither edits it, so every keep/drop decision is the same, and
    # the cheaper filter first spares the n-gram work for what it drops. Only the reported reason of a
    # document failing both differs. C4 edits the text, so it stays after them and before FineWeb; C4
    # removes lines, so the length bounds apply again to what is left. Toxicity and perplexity read the
    # final text's tokens, which FineWeb has already computed.
    splitting = "word_splitting"
    return [
        (("gopher_quality", splitting), lambda s: GopherQualityFilter(s.gopher_quality, multilingual(s)) if s.gopher_quality.enabled else None),
        (("gopher_repetition", splitting), lambda s: GopherRepetitionFilter(s.gopher_repetition, multilingual(s)) if s.gopher_repetition.enabled else None),
        (("c4", splitting), lambda s: C4QualityFilter(s.c4, multilingual(s)) if s.c4.enabled else None),
        (("fineweb_quality", splitting), lambda s: FineWebQualityFilter(s.fineweb_quality, multilingual(s)) if s.fineweb_quality.enabled else None),
        (("c4", "min_chars", "max_chars"), lambda s: _FinalLength(s.min_chars, s.max_chars) if s.c4.enabled else None),
        (("toxicity", splitting), toxicity),
        (("perplexity",), perplexity),
        (("quality_threshold",), quality),
    ]


class _FinalLength(LengthFilter):
    name = "length_after_filters"


def clear_text_caches() -> None:
    """Forget what the steps remember of earlier texts (the word splitter's chunks, code share's lines,
    language ID's word sums), so a benchmark that cleans the same documents again in one process starts each
    timed pass cold."""
    from sluice.clean.models.langid import clear_word_cache
    from sluice.clean.steps.codeshare import clear_line_cache
    from sluice.words import clear_chunk_cache

    clear_chunk_cache()
    clear_line_cache()
    clear_word_cache()


def drop_reasons(settings: Iterable[CleaningSettings]) -> list[str]:
    """Every reason the cleaning chains of these settings (each source's `CleaningSettings.for_source`) can drop
    a document for, sorted: the reasons the steps they enable declare (`Step.reasons`, their rule tables),
    for each language's settings, with the names the settings choose (Gopher's n-gram sizes, perplexity's
    dropped buckets). The cleaned metadata records each as a count, 0 where a partition dropped none, so every
    partition carries the same keys whichever run wrote it. (The budget's rare `step_timeout:<step>` /
    `step_crashed:<step>` are recorded where they happen.)"""
    from sluice.blocklist import BlocklistFilter
    from sluice.clean.steps.codeshare import CodeShare
    from sluice.clean.steps.extract import DecodeText, ExtractHtml
    from sluice.clean.steps.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from sluice.clean.steps.perplexity import PerplexityScorer
    from sluice.clean.steps.quality import QualityScorer
    from sluice.clean.steps.toxicity import ToxicityFilter
    from sluice.clean.steps.urlfilter import URLFilter

    reasons: set[str] = set()
    for source in settings:
        reasons.update(DecodeText.reasons, ExtractHtml.reasons, LengthFilter.reasons, LanguageFilter.reasons)
        for enabled, step in ((source.url_blocklist, URLFilter), (source.blocklist, BlocklistFilter), (source.code_share.enabled, CodeShare)):
            if enabled:
                reasons.update(step.reasons)
        for s in (source, *(source.for_language(code) for code in sorted(source.languages))):
            for enabled, step in (
                (s.gopher_quality.enabled, GopherQualityFilter), (s.c4.enabled, C4QualityFilter),
                (s.fineweb_quality.enabled, FineWebQualityFilter), (s.toxicity.enabled, ToxicityFilter),
                (s.perplexity.enabled, PerplexityScorer), (s.quality_threshold is not None, QualityScorer),
            ):
                if enabled:
                    reasons.update(step.reasons)
            if s.gopher_repetition.enabled:
                repetition = s.gopher_repetition
                reasons.update(GopherRepetitionFilter.reasons)
                reasons.update(f"top_{n}_gram" for n in repetition.top_n_grams)
                reasons.update(f"duplicated_{n}_n_grams" for n in repetition.dup_n_grams)
            if s.perplexity.enabled:
                reasons.update(f"perplexity_{bucket}" for bucket in s.perplexity.drop_buckets)
    return sorted(reasons)
