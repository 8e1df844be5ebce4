"""Jobs: per-partition ingest (raw -> tokenized), tokenizer training, and mix building."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

ingest_job = define_asset_job(
    "ingest_job",
    selection=AssetSelection.assets("raw_documents", "cleaned_documents", "deduped_documents", "decontamination", "tokenized_shards"),
    description="One source x snapshot partition from raw crawl files to token shards and decontamination flags (needs a materialized tokenizer).",
)

tokenizer_job = define_asset_job("tokenizer_job", selection=AssetSelection.assets("tokenizer"))

mix_job = define_asset_job(
    "mix_job",
    selection=AssetSelection.assets("mixed_dataset"),
    description="Rebuild a mix from every tokenized partition that exists.",
)
