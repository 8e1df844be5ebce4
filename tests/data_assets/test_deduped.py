"""The dedup assets on planted cleaned partitions: metadata, side outputs, checks, and the order gate."""

from __future__ import annotations

import pytest
from dagster import DagsterInstance, materialize

from benchmarks.dedup_oracle import write_all
from data_assets.deduped import STAGE_ASSETS
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import SNAPSHOTS, multi_key
from sluice.io.storage import open_store
from tests.sluice.dedup.test_dedup import ORDER, long_texts, planted_partitions  # noqa: F401 - the module-scoped fixture
from tests.support.results import checks_of, metadata_of


@pytest.fixture
def planted_root(tmp_path, long_texts):  # noqa: F811
    store = open_store(str(tmp_path / "data"))
    write_all(store, planted_partitions(long_texts))
    return store


def test_metadata_and_removed_share_check(planted_root, make_config, tmp_path):
    # The planted cleaned partitions are the storage root; only the dedup assets run.
    config = make_config(storage={"root": planted_root.url}, dedup={"max_removed_share": 0.2}, compute={"backend": "local", "max_workers": 1})
    resources = build_resources(config)
    (tmp_path / "home").mkdir()
    metadata, checks = {}, {}
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01", "2026-02"])
        for ref in ORDER:
            result = materialize(ASSETS, selection=STAGE_ASSETS, partition_key=multi_key(ref.source, ref.snapshot), instance=instance, resources=resources)
            metadata[ref.key] = metadata_of(result)
            checks[ref.key] = {name: passed for _, name, passed in checks_of(result)}
    web_early = metadata["web/2026-01"]["deduped_documents"]
    # Planted in web/2026-01: one exact and two near duplicates (the sample's w1-15 is an LSH candidate of
    # r1-3 below Jaccard 0.8, kept by the default verification; see tests/sluice/dedup/test_dedup.py).
    assert (web_early["documents_in"], web_early["removed_exact"], web_early["removed_fuzzy"]) == (12, 1, 2)
    assert web_early["removed_share_against/2026-01"] == 3 / 12
    assert "| 2 | 3 |" in web_early["cluster_sizes"]  # three clusters of two
    last = metadata["web/2026-02"]
    assert (last["deduped_documents"]["removed_exact"], last["deduped_documents"]["removed_fuzzy"]) == (1, 2)
    assert last["dedup_clusters"]["indexed_partitions_before"] == 3
    assert last["dedup_clusters"]["linked_partitions"] == ["reference/2026-01", "web/2026-01", "reference/2026-02"]
    assert last["dedup_signatures"]["origin"] == "signed" and last["dedup_index"]["changed"] is True
    # 3 of 12 removed > 0.2 warns; 1 of 8 does not; no exact duplicate remains anywhere.
    assert checks["web/2026-01"] == {"no_exact_duplicates": True, "removed_share_within_bounds": False}
    assert checks["reference/2026-02"]["removed_share_within_bounds"] is True
    assert all(c["no_exact_duplicates"] for c in checks.values())
    assert planted_root.exists("deduped_removed/source=web/snapshot=2026-02/removed.parquet")
    assert planted_root.exists("dedup_clusters/source=web/snapshot=2026-02/clusters.parquet")


def test_clusters_refuse_to_run_before_every_registered_earlier_partition_is_indexed(planted_root, make_config, tmp_path):
    config = make_config(storage={"root": planted_root.url}, compute={"backend": "local", "max_workers": 1})
    resources = build_resources(config)
    (tmp_path / "home").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01", "2026-02"])
        last = ORDER[3]
        result = materialize(ASSETS, selection=STAGE_ASSETS, partition_key=multi_key(last.source, last.snapshot), instance=instance, resources=resources, raise_on_error=False)
        assert not result.success
        failure = next(event for event in result.all_events if event.event_type_value == "STEP_FAILURE")
        error = failure.event_specific_data.error
        message = error.message + (error.cause.message if error.cause else "")
        assert "dedup_clusters" in failure.step_key and "reference/2026-01, web/2026-01, reference/2026-02" in message
        materialized = {event.asset_key.to_user_string() for event in result.get_asset_materialization_events()}
        assert materialized == {"dedup_signatures", "dedup_index"}  # an order-free prefix; nothing after the gate


def test_the_daemon_sees_the_every_partition_gates(tmp_path, monkeypatch):
    """The daemon (automation, backfills) works from the code location's snapshot, loaded in a code server
    process, which keeps built-in partition mappings only: dedup's gates must survive that trip."""
    from dagster import AssetKey, DagsterInstance
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    from tests.conftest import PROJECT_ROOT

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.chdir(PROJECT_ROOT)
    with DagsterInstance.get() as instance, WorkspaceProcessContext(instance, WorkspaceFileTarget([str(PROJECT_ROOT / "workspace.yaml")])) as context:
        graph = context.create_request_context().asset_graph
        mapping = graph.get_partition_mapping
        assert type(mapping(AssetKey("dedup_clusters"), AssetKey("dedup_index"))).__name__ == "AllPartitionMapping"
        assert type(mapping(AssetKey("deduped_documents"), AssetKey("dedup_clusters"))).__name__ == "AllPartitionMapping"
        assert type(mapping(AssetKey("dedup_clusters"), AssetKey("dedup_signatures"))).__name__ == "IdentityPartitionMapping"
        conditions = {key: graph.get(AssetKey(key)).automation_condition for key in ("dedup_clusters", "deduped_documents", "tokenized_shards")}
        assert all(condition is not None for condition in conditions.values())
        assert "every partition of dedup_index" in conditions["dedup_clusters"].get_label()


@pytest.mark.parametrize("which", ["deploy", "project-local"])
def test_instance_configs_load_and_limit_the_index_pool_to_one(tmp_path, which):
    """deploy/dagster.yaml (Postgres, production) and the project-local instance the CLI writes both load
    (Dagster refuses a run queue configured in two places) and give the dedup_index pool a limit of 1."""
    from dagster._core.instance.config import dagster_instance_config

    from data_assets.instance import DAGSTER_YAML
    from tests.conftest import PROJECT_ROOT

    text = (PROJECT_ROOT / "deploy" / "dagster.yaml").read_text() if which == "deploy" else DAGSTER_YAML
    (tmp_path / "dagster.yaml").write_text(text)
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["concurrency"]["pools"] == {"default_limit": 1, "granularity": "op"}
