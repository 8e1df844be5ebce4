"""The document a cleaning step works on, and the step interface.

A step is a small object with one job: `apply(doc)` may edit the document (its text, language, the values
it measures) and returns None to keep it, or a `Drop(reason, detail)`. Reason codes are short snake_case
names (`gopher_short_doc`, `extract_timeout`); they end up as metadata keys and in the dropped-documents
file. A step that measures something for the output declares the columns it writes (`Step.columns`, NeMo
Curator's `ProcessingStage.outputs()`), records their values in `doc.values`, and counts its own
statistics (`count` / `count_kept`, datatrove's `stat_update`): the cleaned datasets' schema and rows are
built from those declarations (sluice.clean.schema), so a new step touches only its own module.

The steps, one module per subject: `extract` (charset, HTML), `length_language`, `urlfilter`, `filters`
(Gopher, C4, FineWeb as rule tables), `codeshare`, `toxicity`, `perplexity` (KenLM, and training its
models), `quality` (fastText, and training its model), `pii`. `sluice.clean.chain` puts the configured
ones in order. This module imports none of them, so any of them can import it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa


@dataclass
class Drop:
    reason: str
    detail: str = ""


@dataclass
class Route(Drop):
    """Not a drop: the document leaves the filter chain for the side dataset `dataset` (e.g. code-heavy
    pages to `cleaned_code`). Of the remaining steps only those with `on_routed` run on it (language ID,
    PII redaction), and none of them can drop it."""

    dataset: str = ""


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
    # What the steps measured, by name: the values of the columns they declare (Step.columns), written to
    # the cleaned datasets, and what their own count hooks read back (e.g. PII redactions by kind).
    values: dict[str, Any] = field(default_factory=dict)
    # Every rule's statistic and each other step's outcome, by `<step>.<statistic>` (`<step>.reason`), when
    # cleaning writes cleaned_attributes (None: not recorded; see sluice.clean.attributes).
    attributes: dict[str, Any] | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)  # per text version, see tokens()

    def _cached(self, key: str, compute: Any) -> Any:
        text = self.text or ""
        if self._cache.get("text") is not text:
            self._cache = {"text": text}
        if key not in self._cache:
            self._cache[key] = compute(text)
        return self._cache[key]

    def keep_part_of_text(self, text: str, chunks: list[str]) -> None:
        """Replace the text by `text`, made only of characters of the current text and line breaks (C4's kept
        lines), whose whitespace-separated chunks (`text.split()`) the caller has: they are not split again,
        and a text without spaceless-script characters stays without, so that is not searched again."""
        had = self._cache.get("has-spaceless") if self._cache.get("text") is (self.text or "") else None
        self.text = text
        self._cache = {"text": text, "chunks": chunks}
        if had is False:
            self._cache["has-spaceless"] = False

    def has_spaceless(self) -> bool:
        """The current text holds a character of a spaceless script (sluice.words.NO_SPACE_CHAR): what
        tokenize decides its word splitting by, searched once per text version."""
        from sluice.words import NO_SPACE_CHAR

        return self._cached("has-spaceless", lambda text: NO_SPACE_CHAR.search(text) is not None)

    def chunks(self) -> list[str]:
        """The current text's whitespace-separated chunks (`text.split()`), computed once per text version."""
        return self._cached("chunks", str.split)

    def tokens(self, multilingual: bool) -> list[str]:
        """Tokens of the current text (`sluice.words.tokenize(text, multilingual)`), computed once per text
        version from its whitespace-separated chunks."""
        from sluice.words import tokens_of_chunks

        return self._cached(f"tokens-{multilingual}", lambda text: tokens_of_chunks(self.chunks(), multilingual and self.has_spaceless()))

    def token_counts(self, multilingual: bool) -> Counter[str]:
        """How often each token occurs (Counter's C loop; the filters sum over small word sets)."""
        return self._cached(f"counts-{multilingual}", lambda text: Counter(self.tokens(multilingual)))

    def mostly_spaceless(self) -> bool:
        """More than half of the (multilingual) words are characters of a spaceless script (zh, ja, th)."""
        from sluice.words import NO_SPACE_CHAR, PUNCTUATION

        def compute(text: str) -> bool:
            if not self.has_spaceless():
                return False
            counts = self.token_counts(True)
            words = sum(counts.values()) - sum(counts[p] for p in counts.keys() & PUNCTUATION)
            return words > 0 and len(NO_SPACE_CHAR.findall(text)) / words > 0.5

        return self._cached("spaceless", compute)

    @classmethod
    def from_text(cls, text: str, language: str = "en", url: str | None = None, doc_id: str = "doc") -> Document:
        """A plain-text document (tests, benchmarks)."""
        return cls(doc_id, "test", "test", url, None, "text/plain", text.encode("utf-8"), "utf-8", text=text, language=language)


class Step:
    """One cleaning step; subclasses set `name` and implement `apply`. `on_routed`: the step also runs on
    documents routed to a side dataset by an earlier step (see Route); its drops are ignored there."""

    name = "step"
    on_routed = False
    # The columns the step adds to the cleaned datasets; it records their values in `doc.values` under the
    # fields' names. Nullable: null where the step did not measure; a non-nullable one is 0 there.
    columns: ClassVar[tuple[pa.Field, ...]] = ()
    # Every reason code `apply` can drop a document for (the rule table's, for the filters): the cleaned
    # metadata records each as a count, 0 where no document was dropped for it (sluice.clean.chain.drop_reasons).
    reasons: ClassVar[tuple[str, ...]] = ()

    def apply(self, doc: Document) -> Drop | None:
        raise NotImplementedError

    # Whether the step records its outcome in cleaned_attributes as `<name>.reason` (the drop's reason, ""
    # when it keeps; a rule table records its statistics instead) and is run, for that, on a document an
    # earlier step dropped (`measured`; not the model scorers, whose cost would be paid for dropped documents).
    outcome: ClassVar[bool] = True
    measured: ClassVar[bool] = True

    def measure(self, doc: Document) -> None:
        """Record what this step measures on a document an earlier step dropped (for sluice whatif): its
        outcome, for a step that is no rule table; nothing for one that is not `measured`."""
        if self.measured and self.outcome:
            drop = self.apply(doc)
            doc.attributes[f"{self.name}.reason"] = drop.reason if drop is not None else ""

    def as_if_kept(self, doc: Document) -> None:  # noqa: B027 - optional hook
        """Change `doc` as this step does to a document it keeps, after it dropped `doc` (for sluice whatif:
        the later steps are measured on that text; CleaningPipeline.measure_rest puts the document back)."""

    def attribute_names(self) -> set[str]:
        """The cleaned_attributes columns this step records."""
        return {f"{self.name}.reason"} if self.outcome else set()

    def count(self, doc: Document, drop: Drop | None, stats: Any) -> None:  # noqa: B027 - optional hook
        """Add what this step measured on `doc` to the part's counts (sluice.clean.stats.CleaningStats) right
        after it ran (`drop`: its outcome): each step counts its own statistics (datatrove's stat_update)."""

    def count_kept(self, doc: Document, stats: Any) -> None:  # noqa: B027 - optional hook
        """Add what this step recorded on `doc` to the counts once the document is written out: kept by the
        whole chain, or routed to a side dataset (then only for the `on_routed` steps that ran on it)."""

    def close(self) -> None:  # noqa: B027 - optional hook (steps that own a process)
        """Release what the step holds (called once at the end of a part)."""


class ByLanguage(Step):
    """One step with settings per language (`cleaning.languages.<code>`): the document's language picks
    the instance, `default` the rest. An instance may be None: the step is switched off for that language."""

    def __init__(self, default: Step | None, by_language: dict[str, Step | None]) -> None:
        some = next(step for step in (default, *by_language.values()) if step is not None)
        self.name = some.name
        self.on_routed = some.on_routed
        self._some = some
        self.default = default
        self.by_language = by_language

    def apply(self, doc: Document) -> Drop | None:
        step = self.by_language.get(doc.language, self.default)
        return None if step is None else step.apply(doc)

    @property
    def outcome(self) -> bool:  # type: ignore[override]
        return self._some.outcome

    def measure(self, doc: Document) -> None:
        step = self.by_language.get(doc.language, self.default)
        if step is not None:
            step.measure(doc)

    def as_if_kept(self, doc: Document) -> None:
        step = self.by_language.get(doc.language, self.default)
        if step is not None:
            step.as_if_kept(doc)

    def attribute_names(self) -> set[str]:
        return set().union(*(step.attribute_names() for step in (self.default, *self.by_language.values()) if step is not None))

    def count(self, doc: Document, drop: Drop | None, stats: Any) -> None:
        step = self.by_language.get(doc.language, self.default)
        if step is not None:
            step.count(doc, drop, stats)

    def count_kept(self, doc: Document, stats: Any) -> None:
        step = self.by_language.get(doc.language, self.default)
        if step is not None:
            step.count_kept(doc, stats)

    def close(self) -> None:
        for step in {id(s): s for s in (self.default, *self.by_language.values()) if s is not None}.values():
            step.close()
