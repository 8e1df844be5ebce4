"""Trace, skip and block on the whole graph over the bundled sample.

- A trace of random steps names, for every packed segment of the batch, a document whose deduplicated text,
  encoded again with the tokenizer the shards were written with, holds exactly the batch's tokens at the
  traced span; its source, URL, record id and fetch date are those of its raw row (read here with polars).
- The trace from a loader checkpoint, from a saved batch provenance and from the step alone agree; the job
  and the CLI write the same trace.
- A mix rebuilt with a blocklist holds none of the documents the list matches (matched here with Python's
  own re/fnmatch over the deduplicated texts) in any batch, removes the documented counts, and keeps the
  order of everything else within each component.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shutil
from itertools import islice
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from data_assets.cli import register_snapshots
from data_assets.definitions import build_resources
from sluice.config import load_config
from sluice.io.storage import open_store
from sluice.loader import MixedTokens, TrainingLoader
from sluice.trace import BatchSpec, trace_batch
from sluice.trace.batch import batch_provenance
from tests.conftest import base_config, write_config
from tests.support.mix_fixture import mix_shards

BATCH, WORLD = 3, 2


@pytest.fixture(scope="module")
def graph(sample_graph):
    """The session's sample graph (traces are written under its storage root, beside the outputs)."""
    return sample_graph.folder, sample_graph.config


def frame(folder: Path, asset: str, pattern: str = "part-*.parquet") -> pl.DataFrame:
    """Every file of the dataset, with its source and snapshot (Hive folders, not columns of the files)."""
    paths = sorted((folder / "data" / asset).glob(f"source=*/snapshot=*/{pattern}"))
    return pl.concat(
        [pl.read_parquet(path).with_columns(source=pl.lit(path.parent.parent.name.split("=", 1)[1]), snapshot=pl.lit(path.parent.name.split("=", 1)[1])) for path in paths],
        how="diagonal_relaxed",
    )


@pytest.fixture(scope="module")
def tokenizer(graph):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(graph[0] / "data" / "tokenizer" / "tokenizer.json"))


def test_trace_of_random_steps_equals_an_independent_decode(graph, tokenizer):
    folder, config_path = graph
    config = load_config(config_path)
    store = open_store(config.storage.root)
    data = MixedTokens(store, "default")
    texts = dict(frame(folder, "deduped_documents").select("doc_id", "text").iter_rows())
    raw = {row["doc_id"]: row for row in frame(folder, "raw_documents").select("doc_id", "url", "source_id", "fetch_date", "file").iter_rows(named=True)}
    eos = tokenizer.token_to_id("<|endoftext|>")
    steps = np.random.default_rng(3).choice(len(data) // (BATCH * WORLD), size=4, replace=False).tolist()
    for step in steps:
        trace = trace_batch(store, config, BatchSpec(mix="default", step=step, batch_size=BATCH, world_size=WORLD))
        # The batches the loader hands each rank at that step.
        batches = []
        for rank in range(WORLD):
            loader = TrainingLoader(data, BATCH, seed=int(data.manifest["seed"]), rank=rank, world_size=WORLD, prefetch_batches=0)
            batches.append(next(islice(iter(loader), step, None)))
        by_place = {}
        for doc in trace.documents:
            for segment in doc["segments"]:
                by_place.setdefault((segment["rank"], segment["row"]), []).append((segment, doc))
        checked = 0
        for rank, batch in enumerate(batches):
            flat, bounds = batch["input_ids"].reshape(-1).numpy(), batch["cu_seqlens"].numpy()
            traced = [item for row in range(BATCH) for item in sorted(by_place[(rank, row)], key=lambda pair: pair[0]["token_begin"] if False else 0)]
            assert len(traced) == len(bounds) - 1
            for (segment, doc), a, b in zip(traced, bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                assert (segment["rank"], segment["row"]) == (rank, a // data.sequence_length)
                ids = tokenizer.encode(texts[doc["doc_id"]], add_special_tokens=False).ids + [eos]
                assert flat[a:b].tolist() == ids[segment["token_begin"] : segment["token_end"]]
                if segment["token_begin"] == 0 and b - a > 1:
                    piece = tokenizer.decode(flat[a : b - 1].tolist(), skip_special_tokens=False)
                    assert texts[doc["doc_id"]].startswith(piece.rstrip("\ufffd"))
                row = raw[doc["doc_id"]]
                assert (doc["url"], doc["record_id"], doc["raw_file"]) == (row["url"], row["source_id"], row["file"])
                assert doc["source"], doc["snapshot"] == doc["doc_id"].split("/")[:2]
                assert doc["doc_tokens"] == len(ids)
                checked += 1
        assert checked == len(trace.segments) > BATCH * WORLD - 1


def test_trace_fields_measures_and_outputs(graph):
    folder, config_path = graph
    config = load_config(config_path)
    store = open_store(config.storage.root)
    trace = trace_batch(store, config, BatchSpec(mix="default", step=1, batch_size=BATCH, world_size=WORLD, ranks=(1,)))
    assert trace.documents and all(s["rank"] == 1 for doc in trace.documents for s in doc["segments"])
    for doc in trace.documents:
        assert doc["replay_matches"] is True, doc["doc_id"]  # cleaning replayed from the raw record gives the stored text
        assert not doc["failed_rules"] and not doc["problems"]
        steps = {m["step"] for m in doc["measures"]}
        assert {"length", "language", "gopher_quality", "gopher_repetition", "c4", "fineweb_quality"} <= steps
        assert doc["dedup_cluster_size"] >= 1 and doc["preview"]
        assert all((m["near"] and m["keep_if"] != "info") == (m["describe"] in doc["near_thresholds"]) for m in
                   [{**m, "describe": f"{m['step']}.{m['rule']} {m['value']:.4g} (keep {m['keep_if']} {m['threshold']:g})"} for m in doc["measures"]])
    written = trace.write(store, "batch_traces/mix=default/test")
    assert json.loads(Path(written["json"]).read_text())["documents"][0]["doc_id"] == trace.documents[0]["doc_id"]
    table = pl.read_parquet(written["parquet"])
    assert table.height == len(trace.documents) and "measures" in table.columns and "segments" in table.columns
    assert "| # | rank:row |" in Path(written["md"]).read_text()


def test_the_dedup_cluster_of_a_kept_document(graph):
    folder, config_path = graph
    config = load_config(config_path)
    store = open_store(config.storage.root)
    removed = frame(folder, "deduped_removed", "removed.parquet")
    keeper = removed.row(0, named=True)["cluster_id"]
    from sluice.trace import trace_documents

    doc = trace_documents(store, config, "default", [keeper], measures=False).documents[0]
    # The global cluster: the kept document and every copy any partition removed as its duplicate (read
    # here from every partition's removed list with polars; the trace probes the dedup index instead).
    copies = removed.filter(pl.col("cluster_id") == keeper)
    assert doc["dedup_cluster"] == keeper and doc["dedup_cluster_size"] == 1 + copies.height
    partitions = {doc["source"] + "/" + doc["snapshot"], *(copies["source"] + "/" + copies["snapshot"]).to_list()}
    assert doc["dedup_scope"] == f"global: {len(partitions)} partition(s)"
    # Copies removed by later partitions are counted (what the document's own partition saw is less).
    later = copies.filter(pl.col("source") + "/" + pl.col("snapshot") != doc["source"] + "/" + doc["snapshot"])
    assert later.height >= 1


def test_checkpoint_provenance_and_step_name_the_same_batch(graph, tmp_path):
    folder, config_path = graph
    config = load_config(config_path)
    store = open_store(config.storage.root)
    data = MixedTokens(store, "default")
    loaders = [TrainingLoader(data, BATCH, seed=int(data.manifest["seed"]), rank=r, world_size=WORLD, provenance=True, prefetch_batches=0) for r in range(WORLD)]
    iterators = [iter(loader) for loader in loaders]
    for _ in range(4):
        for iterator in iterators:
            next(iterator)
    state = loaders[0].state_dict()
    spiked = [next(iterator) for iterator in iterators]  # step 4
    saved = [batch_provenance(batch, loader, step=4) for batch, loader in zip(spiked, loaders, strict=True)]
    (tmp_path / "state.json").write_text(json.dumps(state))
    for rank, item in enumerate(saved):
        (tmp_path / f"spike-rank{rank}.json").write_text(json.dumps(item))
    by_step = trace_batch(store, config, BatchSpec(mix="default", step=4, batch_size=BATCH, world_size=WORLD), measures=False)
    by_checkpoint = trace_batch(store, config, BatchSpec(mix="default", checkpoint=state, world_size=WORLD), measures=False)
    from data_assets.trace_cli import load_provenance

    by_provenance = trace_batch(store, config, BatchSpec(mix="default", provenance=load_provenance([str(tmp_path / "spike-rank*.json")])), measures=False)
    assert by_step.segments == by_checkpoint.segments == by_provenance.segments
    assert [d["doc_id"] for d in by_step.documents] == [d["doc_id"] for d in by_provenance.documents]
    with pytest.raises(ValueError, match="before the checkpoint"):
        trace_batch(store, config, BatchSpec(mix="default", checkpoint=state, step=2, world_size=WORLD))


def test_the_job_and_the_cli(graph, tmp_path, monkeypatch, capsys):
    folder, config_path = graph
    monkeypatch.setenv("SLUICE_CONFIG", config_path)
    from data_assets.trace import trace_batch_job
    from resources import SluiceSettings

    result = trace_batch_job.execute_in_process(
        run_config={"ops": {"trace_batch": {"config": {"mix": "default", "step": 2, "batch_size": BATCH, "world_size": WORLD, "measures": False}}}},
        resources={"settings": SluiceSettings(config_path=config_path)},
    )
    assert result.success
    output = next(e for e in result.all_events if e.event_type_value == "STEP_OUTPUT")
    metadata = output.event_specific_data.metadata
    assert "| # | rank:row |" in metadata["trace"].value and metadata["documents"].value > 0
    observations = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert observations and observations[0].asset_key.to_user_string() == "mixed_dataset"
    from data_assets.cli import main

    assert main(["trace", "--mix", "default", "--step", "2", "--batch-size", str(BATCH), "--world-size", str(WORLD), "--no-measures", "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out
    assert "Trace of step-2" in printed
    job_json = json.loads((folder / "data" / "batch_traces" / "mix=default" / "step-2" / "trace.json").read_text())
    cli_json = json.loads((tmp_path / "cli" / "trace.json").read_text())
    assert job_json["segments"] == cli_json["segments"] and len(job_json["documents"]) == len(cli_json["documents"])
    assert main(["trace", "--mix", "default", "--step", "2"]) == 2  # no batch size: a message, not a traceback
    assert "batch_size" in capsys.readouterr().err


# -- block for good -----------------------------------------------------------------------------------------------


def mix_rows(folder: Path) -> pl.DataFrame:
    manifest = json.loads((folder / "data" / "mixed_dataset" / "mix=default" / "_manifest.json").read_text())
    ranges = pl.read_parquet(folder / "data" / "mixed_dataset" / "mix=default" / "train.parquet")
    ids = []
    for shard in mix_shards(open_store(str(folder / "data")), manifest):
        docs = pl.read_parquet(folder / "data" / shard["prefix"] / f"{shard['name']}.docs.parquet").select("doc_id")
        ids.append(docs.with_columns(shard=pl.lit(shard["id"], pl.Int32), doc=pl.int_range(pl.len(), dtype=pl.Int64)))
    return ranges.join(pl.concat(ids), on=["shard", "doc"], how="left").with_columns(pl.col("component").cast(pl.String))


def test_a_blocklisted_mix_holds_none_of_the_blocked_and_keeps_the_rest_in_order(graph, tmp_path):
    from dagster import DagsterInstance, materialize

    from data_assets.definitions import ASSETS
    from data_assets.partitions import multi_key

    source_folder, _ = graph
    folder = tmp_path / "copy"
    shutil.copytree(source_folder / "data", folder / "data")
    before = mix_rows(folder)
    deduped = frame(folder, "deduped_documents").select("doc_id", "url", "text")
    in_mix = set(before["doc_id"].to_list())
    pick = sorted(in_mix)[:2]
    # Each sample source is a single host (a domain entry matching it would empty the source and the mix
    # could not be built): the domain entry names a host of no sample document; domains are matched in
    # tests/sluice/trace/test_trace_measures.py and tests/sluice/loader/test_provenance_skip.py.
    host = "handbook.invalid"
    lines = [f"doc:{pick[0]}", f"doc:{pick[1]}", "url:https://debian-handbook.info/browse/ru-RU/*", f"domain:{host}", r"regex:(?i)\bsyslog"]
    blocklist = tmp_path / "blocklist.txt"
    blocklist.write_text("# test list\n" + "\n".join(lines) + "\n")
    raw = base_config(str(folder / "data"))
    raw["blocklist"] = {"path": str(blocklist)}
    config_path = write_config(tmp_path / "sluice.yaml", raw)
    resources = build_resources(config_path)
    (tmp_path / "home").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "home")) as instance:
        register_snapshots(instance, resources)
        materialize(ASSETS, selection=["blocklist"], instance=instance, resources=resources)
        for key in [("web", "2026-01"), ("reference", "2026-01"), ("web", "2026-02"), ("reference", "2026-02")]:
            materialize(ASSETS, selection=["blocklist_matches"], partition_key=multi_key(*key), instance=instance, resources=resources)
        result = materialize(ASSETS, selection=["mixed_dataset"], partition_key="default", instance=instance, resources=resources)
        event = result.get_asset_materialization_events()[0]
        metadata = {k: getattr(v, "value", v) for k, v in event.event_specific_data.materialization.metadata.items()}
        tags = event.event_specific_data.materialization.tags or {}
    # The oracle: what the list matches, by Python's re and fnmatch over the deduplicated documents.
    pattern = re.compile(r"(?i)\bsyslog")
    blocked = {
        doc_id for doc_id, url, text in deduped.iter_rows()
        if doc_id in pick or (url and (fnmatch.fnmatchcase(url, "https://debian-handbook.info/browse/ru-RU/*") or url.split("/")[2].endswith(host)))
        or pattern.search(text)
    }
    assert blocked & in_mix and len(blocked) > 3
    after = mix_rows(folder)
    assert not set(after["doc_id"].to_list()) & blocked
    # ... in no batch of a whole epoch either (the loader reads the index, not the Parquet view).
    data = MixedTokens(open_store(str(folder / "data")), "default")
    shard_docs = {(s["id"]): pl.read_parquet(folder / "data" / s["prefix"] / f"{s['name']}.docs.parquet")["doc_id"].to_list() for s in mix_shards(data.store, data.manifest)}
    seen = set()
    for batch in TrainingLoader(data, 4, seed=1, provenance=True, num_epochs=1, prefetch_batches=0):
        seen |= {shard_docs[shard][doc] for _, shard, doc, _, _ in batch["provenance"].tolist()}
    assert seen and not seen & blocked
    # Lineage and metadata name the version and what it removed.
    version = hashlib.sha256("".join(sorted(f"{line.split(':', 1)[0]}:{line.split(':', 1)[1]}" + "\n" for line in lines)).encode()).hexdigest()
    assert metadata["blocklist_sha256"] == version
    tokenized = {}
    for shard in mix_shards(data.store, data.manifest):
        offsets = np.fromfile(folder / "data" / shard["binary_prefix"] / f"{shard['name']}.idx", "<u8")
        for doc_id, length in zip(shard_docs[shard["id"]], np.diff(offsets).tolist(), strict=True):
            tokenized[doc_id] = length
    removed = blocked & set(tokenized)
    assert metadata["blocklisted_documents"] == len(removed)
    assert metadata["blocklisted_tokens"] == sum(tokenized[d] for d in removed)
    assert any(key.startswith("dagster/input_data_version") and value == version[:16] for key, value in tags.items()), tags
    # The rest of the order: within each component, the documents both builds hold come in the same order.
    for component in sorted(set(before["component"].to_list())):
        old = [(d, c) for d, c in before.filter(pl.col("component") == component).select("doc_id", "copy").iter_rows()]
        new = [(d, c) for d, c in after.filter(pl.col("component") == component).select("doc_id", "copy").iter_rows()]
        common = set(old) & set(new)
        assert len(common) > 10
        assert [x for x in old if x in common] == [x for x in new if x in common], component
        added = {d for d, _ in new} - {d for d, _ in old}
        assert not added & blocked


def test_examples_train_spike_hook_trace_and_resume_with_the_skip_list(graph, tmp_path, monkeypatch):
    """examples/train.py end to end on CPU: the hook saves step 4's provenance and stops before training on
    it; the trace of that file names the documents the step alone names; the resume from the step-3
    checkpoint with --skip-steps 4 leaves out exactly step 4's positions (the oracle: global batch 2, so
    positions [8, 10)) and ends where the kept stream says (steps 3..7 of 2 samples skip 2 positions)."""
    import importlib.util

    import torch

    folder, config_path = graph
    spec = importlib.util.spec_from_file_location("example_train", Path(__file__).resolve().parents[2] / "examples" / "train.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    checkpoint = str(tmp_path / "ckpt.pt")
    common = ["--config", config_path, "--mix", "default", "--batch-size", "2", "--device", "cpu", "--checkpoint", checkpoint, "--save-every", "3"]
    example.main(common + ["--steps", "8", "--spike-at-step", "4", "--stop-on-spike"])
    assert torch.load(checkpoint, weights_only=False)["step"] == 3  # the spike stopped the run before step 4's update
    saved = json.loads((tmp_path / "ckpt.pt.spikes" / "step-00000004-rank0.json").read_text())
    assert saved["positions"] == [8, 9] and saved["step"] == 4
    config = load_config(config_path)
    store = open_store(config.storage.root)
    from_file = trace_batch(store, config, BatchSpec(mix="default", provenance=[saved]), measures=False)
    from_step = trace_batch(store, config, BatchSpec(mix="default", step=4, batch_size=2), measures=False)
    assert from_file.documents and [d["doc_id"] for d in from_file.documents] == [d["doc_id"] for d in from_step.documents]
    example.main(common + ["--steps", "8", "--skip-steps", "4"])
    state = torch.load(checkpoint, weights_only=False)
    assert state["step"] == 8
    assert state["loader"]["skip"]["positions"] == [[8, 10]]
    loader = state["loader"]
    assert loader["epoch"] * loader["num_samples"] + loader["position"] == 8 * 2 + 2
