"""The cleaned datasets' schemas and rows: `cleaned_documents` (and the routed side dataset `cleaned_code`,
same schema), `cleaned_dropped` (every dropped document with its step, reason and detail), and the
normalized text hash exact deduplication compares.

`cleaned_documents` = the document's own columns (id, URL, date, text, language, size, hash) followed by
the columns the measuring steps declare (`Step.columns`), taken from the step classes in COLUMN_STEPS'
order. Every file has every column, whichever steps a source's chain runs: a step that did not run leaves
its columns null (0 for a non-nullable count), so parts of different configs concatenate and the order of
existing files never changes. A new measuring step appends itself to COLUMN_STEPS."""

from __future__ import annotations

import unicodedata
from typing import Any

import pyarrow as pa
import xxhash

from sluice.clean.steps import Document, Drop, Step
from sluice.clean.steps.codeshare import CodeShare
from sluice.clean.steps.perplexity import PerplexityScorer
from sluice.clean.steps.pii import PIIRedactor
from sluice.clean.steps.quality import QualityScorer
from sluice.clean.steps.toxicity import ToxicityFilter

COLUMN_STEPS: tuple[type[Step], ...] = (PIIRedactor, QualityScorer, CodeShare, ToxicityFilter, PerplexityScorer)
STEP_FIELDS: tuple[pa.Field, ...] = tuple(field for step in COLUMN_STEPS for field in step.columns)
_STEP_DEFAULTS = tuple((field.name, None if field.nullable else 0) for field in STEP_FIELDS)

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
        *STEP_FIELDS,
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


def dropped_row(doc: Document, step: str, drop: Drop) -> dict[str, Any]:
    """A cleaned_dropped row: the document, the step that dropped it, the reason and detail."""
    return {
        "doc_id": doc.doc_id,
        "url": doc.url,
        "step": step,
        "reason": drop.reason,
        "detail": drop.detail,
        "text": doc.text,
    }


def cleaned_row(doc: Document, text: str) -> dict[str, Any]:
    """A cleaned_documents (or cleaned_code) row for a document whose final text is `text`."""
    values = doc.values
    row = {
        "doc_id": doc.doc_id,
        "url": doc.url,
        "fetch_date": doc.fetch_date,
        "text": text,
        "language": doc.language,
        "language_score": doc.language_score,
        "n_chars": len(text),
        "text_hash": text_hash(text),
    }
    for name, default in _STEP_DEFAULTS:
        row[name] = values.get(name, default)
    return row
