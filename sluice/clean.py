"""Cleaning: raw HTML or text -> validated, extracted, language-tagged text, one small step at a time.

Each step is an object with one job: `apply(doc)` edits the document in place and returns None to keep
it, or a `Drop(reason, detail)`. `CleaningPipeline` runs the steps in order and counts, per step, the
documents that reach it and the drops by reason (the funnel). Dropped documents are kept, with their
reason, in a side output: nothing silently vanishes.
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
from sluice.storage import StoreSpec

CLEANED_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("snapshot", pa.string(), nullable=False),
        pa.field("url", pa.string()),
        pa.field("fetch_date", pa.timestamp("ms", tz="UTC")),
        pa.field("text", pa.string(), nullable=False),
        pa.field("language", pa.string(), nullable=False),
        pa.field("language_score", pa.float32(), nullable=False),
        pa.field("n_chars", pa.int64(), nullable=False),
        pa.field("text_hash", pa.string(), nullable=False),  # see normalize_for_hash
    ]
)

DROPPED_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("snapshot", pa.string(), nullable=False),
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


@dataclass
class Drop:
    reason: str
    detail: str = ""


@dataclass
class Document:
    doc_id: str
    source: str
    snapshot: str
    url: str | None
    fetch_date: Any
    content_type: str
    content: bytes
    charset: str | None
    text: str | None = None
    language: str = "unknown"
    language_score: float = 0.0


class Step:
    name = "step"

    def apply(self, doc: Document) -> Drop | None:
        raise NotImplementedError


class DecodeText(Step):
    """Bytes -> str. Text must be valid in its declared charset (UTF-8 unless declared otherwise);
    HTML without a declaration is decoded with the charset resiliparse detects from its bytes/meta."""

    name = "decode"

    def apply(self, doc: Document) -> Drop | None:
        charset = doc.charset
        if doc.content_type == "text/html" and not charset:
            from resiliparse.parse.encoding import detect_encoding

            charset = detect_encoding(doc.content) or "utf-8"
        charset = charset or "utf-8"
        try:
            doc.text = doc.content.decode(charset)
        except LookupError:
            return Drop("unknown_charset", f"charset {charset!r} is unknown")
        except UnicodeDecodeError as error:
            reason = "invalid_utf8" if charset.replace("-", "").lower() == "utf8" else "invalid_encoding"
            return Drop(reason, f"{charset}: {error}")
        return None


class ExtractHtml(Step):
    """HTML -> main text with resiliparse (boilerplate such as navigation removed)."""

    name = "extract"

    def apply(self, doc: Document) -> Drop | None:
        if doc.content_type != "text/html":
            return None
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree

        try:
            tree = HTMLTree.parse(doc.text or "")
            doc.text = extract_plain_text(tree, main_content=True, alt_texts=False, links=False, comments=False)
        except Exception as error:  # resiliparse is robust, but never let one page stop a partition
            return Drop("extraction_failed", f"{type(error).__name__}: {error}")
        if not doc.text.strip():
            return Drop("empty_text", "no text after extraction")
        return None


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
    """fastText lid.176; keeps the configured languages (all when none) above the minimum score."""

    name = "language"

    def __init__(self, languages: tuple[str, ...], min_score: float, model_path: str | None) -> None:
        from sluice.langid import LanguageIdentifier

        self.languages = set(languages)
        self.min_score = min_score
        self.identifier = LanguageIdentifier(model_path)

    def apply(self, doc: Document) -> Drop | None:
        doc.language, doc.language_score = self.identifier.predict(doc.text or "")
        if self.languages and doc.language not in self.languages:
            return Drop("language_not_kept", f"{doc.language} ({doc.language_score:.2f})")
        if doc.language_score < self.min_score:
            return Drop("low_language_score", f"{doc.language} {doc.language_score:.2f} < {self.min_score}")
        return None


@dataclass
class CleaningStats:
    documents_in: int = 0
    documents_out: int = 0
    reached: Counter[str] = field(default_factory=Counter)  # documents that reached each step
    drops: Counter[str] = field(default_factory=Counter)  # by reason
    languages: Counter[str] = field(default_factory=Counter)  # of kept documents
    chars_in: int = 0
    chars_out: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "documents_in": self.documents_in,
            "documents_out": self.documents_out,
            "reached": dict(self.reached),
            "drops": dict(self.drops),
            "languages": dict(self.languages),
            "chars_in": self.chars_in,
            "chars_out": self.chars_out,
        }


class CleaningPipeline:
    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.stats = CleaningStats()

    @classmethod
    def from_settings(cls, settings: CleaningSettings) -> CleaningPipeline:
        return cls(
            [
                DecodeText(),
                ExtractHtml(),
                LengthFilter(settings.min_chars, settings.max_chars),
                LanguageFilter(settings.languages, settings.min_language_score, settings.langid_model),
            ]
        )

    def run(self, doc: Document) -> tuple[Step, Drop] | None:
        self.stats.documents_in += 1
        self.stats.chars_in += len(doc.content)
        for step in self.steps:
            self.stats.reached[step.name] += 1
            drop = step.apply(doc)
            if drop is not None:
                self.stats.drops[drop.reason] += 1
                return step, drop
        self.stats.documents_out += 1
        self.stats.chars_out += len(doc.text or "")
        self.stats.languages[doc.language] += 1
        return None


@dataclass(frozen=True)
class CleanTask:
    input_url: str  # raw partition folder
    input_key: str  # raw part file
    output_url: str  # cleaned partition folder
    part: int
    settings: CleaningSettings
    s3: S3Settings = field(default_factory=S3Settings)


def clean_part(task: CleanTask) -> dict[str, Any]:
    """Clean one raw part file into `part-NNNNN.parquet` and `dropped-NNNNN.parquet`."""
    import pyarrow.parquet as pq

    from sluice.layout import _remove_tree
    from sluice.storage import local_temp_dir

    input_store = StoreSpec(task.input_url, task.s3).open()
    output_store = StoreSpec(task.output_url, task.s3).open()
    pipeline = CleaningPipeline.from_settings(task.settings)
    kept = ParquetStreamWriter(CLEANED_SCHEMA)
    dropped = ParquetStreamWriter(DROPPED_SCHEMA)
    scratch = local_temp_dir()
    try:
        path = input_store.local_path(task.input_key) or input_store.fetch(task.input_key, scratch)
        parquet = pq.ParquetFile(path)
        for batch in parquet.iter_batches(batch_size=256):
            for row in batch.to_pylist():
                doc = Document(
                    doc_id=row["doc_id"],
                    source=row["source"],
                    snapshot=row["snapshot"],
                    url=row["url"],
                    fetch_date=row["fetch_date"],
                    content_type=row["content_type"],
                    content=row["content"],
                    charset=row["charset"],
                )
                outcome = pipeline.run(doc)
                if outcome is None:
                    text = doc.text or ""
                    kept.append(
                        {
                            "doc_id": doc.doc_id,
                            "source": doc.source,
                            "snapshot": doc.snapshot,
                            "url": doc.url,
                            "fetch_date": doc.fetch_date,
                            "text": text,
                            "language": doc.language,
                            "language_score": doc.language_score,
                            "n_chars": len(text),
                            "text_hash": text_hash(text),
                        },
                        size_hint=len(text),
                    )
                else:
                    step, drop = outcome
                    dropped.append(
                        {
                            "doc_id": doc.doc_id,
                            "source": doc.source,
                            "snapshot": doc.snapshot,
                            "url": doc.url,
                            "step": step.name,
                            "reason": drop.reason,
                            "detail": drop.detail,
                            "text": doc.text,
                        },
                        size_hint=len(doc.text or ""),
                    )
        kept_entry = kept.publish(output_store, f"part-{task.part:05d}.parquet")
        dropped_entry = dropped.publish(output_store, f"dropped-{task.part:05d}.parquet")
    except BaseException:
        kept.abort()
        dropped.abort()
        raise
    finally:
        _remove_tree(scratch)
    return {"part": kept_entry, "dropped": dropped_entry, "stats": pipeline.stats.as_dict()}
