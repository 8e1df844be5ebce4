"""The Dagster UI in a real browser: headless Chromium (Debian's package, driven by Playwright) on the
webserver serving a materialized sample graph shows the assets, their lineage, partitions and check results.

Screenshots are saved under `.test-artifacts/ui/` in the project root (or `$SLUICE_TEST_ARTIFACTS/ui`).
Slow (it materializes the whole sample graph first); `make test-all` installs Chromium and runs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scripts.docs_screenshots import CHROMIUM, SHOTS, browser_page, shoot
from tests.data_assets.test_webserver import CHECKS, PROJECT_ROOT, Webserver, serve_webserver

pytestmark = pytest.mark.slow

# Upstream of mixed_dataset (the sample's cleaning scores with neither model: they are beside the graph).
ASSETS = [
    "raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents", "decontamination",
    "tokenizer", "tokenized_shards", "mixed_dataset",
]
ARTIFACTS = Path(os.environ.get("SLUICE_TEST_ARTIFACTS", PROJECT_ROOT / ".test-artifacts")) / "ui"


@dataclass
class Graph:
    """The sample graph, materialized: its data root, Dagster home, config and `materialize_graph` report."""

    root: Path
    home: Path
    config: str
    report: dict[str, Any]


@pytest.fixture(scope="module")
def materialized(sample_graph) -> Graph:
    """The session's sample graph (materialized through Dagster's backfill machinery)."""
    if not Path(CHROMIUM).is_file():
        pytest.skip("Chromium is not installed (make test-all installs Debian's chromium)")
    pytest.importorskip("playwright")
    assert all(passed for _, _, passed in sample_graph.report["checks"])
    return Graph(sample_graph.data, sample_graph.home, sample_graph.config, sample_graph.report)


@pytest.fixture(scope="module")
def served_graph(materialized: Graph) -> Iterator[Webserver]:
    env = {**os.environ, "DAGSTER_HOME": str(materialized.home), "SLUICE_CONFIG": materialized.config}
    with serve_webserver(materialized.home.parent, env) as server:
        yield server


@pytest.fixture(scope="module")
def page(served_graph):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with browser_page(served_graph.url, {"width": 1600, "height": 1000}) as page:
        yield page


def test_lineage_shows_every_asset_of_the_graph(served_graph, page):
    page.goto(f"{served_graph.url}/assets/mixed_dataset?view=lineage&lineageScope=upstream&lineageDepth=5")
    for name in ASSETS:
        page.get_by_text(name, exact=True).first.wait_for(state="visible")
    page.screenshot(path=str(ARTIFACTS / "lineage.png"))
    assert (ARTIFACTS / "lineage.png").stat().st_size > 10_000


@pytest.mark.parametrize("asset", ["raw_documents", "cleaned_documents", "deduped_documents", "decontamination", "tokenized_shards"])
def test_partitions_of_each_stage_are_materialized(served_graph, page, asset):
    page.goto(f"{served_graph.url}/assets/{asset}?view=partitions")
    page.get_by_text("Materialized (4)").first.wait_for(state="visible")
    page.get_by_text("Missing (0)").first.wait_for(state="visible")
    for key in ("2026-01", "2026-02", "web", "reference"):
        page.get_by_text(key, exact=True).first.wait_for(state="visible")
    page.screenshot(path=str(ARTIFACTS / f"partitions-{asset}.png"))


@pytest.mark.parametrize("asset", [name for name in [*ASSETS, "quality_model"] if CHECKS[name]])
def test_check_results_are_shown_as_succeeded(served_graph, page, asset):
    page.goto(f"{served_graph.url}/assets/{asset}?view=checks")
    for check in CHECKS[asset]:
        # Long names are shown middle-truncated; the full name is in the list's (hidden) measuring element.
        page.get_by_text(check, exact=True).first.wait_for(state="attached")
    page.get_by_text("Succeeded").first.wait_for(state="visible")
    body = page.inner_text("body")
    assert body.count("Succeeded") >= len(CHECKS[asset]), body[:2000]
    page.screenshot(path=str(ARTIFACTS / f"checks-{asset}.png"))


PARTITIONS = [("reference", "2026-01"), ("web", "2026-01"), ("reference", "2026-02"), ("web", "2026-02")]


def image_size(page, selector: str) -> tuple[int, int]:
    """The decoded size of an <img> once loaded (0 x 0 when its source is missing or not an image)."""
    image = page.locator(selector).first
    image.wait_for(state="visible")
    page.wait_for_function("(img) => img.complete", arg=image.element_handle())
    return tuple(image.evaluate("(img) => [img.naturalWidth, img.naturalHeight]"))


def test_quality_report_page_shows_every_partition_and_its_picture(materialized, page, tmp_path):
    """The report written next to the data, opened as a user would (file://): its picture loads, and every
    source x snapshot is named with the numbers the stages recorded (their materialization metadata)."""
    page.goto((materialized.root / "quality_report" / "index.html").as_uri())
    page.get_by_role("heading", name="sluice quality report").wait_for(state="visible")
    width, height = image_size(page, "img#report")
    assert width > 500 and height > 1000
    for source, snapshot in PARTITIONS:
        meta = materialized.report["partitions"][(source, snapshot)]
        section = page.locator(f'section[data-source="{source}"][data-snapshot="{snapshot}"]')
        section.get_by_role("heading", name=f"{source}/{snapshot}").wait_for(state="visible")
        for heading in ("Cleaning funnel", "Drop reasons", "Languages kept"):
            section.get_by_role("heading", name=heading).wait_for(state="visible")
        row = page.locator("table").first.locator("tr", has=page.locator("td", has_text=source)).filter(has_text=snapshot)
        cells = row.locator("td").all_inner_texts()
        assert cells[:3] == [source, snapshot, str(meta["raw_documents"]["documents_out"])]
        assert cells[4:6] == [str(meta["cleaned_documents"]["documents_out"]), str(meta["deduped_documents"]["documents_out"])]
        assert cells[-1] == str(meta["tokenized_shards"]["tokens"])
    shot = tmp_path / "quality-report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def rendered_font_px(element) -> float:
    """The size a label is drawn at: its font size times the graph's zoom (its drawn width over its own)."""
    return element.evaluate("e => parseFloat(getComputedStyle(e).fontSize) * e.getBoundingClientRect().width / e.offsetWidth")


def test_the_global_lineage_is_readable_at_its_default_zoom(served_graph, page):
    """One group per stage: the global lineage opens with a box per stage whose label is drawn at 10 px or
    more (one group of every asset drew its labels at about 6 px); a stage's group page shows its assets."""
    page.goto(f"{served_graph.url}/asset-groups")  # the global asset lineage
    for stage in ("crawl", "settings", "curation", "tokenization", "training", "reporting"):
        label = page.locator("svg foreignObject").get_by_text(stage, exact=True).first
        label.wait_for(state="visible")
        assert rendered_font_px(label) >= 10, stage
    page.screenshot(path=str(ARTIFACTS / "global-lineage.png"))
    page.goto(f"{served_graph.url}/locations/sluice/asset-groups/curation")
    for name in ("raw_documents", "cleaned_documents", "dedup_signatures", "deduped_documents"):
        label = page.locator("svg foreignObject").get_by_text(name, exact=True).first
        label.wait_for(state="visible")
        assert rendered_font_px(label) >= 10, name


def test_quality_report_picture_is_on_its_asset_page(served_graph, materialized, page, tmp_path):
    """The asset's page in the Dagster UI shows as it opens the funnel per source (a table, with the figures
    the stages recorded) and a sketch of the report (markdown metadata short enough to be shown inline), the
    whole picture one click away, and the paths of the files."""
    page.goto(f"{served_graph.url}/assets/quality_report")
    width, height = image_size(page, 'img[alt="kept documents per snapshot by source"]')
    assert width > 200 and height > 50
    for source in ("reference", "web"):
        snapshots = [snapshot for s, snapshot in PARTITIONS if s == source]
        raw = sum(materialized.report["partitions"][(source, snapshot)]["raw_documents"]["documents_out"] for snapshot in snapshots)
        row = page.locator(f'tr:has(> td:first-child:text-is("{source}"))').first  # the funnel's row, not the row holding the table
        row.wait_for(state="visible")
        assert row.locator("td").all_inner_texts()[:3] == [source, str(len(snapshots)), str(raw)]
    shot = tmp_path / "quality-report-asset-inline.png"
    page.screenshot(path=str(shot), full_page=True)
    page.get_by_text("[Show Markdown]").first.click()
    width, height = image_size(page, 'img[alt="quality report"]')
    assert width > 500 and height > 1000
    body = page.inner_text("body")
    assert str(materialized.root / "quality_report" / "index.html") in body  # the path metadata naming the HTML page
    shot = tmp_path / "quality-report-asset.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def test_per_source_view_plots_one_source_over_its_snapshots(served_graph, materialized, page, tmp_path):
    """`quality_of_web` holds one materialization per web snapshot (the Events tab names both, no reference
    partition), and its metadata plots are drawn on the "Partitions" x axis (one point per snapshot) as on the
    "Events" one."""
    page.goto(f"{served_graph.url}/assets/quality_of_web?view=events")
    for snapshot in ("2026-01", "2026-02"):
        page.get_by_text(snapshot, exact=True).first.wait_for(state="visible")
    assert "reference" not in page.inner_text("body")
    page.goto(f"{served_graph.url}/assets/quality_of_web")
    page.get_by_role("button", name="Plots").first.click()
    for axis in ("Partitions", "Events"):
        page.get_by_role("button", name=axis).first.click()
        for metric in ("tokens", "drop_rate", "deduped_documents"):
            page.get_by_text(metric, exact=True).first.wait_for(state="visible")
        assert page.locator("canvas").count() >= 3, axis
    shot = tmp_path / "quality-by-source-web.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def test_a_stage_page_links_each_sources_view(served_graph, page):
    """cleaned_documents' page lists `per-source plots: web` in its metadata; clicking it opens quality_of_web."""
    page.goto(f"{served_graph.url}/assets/cleaned_documents")
    page.get_by_text("per-source plots: web", exact=True).first.wait_for(state="visible")
    page.get_by_role("link", name="quality_of_web").first.click()
    page.wait_for_url("**/assets/quality_of_web**")
    page.get_by_text("Quality figures of source 'web'").first.wait_for(state="visible")


def test_docs_screenshots_script_takes_every_page(served_graph, page, tmp_path):
    """`make docs-screenshots` (scripts/docs_screenshots.py) against the served sample graph: every page of the
    UI guide is found (each step waits for what the guide points at) and saved as a picture of the viewport."""
    import matplotlib.image

    viewport = page.viewport_size
    try:
        written = shoot(page, served_graph.url, tmp_path)  # what take() does with its own browser
    finally:
        page.set_viewport_size(viewport)
    assert [path.name for path in written] == list(SHOTS)
    for path in written:
        pixels = matplotlib.image.imread(str(path), format="png")
        assert pixels.shape[:2] == (900, 1440) and pixels.std() > 0.05, path.name
    assert not list(tmp_path.glob(".*.tmp.png"))
