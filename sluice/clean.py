"""Cleaning: raw HTML or text -> extracted, language-tagged, quality-filtered, PII-redacted text.

Each step is an object with one job (sluice.steps): `apply(doc)` edits the document in place and returns
None to keep it, or a `Drop(reason, detail)`. `CleaningPipeline` runs the steps in order and counts, per
step, the documents that reach it and the drops by reason (the funnel). Dropped documents are kept, with
their step and reason, in the side dataset `cleaned_dropped` (`DROPPED_DATASET`, one `dropped-NNNNN.parquet`
per part under `cleaned_dropped/source=<s>/snapshot=<n>/`): nothing silently vanishes. Part files carry no
`source`/`snapshot` columns (they are the Hive partition folders), so each folder reads as one dataset. A step may instead route a document to a side dataset (`Route`, e.g. code-heavy pages to
`cleaned_code`): it skips the remaining filters, gets language ID and PII redaction, and is written there.
The steps live in sluice.extract (charset, HTML), sluice.filters (Gopher, C4, FineWeb), sluice.codeshare,
sluice.toxicity, sluice.perplexity, sluice.urlfilter and sluice.pii. Steps after language ID take their
settings per language (`cleaning.languages.<code>`, `ByLanguage`).
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import xxhash

from sluice.config import CleaningSettings, S3Settings
from sluice.layout import ParquetStreamWriter
from sluice.steps import ByLanguage, Document, Drop, Route, Step
from sluice.storage import StoreSpec

__all__ = ["CleaningPipeline", "Document", "Drop", "LanguageFilter", "LengthFilter", "Route", "Step", "build_steps", "clean_part"]

CLEANED_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("url", pa.string()),
        pa.field("fetch_date", pa.timestamp("ms", tz="UTC")),
        pa.field("text", pa.string(), nullable=False),
        pa.field("language", pa.string(), nullable=False),
        pa.field("language_score", pa.float32(), nullable=False),
        pa.field("n_chars", pa.int64(), nullable=False),
        pa.field("text_hash", pa.string(), nullable=False),  # see normalize_for_hash
        pa.field("pii_redactions", pa.int32(), nullable=False),  # placeholders put into this text
        pa.field("quality_score", pa.float32()),  # quality model's P(like the reference); null when not used
        pa.field("code_share", pa.float32()),  # share of lines that look like code (sluice.codeshare)
        pa.field("toxicity_score", pa.float32()),  # listed toxic terms per word; null: no list for the language
        pa.field("toxic_terms", pa.int32()),  # occurrences of listed terms
        pa.field("perplexity", pa.float32()),  # under the language's n-gram model; null when not scored
        pa.field("perplexity_bucket", pa.string()),  # head / middle / tail (per-language cut-offs)
    ]
)

DROPPED_DATASET = "cleaned_dropped"
DROPPED_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("url", pa.string()),
        pa.field("step", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("text", pa.string()),  # the text as far as it was extracted, if it was
    ]
)


def normalize_for_hash(text: str) -> str:
    """Exact-dedup normalisation: Unicode NFKC, case-folded, runs of whitespace collapsed to one space,
    leading/trailing whitespace removed. Two documents are exact duplicates when these strings are equal."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def text_hash(text: str) -> str:
    return xxhash.xxh3_128_hexdigest(normalize_for_hash(text).encode("utf-8"))


class LengthFilter(Step):
    name = "length"

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
    from sluice.extract import DecodeText, ExtractHtml
    from sluice.pii import PIIRedactor
    from sluice.urlfilter import URLFilter

    steps: list[Step] = []
    if settings.url_blocklist:
        steps.append(URLFilter.from_file(settings.url_blocklist))
    steps += [DecodeText(), ExtractHtml(settings.extraction)]
    if settings.fix_mojibake:
        from sluice.extract import FixMojibake

        steps.append(FixMojibake())
    if settings.blocklist:
        from sluice.blocklist import BlocklistFilter

        steps.append(BlocklistFilter.from_file(settings.blocklist))
    steps.append(LengthFilter(settings.min_chars, settings.max_chars))
    if settings.code_share.enabled:
        from sluice.codeshare import CodeShare

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
    from sluice.filters import (
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
        from sluice.quality import QualityScorer

        return QualityScorer(quality_model_path, s.quality_threshold, quality_max_chars)

    def toxicity(s: CleaningSettings) -> Step | None:
        from sluice.toxicity import ToxicityFilter

        return ToxicityFilter(s.toxicity, multilingual(s)) if s.toxicity.enabled else None

    def perplexity(s: CleaningSettings) -> Step | None:
        if not s.perplexity.enabled:
            return None
        if perplexity_models is None:
            raise ValueError("cleaning.perplexity is enabled but no perplexity model was given (materialize perplexity_model)")
        from sluice.perplexity import PerplexityScorer

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
    from sluice.codeshare import clear_line_cache
    from sluice.langid import clear_word_cache
    from sluice.words import clear_chunk_cache

    clear_chunk_cache()
    clear_line_cache()
    clear_word_cache()


@dataclass
class CleaningStats:
    documents_in: int = 0
    documents_out: int = 0
    reached: dict[str, int] = field(default_factory=dict)  # documents that reached each step, in step order
    drops: Counter[str] = field(default_factory=Counter)  # by reason
    drops_by_step: Counter[str] = field(default_factory=Counter)
    languages_in: Counter[str] = field(default_factory=Counter)  # language of every identified document
    languages: Counter[str] = field(default_factory=Counter)  # of kept documents
    pii: Counter[str] = field(default_factory=Counter)  # redactions by kind
    residual_pii: Counter[str] = field(default_factory=Counter)  # PII patterns found in the written texts
    input_bytes: list[int] = field(default_factory=list)  # per input document
    extracted_chars: list[int] = field(default_factory=list)  # per document that got through extraction
    output_chars: list[int] = field(default_factory=list)  # per kept document
    quality_scores: list[float] = field(default_factory=list)  # per kept document, when scored
    routed: Counter[str] = field(default_factory=Counter)  # documents routed, by side dataset
    code_shares: list[float] = field(default_factory=list)  # per kept document, when measured
    toxic_documents: int = 0  # kept documents with at least one listed term
    toxic_terms: int = 0  # listed-term occurrences in kept documents
    perplexities: list[float] = field(default_factory=list)  # per kept document, when scored
    perplexity_buckets: Counter[str] = field(default_factory=Counter)  # of kept documents
    chars_in: int = 0
    chars_out: int = 0

    def merge(self, other: dict[str, Any]) -> None:
        """Add the counts of another part of the same chain (`as_dict()` form), keeping step order."""
        for name, count in other["reached"].items():
            self.reached[name] = self.reached.get(name, 0) + count
        for name in ("documents_in", "documents_out", "toxic_documents", "toxic_terms", "chars_in", "chars_out"):
            setattr(self, name, getattr(self, name) + other[name])
        for counter in ("drops", "drops_by_step", "languages_in", "languages", "pii", "residual_pii", "routed", "perplexity_buckets"):
            getattr(self, counter).update(other[counter])
        for values in ("input_bytes", "extracted_chars", "output_chars", "quality_scores", "code_shares", "perplexities"):
            getattr(self, values).extend(other[values])

    def as_dict(self) -> dict[str, Any]:
        return {
            "documents_in": self.documents_in,
            "documents_out": self.documents_out,
            "reached": dict(self.reached),
            "drops": dict(self.drops),
            "drops_by_step": dict(self.drops_by_step),
            "languages_in": dict(self.languages_in),
            "languages": dict(self.languages),
            "pii": dict(self.pii),
            "residual_pii": dict(self.residual_pii),
            "input_bytes": self.input_bytes,
            "extracted_chars": self.extracted_chars,
            "output_chars": self.output_chars,
            "quality_scores": self.quality_scores,
            "routed": dict(self.routed),
            "code_shares": self.code_shares,
            "toxic_documents": self.toxic_documents,
            "toxic_terms": self.toxic_terms,
            "perplexities": self.perplexities,
            "perplexity_buckets": dict(self.perplexity_buckets),
            "chars_in": self.chars_in,
            "chars_out": self.chars_out,
        }


class CleaningPipeline:
    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.stats = CleaningStats()
        self.stats.reached = {step.name: 0 for step in steps}
        self.on_step: Any = None  # called with a step's index before it runs (sluice.budget's heartbeat)

    def stage_name(self, index: int) -> str:
        """Name of step `index`; the index after the last step is the output stage (PII re-scan, hash)."""
        return self.steps[index].name if 0 <= index < len(self.steps) else OUTPUT_STAGE

    def take_stats(self) -> dict[str, Any]:
        """The counts so far (as_dict form), and start counting afresh."""
        taken = self.stats.as_dict()
        self.stats = CleaningStats()
        self.stats.reached = {step.name: 0 for step in self.steps}
        return taken

    def count_skipped(self, doc: Document, stage: int, reason: str, detail: str) -> Drop:
        """Count a document the budget took away in step `stage` (it reached the steps up to it)."""
        stats = self.stats
        stats.documents_in += 1
        stats.chars_in += len(doc.content)
        stats.input_bytes.append(len(doc.content))
        for step in self.steps[: stage + 1]:
            stats.reached[step.name] += 1
        name = self.stage_name(stage)
        stats.drops[f"{reason}:{name}"] += 1
        stats.drops_by_step[name] += 1
        return Drop(f"{reason}:{name}", detail)

    @classmethod
    def from_settings(
        cls,
        settings: CleaningSettings,
        quality_model_path: str | None = None,
        quality_max_chars: int = 4000,
        perplexity_models: tuple[dict[str, dict], Any] | None = None,
    ) -> CleaningPipeline:
        return cls(build_steps(settings, quality_model_path, quality_max_chars, perplexity_models))

    def run(self, doc: Document) -> tuple[Step, Drop] | None:
        stats = self.stats
        stats.documents_in += 1
        stats.chars_in += len(doc.content)
        stats.input_bytes.append(len(doc.content))
        on_step = self.on_step
        for index, step in enumerate(self.steps):
            if on_step is not None:
                on_step(index)
            stats.reached[step.name] += 1
            drop = step.apply(doc)
            if step.name == "extract" and drop is None:
                stats.extracted_chars.append(len(doc.text or ""))
            elif step.name == "language":
                stats.languages_in[doc.language] += 1
            if isinstance(drop, Route):
                for later_index, later in enumerate(self.steps[index + 1 :], index + 1):
                    if later.on_routed:
                        if on_step is not None:
                            on_step(later_index)
                        later.apply(doc)  # language ID and PII redaction; no drop for a routed document
                stats.routed[drop.dataset] += 1
                stats.pii.update(doc.pii)
                return step, drop
            if drop is not None:
                stats.drops[drop.reason] += 1
                stats.drops_by_step[step.name] += 1
                return step, drop
        stats.documents_out += 1
        stats.chars_out += len(doc.text or "")
        stats.output_chars.append(len(doc.text or ""))
        stats.languages[doc.language] += 1
        stats.pii.update(doc.pii)
        if doc.quality_score is not None:
            stats.quality_scores.append(doc.quality_score)
        if doc.code_share is not None:
            stats.code_shares.append(doc.code_share)
        if doc.toxic_terms:
            stats.toxic_documents += 1
            stats.toxic_terms += doc.toxic_terms
        if doc.perplexity is not None:
            stats.perplexities.append(doc.perplexity)
            stats.perplexity_buckets[doc.perplexity_bucket or ""] += 1
        return None

    def close(self) -> None:
        for step in self.steps:
            step.close()


OUTPUT_STAGE = "output"  # the re-scan for PII left and the text hash of a kept document
CHUNK_DOCUMENTS = 64  # documents per message from the budgeted worker (what a kill makes it redo, at most)
CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class CleanTask:
    input_url: str  # raw partition folder
    input_key: str  # raw part file
    output_url: str  # cleaned partition folder
    part: int
    settings: CleaningSettings
    s3: S3Settings = field(default_factory=S3Settings)
    quality_model_url: str | None = None  # folder holding the quality model's model.bin, when used
    quality_max_chars: int = 4000
    code_url: str | None = None  # side dataset folder for documents routed by code share, when routing
    perplexity_model_url: str | None = None  # folder of the perplexity_model asset, when cleaning.perplexity is on
    perplexity_models: dict[str, dict] | None = None  # its manifest's entries by language
    source: str = ""  # the partition's source and snapshot (the Hive folders; not columns of the part files)
    snapshot: str = ""
    dropped_url: str | None = None  # the partition's cleaned_dropped folder (default: output_url)


@dataclass(frozen=True)
class _PartInput:
    """What the cleaning of one part needs in its (budgeted) worker process: local paths and picklable
    objects only."""

    path: str  # the raw part file
    settings: CleaningSettings
    model_path: str | None
    quality_max_chars: int
    perplexity_models: tuple[dict[str, dict], Any] | None
    source: str = ""
    snapshot: str = ""


def _documents(path: str, start: int, source: str, snapshot: str) -> Any:
    """(row index, Document) of a raw part file from row `start`, reading only the row groups needed."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    first = 0
    for group in range(parquet.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        if first + rows <= start:
            first += rows
            continue
        for batch in parquet.iter_batches(batch_size=256, row_groups=[group]):
            for row in batch.to_pylist():
                if first >= start:
                    yield first, Document(
                        doc_id=row["doc_id"],
                        source=source,
                        snapshot=snapshot,
                        url=row["url"],
                        fetch_date=row["fetch_date"],
                        content_type=row["content_type"],
                        content=row["content"],
                        charset=row["charset"],
                    )
                first += 1


def _dropped_row(doc: Document, step: str, drop: Drop) -> dict[str, Any]:
    return {
        "doc_id": doc.doc_id,
        "url": doc.url,
        "step": step,
        "reason": drop.reason,
        "detail": drop.detail,
        "text": doc.text,
    }


def _row(doc: Document, text: str) -> dict[str, Any]:
    """A cleaned_documents (or cleaned_code) row for a document whose final text is `text`."""
    return {
        "doc_id": doc.doc_id,
        "url": doc.url,
        "fetch_date": doc.fetch_date,
        "text": text,
        "language": doc.language,
        "language_score": doc.language_score,
        "n_chars": len(text),
        "text_hash": text_hash(text),
        "pii_redactions": sum(doc.pii.values()),
        "quality_score": doc.quality_score,
        "code_share": doc.code_share,
        "toxicity_score": doc.toxicity_score,
        "toxic_terms": doc.toxic_terms,
        "perplexity": doc.perplexity,
        "perplexity_bucket": doc.perplexity_bucket,
    }


def clean_documents(part: _PartInput, start: int, skips: dict[int, Any], heartbeat: Any, send: Any) -> None:
    """Clean the documents of a part from row `start` (the work function of sluice.budget): sends
    ("chunk", next row, (rows, stats)) every CHUNK_DOCUMENTS documents and ("done", (rows, stats)) at the
    end, where rows are ("kept" | "routed" | "dropped", output row). Rows in `skips` are dropped unprocessed
    with reason `step_timeout:<step>` (or `step_crashed:<step>`)."""
    from sluice.config import PIISettings
    from sluice.pii import find_pii

    pipeline = CleaningPipeline.from_settings(part.settings, part.model_path, part.quality_max_chars, part.perplexity_models)
    pipeline.on_step = heartbeat.stage
    output_stage = len(pipeline.steps)
    # With redaction off for a source every kind is looked for, so the check reports what is left.
    pii_kinds = part.settings.pii if part.settings.pii.enabled else PIISettings()
    rows: list[tuple[str, dict[str, Any]]] = []
    size = 0
    try:
        for index, doc in _documents(part.path, start, part.source, part.snapshot):
            if rows and (len(rows) >= CHUNK_DOCUMENTS or size >= CHUNK_BYTES):
                send(("chunk", index, (rows, pipeline.take_stats())))
                rows, size = [], 0
            heartbeat.item(index)
            skip = skips.get(index)
            if skip is not None:
                reason = "step_timeout" if skip.kind == "timeout" else "step_crashed"
                drop = pipeline.count_skipped(doc, skip.stage, reason, skip.detail)
                rows.append(("dropped", _dropped_row(doc, pipeline.stage_name(skip.stage), drop)))
                continue
            outcome = pipeline.run(doc)
            if outcome is not None and not isinstance(outcome[1], Route):
                step, drop = outcome
                rows.append(("dropped", _dropped_row(doc, step.name, drop)))
                size += len(doc.text or "")
                continue
            heartbeat.stage(output_stage)
            text = doc.text or ""
            # Independent re-scan of exactly what is written (the blocking asset check reads it).
            pipeline.stats.residual_pii.update(find_pii(text, pii_kinds))
            rows.append(("kept" if outcome is None else "routed", _row(doc, text)))
            size += len(text)
        final = (rows, pipeline.take_stats())
    finally:
        pipeline.close()  # (first: its helper processes are waited for, so their CPU time is counted)
    send(("done", final))


def clean_part(task: CleanTask) -> dict[str, Any]:
    """Clean one raw part file into `part-NNNNN.parquet` and `dropped-NNNNN.parquet` (and, when code
    share routes, the side dataset's `part-NNNNN.parquet` under `code_url`). With a step budget
    (`cleaning.step_cpu_budget_s`) the chain runs in a supervised worker process (sluice.budget); without,
    in this process."""
    from sluice.budget import NoHeartbeat, supervise
    from sluice.layout import _remove_tree
    from sluice.storage import local_temp_dir

    input_store = StoreSpec(task.input_url, task.s3).open()
    output_store = StoreSpec(task.output_url, task.s3).open()
    scratch = local_temp_dir()
    kept = ParquetStreamWriter(CLEANED_SCHEMA)
    dropped = ParquetStreamWriter(DROPPED_SCHEMA)
    routed = ParquetStreamWriter(CLEANED_SCHEMA)
    stats = CleaningStats()
    skipped: dict[int, Any] = {}

    def deliver(payload: tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]) -> None:
        rows, part_stats = payload
        for kind, row in rows:
            writer = kept if kind == "kept" else routed if kind == "routed" else dropped
            writer.append(row, size_hint=len(row["text"] or ""))
        stats.merge(part_stats)

    try:
        model_path = None
        if task.quality_model_url and task.settings.uses_quality_model:
            from sluice.quality import MODEL_FILE

            model_store = StoreSpec(task.quality_model_url, task.s3).open()
            model_path = model_store.fetch(MODEL_FILE, scratch)
        perplexity_models = None
        if task.perplexity_model_url and task.perplexity_models is not None:
            from sluice.perplexity import ModelFetcher

            perplexity_models = (task.perplexity_models, ModelFetcher(task.perplexity_model_url, task.s3, scratch))
        part = _PartInput(
            input_store.fetch(task.input_key, scratch), task.settings, model_path, task.quality_max_chars, perplexity_models,
            task.source, task.snapshot,
        )
        budget = task.settings.step_cpu_budget_s
        worker_cpu_s = None
        if budget is None:
            clean_documents(part, 0, {}, NoHeartbeat(), lambda message: deliver(message[-1]))
        else:
            supervised = supervise(clean_documents, part, budget, deliver)
            deliver(supervised.payload)
            skipped, worker_cpu_s = supervised.skips, supervised.worker_cpu_s
        kept_entry = kept.publish(output_store, f"part-{task.part:05d}.parquet")
        dropped_store = StoreSpec(task.dropped_url, task.s3).open() if task.dropped_url else output_store
        dropped_entry = dropped.publish(dropped_store, f"dropped-{task.part:05d}.parquet")
        code_entry = None
        if task.code_url:
            code_entry = routed.publish(StoreSpec(task.code_url, task.s3).open(), f"part-{task.part:05d}.parquet")
        elif routed.rows or routed.total_rows:
            raise ValueError("documents were routed to cleaned_code but the task names no code_url")
        else:
            routed.abort()
    except BaseException:
        kept.abort()
        dropped.abort()
        routed.abort()
        raise
    finally:
        _remove_tree(scratch)
    return {
        "part": kept_entry, "dropped": dropped_entry, "code": code_entry, "stats": stats.as_dict(),
        "budget_skips": len(skipped), "worker_cpu_s": worker_cpu_s,
    }
