"""Cleaning: raw HTML or text -> extracted, language-tagged, quality-filtered, PII-redacted text.

The package: `steps` (the step interface and every step, one module per subject), `chain` (the configured
steps in order), `pipeline` (runs them and counts the funnel), `stats`, `schema` (the output columns, built
from what the steps declare) and `task` (one part file in, Parquet out, under a budget).

Each step is an object with one job (sluice.clean.steps): `apply(doc)` edits the document in place and returns
None to keep it, or a `Drop(reason, detail)`. `CleaningPipeline` runs the steps in order and counts, per
step, the documents that reach it and the drops by reason (the funnel). Dropped documents are kept, with
their step and reason, in the side dataset `cleaned_dropped` (`DROPPED_DATASET`, one `dropped-NNNNN.parquet`
per part under `cleaned_dropped/source=<s>/snapshot=<n>/`): nothing silently vanishes. Part files carry no
`source`/`snapshot` columns (they are the Hive partition folders), so each folder reads as one dataset. A step
may instead route a document to a side dataset (`Route`, e.g. code-heavy pages to `cleaned_code`): it skips
the remaining filters, gets language ID and PII redaction, and is written there. Steps after language ID take
their settings per language (`cleaning.languages.<code>`, `ByLanguage`). With `attributes`, every rule's
statistic of every input document goes to the side dataset `cleaned_attributes` (`attributes`, read by
`sluice whatif`).
"""

from __future__ import annotations

from sluice.clean.attributes import ATTRIBUTES_DATASET
from sluice.clean.chain import build_steps, clear_text_caches
from sluice.clean.pipeline import OUTPUT_STAGE, CleaningPipeline
from sluice.clean.schema import CLEANED_SCHEMA, DROPPED_DATASET, DROPPED_SCHEMA, normalize_for_hash, text_hash
from sluice.clean.stats import CleaningStats
from sluice.clean.steps import Document, Drop, Route, Step
from sluice.clean.steps.length_language import LanguageFilter, LengthFilter
from sluice.clean.task import CleanTask, clean_part

__all__ = [
    "ATTRIBUTES_DATASET", "CLEANED_SCHEMA", "DROPPED_DATASET", "DROPPED_SCHEMA", "OUTPUT_STAGE", "CleanTask", "CleaningPipeline", "CleaningStats",
    "Document", "Drop", "LanguageFilter", "LengthFilter", "Route", "Step", "build_steps", "clean_part", "clear_text_caches",
    "normalize_for_hash", "text_hash",
]
