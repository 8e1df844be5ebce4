"""End to end: the real `dagster-webserver` serves the sluice code location, checked through its GraphQL API.

One webserver (module-scoped) on a free 127.0.0.1 port, with a fresh DAGSTER_HOME (telemetry off) and
SLUICE_CONFIG at the project's sluice.yaml; the process group is terminated in the fixture teardown.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]
WEBSERVER = PROJECT_ROOT / ".venv" / "bin" / "dagster-webserver"
CONFIG = PROJECT_ROOT / "sluice.yaml"
LOCATION = "sluice"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0

# Expected graph, read from data_assets/*.py (deps=[AssetDep(...)], check_specs=[AssetCheckSpec(...)]).
DEPENDENCIES: dict[str, set[str]] = {
    "crawl": set(),
    "source_settings": set(),
    "cleaning_settings": set(),
    "mix_settings": set(),
    "raw_documents": {"crawl", "source_settings"},
    "quality_model": {"raw_documents"},
    "perplexity_model": {"raw_documents"},
    # the sample's cleaning scores with neither model: cleaning does not wait for them (data_assets/cleaned.py)
    "cleaned_documents": {"raw_documents", "cleaning_settings"},
    "dedup_signatures": {"cleaned_documents"},
    "dedup_index": {"dedup_signatures"},
    "dedup_clusters": {"dedup_signatures", "dedup_index"},
    "deduped_documents": {"cleaned_documents", "dedup_clusters"},
    "tokenizer": {"deduped_documents"},
    "tokenized_shards": {"deduped_documents", "tokenizer"},
    "decontamination": {"deduped_documents"},
    "blocklist": set(),
    "blocklist_matches": {"deduped_documents", "blocklist"},
    "mixed_dataset": {"mix_settings", "tokenized_shards", "decontamination", "blocklist_matches", "blocklist", "tokenizer"},
    "quality_report": {"raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards"},
    "quality_of_web": {"quality_report"},
    "quality_of_reference": {"quality_report"},
}
# One group per stage (the global lineage opens with one readable box each); the stage is also a tag.
STAGES = {
    "crawl": ["crawl"],
    "settings": ["source_settings", "cleaning_settings", "mix_settings"],
    "curation": ["raw_documents", "quality_model", "perplexity_model", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents"],
    "tokenization": ["tokenizer", "tokenized_shards"],
    "training": ["decontamination", "blocklist", "blocklist_matches", "mixed_dataset"],
    "reporting": ["quality_report", "quality_of_web", "quality_of_reference"],
}
GROUPS = {key: stage for stage, keys in STAGES.items() for key in keys}
# check name -> blocking
CHECKS: dict[str, dict[str, bool]] = {
    "raw_documents": {"quarantined_file_share_below_bound": True},
    "quality_model": {"held_out_accuracy_above_chance": False},
    "perplexity_model": {"cutoffs_from_other_sources": False},
    "cleaned_documents": {"drop_rate_within_bounds": False, "no_pii_left": True},
    "dedup_signatures": {},
    "dedup_index": {},
    "dedup_clusters": {},
    "deduped_documents": {"no_exact_duplicates": True, "removed_share_within_bounds": False},
    "tokenizer": {},
    "decontamination": {},
    "blocklist": {},
    "blocklist_matches": {},
    "tokenized_shards": {
        "token_ids_below_vocab_size": True,
        "decoded_sample_equals_text": True,
        "checksums_verify": True,
    },
    "mixed_dataset": {
        "realized_shares_match_weights": True,
        "validation_disjoint_from_training": True,
        "no_evaluation_overlap_in_mix": True,
        "copies_of_a_document_never_share_a_sample": True,
        "no_blocklisted_document_in_mix": True,
    },
    "quality_report": {},
    "quality_of_web": {},
    "quality_of_reference": {},
    "crawl": {},
    "source_settings": {},
    "cleaning_settings": {},
    "mix_settings": {},
}
SOURCE_SNAPSHOT_ASSETS = [
    "raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents", "decontamination",
    "blocklist_matches", "tokenized_shards",
]

WORKSPACE_QUERY = """
query {
  workspaceOrError {
    __typename
    ... on PythonError { message }
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError {
          __typename
          ... on PythonError { message stack }
          ... on RepositoryLocation {
            name
            repositories {
              name
              jobs { name }
              sensors { name }
              schedules { name }
            }
          }
        }
      }
    }
  }
}
"""

ASSET_NODES_QUERY = """
query {
  assetNodes {
    assetKey { path }
    groupName
    isPartitioned
    dependencyKeys { path }
    dependedByKeys { path }
    partitionDefinition {
      type
      description
      dimensionTypes { name type dynamicPartitionsDefinitionName }
    }
    partitionKeysByDimension { name partitionKeys }
    assetChecksOrError {
      __typename
      ... on AssetChecks { checks { name blocking assetKey { path } } }
    }
  }
}
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Webserver:
    def __init__(self, url: str, log_path: Path):
        self.url = url
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def graphql(self, query: str) -> dict[str, Any]:
        response = requests.post(f"{self.url}/graphql", json={"query": query}, timeout=30)
        assert response.status_code == 200, response.text
        body = response.json()
        assert not body.get("errors"), body["errors"]
        return body["data"]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the webserver's process group (it includes the code server it spawned), SIGKILL after a timeout."""
    pgid = proc.pid  # start_new_session=True: the webserver leads its own process group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)
    # the code server child exits on its own after SIGTERM; make sure nothing of the group survives
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _location_loaded(server: Webserver) -> bool:
    data = server.graphql(
        "query { workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
    )
    entries = (data["workspaceOrError"] or {}).get("locationEntries") or []
    return bool(entries) and all(entry["loadStatus"] == "LOADED" for entry in entries)


def _wait_until_serving(proc: subprocess.Popen, server: Webserver) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dagster-webserver exited with {proc.returncode}:\n{server.log()}")
        try:
            info = requests.get(f"{server.url}/server_info", timeout=2)
            if info.status_code == 200 and _location_loaded(server):
                return
        except (requests.ConnectionError, requests.Timeout):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"dagster-webserver did not serve within {START_TIMEOUT_S:.0f} s:\n{server.log()}")


@pytest.fixture(scope="module")
def webserver(tmp_path_factory) -> Iterator[Webserver]:
    assert WEBSERVER.is_file(), f"{WEBSERVER} is missing (the project virtualenv)"
    root = tmp_path_factory.mktemp("webserver")
    dagster_home = root / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "SLUICE_CONFIG": str(CONFIG)}
    with serve_webserver(root, env) as server:
        yield server


@contextlib.contextmanager
def serve_webserver(root: Path, env: dict[str, str]) -> Iterator[Webserver]:
    """`dagster-webserver -w workspace.yaml` on a free 127.0.0.1 port with `env`, until the block ends."""
    for attempt in range(3):  # another process may grab the free port between free_port() and bind
        port = free_port()
        log_path = root / f"webserver-{attempt}.log"
        server = Webserver(f"http://127.0.0.1:{port}", log_path)
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [str(WEBSERVER), "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
                cwd=PROJECT_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            try:
                _wait_until_serving(proc, server)
            except RuntimeError:
                if attempt < 2 and "address already in use" in server.log().lower():
                    continue
                raise
            yield server
            return
        finally:
            _stop(proc)


def _nodes_by_key(server: Webserver) -> dict[str, dict[str, Any]]:
    nodes = server.graphql(ASSET_NODES_QUERY)["assetNodes"]
    by_key = {"/".join(node["assetKey"]["path"]): node for node in nodes}
    assert len(by_key) == len(nodes), "duplicate asset keys"
    return by_key


def test_code_location_loads_without_error(webserver: Webserver):
    workspace = webserver.graphql(WORKSPACE_QUERY)["workspaceOrError"]
    assert workspace["__typename"] == "Workspace", workspace
    entries = {entry["name"]: entry for entry in workspace["locationEntries"]}
    assert set(entries) == {LOCATION}
    entry = entries[LOCATION]
    location = entry["locationOrLoadError"]
    assert location["__typename"] == "RepositoryLocation", location.get("message", location)
    assert entry["loadStatus"] == "LOADED"
    (repository,) = location["repositories"]
    assert {"trace_batch_job", "export_job"} <= {job["name"] for job in repository["jobs"]}
    assert sorted(sensor["name"] for sensor in repository["sensors"]) == ["new_snapshot_sensor", "sluice_automation"]
    assert [schedule["name"] for schedule in repository["schedules"]] == ["daily_mix_rebuild"]

    log = webserver.log()
    assert "Serving dagster-webserver" in log
    assert "Traceback" not in log and not re.search(r"\bERROR\b", log), log


def test_asset_graph_lists_assets_with_dependencies(webserver: Webserver):
    nodes = _nodes_by_key(webserver)
    assert set(nodes) == set(DEPENDENCIES)
    for key, expected in DEPENDENCIES.items():
        node = nodes[key]
        assert {"/".join(dep["path"]) for dep in node["dependencyKeys"]} == expected, key
        children = {child for child, parents in DEPENDENCIES.items() if key in parents}
        assert {"/".join(dep["path"]) for dep in node["dependedByKeys"]} == children, key
        assert node["groupName"] == GROUPS[key], key


def test_partition_definitions(webserver: Webserver):
    config = yaml.safe_load(CONFIG.read_text())
    source_names = [source["name"] for source in config["sources"]]
    mix_names = sorted(config["mixes"])
    nodes = _nodes_by_key(webserver)

    for key in SOURCE_SNAPSHOT_ASSETS:
        node = nodes[key]
        assert node["isPartitioned"], key
        partitions = node["partitionDefinition"]
        assert partitions["type"] == "MULTIPARTITIONED", key
        dims = {dim["name"]: dim for dim in partitions["dimensionTypes"]}
        assert set(dims) == {"source", "time"}, key  # "time" sorts after "source": keys read web|2026-01
        assert dims["source"]["type"] == "STATIC", key
        assert dims["time"]["type"] == "DYNAMIC", key
        assert dims["time"]["dynamicPartitionsDefinitionName"] == "snapshots", key
        keys = {dim["name"]: dim["partitionKeys"] for dim in node["partitionKeysByDimension"]}
        assert keys["source"] == source_names, key
        # a fresh DAGSTER_HOME: no snapshot has been registered yet
        assert keys["time"] == [], key

    mixed = nodes["mixed_dataset"]
    assert mixed["isPartitioned"]
    assert mixed["partitionDefinition"]["type"] == "STATIC"
    (mix_dimension,) = mixed["partitionKeysByDimension"]
    assert mix_dimension["partitionKeys"] == mix_names

    tokenizer = nodes["tokenizer"]
    assert not tokenizer["isPartitioned"]
    assert tokenizer["partitionDefinition"] is None


def test_asset_checks(webserver: Webserver):
    nodes = _nodes_by_key(webserver)
    for key, expected in CHECKS.items():
        checks_or_error = nodes[key]["assetChecksOrError"]
        assert checks_or_error["__typename"] == "AssetChecks", (key, checks_or_error)
        checks = checks_or_error["checks"]
        assert {check["name"]: check["blocking"] for check in checks} == expected, key
        assert all("/".join(check["assetKey"]["path"]) == key for check in checks), key



LOAD_ERROR_QUERY = """
query { workspaceOrError { ... on Workspace { locationEntries { name locationOrLoadError { __typename
  ... on PythonError { message stack errorChain { error { message stack className } } } } } } } }
"""


def test_ui_shows_a_config_error_as_its_message_without_a_traceback(tmp_path):
    """A config with a typo, served by `dagster-webserver -w workspace.yaml` (the code server `dagster dev`
    starts too): the location's load error, as the UI receives it, carries the ConfigError's one-line message
    (file, key, suggestion) and no stack frames, Dagster's or ours; SLUICE_DEBUG=1 brings the frames back."""
    from sluice.config import ConfigError, load_config
    from tests.conftest import base_config, write_config

    raw = base_config(str(tmp_path / "data"))
    raw["cleaning"]["min_char"] = raw["cleaning"].pop("min_chars")
    path = write_config(tmp_path / "sluice.yaml", raw)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "SLUICE_CONFIG": path}
    env.pop("SLUICE_DEBUG", None)

    def load_error(env: dict[str, str]) -> dict[str, Any]:
        with serve_webserver(tmp_path, env) as server:
            (entry,) = server.graphql(LOAD_ERROR_QUERY)["workspaceOrError"]["locationEntries"]
        error = entry["locationOrLoadError"]
        assert error["__typename"] == "PythonError", error
        return error

    error = load_error(env)
    (cause,) = [link["error"] for link in error["errorChain"]]
    assert cause["className"] == "ConfigError"
    assert cause["message"].strip() == f"{ConfigError.__module__}.ConfigError: {raised.value}"
    assert "did you mean 'min_chars'" in cause["message"]
    assert error["stack"] == [] and cause["stack"] == []

    debug = load_error({**env, "SLUICE_DEBUG": "1"})
    assert any("settings.py" in frame for link in debug["errorChain"] for frame in link["error"]["stack"])


PAGE_QUERY = """
query {
  assetNodes {
    assetKey { path }
    dependencyKeys { path }
    metadataEntries { label __typename ... on AssetMetadataEntry { assetKey { path } } }
    assetMaterializations(limit: 1) {
      metadataEntries {
        label __typename
        ... on MarkdownMetadataEntry { mdStr }
        ... on IntMetadataEntry { intValue }
        ... on TableMetadataEntry { table { records schema { columns { name } } } }
      }
    }
  }
}
"""


@pytest.fixture(scope="module")
def scored_webserver(tmp_path_factory) -> Iterator[Webserver]:
    """The webserver over a config whose cleaning scores with both models (a quality threshold, perplexity on),
    on an instance where quality_report has drawn three partitions' manifests."""
    from dagster import DagsterInstance, materialize

    from data_assets.definitions import build_resources
    from data_assets.partitions import SNAPSHOTS
    from data_assets.report import quality_report, source_views
    from sluice.io.layout import PartitionRef
    from sluice.io.storage import open_store
    from tests.conftest import base_config, write_config
    from tests.sluice.test_report import publish

    root = tmp_path_factory.mktemp("scored")
    store = open_store(str(root / "data"))
    publish(store, PartitionRef("web", "2026-01"), 10, 7, 6, 600, 1, {})
    publish(store, PartitionRef("web", "2026-02"), 12, 9, 5, 500, 0, {"web/2026-01": 3})
    publish(store, PartitionRef("reference", "2026-01"), 5, 5, 5, 900, 0, {})
    raw = base_config(str(root / "data"))
    raw["cleaning"]["quality_threshold"] = 0.5
    raw["cleaning"]["perplexity"] = {"enabled": True}
    config = write_config(root / "sluice.yaml", raw)
    home = root / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01", "2026-02"])
        result = materialize([quality_report, *source_views], selection=[quality_report.key], resources=build_resources(config), instance=instance)
        assert result.success
    env = {**os.environ, "DAGSTER_HOME": str(home), "SLUICE_CONFIG": config}
    with serve_webserver(root, env) as server:
        yield server


def _page_nodes(server: Webserver) -> dict[str, dict[str, Any]]:
    return {"/".join(node["assetKey"]["path"]): node for node in server.graphql(PAGE_QUERY)["assetNodes"]}


def test_models_have_an_edge_to_the_cleaning_that_scores_with_them(scored_webserver: Webserver):
    """The lineage the UI draws (each node's dependencyKeys): with a quality threshold and perplexity scoring on,
    cleaned_documents depends on both models; with neither (the project's sluice.yaml, the other tests) on none."""
    nodes = _page_nodes(scored_webserver)
    deps = {"/".join(dep["path"]) for dep in nodes["cleaned_documents"]["dependencyKeys"]}
    assert deps == {"raw_documents", "cleaning_settings", "quality_model", "perplexity_model"}


def test_each_source_x_snapshot_page_links_every_sources_view(scored_webserver: Webserver):
    """Overview -> Metadata of every source x snapshot stage and of quality_report: one asset link per source
    (an AssetMetadataEntry, which the UI renders as a link to that asset's page) to its quality_of_<source>
    view, an asset of the graph."""
    nodes = _page_nodes(scored_webserver)
    for key in [*SOURCE_SNAPSHOT_ASSETS, "quality_report"]:
        links = {entry["label"]: "/".join(entry["assetKey"]["path"]) for entry in nodes[key]["metadataEntries"] if entry["__typename"] == "AssetMetadataEntry"}
        assert links == {"per-source plots: web": "quality_of_web", "per-source plots: reference": "quality_of_reference"}, key
        assert set(links.values()) <= set(nodes)
    assert not any(entry["__typename"] == "AssetMetadataEntry" for entry in nodes["mixed_dataset"]["metadataEntries"])


def test_the_report_page_shows_the_funnel_and_the_sketch_without_a_click(scored_webserver: Webserver):
    """The report's latest materialization as the UI receives it: the funnel per source is a table (the UI shows
    tables whole), the sketch is markdown under 1,000 characters (the UI shows those inline, longer ones behind
    "[Show Markdown]": MetadataEntry.tsx), the totals are numbers; the whole picture is the one folded entry."""
    [materialization] = _page_nodes(scored_webserver)["quality_report"]["assetMaterializations"]
    entries = {entry["label"]: entry for entry in materialization["metadataEntries"]}
    funnel = entries["funnel"]
    assert funnel["__typename"] == "TableMetadataEntry"
    assert [column["name"] for column in funnel["table"]["schema"]["columns"]] == [
        "source", "snapshots", "raw", "quarantined", "cleaned", "deduped", "tokens", "drop_rate",
    ]
    import json

    records = [json.loads(record) for record in funnel["table"]["records"]]
    assert records == [
        {"source": "reference", "snapshots": 1, "raw": 5, "quarantined": 1, "cleaned": 5, "deduped": 5, "tokens": 900, "drop_rate": 0.0},
        {"source": "web", "snapshots": 2, "raw": 22, "quarantined": 2, "cleaned": 16, "deduped": 11, "tokens": 1100, "drop_rate": 0.2727},
    ]
    totals = {name: entries[name]["intValue"] for name in ("raw_documents", "cleaned_documents", "deduped_documents", "tokens")}
    assert totals == {"raw_documents": 27, "cleaned_documents": 21, "deduped_documents": 16, "tokens": 2000}
    sketch = entries["report_sketch"]
    assert sketch["__typename"] == "MarkdownMetadataEntry" and sketch["mdStr"].startswith("![") and len(sketch["mdStr"]) < 1000
    report = entries["report"]
    assert report["__typename"] == "MarkdownMetadataEntry" and len(report["mdStr"]) >= 1000  # folded: Dagster allows no larger inline markdown
