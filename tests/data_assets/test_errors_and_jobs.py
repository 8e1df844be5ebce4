"""What a user meets first: config and source problems stop `sluice materialize` before any work with one
line naming the file, the key and the fix (no traceback unless --debug); runs are tagged with the
partitions' source and snapshot and the purpose of whoever started them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from dagster import AssetKey, DagsterEventType

from data_assets.backfill import submit
from data_assets.definitions import defs
from data_assets.freshness import Plan
from data_assets.partitions import SNAPSHOTS, multi_key
from resources.run_tags import run_labels
from sluice.config import ConfigError, load_config
from sluice.runtime.preflight import location_problems
from tests.conftest import PROJECT_ROOT, SAMPLE, base_config, write_config
from tests.support.graph import config_env, graph_instance, run_backfill


def sluice(tmp_path, config: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLUICE_CONFIG": config, "DAGSTER_HOME": str(tmp_path / "home"), "SLUICE_PROGRESS": "lines"}
    return subprocess.run(
        [sys.executable, "-m", "data_assets.cli", "materialize", *args], cwd=PROJECT_ROOT, env=env,
        capture_output=True, text=True, timeout=300,
    )


def test_config_typo_is_one_line_with_a_suggestion(tmp_path):
    raw = base_config(str(tmp_path / "data"))
    raw["cleaning"]["min_char"] = raw["cleaning"].pop("min_chars")
    path = write_config(tmp_path / "sluice.yaml", raw)
    try:
        load_config(path)
    except ConfigError as error:
        message = str(error)
    assert message.count("\n") == 0
    assert path in message and "cleaning.min_char" in message and "did you mean 'min_chars'?" in message


def test_missing_source_folder_stops_materialize_before_any_work(tmp_path):
    raw = base_config(str(tmp_path / "data"))
    raw["sources"][0]["location"] = "crawl/webb"  # relative: resolved against the config file's folder
    (tmp_path / "crawl" / "web").mkdir(parents=True)
    path = write_config(tmp_path / "sluice.yaml", raw)

    [problem] = location_problems(load_config(path), path)
    assert problem.startswith(f"{path}: sources[0].location (source 'web'): {tmp_path / 'crawl' / 'webb'}")
    assert f"'crawl/webb' resolved against {tmp_path}" in problem and "did you mean 'web'?" in problem and "fix:" in problem

    done = sluice(tmp_path, path)
    assert done.returncode == 2
    assert done.stderr.strip() == problem  # the one line, no traceback
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "data").exists()  # nothing was written: no run started

    debug = sluice(tmp_path, path, "--debug")
    assert debug.returncode == 2 and debug.stderr.strip() == problem  # a located problem needs no traceback


def test_backfill_runs_are_tagged_with_their_partitions_and_purpose(tmp_path):
    """A run of Dagster's asset job gets the `sluice/*` tags of what it materializes and why; the check it
    ran is recorded for its partition (the UI's checks tab links it)."""
    raw = base_config(str(tmp_path / "data"))
    raw["compute"] = {"backend": "local", "max_workers": 1}
    config = write_config(tmp_path / "sluice.yaml", raw)
    with graph_instance(tmp_path / "home") as instance:
        instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01"])
        key = multi_key("reference", "2026-01")
        plan = Plan(selected={AssetKey("raw_documents"): [key]})
        with config_env(config):
            backfill_id = submit(instance, defs, plan, "materialize")
            assert run_backfill(instance, backfill_id).value == "COMPLETED_SUCCESS"
        [run] = instance.get_runs()
        assert run.job_name == "__ASSET_JOB" and run.tags["dagster/backfill"] == backfill_id
        assert run.tags["sluice/source"] == "reference" and run.tags["sluice/snapshot"] == "2026-01"
        assert run.tags["sluice/purpose"] == "materialize"
        [record] = instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
        evaluation = record.dagster_event.event_specific_data
        assert evaluation.check_name == "quarantined_file_share_below_bound" and evaluation.passed
        assert evaluation.partition == str(key)


def test_run_labels_follow_what_started_the_run():
    single = {"dagster/partition": "web|2026-01", "dagster/backfill": "abc"}
    assert run_labels(single) == {"sluice/source": "web", "sluice/snapshot": "2026-01", "sluice/purpose": "backfill", "sluice/coordinated": "true"}
    ranged = {"dagster/asset_partition_range_start": "web|2026-01", "dagster/asset_partition_range_end": "web|2026-04",
              "dagster/from_automation_condition": "true", "dagster/backfill": "x"}
    assert run_labels(ranged) == {"sluice/source": "web", "sluice/snapshot": "2026-01..2026-04", "sluice/purpose": "automation"}
    mix = {"dagster/partition": "default", "sluice/purpose": "daily-mix-rebuild", "dagster/schedule_name": "daily_mix_rebuild"}
    assert run_labels(mix) == {"sluice/mix": "default"}  # the purpose its starter set stays; not a backfill
    assert run_labels({"dagster/sensor_name": "s"}) == {"sluice/purpose": "sensor s"}
    assert run_labels({"sluice/purpose": "manual"}) == {}


def test_dagster_cli_loading_a_bad_config_prints_the_message_without_a_traceback(tmp_path):
    """`dagster asset materialize -m data_assets.definitions` on a config with a typo: the code location
    cannot load; the user sees the one-line ConfigError (file, key, suggestion), no loader traceback
    (SLUICE_DEBUG=1 brings it back), and nothing runs."""
    raw = base_config(str(tmp_path / "data"))
    raw["cleaning"]["min_char"] = raw["cleaning"].pop("min_chars")
    path = write_config(tmp_path / "sluice.yaml", raw)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    command = [dagster, "asset", "materialize", "-m", "data_assets.definitions", "--select", "tokenizer"]
    env = {**os.environ, "SLUICE_CONFIG": path, "DAGSTER_HOME": str(tmp_path / "home")}
    env.pop("SLUICE_DEBUG", None)
    try:
        load_config(path)
    except ConfigError as error:
        message = str(error)

    done = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    assert f"sluice: {message}" in done.stderr.splitlines()
    assert not (tmp_path / "data").exists()

    debug = subprocess.run(command, cwd=PROJECT_ROOT, env={**env, "SLUICE_DEBUG": "1"}, capture_output=True, text=True, timeout=300)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and message in debug.stderr


def test_only_dagster_code_server_processes_count_as_code_servers():
    from data_assets.settings import is_code_server

    assert is_code_server(["/venv/lib/dagster/__main__.py", "api", "grpc", "--lazy-load-user-code", "--port", "1"])
    assert is_code_server(["/venv/bin/dagster", "code-server", "start", "-m", "data_assets.definitions"])
    assert not is_code_server(["/venv/bin/dagster", "asset", "materialize", "-m", "data_assets.definitions"])
    assert not is_code_server(["/venv/bin/pytest", "tests/"])


def test_snapshot_folders_that_cannot_be_partition_keys_stop_materialize_naming_each_and_its_fix(tmp_path):
    raw = base_config(str(tmp_path / "data"))
    for source, bad in (("web", "2026|03"), ("reference", "snap ü,04")):
        shutil.copytree(SAMPLE / source / "2026-01", tmp_path / "crawl" / source / "2026-01")
        (tmp_path / "crawl" / source / bad).mkdir()
        next(s for s in raw["sources"] if s["name"] == source)["location"] = str(tmp_path / "crawl" / source)
    path = write_config(tmp_path / "sluice.yaml", raw)

    done = sluice(tmp_path, path)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in done.stdout + done.stderr
    web = next(line for line in lines if "'2026|03'" in line)
    reference = next(line for line in lines if "'snap ü,04'" in line)
    assert "web: snapshot folder '2026|03' cannot be a partition key" in web and "rename it, e.g. to '2026-03'" in web
    assert "reference: snapshot folder 'snap ü,04' cannot be a partition key" in reference and "rename it, e.g. to 'snap-04'" in reference
    assert not (tmp_path / "data").exists()  # nothing was written: no run started


def test_every_missing_file_the_config_names_stops_materialize_at_once(tmp_path):
    """A missing URL blocklist used to pass preflight and fail mid-graph in a worker; a missing evaluation set
    only at the mix. Both are reported before any run, one line each, with the closest existing name."""
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "blocked-domains.txt").write_text("spam.example\n")
    raw = base_config(str(tmp_path / "data"))
    raw["cleaning"]["url_blocklist"] = "lists/blocked-domain.txt"
    raw["mixes"]["default"]["eval_sets"] = [str(tmp_path / "evals" / "held-out.jsonl")]
    path = write_config(tmp_path / "sluice.yaml", raw)

    done = sluice(tmp_path, path)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    header, *lines = done.stderr.strip().splitlines()
    assert header == f"{path}: invalid config, 2 problems" and len(lines) == 2 and "Traceback" not in done.stdout + done.stderr
    assert lines[0].startswith(f"  cleaning.url_blocklist: {tmp_path / 'lists' / 'blocked-domain.txt'} does not exist")
    assert "did you mean 'blocked-domains.txt'?" in lines[0]
    assert lines[1].startswith(f"  mixes.default.eval_sets[0]: {tmp_path / 'evals' / 'held-out.jsonl'} does not exist")
    assert not (tmp_path / "data").exists()


def test_the_command_reports_every_problem_of_a_copied_config_in_one_list(tmp_path, monkeypatch, capsys):
    """`sluice materialize` on a config with a typo'd key, an unknown train source, an unknown mix source, a
    missing blocklist and a missing source folder: one list of all five before any work (the code
    location's own load, which stops at the schema, comes after it)."""
    from data_assets.cli import _main
    from tests.sluice.config.test_all_problems import copied_config

    path = write_config(tmp_path / "sluice.yaml", copied_config(tmp_path))
    monkeypatch.setenv("SLUICE_CONFIG", path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert _main(["materialize"]) == 2
    header, *lines = capsys.readouterr().err.strip().splitlines()
    assert header == f"{path}: invalid config, 5 problems"
    assert [line.strip().split(": ")[0] for line in lines] == [
        "cleaning.min_char", "mixes.default.weights", "tokenizer.train_sources", "sources[1].location (source 'reference')", "cleaning.url_blocklist",
    ]
    assert not (tmp_path / "data").exists() and not (tmp_path / "home").exists()  # nothing ran, no instance made
