"""`export_job`: write one split of a built mix as Parquet, WebDataset or MDS shards (`sluice.export`).

Launched from the UI (Jobs -> export_job -> Launchpad) with run config

    ops: {export_mix: {config: {mix: default, split: train, format: mds, destination: "s3://bucket/exports/default"}}}

An empty destination writes below `export.root` (default `<storage.root>/mixed_export/mix=<mix>/format=<format>`).
The run's output metadata names the destination, files, samples and tokens; an observation of the
`mixed_dataset` partition records the same, so the asset's page lists its exports. `sluice export` runs the
same function from the command line.
"""

# (no `from __future__ import annotations`: Dagster reads the op's config annotation at definition time)
from collections.abc import Callable
from typing import Any, Literal

from dagster import AssetObservation, Config, Failure, MetadataValue, OpExecutionContext, Output, job, op
from pydantic import Field

from data_assets.metadata import markdown_table
from resources import SluiceSettings
from sluice.config import SluiceConfig
from sluice.export import ExportError
from sluice.io.storage import StorageError, open_store
from sluice.mix import MixError


def default_destination(config: SluiceConfig, mix: str, fmt: str) -> str:
    root = config.export.root or open_store(config.storage.root, config.s3).uri("mixed_export")
    return f"{root.rstrip('/')}/mix={mix}/format={fmt}"


def export_from_config(
    config: SluiceConfig, mix: str, split: str, fmt: str, destination: str | None = None, seed: int | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Export `split` of `mix` in `fmt` to `destination` (default: `default_destination`) with the config's
    export settings; returns the export manifest. Raises ExportError with a message for people."""
    if mix not in config.mixes:
        raise ExportError(f"mix {mix!r} is not in the config; mixes are {sorted(config.mixes)}")
    from sluice.export import export_split  # the writers import torch: only when an export runs

    settings = config.export
    out = destination or default_destination(config, mix, fmt)
    try:
        return export_split(
            open_store(config.storage.root, config.s3), mix, split, fmt, open_store(out, config.s3),
            seed=settings.seed if seed is None else seed, shard_bytes=settings.shard_bytes,
            mask_document_boundaries=settings.mask_document_boundaries, log=log,
        )
    except (MixError, StorageError, FileNotFoundError) as error:
        raise ExportError(str(error)) from error


def summary_metadata(manifest: dict[str, Any]) -> dict[str, Any]:
    files = manifest["files"]
    return {
        "destination": MetadataValue.path(manifest["uri"]),
        "format": manifest["export_format"],
        "split": manifest["split"],
        "samples": manifest["samples"],
        "tokens": manifest["tokens"],
        "sequence_length": manifest["sequence_length"],
        "file_count": len(files),
        "bytes": sum(entry["bytes"] for entry in files),
        "files": markdown_table(["file", "samples", "bytes", "sha256"], [(e["key"], e["rows"], e["bytes"], e["sha256"][:16]) for e in files]),
        "mix_version": manifest["mix_version"],
        "tokenizer_sha256": manifest["tokenizer_sha256"],
        "seed": manifest["order"]["seed"],
        "repeated_documents_in_a_sample": manifest["checks"]["repeated_documents_in_a_sample"],
    }


class ExportConfig(Config):
    mix: str = Field(description="The mix to export (a mixed_dataset partition).")
    split: Literal["train", "validation"] = Field("train", description="Which split of the mix.")
    format: Literal["parquet", "webdataset", "mds"] = Field("parquet", description="parquet | webdataset (tar shards) | mds (MosaicML Streaming).")
    destination: str = Field("", description="Folder, local or s3://bucket/prefix; the split goes to <destination>/<split>/. Empty = export.root.")
    seed: int | None = Field(None, description="Row order: the training loader's with this seed. Empty = export.seed, else the mix's seed.")


@op(description="Write one split of a built mix as Parquet, WebDataset or MDS shards, in the training loader's order.")
def export_mix(context: OpExecutionContext, config: ExportConfig, settings: SluiceSettings) -> Output[dict]:
    try:
        manifest = export_from_config(
            settings.config, config.mix, config.split, config.format, config.destination or None, config.seed, log=context.log.info
        )
    except ExportError as error:
        raise Failure(description=str(error)) from None
    metadata = summary_metadata(manifest)
    context.log_event(AssetObservation(asset_key="mixed_dataset", partition=config.mix, metadata={**metadata, "event": "export"}))
    summary = {key: manifest[key] for key in ("uri", "export_format", "split", "samples", "tokens", "mix_version")}
    return Output(summary, metadata=metadata)


@job(description="Export a built mix (one split, one format) to a folder or bucket; configure mix, split, format, destination.", tags={"purpose": "export"})
def export_job() -> None:
    export_mix()
