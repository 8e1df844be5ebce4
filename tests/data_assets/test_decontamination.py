"""The `decontamination` asset: flags computed once per deduplicated partition, reused until the partition or
an eval set changes; its code version follows the eval sets' content; mixes refuse missing or stale flags."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster import materialize

from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import SNAPSHOTS, multi_key
from sluice.io.layout import PartitionRef, partition_prefix, write_manifest, write_parquet
from sluice.io.storage import open_store

PASSAGE = (
    "then analyzes its contents, and automatically fetches the file or files referenced within. Once everything has "
    "been downloaded, it verifies the integrity of the downloaded source packages using dscverify"
)


def write_deduped(store, texts: dict[str, str]) -> None:
    prefix = partition_prefix("deduped_documents", PartitionRef("web", "s1"))
    table = pa.table({"doc_id": list(texts), "text": list(texts.values())})
    write_manifest(store, prefix, {"files": [write_parquet(store, f"{prefix}/part-00000.parquet", table)]})


@pytest.fixture
def setup(tmp_path, make_config, dagster_instance):
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(json.dumps({"text": f"Question: what does it do? Passage: {PASSAGE}"}) + "\n")
    mixes = {"default": {"weights": {"web": 1.0}, "token_budget": 1000, "sequence_length": 64, "eval_sets": [str(eval_file)]}}
    config = make_config(storage_root=str(tmp_path / "data"), mixes=mixes)
    store = open_store(str(tmp_path / "data"))
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, ["s1"])
    write_deduped(store, {"a": f"An introduction. {PASSAGE.upper()} and more.", "b": "Nothing in common with any evaluation text at all here, said the page about garden tools today."})
    resources = build_resources(config)

    def run() -> dict:
        result = materialize(ASSETS, selection=["decontamination"], partition_key=multi_key("web", "s1"), instance=dagster_instance, resources=resources)
        (event,) = result.get_asset_materialization_events()
        return {key: getattr(value, "value", value) for key, value in event.event_specific_data.materialization.metadata.items()}

    return store, eval_file, run, resources


def flags(store) -> list[str]:
    return pq.read_table(store.local_path("decontamination/source=web/snapshot=s1/flags.parquet")).column("doc_id").to_pylist()


def test_flags_are_reused_until_the_partition_or_the_eval_sets_change(setup):
    store, eval_file, run, _ = setup
    first = run()
    assert first["reused"] is False and flags(store) == ["a"] and first["documents_scanned"] == 2
    path = Path(store.local_path("decontamination/source=web/snapshot=s1/flags.parquet"))
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    again = run()
    assert again["reused"] is True and (path.read_bytes(), path.stat().st_mtime_ns) == before
    # Another eval text matching document b: recomputed.
    eval_file.write_text(eval_file.read_text() + json.dumps({"text": "Quote: Nothing in common with any evaluation text at all here, said the page about garden tools today."}) + "\n")
    changed = run()
    assert changed["reused"] is False and flags(store) == ["a", "b"]
    # A re-deduplicated partition: recomputed.
    write_deduped(store, {"c": "A new page that quotes nothing whatsoever from the evaluation set texts."})
    assert run()["reused"] is False and flags(store) == []


def test_mixes_refuse_missing_or_stale_flags(setup):
    from data_assets.mixed import partition_flags
    from sluice.dedup.decontaminate import EvalSpec
    from sluice.mix import MixError

    store, _, run, resources = setup
    config = resources["settings"].config
    spec = EvalSpec.of(config.mixes["default"])
    reader, _ = partition_flags(store, spec, config.mixes, config.s3)
    with pytest.raises(MixError, match=r"decontamination/source=web/snapshot=s1 has no manifest: materialize decontamination for web/s1"):
        reader(PartitionRef("web", "s1"))
    run()
    assert reader(PartitionRef("web", "s1")).column("doc_id").to_pylist() == ["a"]
    write_deduped(store, {"a": "re-deduplicated since"})
    with pytest.raises(MixError, match="another deduplicated partition or eval-set version"):
        reader(PartitionRef("web", "s1"))


def test_the_code_version_follows_the_eval_sets_content(setup):
    from data_assets.versions import STAGE_VERSIONS, code_versions

    _, eval_file, _, resources = setup
    config = resources["settings"].config
    first = code_versions(config)["decontamination"]
    assert first == code_versions(config)["decontamination"] and first.startswith("1-")
    eval_file.write_text(eval_file.read_text().replace("Passage", "Text"))
    assert code_versions(config)["decontamination"] != first
    assert code_versions(config)["cleaned_documents"] == STAGE_VERSIONS["cleaned_documents"]  # the eval sets are no input of cleaning
