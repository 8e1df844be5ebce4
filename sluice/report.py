"""The quality report: per source and snapshot, the cleaning funnel, drop reasons, language shares, dedup
removal against earlier snapshots and token counts, drawn as one PNG (matplotlib) and a small HTML page.

Built from the partitions' manifests only (what each stage measured while writing: `stats` of the
cleaned and deduped manifests, the raw and tokenized counts), never from the data: a few KB per
partition. Written to its own folder `<root>/quality_report/` (`report.png`, `index.html`, `_manifest.json`).
Over snapshots, each chart draws one line or bar group per source, so sources never interleave.
"""

from __future__ import annotations

import html
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.io.layout import PartitionRef, partition_prefix, read_manifest, write_manifest
from sluice.io.storage import Store

REPORT_DATASET = "quality_report"
PNG_NAME = "report.png"
HTML_NAME = "index.html"
STAGES = ("raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards")


@dataclass
class PartitionQuality:
    """What the stages of one source x snapshot partition recorded (None: the stage has not run)."""

    source: str
    snapshot: str
    raw: int | None = None
    quarantined: int = 0
    cleaned: int | None = None
    funnel: list[tuple[str, int, int]] = field(default_factory=list)  # (step, documents reaching it, dropped by it)
    drops: dict[str, int] = field(default_factory=dict)
    languages: dict[str, int] = field(default_factory=dict)  # kept documents by language
    deduped: int | None = None
    removed_within: int = 0
    removed_earlier: int = 0  # removed as copies of documents of partitions ordered before this one
    tokens: int | None = None

    @property
    def label(self) -> str:
        return f"{self.source}/{self.snapshot}"


def partition_quality(store: Store, ref: PartitionRef) -> PartitionQuality:
    """One partition's figures from its stages' manifests (absent stages stay None)."""
    manifests = {stage: read_manifest(store, partition_prefix(stage, ref)) for stage in STAGES}
    row = PartitionQuality(ref.source, ref.snapshot)
    if raw := manifests["raw_documents"]:
        row.raw = int(raw["documents"])
        row.quarantined = sum(int(entry.get("rows", 0)) for entry in raw.get("side_files", []))
    if cleaned := manifests["cleaned_documents"]:
        stats = cleaned.get("stats", {})
        row.cleaned = int(cleaned["documents"])
        row.funnel = [(str(name), int(reached), int(dropped)) for name, reached, dropped in stats.get("funnel", [])]
        row.drops = {str(k): int(v) for k, v in cleaned.get("drops", {}).items()}
        row.languages = {str(k): int(v) for k, v in stats.get("languages", {}).items()}
    if deduped := manifests["deduped_documents"]:
        stats = deduped.get("stats", {})
        row.deduped = int(deduped["documents"])
        row.removed_within = int(stats.get("removed_within_partition", 0))
        row.removed_earlier = sum(int(v) for v in stats.get("removed_against", {}).values())
    if tokenized := manifests["tokenized_shards"]:
        row.tokens = int(tokenized["tokens"])
    return row


def collect(store: Store, refs: Iterable[PartitionRef]) -> list[PartitionQuality]:
    """The figures of `refs` in the global order (snapshot, source); partitions no stage wrote are left out."""
    rows = [partition_quality(store, ref) for ref in sorted(refs, key=PartitionRef.sort_key)]
    return [row for row in rows if row.raw is not None]


def _sources(rows: Sequence[PartitionQuality]) -> list[str]:
    return sorted({row.source for row in rows})


def _snapshots(rows: Sequence[PartitionQuality]) -> list[str]:
    return sorted({row.snapshot for row in rows})


def _stacked(axis: Any, rows: Sequence[PartitionQuality], parts: dict[str, list[float]], title: str, ylabel: str) -> None:
    """Stacked bars, one per partition, grouped by source (a gap between sources)."""
    positions = _positions(rows)
    bottom = [0.0] * len(rows)
    for name, values in parts.items():
        axis.bar(positions, values, bottom=bottom, label=name, width=0.8)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    _label_partitions(axis, rows, positions)
    axis.set_title(title)
    axis.set_ylabel(ylabel)
    if parts:
        axis.legend(fontsize="x-small", ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _positions(rows: Sequence[PartitionQuality]) -> list[float]:
    """x positions of partitions ordered by (source, snapshot), one unit apart, a gap between sources."""
    positions, x, previous = [], 0.0, None
    for row in rows:
        if previous is not None and row.source != previous:
            x += 0.6
        positions.append(x)
        previous, x = row.source, x + 1
    return positions


def _label_partitions(axis: Any, rows: Sequence[PartitionQuality], positions: list[float]) -> None:
    axis.set_xticks(positions)
    axis.set_xticklabels([row.label for row in rows], rotation=30, ha="right", fontsize="small")


def _funnel_chart(axis: Any, rows: Sequence[PartitionQuality]) -> None:
    """Documents after each stage, one line per source over snapshots."""
    snapshots = _snapshots(rows)
    for index, source in enumerate(_sources(rows)):
        by_snapshot = {row.snapshot: row for row in rows if row.source == source}
        for stage, style in (("raw", "-"), ("cleaned", "--"), ("deduped", ":")):
            values = [getattr(by_snapshot[s], stage) if s in by_snapshot else None for s in snapshots]
            points = [float("nan") if v is None else v for v in values]
            axis.plot(snapshots, points, style, color=f"C{index}", marker="o", label=f"{source} {stage}")
    axis.set_title("Cleaning funnel: documents after each stage, per source")
    axis.set_ylabel("documents")
    axis.legend(fontsize="x-small", ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _tokens_chart(axis: Any, rows: Sequence[PartitionQuality]) -> None:
    snapshots = _snapshots(rows)
    for source in _sources(rows):
        by_snapshot = {row.snapshot: row.tokens for row in rows if row.source == source}
        values = [by_snapshot.get(s) for s in snapshots]
        axis.plot(snapshots, [float("nan") if v is None else v for v in values], marker="o", label=source)
    axis.set_title("Tokens per snapshot, per source")
    axis.set_ylabel("tokens")
    axis.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _by_source(rows: Sequence[PartitionQuality]) -> list[PartitionQuality]:
    return sorted(rows, key=lambda row: (row.source, row.snapshot))


def render_png(rows: Sequence[PartitionQuality], title: str = "sluice quality report") -> bytes:
    """The report's picture: funnel and tokens as lines per source over snapshots; drop reasons, language
    shares and dedup removal as stacked bars per partition, grouped by source. Deterministic bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grouped = _by_source(rows)
    reasons = sorted({reason for row in rows for reason in row.drops})
    languages = sorted({language for row in rows for language in row.languages})
    figure, axes = plt.subplots(5, 1, figsize=(11, 22), layout="constrained")
    _funnel_chart(axes[0], rows)
    _stacked(axes[1], grouped, {r: [float(row.drops.get(r, 0)) for row in grouped] for r in reasons}, "Cleaning drops by reason", "documents dropped")
    shares = {
        language: [row.languages.get(language, 0) / max(1, sum(row.languages.values())) for row in grouped] for language in languages
    }
    _stacked(axes[2], grouped, shares, "Language shares of the kept documents", "share")
    removal = {
        "within the partition": [float(row.removed_within) for row in grouped],
        "against earlier partitions": [float(row.removed_earlier) for row in grouped],
    }
    _stacked(axes[3], grouped, removal, "Dedup removal (copies within the partition / of earlier snapshots)", "documents removed")
    _tokens_chart(axes[4], rows)
    figure.suptitle(title)
    buffer = io.BytesIO()
    # No timestamp or software version in the file: the same figures give the same bytes.
    figure.savefig(buffer, format="png", dpi=72, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


@dataclass(frozen=True)
class SourceTotals:
    """One source's funnel summed over its snapshots (a stage that has not run for a snapshot adds nothing)."""

    source: str
    snapshots: int
    raw: int
    quarantined: int
    cleaned: int
    deduped: int
    tokens: int

    @property
    def drop_rate(self) -> float:
        """The share of raw documents cleaning dropped."""
        return 1 - self.cleaned / self.raw if self.raw else 0.0


def source_totals(rows: Sequence[PartitionQuality]) -> list[SourceTotals]:
    """Per source, in name order: the funnel (raw -> cleaned -> deduped documents, tokens) over its snapshots."""
    return [
        SourceTotals(
            source,
            len(mine := [row for row in rows if row.source == source]),
            *(sum(getattr(row, stage) or 0 for row in mine) for stage in ("raw", "quarantined", "cleaned", "deduped", "tokens")),
        )
        for source in _sources(rows)
    ]


SKETCH_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def sketch_svg(rows: Sequence[PartitionQuality], max_chars: int = 999) -> str:
    """A compact SVG of the report's gist, as a markdown image of at most `max_chars` characters (Dagster's UI
    shows markdown metadata inline only under 1,000 characters and folds longer markdown behind a button): per
    source a line of its documents kept after dedup over the snapshots, the latest ones when they do not all
    fit, with its axes (0 and the largest count; the first and last snapshot drawn)."""
    import base64

    sources, snapshots = _sources(rows), _snapshots(rows)
    kept = {(row.source, row.snapshot): row.deduped or 0 for row in rows}
    for points in range(len(snapshots), 1, -1):
        svg = _sketch(sources, snapshots[-points:], kept)
        text = f"![kept documents per snapshot by source](data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()})"
        if len(text) <= max_chars:
            return text
    return ""


def _sketch(sources: Sequence[str], snapshots: Sequence[str], kept: dict[tuple[str, str], int]) -> str:
    left, right, top_y, bottom_y = 34, 230, 6, 62
    top = max([1, *(kept.get((source, snapshot), 0) for source in sources for snapshot in snapshots)])
    step = (right - left) / max(1, len(snapshots) - 1)
    first, last = (html.escape(snapshot[:12]) for snapshot in (snapshots[0], snapshots[-1]))
    lines, legend = [], []
    for index, source in enumerate(sources[: len(SKETCH_COLORS)]):
        color = SKETCH_COLORS[index]
        points = [
            f"{round(left + i * step)},{round(bottom_y - (bottom_y - top_y) * kept[source, snapshot] / top)}"
            for i, snapshot in enumerate(snapshots)
            if (source, snapshot) in kept
        ]
        points = " ".join(points * 2 if len(points) == 1 else points)  # a lone point: a dot (round caps)
        lines.append(f'<polyline points="{points}" stroke="{color}"/>')
        legend.append(f'<text x="{right + 6}" y="{top_y + 8 + 12 * index}" fill="{color}">{html.escape(source[:10])}</text>')
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="300" height="78" font-size="10">'
        f'<path d="M{left} {top_y}V{bottom_y}H{right}" stroke="#888" fill="none"/>'
        f'<g text-anchor="end"><text x="{left - 3}" y="{top_y + 8}">{top}</text><text x="{left - 3}" y="{bottom_y}">0</text>'
        f'<text x="{right}" y="{bottom_y + 12}">{last}</text></g><text x="{left}" y="{bottom_y + 12}">{first}</text>'
        f'<g fill="none" stroke-width="2" stroke-linecap="round">{"".join(lines)}</g>{"".join(legend)}</svg>'
    )


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(cell))}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_html(rows: Sequence[PartitionQuality], png_name: str = PNG_NAME, title: str = "sluice quality report") -> str:
    """A page with the picture and, per partition, the numbers it draws (every text escaped)."""
    summary = _table(
        ["source", "snapshot", "raw", "quarantined", "cleaned", "deduped", "removed within", "removed against earlier", "tokens"],
        [
            (row.source, row.snapshot, _dash(row.raw), row.quarantined, _dash(row.cleaned), _dash(row.deduped),
             row.removed_within, row.removed_earlier, _dash(row.tokens))
            for row in rows
        ],
    )
    sections = []
    for row in rows:
        total = max(1, sum(row.languages.values()))
        funnel = _table(["step", "documents reaching it", "dropped by it"], row.funnel)
        drops = _table(["reason", "documents"], sorted(row.drops.items(), key=lambda item: (-item[1], item[0])))
        languages = _table(["language", "kept", "share"], [(k, v, f"{v / total:.1%}") for k, v in sorted(row.languages.items(), key=lambda item: (-item[1], item[0]))])
        sections.append(
            f'<section class="partition" data-source="{html.escape(row.source)}" data-snapshot="{html.escape(row.snapshot)}">'
            f"<h2>{html.escape(row.label)}</h2><h3>Cleaning funnel</h3>{funnel}<h3>Drop reasons</h3>{drops}"
            f"<h3>Languages kept</h3>{languages}</section>"
        )
    return (
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:0.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#eee}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p>{len(rows)} partitions (source x snapshot), from the stages' manifests.</p>"
        f'<img id="report" src="{html.escape(png_name)}" alt="quality report: funnel, drop reasons, languages, dedup removal, tokens">'
        f"<h2>Per partition</h2>{summary}{''.join(sections)}</body></html>\n"
    )


def write_report(store: Store, rows: Sequence[PartitionQuality], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write `report.png`, `index.html` and the folder's manifest (with `extra`'s entries) under
    `quality_report/`; returns the manifest."""
    png = render_png(rows)
    page = render_html(rows).encode("utf-8")
    store.write_bytes(f"{REPORT_DATASET}/{PNG_NAME}", png)
    store.write_bytes(f"{REPORT_DATASET}/{HTML_NAME}", page)
    manifest = {
        "asset": REPORT_DATASET,
        "partitions": [row.label for row in rows],
        "extra_keys": [PNG_NAME, HTML_NAME],
        "png_bytes": len(png),
        **(extra or {}),
    }
    write_manifest(store, REPORT_DATASET, manifest)
    return manifest
