"""Small helpers that turn stage statistics into Dagster metadata (numbers plot across partitions)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dagster import MetadataValue


def markdown_table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> MetadataValue:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(value) for value in row) + " |")
    return MetadataValue.md("\n".join(lines))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def counts_table(counts: Mapping[str, int], key: str = "reason", value: str = "documents") -> MetadataValue:
    return markdown_table([key, value], sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def prefixed_counts(prefix: str, counts: Mapping[str, int]) -> dict[str, int]:
    """`{"drop/too_short": 3, ...}`: one plottable number per reason."""
    return {f"{prefix}/{name}": int(count) for name, count in sorted(counts.items())}


def stage_progress(context: Any, label: str, total: int, unit: str = "files") -> Any:
    """A StageProgress that logs to the run (the UI shows the lines) and draws a bar on a terminal."""
    from sluice.progress import StageProgress

    return StageProgress(label, total, context.log.info, unit)
