"""The project's sluice.yaml as a dict with absolute paths (sample locations, eval sets, the URL blocklist),
for configs written elsewhere: the tests' and the benchmarks' (tests import it from here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def base_config(storage_root: str) -> dict[str, Any]:
    """The project's sluice.yaml with absolute sample locations and the given storage root."""
    raw = yaml.safe_load((PROJECT_ROOT / "sluice.yaml").read_text())
    raw["storage"] = {"root": storage_root}
    for source in raw["sources"]:
        source["location"] = str(PROJECT_ROOT / source["location"])
    for mix in raw["mixes"].values():
        mix["eval_sets"] = [str(PROJECT_ROOT / path) for path in mix.get("eval_sets", [])]
    cleaning = raw.get("cleaning") or {}
    if cleaning.get("url_blocklist"):
        cleaning["url_blocklist"] = str(PROJECT_ROOT / cleaning["url_blocklist"])
    return raw


def write_config(path: Path, raw: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)
