"""The what-if report: what a changed cleaning config would flip, drawn as one PNG and a small HTML page.

Input is what `sluice whatif` computes from the attributes (no Dagster run, no cleaning): the flips (one row
per document whose decision changes: `doc_id`, `source`, `snapshot`, `language`, `before`, `after`, `rule`:
the first failing rule after the change, null when kept; optionally `before_rule`, the first failing rule
before it, and `tokens`) and, per flip class, a few sample documents with the statistic that moved. A flip
class is (before, after, class rule): the class rule is `rule`, or `before_rule` for a document the change
keeps, so that each class names the threshold that moved. The picture and the page are deterministic bytes for the same input, like the quality report's.
"""

from __future__ import annotations

import hashlib
import html
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from sluice.storage import Store

PNG_NAME = "report.png"
HTML_NAME = "index.html"
EXCERPT_CHARS = 1_200  # of a sample's text on the page


@dataclass(frozen=True)
class FlipSample:
    """One sample document of a flip class, with the statistic that moved: its value and the rule's threshold
    before and after the change (None: that rule was off)."""

    doc_id: str
    source: str
    snapshot: str
    before: str
    after: str
    rule: str
    statistic: str
    value: Any
    threshold_before: Any
    threshold_after: Any
    text: str


def with_class_rule(flips: pl.DataFrame) -> pl.DataFrame:
    """The flips with `rule` replaced by the class rule (`rule`, else `before_rule` where the flips carry it)."""
    if "before_rule" not in flips.columns:
        return flips
    return flips.with_columns(pl.coalesce("rule", "before_rule").alias("rule"))


def flip_counts(flips: pl.DataFrame) -> pl.DataFrame:
    """Documents (and tokens, where the flips carry them) per source x snapshot x language x flip class,
    sorted so that the same flips give the same rows."""
    flips = with_class_rule(flips)
    keys = ["source", "snapshot", "language", "before", "after", "rule"]
    tokens = [pl.col("tokens").sum().alias("tokens")] if "tokens" in flips.columns else [pl.lit(None, pl.Int64).alias("tokens")]
    return flips.group_by(keys).agg(pl.len().alias("documents"), *tokens).sort(keys, nulls_last=True)


def sample_ids(flips: pl.DataFrame, per_class: int, seed: str = "whatif") -> dict[tuple[str, str, str], list[str]]:
    """Up to `per_class` doc ids of each flip class, the ones whose seeded hash of the id is smallest: the
    same documents whatever the order or the number of files the flips came in."""
    ranked: dict[tuple[str, str, str], list[tuple[bytes, str]]] = {}
    for before, after, rule, doc_id in with_class_rule(flips).select("before", "after", "rule", "doc_id").iter_rows():
        key = (before, after, rule or "")
        ranked.setdefault(key, []).append((hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest(), doc_id))
    return {key: [doc_id for _, doc_id in sorted(items)[:per_class]] for key, items in sorted(ranked.items())}


def _classes(counts: pl.DataFrame) -> list[tuple[str, int, int]]:
    """(label, documents kept -> dropped, documents dropped -> kept) per source x rule, most flips first."""
    rows: dict[str, list[int]] = {}
    for row in counts.iter_rows(named=True):
        label = f"{row['source']}: {row['rule'] or '-'}"
        side = 0 if row["after"] != "kept" else 1
        rows.setdefault(label, [0, 0])[side] += row["documents"]
    return sorted(((label, lost, won) for label, (lost, won) in rows.items()), key=lambda item: (-(item[1] + item[2]), item[0]))


def render_png(counts: pl.DataFrame, title: str = "sluice what-if") -> bytes:
    """One bar per source x rule: documents the change drops (left, red) and keeps (right, green)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = _classes(counts) or [("no flips", 0, 0)]
    figure, axis = plt.subplots(figsize=(10, 1.5 + 0.35 * len(classes)), layout="constrained")
    positions = list(range(len(classes)))[::-1]
    axis.barh(positions, [-lost for _, lost, _ in classes], color="#c44e52", label="kept -> dropped")
    axis.barh(positions, [won for _, _, won in classes], color="#55a868", label="dropped -> kept")
    axis.set_yticks(positions, [label for label, _, _ in classes])
    axis.axvline(0, color="#333", linewidth=0.8)
    axis.set_xlabel("documents (left: newly dropped, right: newly kept)")
    axis.legend(loc="lower right")
    axis.set_title(title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=72, metadata={"Software": None})  # no timestamp: same input, same bytes
    plt.close(figure)
    return buffer.getvalue()


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(cell))}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('-' if cell is None else str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _sample(sample: FlipSample) -> str:
    """A sample's card: the statistic that moved, marked, then the start of its text (all escaped)."""
    moved = (
        f"<mark>{html.escape(sample.statistic)} = {html.escape(str(sample.value))}</mark>: threshold "
        f"{html.escape(str(sample.threshold_before))} &rarr; {html.escape(str(sample.threshold_after))}"
    )
    text = sample.text[:EXCERPT_CHARS] + ("..." if len(sample.text) > EXCERPT_CHARS else "")
    return (
        f'<div class="sample" data-doc-id="{html.escape(sample.doc_id)}"><p><code>{html.escape(sample.doc_id)}</code> '
        f"({html.escape(sample.source)}/{html.escape(sample.snapshot)}): {moved}</p><pre>{html.escape(text)}</pre></div>"
    )


def render_html(counts: pl.DataFrame, samples: Sequence[FlipSample], png_name: str = PNG_NAME, title: str = "sluice what-if") -> str:
    """The picture, the counts per source x snapshot x language x flip class, and the samples per class."""
    table = _table(["source", "snapshot", "language", "before", "after", "rule", "documents", "tokens"], counts.iter_rows())
    sections = []
    for key in sorted({(s.before, s.after, s.rule) for s in samples}):
        cards = "".join(_sample(s) for s in samples if (s.before, s.after, s.rule) == key)
        sections.append(f"<section><h3>{html.escape(key[0])} &rarr; {html.escape(key[1])}: {html.escape(key[2] or '-')}</h3>{cards}</section>")
    return (
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:0.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 8px}th{background:#eee}pre{white-space:pre-wrap;background:#f6f6f6;"
        "padding:0.5em;max-height:14em;overflow:auto}mark{background:#ffe08a}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{int(counts['documents'].sum()) if counts.height else 0} documents flip.</p>"
        f'<img id="report" src="{html.escape(png_name)}" alt="documents each rule would newly drop or keep, by source">'
        f"<h2>Flips</h2>{table}<h2>Samples</h2>{''.join(sections) or '<p>none</p>'}</body></html>\n"
    )


def write_report(store: Store, flips: pl.DataFrame, samples: Sequence[FlipSample], title: str = "sluice what-if") -> dict[str, int]:
    """Write `report.png` and `index.html` into `store` (each write atomic); returns their sizes in bytes."""
    counts = flip_counts(flips)
    png = render_png(counts, title)
    page = render_html(counts, samples, PNG_NAME, title).encode("utf-8")
    store.write_bytes(PNG_NAME, png)
    store.write_bytes(HTML_NAME, page)
    return {PNG_NAME: len(png), HTML_NAME: len(page)}
