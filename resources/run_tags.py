"""The `sluice/*` tags every run carries, whatever started it, so the runs list can be filtered by them.

Runs of Dagster's asset job are started by `sluice materialize`, a UI backfill, the snapshot sensor,
declarative automation or the schedule; Dagster tags them with their partition (or partition range) and
origin. `run_labels` derives from those tags: `sluice/source` and `sluice/snapshot` (or `sluice/mix`; a
range reads `first..last`), and `sluice/purpose` (kept when whoever started the run set it: `materialize`,
`demo`, `automation`, `daily-mix-rebuild`; else `backfill` for a UI backfill, `manual`), and
`sluice/coordinated` on the runs of a backfill that is not automation's. `sluice materialize` also tags its
backfill (and so its runs) `sluice/why`.
The settings resource adds them when a run starts (resources/settings.py).
"""

from __future__ import annotations

from collections.abc import Mapping

PURPOSE_TAG = "sluice/purpose"
# On the runs of a backfill that plans its own downstream (the command's, a UI backfill, the schedule's), so
# declarative automation does not react to what they materialize (data_assets/automation.py).
COORDINATED_TAG = "sluice/coordinated"
# On the command's backfill and its runs: why they run (missing partitions, which settings changed, a code
# version; data_assets/freshness.py Plan.why).
WHY_TAG = "sluice/why"
_RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
_DIMENSIONS = ("source", "snapshot")


def _dimensions(key: str) -> dict[str, str] | None:
    """`source|snapshot` -> its dimensions (data_assets/partitions.py); None for a one-dimensional key."""
    if "|" not in key:
        return None
    source, snapshot = key.split("|", 1)
    return {"source": source, "snapshot": snapshot}


def _span(first: str, last: str) -> str:
    return first if first == last else f"{first}..{last}"


def partition_labels(tags: Mapping[str, str]) -> dict[str, str]:
    start, end = tags.get(_RANGE[0]), tags.get(_RANGE[1])
    if start is None or end is None:
        single = tags.get("dagster/partition")
        if single is None:
            return {}
        start = end = single
    first, last = _dimensions(start), _dimensions(end)
    if first is None or last is None:
        return {"sluice/mix": _span(start, end)}
    return {f"sluice/{name}": _span(first[name], last[name]) for name in _DIMENSIONS}


def purpose(tags: Mapping[str, str]) -> str:
    if tags.get(PURPOSE_TAG):
        return tags[PURPOSE_TAG]
    if tags.get("dagster/from_automation_condition"):
        return "automation"
    if tags.get("dagster/sensor_name"):
        return f"sensor {tags['dagster/sensor_name']}"
    if tags.get("dagster/schedule_name"):
        return f"schedule {tags['dagster/schedule_name']}"
    return "backfill" if tags.get("dagster/backfill") else "manual"


def run_labels(tags: Mapping[str, str]) -> dict[str, str]:
    """The `sluice/*` tags a run with these Dagster tags should carry (only those it lacks or has otherwise)."""
    wanted = {**partition_labels(tags), PURPOSE_TAG: purpose(tags)}
    if tags.get("dagster/backfill") and purpose(tags) != "automation":
        wanted[COORDINATED_TAG] = "true"
    return {key: value for key, value in wanted.items() if tags.get(key) != value}
