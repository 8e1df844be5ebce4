"""The UI in a real browser: `dagster-webserver` on 127.0.0.1 over an instance in which one partition's
first three stages were materialized, driven by Debian's headless Chromium.

The asset catalog lists the six assets (the five stages and the tokenizer), the partitions view of
raw_documents shows its source x snapshot keys with the materialized one counted, and the checks view shows
the check's result. Chromium renders each page (JavaScript, GraphQL calls) and hands back the DOM; a
screenshot of the curation group's graph, taken through chromedriver (WebDriver over HTTP, after dismissing
the first-visit dialog), is saved to `.test_artifacts/` (git-ignored) as the test's artifact.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import time

import pytest

from tests.conftest import PROJECT_ROOT, base_config, write_config
from tests.test_webserver import WEBSERVER, Webserver, _stop, _wait_until_serving, free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = PROJECT_ROOT / ".test_artifacts"
ASSETS = ["raw_documents", "cleaned_documents", "deduped_documents", "tokenizer", "tokenized_shards", "mixed_dataset"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"),
]


def chromium(url: str, *extra: str) -> str:
    done = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1000",
         "--virtual-time-budget=15000", *extra, url],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def visible_text(dom: str) -> str:
    text = re.sub(r"<script.*?</script>|<style.*?</style>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def page_text(server: Webserver, path: str, expect: str, attempts: int = 4) -> str:
    """The rendered page's text, re-rendered while `expect` has not appeared (first GraphQL calls are slow)."""
    text = ""
    for _ in range(attempts):
        text = visible_text(chromium(f"{server.url}/{path}", "--dump-dom"))
        if expect in text:
            break
    return text


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    from dagster import DagsterInstance, materialize

    from data_assets.cli import register_snapshots
    from data_assets.definitions import ASSETS as DEFINITIONS
    from data_assets.definitions import build_resources
    from data_assets.partitions import multi_key

    root = tmp_path_factory.mktemp("ui")
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    config = write_config(root / "sluice.yaml", base_config(str(root / "data")))
    resources = build_resources(config)
    with DagsterInstance.from_config(str(home)) as instance:
        register_snapshots(instance, resources)
        materialize(DEFINITIONS, selection=["raw_documents", "cleaned_documents", "deduped_documents"],
                    partition_key=multi_key("web", "2026-01"), instance=instance, resources=resources)
    port = free_port()
    server = Webserver(f"http://127.0.0.1:{port}", root / "webserver.log")
    with server.log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(WEBSERVER), "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
            cwd=PROJECT_ROOT, env={**os.environ, "DAGSTER_HOME": str(home), "SLUICE_CONFIG": config},
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        _wait_until_serving(proc, server)
        yield server
    finally:
        _stop(proc)


def test_catalog_lists_every_asset(ui):
    text = page_text(ui, "assets", "mixed_dataset")
    for name in ASSETS:
        assert name in text, text[:2000]


def test_partitions_view_shows_source_snapshot_keys_and_the_materialized_one(ui):
    text = page_text(ui, "assets/raw_documents?view=partitions", "Materialized (1)")
    assert "Materialized (1)" in text, text[:2000]
    assert "web" in text and "reference" in text and "2026-01" in text


def test_checks_view_shows_the_check_result(ui):
    text = page_text(ui, "assets/raw_documents?view=checks", "Passed")
    assert "quarantined_file_share_below_bound" in text and "Passed" in text, text[:2000]


class WebDriver:
    """The W3C WebDriver protocol spoken to Debian's chromedriver over HTTP (no client library needed)."""

    def __init__(self) -> None:
        import requests

        self.http = requests.Session()
        self.port = free_port()
        self.proc = subprocess.Popen([CHROMEDRIVER, f"--port={self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                self.http.get(f"{self.base}/status", timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        options = {"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1000"]}
        if CHROMIUM:
            options["binary"] = CHROMIUM
        session = self.call("POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}})
        self.session = f"/session/{session['sessionId']}"

    def call(self, method: str, path: str, body: dict | None = None):
        response = self.http.request(method, f"{self.base}{path}", json=body, timeout=120)
        value = response.json().get("value")
        assert response.ok, value
        return value

    def go(self, url: str) -> None:
        self.call("POST", f"{self.session}/url", {"url": url})

    def find(self, xpath: str, timeout_s: float = 30) -> str | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.call("POST", f"{self.session}/elements", {"using": "xpath", "value": xpath})
            if found:
                return next(iter(found[0].values()))
            time.sleep(0.3)
        return None

    def click(self, element: str) -> None:
        self.call("POST", f"{self.session}/element/{element}/click", {})

    def screenshot(self) -> bytes:
        import base64

        return base64.b64decode(self.call("GET", f"{self.session}/screenshot"))

    def quit(self) -> None:
        try:
            self.call("DELETE", self.session)
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=15)


@pytest.mark.skipif(CHROMEDRIVER is None, reason="Debian's chromium-driver is not installed")
def test_asset_graph_screenshot_is_saved(ui):
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-curation-asset-graph.png"
    shot.unlink(missing_ok=True)
    driver = WebDriver()
    try:
        driver.go(f"{ui.url}/locations/sluice/asset-groups/curation")
        skip = driver.find("//button[normalize-space()='Skip']", timeout_s=10)  # the first-visit community dialog
        if skip:
            driver.click(skip)
        # The graph's nodes: each asset of the group with its check summary.
        for name in ("raw_documents", "cleaned_documents", "deduped_documents"):
            assert driver.find(f"//*[contains(text(), '{name}')]"), name
        assert driver.find("//*[contains(., 'Passed') and not(*[contains(., 'Passed')])]")  # deepest such element
        time.sleep(1.0)  # let the graph settle its layout
        png = driver.screenshot()
    finally:
        driver.quit()
    shot.write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
