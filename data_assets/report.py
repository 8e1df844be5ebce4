"""`quality_report`: the picture of every registered source x snapshot partition's quality (see `sluice.report`),
written to `<root>/quality_report/` and shown on the asset's page (the PNG embedded in markdown metadata: the
UI's markdown renderer allows `data:` images).

Per-source views: one external asset per source, `quality_by_source/<source>`, partitioned by snapshot. The
report records an observation of each (source, snapshot) on it, so the UI's metadata plots of a view are that
source's figures over its snapshots: one continuous line per metric, never two sources interleaved."""

import base64

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetObservation,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    asset,
)

from data_assets.partitions import registered_partitions, snapshot_partitions
from data_assets.settings import CONFIG
from resources import SluiceSettings, StorageResource
from sluice.report import HTML_NAME, PNG_NAME, REPORT_DATASET, PartitionQuality, collect, write_report

ASSET = REPORT_DATASET
SOURCE_VIEW = "quality_by_source"


def source_view_key(source: str) -> AssetKey:
    return AssetKey([SOURCE_VIEW, source])


source_views = [
    AssetSpec(
        source_view_key(source),
        deps=[ASSET],
        partitions_def=snapshot_partitions,
        group_name="reporting",
        description=f"Quality figures of source {source!r} per snapshot, observed by quality_report: plot them (Overview -> Metadata -> Plots) for this source alone.",
    )
    for source in CONFIG.source_names
]


def view_metadata(row: PartitionQuality, reasons: list[str], languages: list[str]) -> dict[str, float]:
    """One (source, snapshot)'s numbers for its source view; every reason and language of the report, 0 included."""
    def number(value: int | None) -> int:
        return 0 if value is None else value

    kept = max(1, sum(row.languages.values()))
    return {
        "raw_documents": number(row.raw),
        "cleaned_documents": number(row.cleaned),
        "deduped_documents": number(row.deduped),
        "tokens": number(row.tokens),
        "drop_rate": 1 - number(row.cleaned) / row.raw if row.raw else 0.0,
        "removed_within_partition": row.removed_within,
        "removed_against_earlier": row.removed_earlier,
        **{f"drop/{reason}": row.drops.get(reason, 0) for reason in reasons},
        **{f"language_share/{code}": row.languages.get(code, 0) / kept for code in languages},
    }


def observe_sources(context: AssetExecutionContext, rows: list[PartitionQuality]) -> None:
    reasons = sorted({reason for row in rows for reason in row.drops})
    languages = sorted({code for row in rows for code in row.languages})
    for row in rows:
        metadata = view_metadata(row, reasons, languages)
        context.log_event(AssetObservation(asset_key=source_view_key(row.source), partition=row.snapshot, metadata=metadata))


@asset(
    name=ASSET,
    deps=[AssetDep(stage) for stage in ("raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards")],
    group_name="reporting",
    kinds={"python", "html"},
    owners=["team:data-engineering"],
    description=(
        "Per source and snapshot: the cleaning funnel, drop reasons, language shares, dedup removal against earlier "
        "snapshots and token counts, as a PNG (matplotlib) and an HTML page in quality_report/, drawn from the "
        "partitions' manifests (what each stage measured while writing)."
    ),
)
def quality_report(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource) -> MaterializeResult:
    store = storage.store()
    rows = collect(store, registered_partitions(context, settings.config.source_names))
    manifest = write_report(store, rows)
    observe_sources(context, rows)
    png = store.read_bytes(f"{ASSET}/{PNG_NAME}")
    return MaterializeResult(
        metadata={
            "report": MetadataValue.md(f"![quality report](data:image/png;base64,{base64.b64encode(png).decode()})"),
            "html": MetadataValue.path(store.uri(f"{ASSET}/{HTML_NAME}")),
            "png": MetadataValue.path(store.uri(f"{ASSET}/{PNG_NAME}")),
            "partitions": len(rows),
            "partition_keys": MetadataValue.json(manifest["partitions"]),
            "png_bytes": manifest["png_bytes"],
        }
    )
