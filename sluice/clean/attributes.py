"""`cleaned_attributes`: beside cleaned_documents and cleaned_dropped, one row per input document with the
value of every rule's statistic and the decision, so that `sluice whatif` can re-threshold a corpus from
them instead of re-cleaning it.

Layout: one Parquet file per cleaning task, `cleaned_attributes/source=S/snapshot=T/attributes-NNNNN.parquet`,
published by the cleaned partition's manifest as side files (like cleaned_dropped). Wide: the document's
columns (ATTRIBUTE_COLUMNS) then one column per statistic, named `<step>.<statistic>` (`gopher_quality.words`,
`fineweb_quality.line_punct_ratio`; float64, null where the rule does not apply to the document), and one
`<step>.reason` per step that is no rule table (extraction, URL and training blocklists, code share,
toxicity, the model scorers: the step's drop reason, "" when it kept the document, null where it did not
run). Wide, not long (one row per statistic), because re-thresholding is then one vectorized comparison per
rule over a column, Parquet reads only the columns of the rules a change touches, and a row costs one
doc_id instead of one per statistic.

The values are statistics, never decisions under a threshold: the rule tables (RuleFilter) are evaluated
whole for every document (rules switched off in the config too), and the steps after the one that dropped a
document run on it as if it had been kept (CleaningPipeline.measure_rest), so a looser threshold elsewhere
is answered from the stored values. The model scorers (perplexity, quality model) are not run on dropped
documents (their cost); their outcome is known only where cleaning ran them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sluice.clean.steps import Document, Drop

ATTRIBUTES_DATASET = "cleaned_attributes"
ATTRIBUTE_COLUMNS = (
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("decision", pa.string(), nullable=False),  # kept | dropped | routed
    pa.field("step", pa.string()),  # the step that dropped or routed it (null: kept)
    pa.field("reason", pa.string()),  # its reason: the first failing rule
    pa.field("language", pa.string()),  # as language ID named it (null: not reached, e.g. no text)
    pa.field("chars", pa.int64()),  # characters of the text: written (kept, routed) or as measured to the end (dropped)
    pa.field("tokens", pa.int64()),  # token estimate of that text: UTF-8 bytes / BYTES_PER_TOKEN, rounded up
)
BYTES_PER_TOKEN = 4  # an estimate (BPE tokenizers of web English: about 4 bytes a token); the tokenizer comes later in the graph
STRING_SUFFIXES = (".reason", ".language")


def attributes_schema(names: list[str]) -> pa.Schema:
    """The document columns, then each attribute (`names`, sorted): strings for outcomes and the language,
    float64 for statistics."""
    return pa.schema([*ATTRIBUTE_COLUMNS, *(pa.field(name, pa.string() if name.endswith(STRING_SUFFIXES) else pa.float64()) for name in names)])


def attributes_row(doc: Document, names: list[str], decision: str, step: str | None, drop: Drop | None, text: str | None) -> dict[str, Any]:
    """A cleaned_attributes row: `text` is the written text (kept, routed), or None for a dropped document
    (then the text as far as it was measured)."""
    attributes = doc.attributes or {}
    if text is None:
        text = attributes.get("measured_text")
    values = {name: attributes.get(name) for name in names}
    for name, value in values.items():
        if isinstance(value, bool):
            values[name] = float(value)
    return {
        "doc_id": doc.doc_id,
        "decision": decision,
        "step": step,
        "reason": drop.reason if drop is not None else None,
        "language": attributes.get("language.language"),
        "chars": None if text is None else len(text),
        "tokens": None if text is None else -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN),
        **values,
    }
