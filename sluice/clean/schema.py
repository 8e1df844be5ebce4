"""The cleaned datasets' schemas and rows: `cleaned_documents` (and the routed side dataset `cleaned_code`,
same schema), `cleaned_dropped` (every dropped document with its step, reason and detail), and the
normalized text hash exact deduplication compares."""

from __future__ import annotations

import unicodedata
from typing import Any

import pyarrow as pa
import xxhash

from sluice.steps import Document, Drop

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
