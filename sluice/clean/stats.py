"""What a cleaning run counts: the funnel (documents reaching each step, drops by step and reason),
languages, PII redactions, sizes and scores; merged across parts and tasks with one `merge`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


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
