"""cleaned_attributes as the materialized graph writes them (Dagster run, budgeted cleaning worker), read
by `sluice whatif`: every cleaned partition publishes its attributes, one row per raw document, whose kept
decisions are exactly the documents cleaned_documents holds; the graph's own config flips nothing."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from sluice.config import load_config
from sluice.io.layout import PartitionRef, entry_key, list_partitions, partition_prefix, read_manifest
from sluice.io.storage import open_store
from sluice.whatif.engine import attribute_partitions, what_if


def test_the_materialized_sample_has_attributes_whose_decisions_are_its_cleaned_outputs(sample_graph, tmp_path):
    config = load_config(sample_graph.config)
    store = open_store(config.storage.root, config.s3)
    partitions = attribute_partitions(config, str(tmp_path))
    assert len(partitions) == len(list_partitions(store, "cleaned_documents")) and all(p.files for p in partitions)
    for partition in partitions:
        attributes = pl.read_parquet(partition.files)
        ref = PartitionRef(partition.source, partition.snapshot)
        prefix = partition_prefix("cleaned_documents", ref)
        kept = pl.read_parquet([store.local_path(entry_key(prefix, entry)) for entry in read_manifest(store, prefix)["files"]], columns=["doc_id"])
        raw = read_manifest(store, partition_prefix("raw_documents", ref))
        assert attributes.height == sum(entry["rows"] for entry in raw["files"])
        assert set(attributes.filter(pl.col("decision") == "kept")["doc_id"]) == set(kept["doc_id"])
    result = what_if(config, config, str(tmp_path))
    assert result.unanswered == [] and result.inconsistent == 0
    assert result.flips is not None and result.flips.collect().height == 0


def test_the_change_applied_rematerializes_its_partitions_and_their_history_holds_the_counts_whatif_predicted(sample_graph, tmp_path):
    """What the cleaned asset's Plots tab draws (each partition's materializations, their `documents_out`)
    after a change is applied through the graph (`sluice materialize` with OTHER: Dagster's backfill
    machinery): the count before, then the one `sluice whatif` predicted from the attributes alone."""
    import yaml

    from tests.sluice.whatif.test_engine import _changed
    from tests.support.graph import graph_instance, materialize_graph

    graph = sample_graph.copy(tmp_path / "graph")
    current = load_config(graph.config)
    other_path = tmp_path / "other.yaml"
    other_path.write_text(yaml.safe_dump(_changed(yaml.safe_load(Path(graph.config).read_text()), c4__min_num_sentences=12), sort_keys=False))
    flips = what_if(current, load_config(str(other_path)), str(tmp_path / "scratch")).flips.collect()
    assert flips.height > 0
    with graph_instance(graph.home) as instance:
        before = _cleaned_history(instance, graph.report)
        report = materialize_graph(instance, str(other_path))
        assert report["status"].value == "COMPLETED_SUCCESS", report["failed"]
        after = _cleaned_history(instance, graph.report)
    assert len(after) == len(graph.report["partitions"]) > 0
    for (source, snapshot), counts in after.items():
        here = flips.filter((pl.col("source") == source) & (pl.col("snapshot") == snapshot))
        lost = here.filter((pl.col("before") == "kept") & (pl.col("after") != "kept")).height  # dropped or routed
        gained = here.filter((pl.col("before") != "kept") & (pl.col("after") == "kept")).height
        assert counts[1:] == before[(source, snapshot)]  # the earlier points stay in the history
        assert counts[0] == before[(source, snapshot)][0] - lost + gained, (source, snapshot)


def _cleaned_history(instance, report) -> dict[tuple[str, str], list[int]]:
    """(source, snapshot) -> cleaned_documents' `documents_out` of each materialization, newest first."""
    from dagster import AssetKey, AssetRecordsFilter

    from data_assets.partitions import partition_key

    history = {}
    for source, snapshot in report["partitions"]:
        ref = PartitionRef(source, snapshot)
        records = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("cleaned_documents"), asset_partitions=[partition_key(ref)]), limit=100).records
        history[(source, snapshot)] = [record.asset_materialization.metadata["documents_out"].value for record in records]
    return history
