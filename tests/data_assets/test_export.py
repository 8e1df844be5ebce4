"""The export from the Dagster UI's side (`export_job` with run config), the command line, and S3: a mix on
a real S3-compatible server exported to S3 gives the same bytes as the local export."""

from __future__ import annotations

import pytest
from dagster import DagsterInvalidConfigError

from data_assets.definitions import build_resources, defs
from data_assets.export import export_job
from sluice.config import S3Settings
from sluice.export import export_split
from sluice.io.storage import open_store
from tests.conftest import tree_digest
from tests.data_assets.test_s3 import s3_digest, upload_tree
from tests.support.mix_fixture import build_test_mix

MIX = {"test": {"weights": {"web": 0.6, "reference": 0.4}, "token_budget": 40_000, "sequence_length": 64, "seed": 11, "validation_share": 0.1}}


@pytest.fixture
def mix_config(make_config, tmp_path) -> str:
    """A config whose storage root holds the built test mix `test`."""
    build_test_mix(open_store(str(tmp_path / "data")), sequence_length=64, validation_share=0.1)
    return make_config(mixes=MIX, export={"shard_bytes": 1 << 14})


def run_config(**values) -> dict:
    return {"ops": {"export_mix": {"config": values}}}


def test_export_job_is_in_the_code_location_with_its_config_schema():
    job = defs.get_job_def("export_job")
    ops = job.run_config_schema.config_type.fields["ops"].config_type
    config = ops.fields["export_mix"].config_type.fields["config"].config_type
    assert set(config.fields) == {"mix", "split", "format", "destination", "seed"}
    assert {value.config_value for value in config.fields["format"].config_type.enum_values} == {"parquet", "webdataset", "mds"}
    with pytest.raises(DagsterInvalidConfigError, match="format"):
        job.execute_in_process(run_config=run_config(mix="default", format="csv"))


def test_export_job_writes_the_split_and_names_what_it_wrote(mix_config, tmp_path, dagster_instance):
    out = tmp_path / "exported"
    result = export_job.execute_in_process(
        run_config=run_config(mix="test", split="validation", format="webdataset", destination=str(out)),
        resources=build_resources(mix_config), instance=dagster_instance,
    )
    assert result.success
    # The same as a direct export of the split (what the job's metadata describes).
    direct = tmp_path / "direct"
    manifest = export_split(open_store(str(tmp_path / "data")), "test", "validation", "webdataset", open_store(str(direct)), shard_bytes=1 << 14)
    assert tree_digest(str(out)) == tree_digest(str(direct)) and len(manifest["files"]) > 1
    output = next(event for event in result.all_events if event.is_successful_output)
    metadata = {key: getattr(value, "value", value) for key, value in output.event_specific_data.metadata.items()}
    assert metadata["destination"] == str(out / "validation")
    assert (metadata["samples"], metadata["tokens"], metadata["file_count"]) == (manifest["samples"], manifest["tokens"], len(manifest["files"]))
    assert all(entry["key"] in metadata["files"] for entry in manifest["files"])
    assert metadata["mix_version"] == manifest["mix_version"] and metadata["format"] == "webdataset"
    observations = [event for event in result.all_events if event.event_type_value == "ASSET_OBSERVATION"]
    observation = observations[0].event_specific_data.asset_observation
    assert observation.asset_key.to_user_string() == "mixed_dataset" and observation.partition == "test"


def test_export_job_default_destination_and_a_clear_failure(mix_config, tmp_path, dagster_instance):
    resources = build_resources(mix_config)
    result = export_job.execute_in_process(run_config=run_config(mix="test", format="mds"), resources=resources, instance=dagster_instance)
    assert result.success
    assert (tmp_path / "data" / "mixed_export" / "mix=test" / "format=mds" / "train" / "index.json").is_file()
    failed = export_job.execute_in_process(run_config=run_config(mix="nope"), resources=resources, instance=dagster_instance, raise_on_error=False)
    assert not failed.success
    failure = next(event for event in failed.all_events if event.is_step_failure)
    assert "mix 'nope' is not in the config" in failure.event_specific_data.error.message


def test_cli_export(mix_config, tmp_path, monkeypatch, capsys):
    import data_assets.settings
    from data_assets.cli import main

    monkeypatch.setattr(data_assets.settings, "CONFIG_PATH", mix_config)
    out = tmp_path / "cli"
    assert main(["export", "--mix", "test", "--split", "train", "--format", "parquet", "--out", str(out), "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert f"-> {out / 'train'}" in printed and "as parquet" in printed
    direct = tmp_path / "direct"
    export_split(open_store(str(tmp_path / "data")), "test", "train", "parquet", open_store(str(direct)), seed=3, shard_bytes=1 << 14)
    assert tree_digest(str(out)) == tree_digest(str(direct))
    assert main(["export", "--mix", "test", "--split", "validation", "--format", "mds", "--out", str(tmp_path / "mds")]) == 0
    assert (tmp_path / "mds" / "validation" / "index.json").is_file()
    (tmp_path / "other" / "train").mkdir(parents=True)
    (tmp_path / "other" / "train" / "notes.txt").write_text("mine")
    assert main(["export", "--mix", "test", "--out", str(tmp_path / "other")]) == 2
    assert "not a sluice export" in capsys.readouterr().err


def test_export_from_and_to_s3_gives_the_local_bytes(s3_credentials, tmp_path):
    server = s3_credentials
    bucket = server.create_bucket()
    local_root = tmp_path / "data"
    build_test_mix(open_store(str(local_root)), sequence_length=64, validation_share=0.1)
    upload_tree(server.client(), bucket, local_root, "data")
    s3 = S3Settings(endpoint_url=server.endpoint_url)
    for fmt in ("parquet", "webdataset", "mds"):
        local = tmp_path / f"local-{fmt}"
        export_split(open_store(str(local_root)), "test", "train", fmt, open_store(str(local)), shard_bytes=1 << 14)
        manifest = export_split(open_store(f"s3://{bucket}/data", s3), "test", "train", fmt, open_store(f"s3://{bucket}/exports/{fmt}", s3), shard_bytes=1 << 14)
        assert manifest["uri"] == f"s3://{bucket}/exports/{fmt}/train"
        assert s3_digest(server.client(), bucket, f"exports/{fmt}") == tree_digest(str(local))
