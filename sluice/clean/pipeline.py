"""`CleaningPipeline`: runs the chain's steps on one document at a time, in order, and counts the funnel."""

from __future__ import annotations

from typing import Any

from sluice.clean.chain import build_steps
from sluice.clean.stats import CleaningStats
from sluice.clean.steps import Document, Drop, Route, Step
from sluice.config import CleaningSettings

OUTPUT_STAGE = "output"  # the re-scan for PII left and the text hash of a kept document


class CleaningPipeline:
    """`attributes`: record on each document (`doc.attributes`) every rule's statistic and each other step's
    outcome, also for the steps after the one that dropped or routed it (`measure`), for cleaned_attributes."""

    def __init__(self, steps: list[Step], attributes: bool = False) -> None:
        self.steps = steps
        self.attributes = attributes
        self.stats = CleaningStats()
        self.stats.reached = {step.name: 0 for step in steps}
        self.on_step: Any = None  # called with a step's index before it runs (sluice.runtime.budget's heartbeat)

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
        stats.input_bytes.add(len(doc.content))
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
        attributes: bool = False,
    ) -> CleaningPipeline:
        return cls(build_steps(settings, quality_model_path, quality_max_chars, perplexity_models), attributes)

    def attribute_names(self) -> list[str]:
        """The cleaned_attributes columns these steps record, sorted."""
        return sorted(set().union(*(step.attribute_names() for step in self.steps)))

    def run(self, doc: Document) -> tuple[Step, Drop] | None:
        stats = self.stats
        stats.documents_in += 1
        stats.chars_in += len(doc.content)
        stats.input_bytes.add(len(doc.content))
        on_step = self.on_step
        attributes = doc.attributes = {} if self.attributes else None
        for index, step in enumerate(self.steps):
            if on_step is not None:
                on_step(index)
            stats.reached[step.name] += 1
            drop = step.apply(doc)
            if attributes is not None and step.outcome:
                attributes[f"{step.name}.reason"] = drop.reason if drop is not None else ""
            step.count(doc, drop, stats)  # each step counts its own statistics
            if attributes is not None and drop is not None and not getattr(step, "extracts", False):
                self.measure_rest(doc, index)
            if isinstance(drop, Route):
                for later_index, later in enumerate(self.steps[index + 1 :], index + 1):
                    if later.on_routed:
                        if on_step is not None:
                            on_step(later_index)
                        later.apply(doc)  # language ID and PII redaction; no drop for a routed document
                        later.count_kept(doc, stats)
                stats.routed[drop.dataset] += 1
                return step, drop
            if drop is not None:
                stats.drops[drop.reason] += 1
                stats.drops_by_step[step.name] += 1
                return step, drop
        stats.documents_out += 1
        stats.chars_out += len(doc.text or "")
        stats.output_chars.add(len(doc.text or ""))
        stats.languages[doc.language] += 1
        for step in self.steps:
            step.count_kept(doc, stats)  # the scores the steps recorded on a kept document
        return None

    def measure_rest(self, doc: Document, index: int) -> None:
        """Record the statistics of the steps after `index` on a document that step dropped or routed, as
        if it had been kept (the dropping step first changes it as it changes a kept one: C4 removes its lines
        whether it dropped the document or a later step measures it; language ID names its language), for
        sluice whatif; then put the document back as it was (its dropped row, its routed text are unchanged). Stops where an
        extraction step fails (no text to measure)."""
        saved = doc.text, doc.language, doc.language_score, doc.values, doc._cache
        doc.values = dict(doc.values)
        attributes = doc.attributes
        try:
            self.steps[index].as_if_kept(doc)
            for later_index, later in enumerate(self.steps[index + 1 :], index + 1):
                if self.on_step is not None:
                    self.on_step(later_index)
                later.measure(doc)
                if getattr(later, "extracts", False) and attributes.get(f"{later.name}.reason"):
                    break
            attributes["measured_text"] = doc.text
        finally:
            doc.text, doc.language, doc.language_score, doc.values, doc._cache = saved

    def close(self) -> None:
        for step in self.steps:
            step.close()
