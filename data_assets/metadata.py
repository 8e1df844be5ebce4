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


def prefixed_counts(prefix: str, counts: Mapping[str, int], known: Iterable[str] = ()) -> dict[str, int]:
    """`{"drop/too_short": 3, ...}`: one plottable number per reason; 0 for each name of `known` not counted."""
    merged = {**dict.fromkeys(known, 0), **counts}
    return {f"{prefix}/{name}": int(count) for name, count in sorted(merged.items())}


def known_keys(context: Any, asset: str, prefixes: Iterable[str]) -> dict[str, set[str]]:
    """By prefix, the names (`drop/<name>`) the asset's latest materialization, of any partition, recorded.
    Recording them again here, as 0 when absent, keeps each per-reason chart a line across partitions
    instead of dots (one lookup of the latest event: the cost does not grow with history)."""
    from dagster import AssetKey

    names: dict[str, set[str]] = {prefix: set() for prefix in prefixes}
    event = context.instance.get_latest_materialization_event(AssetKey(asset))
    materialization = event.asset_materialization if event is not None else None
    for key in (materialization.metadata if materialization is not None else {}):
        prefix, _, name = key.partition("/")
        if prefix in names and name:
            names[prefix].add(name)
    return names


def stage_progress(context: Any, label: str, total: int, unit: str = "files") -> Any:
    """A StageProgress that logs to the run (the UI shows the lines) and draws a bar on a terminal."""
    from sluice.runtime.progress import StageProgress

    return StageProgress(label, total, context.log.info, unit)
