"""Jobs: per-partition ingest (raw -> the dedup index), tokenizer training, and mix building."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

# What one partition can do on its own, whatever other partitions' runs are doing: its dedup_clusters,
# deduped_documents, decontamination and tokenized_shards wait for the other partitions (declarative automation, see
# data_assets/deduped.py), so they are not in this job.
ingest_job = define_asset_job(
    "ingest_job",
    selection=AssetSelection.assets("raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index"),
    description="One source x snapshot partition from raw crawl files into the global dedup index; automation takes it on from there.",
)

tokenizer_job = define_asset_job("tokenizer_job", selection=AssetSelection.assets("tokenizer"))

mix_job = define_asset_job(
    "mix_job",
    selection=AssetSelection.assets("mixed_dataset"),
    description="Rebuild a mix from every tokenized partition that exists.",
)
