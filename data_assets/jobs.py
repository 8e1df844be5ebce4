"""Jobs, named by what they do, so the runs list says what ran.

Per purpose: `ingest_job` (the new-snapshot sensor: one source x snapshot partition from raw crawl files
into the global dedup index; automation takes it on from there), `tokenizer_job`, `mix_job` (the daily
schedule). Per stage: one job per asset (`<asset>_job`; the tokenizer's and the mix's are the two above),
the jobs `sluice materialize` and `sluice demo` launch, one asset partition per run, tagged with the
command, the source and the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dagster import AssetSelection, define_asset_job

# What one partition can do on its own, whatever other partitions' runs are doing: its dedup_clusters,
# deduped_documents, decontamination and tokenized_shards wait for the other partitions (declarative automation, see
# data_assets/deduped.py), so they are not in this job.
ingest_job = define_asset_job(
    "ingest_job",
    selection=AssetSelection.assets("raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index"),
    description="One source x snapshot partition from raw crawl files into the global dedup index; automation takes it on from there.",
)

tokenizer_job = define_asset_job("tokenizer_job", selection=AssetSelection.assets("tokenizer"), description="Train (or load) the tokenizer.")

mix_job = define_asset_job(
    "mix_job",
    selection=AssetSelection.assets("mixed_dataset"),
    description="Rebuild a mix from every tokenized partition that exists.",
)

_STAGE_JOBS_BY_ASSET = {"tokenizer": tokenizer_job, "mixed_dataset": mix_job}


def stage_job_name(asset: str) -> str:
    """The job that materializes `asset` alone (and runs its checks)."""
    job = _STAGE_JOBS_BY_ASSET.get(asset)
    return job.name if job is not None else f"{asset}_job"


def stage_jobs(assets: Iterable[str]) -> list[Any]:
    """One job per asset, selecting that asset and its checks: `<asset>_job`, or its purpose job above."""
    return [
        _STAGE_JOBS_BY_ASSET.get(asset)
        or define_asset_job(stage_job_name(asset), selection=AssetSelection.assets(asset), description=f"Materialize {asset} (one partition per run).")
        for asset in assets
    ]
