"""`sluice materialize --select ... --partition SOURCE/SNAPSHOT` (data_assets/selection.py): Dagster's own
selection syntax names the assets, the plan holds only those asset partitions, and the backfill the command
submits (data_assets/backfill.submit, executed by Dagster's backfill daemon iteration) materializes only
them, read back from the Dagster instance."""

from __future__ import annotations

import pytest
from dagster import AssetKey

from data_assets.backfill import submit
from data_assets.cli import _main, narrowed_selection, plan_work, register_snapshots
from data_assets.definitions import build_resources, defs
from data_assets.partitions import multi_key
from data_assets.selection import SelectionError, make_selection
from resources.run_tags import PURPOSE_TAG
from tests.support.graph import config_env, graph_instance, run_backfill

GRAPH = defs.resolve_asset_graph()


def names(keys) -> set[str]:
    return {key.to_user_string() for key in keys}


def materialized(instance) -> dict[str, set[str]]:
    """Every materializable asset's materialized partitions ('' for an unpartitioned one), from the instance."""
    found = {}
    for key in GRAPH.materializable_asset_keys:
        if GRAPH.get(key).partitions_def is None:
            done = {""} if instance.get_latest_materialization_event(key) is not None else set()
        else:
            done = set(instance.get_materialized_partitions(key))
        if done:
            found[key.to_user_string()] = done
    return found


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("cleaned_documents", {"cleaned_documents"}),
        ("+cleaned_documents", {"raw_documents", "cleaned_documents"}),  # one level up
        ("raw_documents, tokenizer", {"raw_documents", "tokenizer"}),
        ("key:deduped_documents+", "every level down"),
        ("deduped_documents*", "every level down"),
    ],
)
def test_dagsters_selection_syntax_names_the_assets(select, expected):
    if expected == "every level down":  # the graph's own edges, walked here
        expected, todo = set(), [AssetKey("deduped_documents")]
        while todo:
            key = todo.pop()
            expected.add(key.to_user_string())
            todo += [child for child in GRAPH.get(key).child_keys if child in GRAPH.materializable_asset_keys]
        assert {"tokenized_shards", "mixed_dataset"} <= expected
    assert names(make_selection(select, None, GRAPH, build_resources("")["settings"].config, []).assets) == expected


def test_star_selects_every_materializable_asset_and_nothing_else():
    selection = make_selection("*", None, GRAPH, build_resources("")["settings"].config, [])
    assert selection.assets == frozenset(GRAPH.materializable_asset_keys)
    assert "crawl" not in names(selection.assets)  # observed, not materialized


@pytest.mark.parametrize(
    ("select", "partition", "fragments"),
    [
        ("cleaned_documnts", None, ["--select 'cleaned_documnts'", "did you mean 'cleaned_documents'?", "fix: name one or more of"]),
        ("key:nothing_here", None, ["selects no asset"]),
        ("2+raw_documents", None, ["Invalid selection string"]),
        ("raw_documents", "web", ["expected SOURCE/SNAPSHOT"]),
        ("raw_documents", "forum/2026-01", ["unknown source 'forum'", "fix: use one of ['web', 'reference']"]),
        ("raw_documents", "web/2026-09", ["snapshot '2026-09' is not registered", "'2026-01'", "sluice register"]),
        ("tokenizer,mixed_dataset", "web/2026-01", ["has source/snapshot partitions", "fix: leave --partition out"]),
    ],
)
def test_a_selection_naming_nothing_says_what_there_is(select, partition, fragments):
    with pytest.raises(SelectionError) as error:
        make_selection(select, partition, GRAPH, build_resources("")["settings"].config, ["2026-01", "2026-02"])
    for fragment in fragments:
        assert fragment in str(error.value)


def test_partition_keeps_one_partition_and_names_the_assets_it_leaves_out():
    selection = make_selection("+tokenizer", "reference/2026-02", GRAPH, build_resources("")["settings"].config, ["2026-01", "2026-02"])
    assert selection.partition == multi_key("reference", "2026-02")
    assert "tokenizer" in selection.left_out and AssetKey("tokenizer") not in selection.assets
    assert AssetKey("deduped_documents") in selection.assets


def test_only_the_selected_asset_partitions_are_planned_and_materialized(tmp_path, make_config):
    config = make_config()
    with graph_instance(tmp_path / "home") as instance, config_env(config):
        resources = build_resources(config)
        register_snapshots(instance, resources, log=lambda _: None)
        selection = narrowed_selection(instance, resources, "+cleaned_documents", "web/2026-02")
        plan = plan_work(instance, resources, log=lambda _: None, selection=selection)
        wanted = {"raw_documents": {str(multi_key("web", "2026-02"))}, "cleaned_documents": {str(multi_key("web", "2026-02"))}}
        assert {key.to_user_string(): {str(p) for p in parts} for key, parts in plan.selected.items()} == wanted
        assert run_backfill(instance, submit(instance, defs, plan, "materialize")).value == "COMPLETED_SUCCESS"
        assert materialized(instance) == wanted  # nothing else ran: no other partition, nothing downstream

        # Selected again: nothing missing or stale there, nothing planned; the other partitions of the
        # selected asset are planned when --partition is left out, still nothing downstream of it.
        assert plan_work(instance, resources, log=lambda _: None, selection=selection).count == 0
        again = plan_work(instance, resources, log=lambda _: None, selection=narrowed_selection(instance, resources, "raw_documents", None))
        assert names(again.selected) == {"raw_documents"} and len(again.selected[AssetKey("raw_documents")]) == 3


def test_the_command_rejects_a_selection_before_any_work_and_lists_trace(tmp_path, make_config, monkeypatch, capsys):
    monkeypatch.setenv("SLUICE_CONFIG", make_config())
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert _main(["materialize", "--select", "cleaned_documnts"]) == 2
    assert "did you mean 'cleaned_documents'?" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
    with pytest.raises(SystemExit):
        _main(["register", "--partition", "web/2026-01"])  # only materialize narrows
    assert "--select and --partition go with materialize" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _main(["--help"])
    usage = capsys.readouterr().out
    assert "{register,materialize,demo,export,cleanup,trace,whatif}" in usage and "sluice trace" in usage and "sluice whatif" in usage and "--select ASSET[,ASSET...]" in usage


@pytest.mark.slow
def test_the_command_materializes_only_the_selected_partition_through_its_daemon(tmp_path, make_config):
    """The real command (a subprocess with its own daemon, automation sensor included) on a registered,
    unmaterialized instance: `--select raw_documents --partition reference/2026-01` materializes that one
    asset partition and nothing else, read back from the instance after the command and its daemon ended."""
    import os
    import subprocess
    import sys

    from dagster import DagsterInstance

    from tests.conftest import PROJECT_ROOT

    env = {**os.environ, "SLUICE_CONFIG": make_config(), "DAGSTER_HOME": str(tmp_path / "home"), "PYTHONPATH": str(PROJECT_ROOT)}

    def sluice(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "data_assets.cli", *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600)

    assert sluice("register").returncode == 0
    done = sluice("materialize", "--select", "raw_documents", "--partition", "reference/2026-01")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Selected: raw_documents [reference/2026-01]" in done.stdout and "To run: 1 asset partitions" in done.stdout
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        assert materialized(instance) == {"raw_documents": {str(multi_key("reference", "2026-01"))}}
        # Nothing else was requested either (automation left the unselected missing partitions alone).
        assert [backfill.tags.get(PURPOSE_TAG) for backfill in instance.get_backfills()] == ["materialize"]
        assert {run.tags.get(PURPOSE_TAG) for run in instance.get_runs()} == {"materialize"}
