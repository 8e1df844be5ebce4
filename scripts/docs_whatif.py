"""The worked example of docs/guides/choosing-thresholds.md, regenerated: `sluice whatif` on the demo's
instance (`make demo` first) with the guide's three changed thresholds (CHANGES), its printed table written
into the guide between the WHATIF_BEGIN / WHATIF_END markers and its report's picture copied to
docs/assets/whatif/report.png, so that the page shows what the command prints today. `make
docs-screenshots` runs it.

    python scripts/docs_whatif.py [--guide docs/guides/choosing-thresholds.md] [--out docs/assets/whatif]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT))

GUIDE = PROJECT_ROOT / "docs" / "guides" / "choosing-thresholds.md"
OUT = PROJECT_ROOT / "docs" / "assets" / "whatif"
WHATIF_BEGIN = "<!-- whatif-example:begin (written by scripts/docs_whatif.py; do not edit) -->"
WHATIF_END = "<!-- whatif-example:end -->"
CHANGES: dict[str, Any] = {"min_chars": 400, "c4": {"min_num_sentences": 10}, "gopher_quality": {"min_doc_words": 300}}


def other_config(current: Path, folder: Path) -> Path:
    """A copy of `current` with CHANGES merged into its `cleaning` section, written to `folder` (the config's
    relative paths resolve against its folder, so `folder` is the current config's)."""
    document = yaml.safe_load(current.read_text(encoding="utf-8"))
    cleaning = document.setdefault("cleaning", {})
    for key, value in CHANGES.items():
        cleaning[key] = {**cleaning.get(key, {}), **value} if isinstance(value, dict) else value
    path = folder / ".whatif-example.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def run_whatif(config: Path, out: Path) -> str:
    """`sluice whatif --config config --out out --samples 1`'s printed table (an error exits)."""
    from data_assets.whatif_cli import main as whatif

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = whatif(["--config", str(config), "--out", str(out), "--samples", "1"])
    if code:
        sys.exit(f"sluice whatif failed ({code}): run `make demo` first")
    return printed.getvalue().rstrip("\n")


def rewrite_guide(guide: Path, table: str) -> None:
    """Replace the text between the guide's markers with `table` as a text block (atomically)."""
    text = guide.read_text(encoding="utf-8")
    head, begin, rest = text.partition(WHATIF_BEGIN)
    _, end, tail = rest.partition(WHATIF_END)
    if not begin or not end:
        sys.exit(f"{guide} has no {WHATIF_BEGIN} ... {WHATIF_END} markers")
    temp = guide.with_suffix(".md.tmp")
    temp.write_text(f"{head}{WHATIF_BEGIN}\n```text\n{table}\n```\n{WHATIF_END}{tail}", encoding="utf-8")
    os.replace(temp, guide)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guide", type=Path, default=GUIDE)
    parser.add_argument("--out", type=Path, default=OUT, help="where report.png goes")
    args = parser.parse_args(argv)
    from data_assets.trace_cli import config_path

    current = Path(config_path()).resolve()
    config = other_config(current, current.parent)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            table = run_whatif(config, Path(scratch))
            args.out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(scratch) / "report.png", args.out / ".report.png.tmp")
            os.replace(args.out / ".report.png.tmp", args.out / "report.png")
    finally:
        config.unlink(missing_ok=True)
    rewrite_guide(args.guide, table)
    print(f"{args.guide}: example table ({len(table.splitlines())} lines); {args.out / 'report.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
