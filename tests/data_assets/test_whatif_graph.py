"""cleaned_attributes as the materialized graph writes them (Dagster run, budgeted cleaning worker), read
by `sluice whatif`: every cleaned partition publishes its attributes, one row per raw document, whose kept
decisions are exactly the documents cleaned_documents holds; the graph's own config flips nothing."""

from __future__ import annotations

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
