"""Every output folder is one Hive-partitioned Parquet dataset: polars, pyarrow.dataset and DuckDB read it
directly, agree with each other, with the files' own Parquet footers (the independent row count) and give
`source`/`snapshot` from the folders. The ingest + cleaning stages run here on the bundled sample; the whole
graph's folders are read by `read_every_dataset` from tests/data_assets/test_graph.py too."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance, materialize

from data_assets.cli import register_snapshots
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import multi_key
from tests.conftest import base_config, write_config

# The Parquet datasets by folder (README "Outputs"); each partition's files share one schema.
SOURCE_SNAPSHOT_DATASETS = ("raw_documents", "raw_quarantine", "cleaned_documents", "cleaned_dropped", "cleaned_attributes")


def footer_rows(folder: Path) -> int:
    return sum(pq.ParquetFile(path).metadata.num_rows for path in folder.rglob("*.parquet"))


def read_three_ways(folder: Path) -> tuple[pl.DataFrame, int, int]:
    """(polars frame, pyarrow.dataset rows, DuckDB rows) of a Hive-partitioned folder."""
    frame = pl.scan_parquet(str(folder / "**" / "*.parquet"), hive_partitioning=True).collect()
    table = ds.dataset(folder, format="parquet", partitioning="hive").to_table()
    # A schema conflict between a file and the Hive fields raises in to_table (the bug this guards).
    assert set(table.column_names) == set(frame.columns)
    sql = f"SELECT count(*) FROM read_parquet('{folder}/**/*.parquet', hive_partitioning = true)"
    [(duck_rows,)] = duckdb.sql(sql).fetchall()
    return frame, table.num_rows, duck_rows


def hf_rows(folder: Path, cache: Path) -> int:
    """Rows HF `datasets` reads from the folder (`load_dataset(<folder>)`: every split its file names give).
    `batch_size` is given: without it, datasets 5.2 reads a file in batches of its first row group's size,
    which is 0 in a file of an empty partition (pyarrow raises)."""
    import datasets

    loaded = datasets.load_dataset(str(folder), cache_dir=str(cache), batch_size=4096)
    return sum(split.num_rows for split in loaded.values())


def read_every_dataset(root: Path, datasets: tuple[str, ...], hf_cache: Path | None = None) -> dict[str, pl.DataFrame]:
    """Each folder read by polars, pyarrow.dataset and DuckDB (and HF datasets with `hf_cache`): the same rows
    as the files' footers, and Hive columns whose values are the folders' `key=value` names."""
    frames = {}
    for name in datasets:
        folder = root / name
        frame, arrow_rows, duck_rows = read_three_ways(folder)
        assert frame.height == arrow_rows == duck_rows == footer_rows(folder), name
        if hf_cache is not None and frame.height:  # (HF datasets cannot build a dataset of no rows)
            assert hf_rows(folder, hf_cache / name) == frame.height, name
        leaves = {path.parent.relative_to(folder) for path in folder.rglob("*.parquet")}
        keys = {part.split("=", 1)[0] for leaf in leaves for part in leaf.parts}
        assert keys <= set(frame.columns), name
        for key in keys:  # the column's values are the folder names
            values = {part.split("=", 1)[1] for leaf in leaves for part in leaf.parts if part.startswith(f"{key}=")}
            assert set(frame[key].cast(pl.String).unique().to_list()) <= values, (name, key)
        frames[name] = frame
    return frames


@pytest.fixture(scope="module")
def cleaned_sample(tmp_path_factory):
    folder = tmp_path_factory.mktemp("datasets")
    raw = base_config(str(folder / "data"))
    raw["compute"] = {"backend": "local", "max_workers": 1}
    resources = build_resources(write_config(folder / "sluice.yaml", raw))
    (folder / "home").mkdir()
    cleaned_metadata = []
    with DagsterInstance.local_temp(tempdir=str(folder / "home")) as instance:
        pairs = register_snapshots(instance, resources)
        for source, snapshot in pairs:
            result = materialize(
                ASSETS, selection=["raw_documents", "cleaned_documents"], partition_key=multi_key(source, snapshot),
                instance=instance, resources=resources, raise_on_error=False,
            )
            assert result.success, (source, snapshot)
            [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "cleaned_documents"]
            cleaned_metadata.append({k: v.value for k, v in event.event_specific_data.materialization.metadata.items()})
    return folder / "data", pairs, cleaned_metadata


def test_raw_and_cleaned_outputs_are_one_dataset_each(cleaned_sample):
    root, pairs, _ = cleaned_sample
    frames = read_every_dataset(root, SOURCE_SNAPSHOT_DATASETS)
    # The part files themselves carry no partition columns (they would clash with the Hive fields).
    for name in ("raw_documents", "cleaned_documents", "cleaned_dropped", "cleaned_attributes"):
        first = next((root / name).rglob("*.parquet"))
        assert not {"source", "snapshot"} & set(pq.read_schema(first).names), name
    # Every partition's documents are there, with their source and snapshot from the folders.
    assert {tuple(row) for row in frames["raw_documents"].select("source", "snapshot").unique().rows()} == set(pairs)
    # The main datasets hold only their own files: no dropped or quarantine file left beside the parts.
    assert not list((root / "raw_documents").rglob("quarantine*"))
    assert not list((root / "cleaned_documents").rglob("dropped*"))
    # Kept and dropped are disjoint and, with the routed ones, add up to the raw documents of each partition.
    kept, dropped = frames["cleaned_documents"], frames["cleaned_dropped"]
    assert set(kept["doc_id"]).isdisjoint(set(dropped["doc_id"]))
    routed = footer_rows(root / "cleaned_code") if (root / "cleaned_code").exists() else 0
    assert kept.height + dropped.height + routed == frames["raw_documents"].height
    # One attributes row per raw document, its decision where cleaning wrote it.
    attributes = frames["cleaned_attributes"]
    assert sorted(attributes["doc_id"]) == sorted(frames["raw_documents"]["doc_id"])
    assert set(attributes.filter(pl.col("decision") == "kept")["doc_id"]) == set(kept["doc_id"])
    assert set(attributes.filter(pl.col("decision") == "dropped")["doc_id"]) == set(dropped["doc_id"])


def test_every_reason_and_language_seen_before_is_recorded_again_with_zeros(cleaned_sample):
    _, pairs, metadata = cleaned_sample
    seen: set[str] = set()
    zeros = 0
    for pair, meta in zip(pairs, metadata, strict=True):
        keys = {key for key in meta if key.startswith(("drop/", "language/", "pii/"))}
        assert seen <= keys, pair
        zeros += sum(meta[key] == 0 for key in seen)
        seen |= keys
    assert zeros > 0  # the sample's partitions differ in their reasons and languages
