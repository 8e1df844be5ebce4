"""What an in-process `materialize(...)` result recorded, as plain values."""

from __future__ import annotations

from typing import Any


def metadata_of(result: Any) -> dict[str, dict[str, Any]]:
    """asset name -> metadata values (plain Python) of the materializations in a run result."""
    out: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        out[materialization.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    return out


def checks_of(result: Any) -> list[tuple[str, str, bool]]:
    """(asset, check, passed) of every check evaluation in a run result."""
    return [(event.asset_key.to_user_string(), event.check_name, event.passed) for event in result.get_asset_check_evaluations()]
