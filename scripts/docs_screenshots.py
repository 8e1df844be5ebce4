"""`make docs-screenshots`: screenshots of the Dagster UI pages the UI guide (docs/guides/ui.md) describes,
taken in headless Chromium (Debian's package, driven by Playwright: no browser download) from a running UI
(`make demo`, then `make ui`; or `--url`), into docs/assets/ui/. Run again after a change to those pages, so
that the pictures stay current.

    python scripts/docs_screenshots.py [--url http://127.0.0.1:3000] [--out docs/assets/ui]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
OUT = PROJECT_ROOT / "docs" / "assets" / "ui"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1440, "height": 900}


@contextlib.contextmanager
def browser_page(url: str, viewport: dict[str, int] = VIEWPORT) -> Iterator[Any]:
    """A headless Chromium page on the UI at `url`, past the first-visit dialog; 60 s per wait."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=viewport)
            page.set_default_timeout(60_000)
            page.goto(f"{url}/assets")
            with contextlib.suppress(Exception):  # the newsletter dialog, not shown on every version
                page.get_by_role("button", name="Skip").click(timeout=10_000)
            yield page
        finally:
            browser.close()


def _scroll_to(page: Any, text: str) -> None:
    """Scroll the first element showing exactly `text` to the top of the view; the UI re-renders as its
    queries refresh, so an element found may be replaced before it is scrolled: then find it again."""
    from playwright.sync_api import Error

    for attempt in range(3):
        try:
            target = page.get_by_text(text, exact=True).first
            target.wait_for(state="visible")
            target.evaluate("(element) => element.scrollIntoView({block: 'start'})")
            return
        except Error:
            if attempt == 2:
                raise
            page.wait_for_timeout(1000)


def _global_lineage(page: Any, url: str) -> None:
    """The global lineage: one box per stage (asset group)."""
    page.goto(f"{url}/asset-groups")
    for name in ("crawl", "settings", "curation", "tokenization", "training", "reporting"):
        page.locator("svg foreignObject").get_by_text(name, exact=True).first.wait_for(state="visible")


def _lineage(page: Any, url: str) -> None:
    """cleaned_documents' Lineage tab, one step up and down, whatever their group."""
    page.goto(f"{url}/assets/cleaned_documents?view=lineage&lineageScope=neighbors&lineageDepth=1")
    for name in ("raw_documents", "cleaning_settings", "dedup_signatures", "deduped_documents", "quality_report"):
        page.get_by_text(name, exact=True).first.wait_for(state="visible")


def _stage_metadata(page: Any, url: str) -> None:
    """cleaned_documents' Overview, at its Metadata: the per-source links."""
    page.goto(f"{url}/assets/cleaned_documents")
    _scroll_to(page, "tasks_run")  # the per-source links follow, at the end of the list


def _check_partitions(page: Any, url: str) -> None:
    """A check's Partitions view: Passed / Failed per partition."""
    page.goto(f"{url}/assets/cleaned_documents?view=checks&checkDetail=no_pii_left")
    page.get_by_text("no_pii_left", exact=True).first.wait_for(state="visible")
    page.get_by_role("tab", name="Partitions").last.click()  # the check's tab, after the asset's own
    page.get_by_text("Passed (").first.wait_for(state="visible")
    page.get_by_text("web", exact=True).first.wait_for(state="visible")


def _report(page: Any, url: str) -> None:
    """quality_report's Overview, at its Metadata: the sketch and the funnel per source."""
    page.goto(f"{url}/assets/quality_report")
    page.locator('img[alt="kept documents per snapshot by source"]').first.wait_for(state="visible")
    _scroll_to(page, "report_sketch")


def _source_plots(page: Any, url: str) -> None:
    """quality_of_web's metadata plots over its snapshots."""
    page.goto(f"{url}/assets/quality_of_web")
    page.get_by_role("button", name="Plots").first.click()
    page.get_by_role("button", name="Partitions").first.click()
    page.get_by_text("deduped_documents", exact=True).first.wait_for(state="visible")
    _scroll_to(page, "Metadata")  # the section, its Partitions / Events switch and the first plots


SHOTS: dict[str, Callable[[Any, str], None]] = {
    "global-lineage.png": _global_lineage,
    "lineage.png": _lineage,
    "stage-metadata.png": _stage_metadata,
    "check-partitions.png": _check_partitions,
    "quality-report.png": _report,
    "quality-of-web-plots.png": _source_plots,
}


def take(url: str, out: Path) -> list[Path]:
    """Every screenshot of SHOTS, from the UI at `url`, written to `out`."""
    with browser_page(url) as page:
        return shoot(page, url, out)


def shoot(page: Any, url: str, out: Path) -> list[Path]:
    """Every screenshot of SHOTS with `page` (its viewport set to VIEWPORT), each written atomically (temp +
    rename) to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size(VIEWPORT)
    written = []
    for name, show in SHOTS.items():
        show(page, url)
        page.wait_for_timeout(1500)  # let charts and lazy markdown settle
        temp = out / f".{name}.tmp.png"
        page.screenshot(path=str(temp))
        os.replace(temp, out / name)
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    host, port = os.environ.get("SLUICE_UI_HOST", "127.0.0.1"), os.environ.get("SLUICE_UI_PORT", "3000")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=f"http://{host}:{port}", help="the running Dagster UI (make ui)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).is_file():
        print("Chromium is not installed (make docs-screenshots installs Debian's chromium)", file=sys.stderr)
        return 2
    import requests

    try:
        requests.get(f"{args.url}/server_info", timeout=5).raise_for_status()
    except requests.RequestException as error:
        print(f"No Dagster UI at {args.url} ({type(error).__name__}): run `make demo`, then `make ui`, first", file=sys.stderr)
        return 2
    for path in take(args.url, args.out):
        print(f"{path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
