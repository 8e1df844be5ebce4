"""`quality_report`: the picture of every registered source x snapshot partition's quality (see `sluice.report`),
written to `<root>/quality_report/`. The asset's page shows inline the funnel per source (a table), the totals
and a sketch (markdown under 1,000 characters: Dagster's UI folds longer markdown, so the PNG, embedded as a
`data:` image, is behind "[Show Markdown]").

Per-source views: one external asset per source, `quality_of_<source>`, partitioned by snapshot (a one-part key,
so the lineage labels it with the source's name, not just "web"), linked from every source x snapshot stage's
page (`source_view_links`). The
report records a materialization of each (source, snapshot) partition of it whose figures changed since the
last report (their digests are kept in the report's manifest), so the UI's metadata plots of a view are that
source's figures over its snapshots (x axis "Partitions": the latest figures of each snapshot; "Events": their
history), one continuous line per metric, never two sources interleaved, and a re-run adds nothing new.

Automation (`sluice_automation`, data_assets/definitions.py): the report runs hourly when any of its stages has new data."""

import base64
import hashlib
import json

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetMaterialization,
    AssetSpec,
    AutomationCondition,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)

from data_assets.batch import in_group
from data_assets.partitions import (
    registered_partitions,
    snapshot_partitions,
    source_view_key,
    source_view_links,
)
from data_assets.settings import CONFIG
from data_assets.versions import CODE_VERSIONS
from resources import SluiceSettings, StorageResource
from sluice.io.layout import read_manifest
from sluice.report import (
    HTML_NAME,
    PNG_NAME,
    REPORT_DATASET,
    PartitionQuality,
    SourceTotals,
    collect,
    sketch_svg,
    source_totals,
    write_report,
)

ASSET = REPORT_DATASET


source_views = [
    AssetSpec(
        source_view_key(source),
        deps=[ASSET],
        partitions_def=snapshot_partitions,
        **in_group("reporting"),
        description=f"Quality figures of source {source!r} per snapshot, recorded by quality_report: plot them (Overview -> Metadata -> Plots) for this source alone.",
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


def view_digest(metadata: dict[str, float]) -> str:
    return hashlib.sha256(json.dumps(metadata, sort_keys=True).encode()).hexdigest()[:16]


def record_source_views(context: AssetExecutionContext, rows: list[PartitionQuality], previous: dict[str, str]) -> dict[str, str]:
    """Materialize the source-view partition of every row whose figures differ from `previous` (label -> digest,
    from the last report's manifest); returns every row's digest."""
    reasons = sorted({reason for row in rows for reason in row.drops})
    languages = sorted({code for row in rows for code in row.languages})
    digests = {}
    for row in rows:
        metadata = view_metadata(row, reasons, languages)
        digests[row.label] = view_digest(metadata)
        if previous.get(row.label) != digests[row.label]:
            context.log_event(AssetMaterialization(asset_key=source_view_key(row.source), partition=row.snapshot, metadata=metadata))
    return digests


TOTALS = {"raw_documents": "raw", "cleaned_documents": "cleaned", "deduped_documents": "deduped", "tokens": "tokens"}
FUNNEL_COLUMNS = (
    ("source", "string"), ("snapshots", "int"), ("raw", "int"), ("quarantined", "int"), ("cleaned", "int"),
    ("deduped", "int"), ("tokens", "int"), ("drop_rate", "float"),
)


def funnel_table(totals: list[SourceTotals]) -> MetadataValue:
    """Per source, its funnel over the snapshots drawn: a table metadata value, which the asset's page shows
    whole (unlike long markdown, a table is never folded)."""
    schema = TableSchema(columns=[TableColumn(name, kind) for name, kind in FUNNEL_COLUMNS])
    records = [
        TableRecord({**{name: getattr(total, name) for name, _ in FUNNEL_COLUMNS[:-1]}, "drop_rate": round(total.drop_rate, 4)})
        for total in totals
    ]
    return MetadataValue.table(records, schema=schema)


# Hourly, once any stage it reads has new data since it last ran (or it has never run): a report reads every
# partition's manifests, so it is not re-drawn after each of a backfill's partitions.
REPORT_AUTOMATION = (
    AutomationCondition.cron_tick_passed("0 * * * *", "UTC").since_last_handled()
    & (AutomationCondition.missing() | AutomationCondition.any_deps_updated().since_last_handled())
    & ~AutomationCondition.in_progress()
).with_label("hourly, when its stages have new data")


@asset(
    name=ASSET,
    code_version=CODE_VERSIONS[ASSET],
    deps=[AssetDep(stage) for stage in ("raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards")],
    **in_group("reporting"),
    kinds={"python", "html"},
    automation_condition=REPORT_AUTOMATION,
    owners=["team:data-engineering"],
    metadata=source_view_links(),
    description=(
        "Per source and snapshot: the cleaning funnel, drop reasons, language shares, dedup removal against earlier "
        "snapshots and token counts, as a PNG (matplotlib) and an HTML page in quality_report/, drawn from the "
        "partitions' manifests (what each stage measured while writing)."
    ),
)
def quality_report(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource) -> MaterializeResult:
    store = storage.store()
    rows = collect(store, registered_partitions(context, settings.config.source_names))
    previous = read_manifest(store, ASSET) or {}
    digests = record_source_views(context, rows, previous.get("view_digests", {}))
    manifest = write_report(store, rows, {"view_digests": digests})
    png = store.read_bytes(f"{ASSET}/{PNG_NAME}")
    totals = source_totals(rows)
    return MaterializeResult(
        metadata={
            # Shown on the asset's page as they are: markdown under 1,000 characters (Dagster folds longer
            # markdown behind a button, the picture included: its PNG is far longer) and tables (never folded).
            "report_sketch": MetadataValue.md(sketch_svg(rows) or "(no sketch for more than 3 sources: see funnel and report)"),
            "funnel": funnel_table(totals),
            **{name: sum(getattr(total, stage) for total in totals) for name, stage in TOTALS.items()},
            "report": MetadataValue.md(f"![quality report](data:image/png;base64,{base64.b64encode(png).decode()})"),
            "html": MetadataValue.path(store.uri(f"{ASSET}/{HTML_NAME}")),
            "png": MetadataValue.path(store.uri(f"{ASSET}/{PNG_NAME}")),
            "partitions": len(rows),
            "partition_keys": MetadataValue.json(manifest["partitions"]),
            "png_bytes": manifest["png_bytes"],
        }
    )
