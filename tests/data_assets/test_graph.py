"""The whole graph on the bundled sample: materializes, passes every check, and is deterministic."""

from __future__ import annotations

import math

import pytest
from dagster import Definitions

from data_assets.definitions import defs
from tests.conftest import base_config, tree_digest, write_config
from tests.support.graph import graph_instance, materialize_graph  # noqa: F401 - run_graph


def run_graph(tmp_path_factory, name: str, **overrides):
    """The whole graph through Dagster's backfill machinery (tests/support/graph.py) with these sections."""
    folder = tmp_path_factory.mktemp(name)
    raw = base_config(str(folder / "data"))
    raw.update(overrides)
    config_path = write_config(folder / "sluice.yaml", raw)
    with graph_instance(folder / "home") as instance:
        report = materialize_graph(instance, config_path)
        report["check_partitions"] = check_partitions(instance)
    return folder, report, None


def check_partitions(instance) -> list[tuple[str, str, object]]:
    """(asset, check, partition key) of every check evaluation the instance recorded."""
    from dagster import DagsterEventType, EventRecordsFilter

    records = instance.get_event_records(EventRecordsFilter(event_type=DagsterEventType.ASSET_CHECK_EVALUATION))
    evaluations = [record.event_log_entry.dagster_event.event_specific_data for record in records]
    return [(e.asset_key.to_user_string(), e.check_name, e.partition) for e in evaluations]


@pytest.fixture(scope="module")
def local_run(sample_graph, tmp_path_factory):
    """The session's sample graph, and its copy re-materialized with every partition forced."""
    from tests.support.graph import graph_instance

    copy = sample_graph.copy(tmp_path_factory.mktemp("rerun"))
    with graph_instance(copy.home) as instance:
        report = dict(sample_graph.report)
        report["check_partitions"] = check_partitions(instance)
        rerun = materialize_graph(instance, copy.config, force=True)
    return sample_graph.folder, report, (sample_graph.digest, tree_digest(str(copy.data)), rerun)


def test_definitions_load():
    Definitions.validate_loadable(defs)
    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards", "mixed_dataset", "tokenizer"} <= keys


def test_loading_the_code_location_does_not_import_torch():
    """Every Dagster run and step process imports the code location; torch (about 1 s of imports) is needed
    only by the training loader and the export writers, which import it when they run."""
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT

    probe = "import sys, data_assets.definitions; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])"
    out = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_every_asset_and_check_for_every_partition(local_run):
    _, report, _ = local_run
    assert set(report["partitions"]) == {("web", "2026-01"), ("web", "2026-02"), ("reference", "2026-01"), ("reference", "2026-02")}
    for meta in report["partitions"].values():
        assert {"raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards"} <= set(meta)
    assert "default" in report["mixes"]
    failed = [check for check in report["checks"] if not check[2]]
    assert failed == []
    checked_assets = {asset for asset, _, _ in report["checks"]}
    assert checked_assets == {
        "raw_documents", "quality_model", "perplexity_model", "cleaned_documents", "deduped_documents", "tokenized_shards", "mixed_dataset",
    }


def test_check_results_of_partitioned_assets_name_their_partition(local_run):
    """Every evaluation of a check on a source x snapshot asset belongs to its partition (the UI's checks tab
    links it), for each of the four partitions; unpartitioned assets' and the mix's checks name none."""
    from data_assets.partitions import multi_key

    _, report, _ = local_run
    by_asset: dict[str, set] = {}
    for asset, _, partition in report["check_partitions"]:
        by_asset.setdefault(asset, set()).add(partition)
    partitions = {multi_key(source, snapshot) for source, snapshot in report["partitions"]}
    for asset in ("raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards"):
        assert by_asset[asset] == partitions, asset
    assert by_asset["quality_model"] == {None}


def cleaned_frame(folder, source: str, snapshot: str, kind: str = "part"):
    """The cleaned (kind="part") or dropped (kind="dropped") documents of a partition, in part order."""
    import polars as pl

    dataset = "cleaned_documents" if kind == "part" else "cleaned_dropped"
    files = sorted((folder / "data" / dataset / f"source={source}" / f"snapshot={snapshot}").glob(f"{kind}-*.parquet"))
    frame = pl.concat([pl.read_parquet(path) for path in files])
    return frame.with_columns(source=pl.lit(source), snapshot=pl.lit(snapshot))


def test_exact_duplicates_removed_across_snapshots_and_sources(local_run):
    folder, report, _ = local_run
    # Expected removals derived from the cleaned outputs: partitions in (snapshot, source) order, a text
    # hash seen before (earlier partition or earlier in the same one) is a duplicate.
    seen: set[str] = set()
    expected = {}
    for source, snapshot in sorted(report["partitions"], key=lambda key: (key[1], key[0])):
        duplicates = 0
        for text_hash in cleaned_frame(folder, source, snapshot)["text_hash"].to_list():
            duplicates += text_hash in seen
            seen.add(text_hash)
        expected[(source, snapshot)] = duplicates
    removed = {key: meta["deduped_documents"]["removed_exact"] for key, meta in report["partitions"].items()}
    assert removed == expected
    # The English pages re-crawled in web/2026-02 are byte-identical to pages of 2026-01 (cleaned the same
    # way), so every one of them that survives cleaning is removed as a duplicate; fr/ja pages are not.
    recrawl_kept = cleaned_frame(folder, "web", "2026-02").filter(cleaned_url_has("/en-US/")).height
    assert recrawl_kept > 0 and removed[("web", "2026-02")] == recrawl_kept
    # Handbook pages exported as text into reference/2026-02 duplicate web pages (another source).
    assert removed[("reference", "2026-02")] > 0
    assert removed[("web", "2026-01")] == 0


def cleaned_url_has(part: str):
    import polars as pl

    return pl.col("url").str.contains(part, literal=True)


def test_cleaning_metadata_explains_every_decision(local_run):
    folder, report, _ = local_run
    for (source, snapshot), meta in report["partitions"].items():
        cleaned = meta["cleaned_documents"]
        raw = meta["raw_documents"]
        assert cleaned["documents_in"] == raw["documents_out"]
        drops = {key.split("/", 1)[1]: value for key, value in cleaned.items() if key.startswith("drop/")}
        assert cleaned["documents_in"] == cleaned["documents_out"] + sum(drops.values())
        # The funnel: numbered steps, each reached by no more documents than the one before.
        funnel = [cleaned[key] for key in sorted(k for k in cleaned if k.startswith("funnel/"))]
        assert funnel[0] == cleaned["documents_in"] and funnel == sorted(funnel, reverse=True)
        languages = {key.split("/", 1)[1]: value for key, value in cleaned.items() if key.startswith("language/")}
        assert sum(languages.values()) == cleaned["documents_out"]
        kept = cleaned_frame(folder, source, snapshot)
        dropped = cleaned_frame(folder, source, snapshot, "dropped")
        assert kept.height == cleaned["documents_out"] and dropped.height == sum(drops.values())
        # The side output, read with polars, holds every dropped document with its step and reason.
        assert dict(zip(*dropped.group_by("reason").len().sort("reason").to_dict(as_series=False).values(), strict=True)) == {
            reason: count for reason, count in drops.items() if count
        }
        assert set(dropped.columns) >= {"doc_id", "url", "step", "reason", "detail", "text"}
        # The median comes from a fixed-size summary (sluice.clean.quantiles): the lower median, within 1 %; both
        # rounded to 4 significant digits, units from 1000 up (data_assets/batch.py).
        lower_median = float(kept["n_chars"].quantile(0.5, "lower"))
        assert abs(cleaned["median_chars_out"] - lower_median) <= 0.0105 * lower_median + 0.5
        assert math.isclose(cleaned["mean_chars_out"], float(kept["n_chars"].mean()), rel_tol=5e-4, abs_tol=0.5)
        assert cleaned["input_bytes_mean"] > cleaned["mean_chars_out"] > 0
        # Every kept text carries the detected language and score.
        assert kept.filter(kept["language_score"] < 0.65).height == 0
    # Every drop reason and language a partition records is recorded by the other partitions of its run (0
    # included: data_assets/batch.py), so each per-reason chart is a line, not dots.
    by_run: dict[str, list[set[str]]] = {}
    for (asset, source, snapshot), run_id in report["runs"].items():
        if asset == "cleaned_documents":
            meta = report["partitions"][(source, snapshot)]["cleaned_documents"]
            by_run.setdefault(run_id, []).append({key for key in meta if key.startswith(("drop/", "language/"))})
    assert any(len(names) > 1 for names in by_run.values())  # runs hold several partitions
    for names in by_run.values():
        assert all(other == names[0] for other in names), names
    assert any(meta["cleaned_documents"].get(key) == 0 for meta in report["partitions"].values() for key in meta["cleaned_documents"] if key.startswith("drop/"))
    web = report["partitions"][("web", "2026-01")]["cleaned_documents"]
    assert {"language/de", "language/en", "language/ru", "language/zh"} <= set(web)


def latest_metadata(instance, asset: str) -> dict[str, tuple[str, int, dict]]:
    """Partition -> (run id, storage id, plain metadata values) of each partition's latest materialization."""
    from dagster import AssetKey, AssetRecordsFilter, DagsterEventType

    latest = instance.get_latest_storage_id_by_partition(AssetKey(asset), DagsterEventType.ASSET_MATERIALIZATION)
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset), storage_ids=list(latest.values())), limit=len(latest)).records
    return {
        record.partition_key: (record.run_id, record.storage_id, {key: getattr(value, "value", value) for key, value in record.asset_materialization.metadata.items()})
        for record in records
    }


def test_every_partition_records_the_same_keys_in_one_type_whatever_run_wrote_it(sample_graph):
    """Each partitioned stage's materializations, read back from the instance: every partition's latest one has
    the same metadata keys (the per-reason counts included, 0 where none, although different runs wrote them),
    each key holds one type across partitions, and every float is rounded to what it means (4 significant
    digits, units from 1000 up; no 0.19999999999999996)."""
    from data_assets.definitions import ASSETS
    from tests.support.graph import graph_instance

    partitioned = sorted(
        key.to_user_string() for assets_def in ASSETS for key in getattr(assets_def, "keys", ()) if assets_def.partitions_def is not None
    )
    with graph_instance(sample_graph.home) as instance:
        latest = {asset: latest_metadata(instance, asset) for asset in partitioned}
    assert len({run for run, _, _ in latest["cleaned_documents"].values()}) > 1  # written by several runs
    for asset, partitions in latest.items():
        assert partitions, asset
        # Languages the config does not name are open-ended (lid.176 has 176): each is recorded by every
        # partition written after one recorded it; every other key by every partition.
        keys = {partition: {key for key in meta if not key.startswith("language/")} for partition, (_, _, meta) in partitions.items()}
        first = next(iter(keys.values()))
        for partition, names in keys.items():
            assert names == first, (asset, partition, sorted(names ^ first))
        for partition, (_, order, meta) in partitions.items():
            for other, (_, later, other_meta) in partitions.items():
                if later > order:
                    assert {k for k in meta if k.startswith("language/")} <= set(other_meta), (asset, partition, other)
        for key in first:
            types = {type(meta[key]).__name__ for _, _, meta in partitions.values()}
            assert len(types) == 1, (asset, key, types)
        for partition, (_, _, meta) in partitions.items():
            for key, value in meta.items():
                if isinstance(value, float) and math.isfinite(value) and value != 0:
                    assert value.is_integer() or float(f"{value:.4g}") == value, (asset, partition, key, value)
    cleaned = next(iter(latest["cleaned_documents"].values()))[2]
    assert {"drop/too_short", "drop/gopher_short_doc", "pii/email"} <= set(cleaned)


def test_near_duplicates_removed_and_incremental_equals_one_batch(local_run):
    import polars as pl

    from benchmarks.dedup_oracle import (
        deduped_view,
        exact_jaccard,
        lsh_one_batch,
        reference_removed,
        stored_partitions,
    )
    from sluice.config import DedupSettings
    from sluice.io.storage import open_store

    folder, report, _ = local_run
    fuzzy = {key: meta["deduped_documents"]["removed_fuzzy"] for key, meta in report["partitions"].items()}
    store = open_store(str(folder / "data"))
    cleaned = pl.concat([cleaned_frame(folder, source, snapshot) for source, snapshot in report["partitions"]])
    partition_of = dict(zip(cleaned["doc_id"], zip(cleaned["source"], cleaned["snapshot"], strict=True), strict=True))
    # The oracle (per partition, one batch over it and the earlier ones: all pairs by brute-force Jaccard of
    # shingle strings, union-find) removes the same documents, per partition and in total.
    batch_kinds = reference_removed(stored_partitions(store))
    expected = {key: sum(kind == "fuzzy" and partition_of[doc] == key for doc, kind in batch_kinds.items()) for key in report["partitions"]}
    assert fuzzy == expected
    texts, urls = dict(zip(cleaned["doc_id"], cleaned["text"], strict=True)), dict(zip(cleaned["doc_id"], cleaned["url"], strict=True))
    # The sample plants one near duplicate (scripts/build_sample.py): reference/2026-02 mirrors the first en
    # chapter of reference/2026-01 with a header line and every 100th word changed. It is removed, across
    # snapshots, as a near duplicate of that chapter. The sample also exports three zh handbook pages of
    # web/2026-01 as text (resiliparse's plain main text): those whose text sluice's extraction reproduces are
    # exact duplicates; one whose extraction now leaves out a link-dense box or a trailing label is a near
    # duplicate of its page. Nothing else is.
    mirror = next(doc for doc, url in urls.items() if "://mirror." in url)
    original = next(doc for doc, url in urls.items() if url == urls[mirror].replace("://mirror.", "://"))
    assert partition_of[mirror] == ("reference", "2026-02") and partition_of[original] == ("reference", "2026-01")
    assert exact_jaccard(texts[mirror], texts[original]) >= 0.8
    page_of = {url: doc for doc, url in urls.items() if partition_of[doc] == ("web", "2026-01")}
    exports = {doc: page_of[url] for doc, url in urls.items() if partition_of[doc] == ("reference", "2026-02") and url in page_of}
    hashes = dict(zip(cleaned["doc_id"], cleaned["text_hash"], strict=True))  # the normalized text's hash
    near_exports = {doc for doc, page in exports.items() if hashes[doc] != hashes[page] and exact_jaccard(texts[doc], texts[page]) >= 0.8}
    assert 1 <= len(exports) <= 3 and len(near_exports) <= 1  # (the cleaning may drop an export)
    assert {doc: kind for doc, kind in batch_kinds.items() if kind == "fuzzy"} == dict.fromkeys({mirror} | near_exports, "fuzzy")
    assert fuzzy == {key: (1 + len(near_exports)) * int(key == ("reference", "2026-02")) for key in report["partitions"]}
    mirror_removed = pl.read_parquet(folder / "data/deduped_removed/source=reference/snapshot=2026-02/removed.parquet").filter(
        pl.col("doc_id") == mirror
    )
    assert mirror_removed.select("kind", "duplicate_of", "duplicate_of_partition").rows() == [("fuzzy", original, "reference/2026-01")]
    # Chapter 16 of the handbook is untranslated English in every language edition: LSH (datatrove's rule,
    # verify_min_jaccard null) removes the en, ru, zh copies of 2026-01 and the fr, ja copies of 2026-02 as
    # near duplicates of the de page, but their Jaccard to it is only ~0.6-0.74, so the default
    # verification (0.8) keeps them all.
    _, lsh_kinds = lsh_one_batch(store, DedupSettings(verify_min_jaccard=None))
    lsh_only = sorted(doc for doc, kind in lsh_kinds.items() if kind == "fuzzy" and doc != mirror and doc not in near_exports)
    german = next(doc for doc, url in urls.items() if url.endswith("/de-DE/stable/conclusion.html") and partition_of[doc] == ("web", "2026-01"))
    assert len(lsh_only) == 5 and all(urls[doc].endswith("/stable/conclusion.html") for doc in lsh_only)
    assert all(0.5 < exact_jaccard(texts[doc], texts[german]) < 0.8 for doc in lsh_only)
    assert not set(lsh_only) & set(batch_kinds)
    later = report["partitions"][("web", "2026-02")]["deduped_documents"]
    removed_file = pl.read_parquet(folder / "data/deduped_removed/source=web/snapshot=2026-02/removed.parquet")
    against_earlier = removed_file.filter(pl.col("duplicate_of_partition").str.ends_with("/2026-01")).height
    documents_in = report["partitions"][("web", "2026-02")]["cleaned_documents"]["documents_out"]
    assert against_earlier > 0 and later["removed_share_against/2026-01"] == pytest.approx(against_earlier / documents_in, abs=5e-5)  # (4 decimals in the metadata)
    kept, removed = deduped_view(store)
    assert {doc_id: kind for doc_id, (kind, _) in removed.items()} == batch_kinds
    assert kept == set(cleaned["doc_id"]) - set(batch_kinds)


def test_mix_realizes_token_weights(local_run):
    _, report, _ = local_run
    mix = report["mixes"]["default"]
    assert mix["tokens"] == base_config("unused")["mixes"]["default"]["token_budget"]
    assert abs(mix["share/web"] - 0.7) <= 0.02 and abs(mix["share/reference"] - 0.3) <= 0.02


def test_mix_holds_out_validation_documents_and_removes_the_planted_evaluation_passage(local_run):
    import glob
    import json
    from pathlib import Path

    import polars as pl

    folder, report, _ = local_run
    mix = report["mixes"]["default"]
    assert mix["validation_documents"] > 0 and mix["validation_tokens"] > 0
    # The bundled evaluation set quotes a passage of the Debian handbook; find the documents holding it
    # independently (plain substring search over the deduplicated texts) and check all were removed.
    eval_file = next(iter(json.loads((folder / "data/mixed_dataset/mix=default/_manifest.json").read_text())["decontamination"]["eval_sets"]))
    passage = " ".join(json.loads(Path(eval_file).read_text().splitlines()[1])["text"].split("Passage: ")[1].split()[:20])
    texts = pl.concat([pl.read_parquet(path, columns=["doc_id", "text"]) for path in sorted(glob.glob(str(folder / "data/deduped_documents/*/*/part-*.parquet")))])
    holding = set(texts.filter(pl.col("text").str.replace_all(r"\s+", " ").str.contains(passage, literal=True))["doc_id"])
    removed = set(pl.read_parquet(folder / "data/mixed_contaminated/mix=default/contaminated.parquet")["doc_id"])
    assert holding and holding <= removed
    assert mix["contaminated_documents"] == len(removed)


def test_rematerializing_gives_byte_identical_files(local_run):
    _, _, (before, after, rerun) = local_run
    assert before == after
    assert len(before) > 40
    assert all(passed for _, _, passed in rerun["checks"])


def test_worker_count_does_not_change_outputs(sample_graph, tmp_path_factory):
    other, _, _ = run_graph(tmp_path_factory, "one_worker", compute={"backend": "local", "max_workers": 1})
    assert tree_digest(str(other / "data")) == sample_graph.digest


def test_ray_backend_gives_identical_outputs(sample_graph, tmp_path_factory, monkeypatch):
    ray = pytest.importorskip("ray")
    import sluice.dedup.clusters

    # Connected components split into Ray tasks too (the sample's graphs are below the threshold).
    monkeypatch.setattr(sluice.dedup.clusters, "EDGES_PER_TASK", 4)  # large/small star rounds as Ray tasks
    try:
        other, report, _ = run_graph(tmp_path_factory, "ray", compute={"backend": "ray", "max_workers": 2})
    finally:
        ray.shutdown()
    assert all(passed for _, _, passed in report["checks"])
    assert tree_digest(str(other / "data")) == sample_graph.digest


def test_training_loader_resource_yields_shifted_batches(local_run):
    import torch

    from resources import TrainingLoaderResource

    folder, _, _ = local_run
    loader = TrainingLoaderResource.from_config_file(str(folder / "sluice.yaml"), mix="default", batch_size=4, device="cpu")
    data = loader.dataset()
    batch = next(iter(loader.batches()))
    assert batch["input_ids"].shape == (4, 512) and batch["labels"].shape == (4, 512)
    assert batch["input_ids"].dtype == torch.int64 and batch["input_ids"].device.type == "cpu"
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])
    # Two ranks split an epoch without overlap and together cover every sample once.
    seen = []
    for rank in range(2):
        for b in loader.batches(rank=rank, world_size=2):
            seen.extend(tuple(row[:16].tolist()) + (int(row[-1]),) for row in b["input_ids"])
    # A mix that repeats a small source over epochs can hold identical samples, so compare multisets:
    # no sample is yielded more often than it occurs in the mix.
    from collections import Counter

    every = Counter(tuple(data.sample(i)[0][:16].tolist()) + (int(data.sample(i)[0][-1]),) for i in range(len(data)))
    assert Counter(seen) <= every
    assert len(seen) >= len(data) - 2 * 4  # drop_last may drop < one batch per rank


def test_every_sample_document_tokenizes_to_the_tokenizers_ids(local_run):
    """The word-cache fast path of sluice.tokens.tokenize on every cleaned document of the bundled sample gives
    `tokenizer.encode(text).ids`, and every shard document is that of its deduplicated text plus EOS."""
    import glob
    import json
    from pathlib import Path

    import numpy as np
    import polars as pl

    from sluice.tokens.shards import ShardView
    from sluice.tokens.tokenize import WordCachedEncoder, load_tokenizer

    folder, report, _ = local_run
    data = folder / "data"
    tokenizer_json = (data / "tokenizer" / "tokenizer.json").read_text()
    tokenizer = load_tokenizer(tokenizer_json)
    encoder = WordCachedEncoder(tokenizer_json)
    assert encoder.unsupported is None
    cleaned = pl.concat([pl.read_parquet(path, columns=["doc_id", "text"]) for path in sorted(glob.glob(str(data / "cleaned_documents/*/*/part-*.parquet")))])
    texts = cleaned["text"].to_list()
    assert len(texts) > 50
    for ids, text in zip(encoder.encode(texts), texts, strict=True):
        assert ids.tolist() == tokenizer.encode(text, add_special_tokens=False).ids
    by_id = dict(zip(cleaned["doc_id"].to_list(), texts, strict=True))
    checked = 0
    for manifest_path in sorted(glob.glob(str(data / "tokenized_shards/*/*/_manifest.json"))):
        manifest = json.loads(Path(manifest_path).read_text())
        shard_folder = manifest_path.rsplit("/", 1)[0]
        binary = data / manifest["binary_prefix"]  # the .bin / .idx files: the side folder tokenized_binary/
        assert binary.parent.parent.name == "tokenized_binary" and not list(Path(shard_folder).glob("*.bin"))
        for shard in manifest["shards"]:
            view = ShardView.open(str(binary / f"{shard['name']}.bin"), str(binary / f"{shard['name']}.idx"), manifest["dtype"])
            doc_ids = pl.read_parquet(f"{shard_folder}/{shard['name']}.docs.parquet")["doc_id"].to_list()
            for index, doc_id in enumerate(doc_ids):
                expected = tokenizer.encode(by_id[doc_id], add_special_tokens=False).ids + [manifest["eos_id"]]
                assert np.asarray(view.doc(index)).tolist() == expected
                checked += 1
    assert checked == sum(meta["tokenized_shards"]["documents"] for meta in report["partitions"].values())
    assert {meta["tokenized_shards"]["encoder"] for meta in report["partitions"].values()} == {"word cache fast path"}


@pytest.mark.parametrize(
    "dataset",
    [
        "raw_documents", "raw_quarantine", "cleaned_documents", "cleaned_dropped", "decontamination",
        "dedup_signatures", "dedup_clusters", "deduped_documents", "deduped_removed", "tokenized_shards", "mixed_dataset",
        "mixed_contaminated", "mixed_blocked",
    ],
)
def test_every_output_folder_reads_as_one_dataset(local_run, dataset, tmp_path):
    """After the whole graph, polars, pyarrow.dataset, DuckDB and HF datasets read the folder as one
    Hive-partitioned dataset and count the rows the files' footers hold."""
    from tests.data_assets.test_datasets import read_every_dataset

    folder, _, _ = local_run
    frames = read_every_dataset(folder / "data", (dataset,), hf_cache=tmp_path / "hf")
    assert frames[dataset].height > 0 or dataset in ("raw_quarantine", "mixed_contaminated", "mixed_blocked"), dataset
    if dataset == "mixed_dataset":  # train and validation ranges: one schema, a split column, a mix folder
        assert set(frames[dataset]["split"].cast(str).unique()) == {"train", "validation"}
        assert set(frames[dataset]["mix"].unique()) == {"default"}
