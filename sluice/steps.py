"""The document a cleaning step works on, and the step interface.

A step is a small object with one job: `apply(doc)` may edit the document (its text, language, scores)
and returns None to keep it, or a `Drop(reason, detail)`. Reason codes are short snake_case names
(`gopher_short_doc`, `extract_timeout`); they end up as metadata keys and in the dropped-documents file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


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
    quality_score: float | None = None
    pii: Counter[str] = field(default_factory=Counter)  # redactions by kind
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)  # per text version, see tokens()

    def _cached(self, key: str, compute: Any) -> Any:
        text = self.text or ""
        if self._cache.get("text") is not text:
            self._cache = {"text": text}
        if key not in self._cache:
            self._cache[key] = compute(text)
        return self._cache[key]

    def tokens(self, multilingual: bool) -> list[str]:
        """Tokens of the current text (see sluice.words), computed once per text version."""
        from sluice.words import tokenize

        return self._cached(f"tokens-{multilingual}", lambda text: tokenize(text, multilingual))

    def token_counts(self, multilingual: bool) -> Counter[str]:
        """How often each token occurs (Counter's C loop; the filters sum over small word sets)."""
        return self._cached(f"counts-{multilingual}", lambda text: Counter(self.tokens(multilingual)))

    def mostly_spaceless(self) -> bool:
        """More than half of the (multilingual) words are characters of a spaceless script (zh, ja, th)."""
        from sluice.words import NO_SPACE_CHAR, PUNCTUATION

        def compute(text: str) -> bool:
            if NO_SPACE_CHAR.search(text) is None:
                return False
            counts = self.token_counts(True)
            words = sum(counts.values()) - sum(counts[p] for p in PUNCTUATION.intersection(counts))
            return words > 0 and len(NO_SPACE_CHAR.findall(text)) / words > 0.5

        return self._cached("spaceless", compute)

    @classmethod
    def from_text(cls, text: str, language: str = "en", url: str | None = None, doc_id: str = "doc") -> Document:
        """A plain-text document (tests, benchmarks)."""
        return cls(doc_id, "test", "test", url, None, "text/plain", text.encode("utf-8"), "utf-8", text=text, language=language)


class Step:
    """One cleaning step; subclasses set `name` and implement `apply`."""

    name = "step"

    def apply(self, doc: Document) -> Drop | None:
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - optional hook (steps that own a process)
        """Release what the step holds (called once at the end of a part)."""
