"""What a cleaning run counts: the funnel (documents reaching each step, drops by step and reason),
languages, PII redactions, sizes and scores; merged across parts and tasks with one `merge`.

Every field has a fixed size whatever the number of documents: counters, and sizes and scores as
`Quantiles` summaries (count, sum, min, max, quantiles within 1 %), so a partition of 10⁹ documents folds
its tasks' stats in the run process in the memory of one."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

from sluice.clean.quantiles import Quantiles


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
    input_bytes: Quantiles = field(default_factory=Quantiles)  # per input document
    extracted_chars: Quantiles = field(default_factory=Quantiles)  # per document that got through extraction
    output_chars: Quantiles = field(default_factory=Quantiles)  # per kept document
    quality_scores: Quantiles = field(default_factory=Quantiles)  # per kept document, when scored
    routed: Counter[str] = field(default_factory=Counter)  # documents routed, by side dataset
    code_shares: Quantiles = field(default_factory=Quantiles)  # per kept document, when measured
    toxic_documents: int = 0  # kept documents with at least one listed term
    toxic_terms: int = 0  # listed-term occurrences in kept documents
    perplexities: Quantiles = field(default_factory=Quantiles)  # per kept document, when scored
    perplexity_buckets: Counter[str] = field(default_factory=Counter)  # of kept documents
    chars_in: int = 0
    chars_out: int = 0

    def merge(self, other: dict[str, Any]) -> None:
        """Add the counts of another part of the same chain (`as_dict()` form), keeping step order: numbers
        add, counters and per-step counts add key by key, summaries merge. A task record written before the
        summaries holds a list of values per document instead: its values are added one by one (so records
        of finished tasks stay reusable)."""
        for name in _FIELDS:
            mine, theirs = getattr(self, name), other[name]
            if isinstance(mine, int):
                setattr(self, name, mine + theirs)
            elif isinstance(mine, Quantiles):
                mine.merge(theirs if isinstance(theirs, dict) else Quantiles.of(theirs).as_dict())
            elif isinstance(mine, Counter):
                mine.update(theirs)
            else:  # `reached`: a plain dict, in step order
                for key, count in theirs.items():
                    mine[key] = mine.get(key, 0) + count

    def as_dict(self) -> dict[str, Any]:
        """Plain values (counters as dicts), in field order: what a task records and `merge` reads."""
        return {name: _plain(getattr(self, name)) for name in _FIELDS}


def _plain(value: Any) -> Any:
    if isinstance(value, Quantiles):
        return value.as_dict()
    return dict(value) if isinstance(value, dict) else value


_FIELDS = tuple(item.name for item in fields(CleaningStats))
