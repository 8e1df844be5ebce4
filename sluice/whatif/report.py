"""The `sluice whatif` report: report.png (documents flipping per rule, each direction) and index.html (the
totals, the flips table, the mixes' components, what was not answered, and `samples` documents per flip
class with the statistic that decided it beside both configs' thresholds, and the start of its text).

Sample texts come from the cleaned outputs the current config wrote: cleaned_documents for a document that
was kept, cleaned_dropped for one that was dropped (routed documents are shown without text)."""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import Any

import polars as pl

from sluice.config import SluiceConfig
from sluice.whatif.engine import FLIPS_SCHEMA, WhatIf, attribute_partitions, chain_checks, scan_attributes

PNG_NAME = "report.png"
EXCERPT_CHARS = 600


def render_png(counts: pl.DataFrame) -> bytes:
    """Horizontal bars: documents per rule, kept->dropped and dropped->kept (other flips with the first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_rule = counts.with_columns(lost=pl.col("before") == "kept").group_by("rule", "lost").agg(pl.col("documents").sum()).sort("rule")
    rules = sorted(set(by_rule["rule"].fill_null("-")))
    figure, axis = plt.subplots(figsize=(8, 1 + 0.35 * max(len(rules), 1)))
    for lost, color, label in ((True, "#c0392b", "kept -> dropped"), (False, "#27ae60", "dropped -> kept")):
        part = {row["rule"] or "-": row["documents"] for row in by_rule.filter(pl.col("lost") == lost).iter_rows(named=True)}
        values = [part.get(rule, 0) * (-1 if lost else 1) for rule in rules]
        axis.barh(rules, values, color=color, label=label)
    axis.axvline(0, color="black", linewidth=0.8)
    axis.set_xlabel("documents (left: no longer kept, right: newly kept)")
    axis.set_title("sluice whatif: flips per rule")
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)  # beside the bars, never over one
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=72, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(cell))}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _deciding(current: Any, other: Any, language: str, flip: dict[str, Any], found: pl.DataFrame) -> tuple[str | None, Any, str, str]:
    """(column, value, threshold before, threshold after) of the check that decided the flip: of the checks
    named by its rule (two share `too_short`: before and after C4), the first that fails under the config that
    drops the document."""
    from sluice.clean.steps.filters import KEEPS

    checks = {
        side: {c.column: c for c in chain_checks(settings, language) if c.reason == flip["deciding"]}
        for side, settings in (("before", current), ("after", other))
    }
    dropping = "after" if flip["before"] == "kept" else "before"
    columns = list(dict.fromkeys([*checks[dropping], *checks["before"], *checks["after"]]))
    if not columns:
        return None, None, "off", "off"
    for column in columns:
        value = found[column][0] if column in found.columns and found.height else None
        check = checks[dropping].get(column)
        fails = check is not None and value is not None and (check.keep_if == "outcome" or not KEEPS[check.keep_if](value, check.threshold))
        if fails or column == columns[-1]:
            return column, value, _shown(checks["before"].get(column)), _shown(checks["after"].get(column))
    raise AssertionError("unreachable: the last column returns")


def _shown(check: Any) -> str:
    if check is None:
        return "off"
    if check.keep_if == "in":
        return f"in {sorted(check.threshold)}"
    return "recorded outcome" if check.keep_if == "outcome" else f"{check.keep_if} {check.threshold}"


def sample_rows(flips_path: str, samples: int, current: SluiceConfig, other: SluiceConfig, scratch: str) -> list[dict[str, Any]]:
    """Up to `samples` flipped documents per (source, before, after, rule), with the deciding statistic's value,
    both thresholds and the start of the text."""

    if samples <= 0:
        return []
    flips = pl.scan_parquet(flips_path).with_columns(deciding=pl.coalesce("rule", "before_rule"))
    chosen = flips.sort("doc_id").group_by("source", "before", "after", "deciding", maintain_order=True).head(samples).sort("source", "deciding", "doc_id").collect()
    if chosen.height == 0:
        return []
    ids = chosen["doc_id"].to_list()
    partitions = [p for p in attribute_partitions(current, scratch) if p.files]
    attributes = scan_attributes(partitions).filter(pl.col("doc_id").is_in(ids)).collect()
    texts = _texts(current, ids, scratch)
    rows = []
    for flip in chosen.iter_rows(named=True):
        found = attributes.filter(pl.col("doc_id") == flip["doc_id"])
        column, value, before, after = _deciding(
            current.cleaning.for_source(flip["source"]), other.cleaning.for_source(flip["source"]), flip["language"] or "", flip, found,
        )
        rows.append({**flip, "column": column, "value": value, "threshold_before": before, "threshold_after": after, "text": texts.get(flip["doc_id"])})
    return rows


def _texts(config: SluiceConfig, ids: list[str], scratch: str) -> dict[str, str]:
    """The written text of these documents: kept ones from cleaned_documents, dropped ones from cleaned_dropped."""
    from sluice.io.layout import entry_key, list_partitions, partition_prefix, read_manifest
    from sluice.io.storage import open_store

    store = open_store(config.storage.root, config.s3)
    paths = []
    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("cleaned_documents", ref)
        manifest = read_manifest(store, prefix) or {}
        entries = manifest.get("files", []) + [e for e in manifest.get("side_files", []) if e.get("prefix", "").startswith("cleaned_dropped/")]
        for entry in entries:
            if entry["rows"]:
                key = entry_key(prefix, entry)
                paths.append(store.local_path(key) or store.fetch(key, scratch))
    frames = [pl.scan_parquet(path).select("doc_id", "text").filter(pl.col("doc_id").is_in(ids)) for path in paths]
    found = pl.concat(frames).collect() if frames else pl.DataFrame({"doc_id": [], "text": []})
    return {row["doc_id"]: row["text"] or "" for row in found.iter_rows(named=True)}


def render_html(summary: dict[str, Any], samples: list[dict[str, Any]], png_name: str = PNG_NAME) -> str:
    """The report page (the figures' PNG beside it)."""
    flips = _table(
        ["source", "snapshot", "language", "before", "after", "rule", "documents", "tokens"],
        [[f[k] if f[k] is not None else "-" for k in ("source", "snapshot", "language", "before", "after", "rule", "documents", "tokens")] for f in summary["flips"]],
    )
    totals = _table(
        ["source", "kept before", "kept after", "tokens before", "tokens after", "unknown"],
        [[t["source"], t["kept_before"], t["kept_after"], t["tokens_before"], t["tokens_after"], t["unknown"]] for t in summary["totals"]],
    )
    budgets = _table(
        ["mix", "component", "target tokens", "available before", "available after", "met before", "met after"],
        [[b["mix"], b["component"], b["target_tokens"], b["available_before"], b["available_after"], b["met_before"], b["met_after"]] for b in summary["mix_budgets"]],
    )
    unanswered = "".join(
        f"<li>{html.escape(item['source'])} (re-run {html.escape(', '.join(item['partitions']))}): {html.escape('; '.join(item['changes']))}</li>"
        for item in summary["unanswered"]
    )
    cards = "".join(_sample(sample) for sample in samples)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>sluice whatif</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        "mark{background:#ffe08a}.sample{border:1px solid #ddd;margin:8px 0;padding:6px}pre{white-space:pre-wrap}</style></head><body>"
        f"<h1>sluice whatif</h1><img src='{html.escape(png_name)}' alt='flips per rule'>"
        f"<h2>Totals</h2>{totals}<h2>Flips</h2>{flips}<h2>Mixes</h2>{budgets}"
        f"<h2>Not answered</h2><ul>{unanswered or '<li>none</li>'}</ul>"
        f"<h2>Samples</h2>{cards or '<p>none</p>'}</body></html>\n"
    )


def _sample(sample: dict[str, Any]) -> str:
    value = sample["value"]
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    text = sample["text"]
    excerpt = html.escape(text[:EXCERPT_CHARS] + ("…" if len(text) > EXCERPT_CHARS else "")) if text is not None else "(text not kept: routed)"
    return (
        f"<div class='sample'><b>{html.escape(sample['doc_id'])}</b> ({html.escape(sample['source'])}/{html.escape(sample['snapshot'])}, "
        f"{html.escape(sample['language'] or '-')}): {html.escape(sample['before'])} → {html.escape(sample['after'])} by "
        f"{html.escape(sample['deciding'] or '-')}: <mark>{html.escape(str(sample['column']))} = {html.escape(shown)}</mark> "
        f"(threshold {html.escape(str(sample['threshold_before']))} → {html.escape(str(sample['threshold_after']))})<pre>{excerpt}</pre></div>"
    )


def write(result: WhatIf, out: str, samples: int = 3) -> dict[str, str]:
    """DIR/flips.parquet (streamed), DIR/summary.json (its `flips`: documents and tokens per source x snapshot x
    language x direction x rule, the rule that drops after the change, or for dropped->kept the one that
    dropped before) and the report, DIR/index.html and DIR/report.png (sluice.whatif.report), with `samples`
    documents per flip class."""
    import tempfile

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    flips_path = folder / "flips.parquet"
    frame = result.flips if result.flips is not None else pl.LazyFrame(schema=FLIPS_SCHEMA)
    frame.sink_parquet(flips_path)  # (in partition and file order, streamed: no sort holding every flip)
    counts = pl.scan_parquet(flips_path).with_columns(rule=pl.coalesce("rule", "before_rule")).group_by(
        "source", "snapshot", "language", "before", "after", "rule"
    ).agg(documents=pl.len(), tokens=pl.col("tokens").sum()).sort("source", "snapshot", "language", "before", "after", "rule").collect()
    summary = {
        "flips": counts.to_dicts(), "totals": result.totals, "unanswered": result.unanswered, "inconsistent": result.inconsistent,
        "mix_budgets": result.budgets,
        "flipped_documents": int(counts["documents"].sum()) if counts.height else 0,
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    rows = []
    if result.configs is not None:
        with tempfile.TemporaryDirectory() as scratch:
            rows = sample_rows(str(flips_path), samples, *result.configs, scratch)
    (folder / PNG_NAME).write_bytes(render_png(counts))
    (folder / "index.html").write_text(render_html(summary, rows), encoding="utf-8")
    return {"flips": str(flips_path), "summary": str(folder / "summary.json"), "report": str(folder / "index.html")}
