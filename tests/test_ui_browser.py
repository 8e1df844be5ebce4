"""The Dagster UI in a real browser: headless Chromium (Debian's package, driven by Playwright) on the
webserver serving a materialized sample graph shows the assets, their lineage, partitions and check results.

Screenshots are saved under `.test-artifacts/ui/` in the project root (or `$SLUICE_TEST_ARTIFACTS/ui`).
Slow (it materializes the whole sample graph first); `make test-all` installs Chromium and runs it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import base_config, write_config
from tests.test_webserver import CHECKS, PROJECT_ROOT, Webserver, serve_webserver

pytestmark = pytest.mark.slow

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
ASSETS = [
    "raw_documents", "quality_model", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents", "decontamination",
    "tokenizer", "tokenized_shards", "mixed_dataset",
]
ARTIFACTS = Path(os.environ.get("SLUICE_TEST_ARTIFACTS", PROJECT_ROOT / ".test-artifacts")) / "ui"


@pytest.fixture(scope="module")
def served_graph(tmp_path_factory) -> Iterator[Webserver]:
    if not Path(CHROMIUM).is_file():
        pytest.skip("Chromium is not installed (make test-all installs Debian's chromium)")
    pytest.importorskip("playwright")
    from dagster import DagsterInstance

    from data_assets.cli import materialize_all, register_snapshots
    from data_assets.definitions import build_resources

    root = tmp_path_factory.mktemp("ui")
    config = write_config(root / "sluice.yaml", base_config(str(root / "data")))
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    resources = build_resources(config)
    with DagsterInstance.from_config(str(home)) as instance:
        register_snapshots(instance, resources)
        report = materialize_all(instance, resources, log=lambda _: None)
    assert all(passed for _, _, passed in report["checks"])
    env = {**os.environ, "DAGSTER_HOME": str(home), "SLUICE_CONFIG": config}
    with serve_webserver(root, env) as server:
        yield server


@pytest.fixture(scope="module")
def page(served_graph):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(f"{served_graph.url}/assets")
        skip = page.get_by_role("button", name="Skip")  # the first-visit newsletter dialog
        with contextlib.suppress(Exception):  # not shown on every version
            skip.click(timeout=10_000)
        yield page
        browser.close()


def test_lineage_shows_every_asset_of_the_graph(served_graph, page):
    page.goto(f"{served_graph.url}/assets/mixed_dataset?view=lineage&lineageScope=upstream&lineageDepth=5")
    for name in ASSETS:
        page.get_by_text(name, exact=True).first.wait_for(state="visible")
    for group in ("curation", "tokenization", "training"):
        page.get_by_text(group, exact=True).first.wait_for(state="visible")
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


@pytest.mark.parametrize("asset", [name for name in ASSETS if CHECKS[name]])
def test_check_results_are_shown_as_succeeded(served_graph, page, asset):
    page.goto(f"{served_graph.url}/assets/{asset}?view=checks")
    for check in CHECKS[asset]:
        # Long names are shown middle-truncated; the full name is in the list's (hidden) measuring element.
        page.get_by_text(check, exact=True).first.wait_for(state="attached")
    page.get_by_text("Succeeded").first.wait_for(state="visible")
    body = page.inner_text("body")
    assert body.count("Succeeded") >= len(CHECKS[asset]), body[:2000]
    page.screenshot(path=str(ARTIFACTS / f"checks-{asset}.png"))
