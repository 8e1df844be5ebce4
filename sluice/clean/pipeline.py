"""`CleaningPipeline`: runs the chain's steps on one document at a time, in order, and counts the funnel."""

from __future__ import annotations

from typing import Any

from sluice.clean.chain import build_steps
from sluice.clean.stats import CleaningStats
from sluice.clean.steps import Document, Drop, Route, Step
from sluice.config import CleaningSettings

OUTPUT_STAGE = "output"  # the re-scan for PII left and the text hash of a kept document


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
    ) -> CleaningPipeline:
        return cls(build_steps(settings, quality_model_path, quality_max_chars, perplexity_models))

    def run(self, doc: Document) -> tuple[Step, Drop] | None:
        stats = self.stats
        stats.documents_in += 1
        stats.chars_in += len(doc.content)
        stats.input_bytes.add(len(doc.content))
        on_step = self.on_step
        for index, step in enumerate(self.steps):
            if on_step is not None:
                on_step(index)
            stats.reached[step.name] += 1
            drop = step.apply(doc)
            step.count(doc, drop, stats)  # each step counts its own statistics
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

    def close(self) -> None:
        for step in self.steps:
            step.close()
