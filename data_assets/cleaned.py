"""`cleaned_documents`: charset + HTML extraction (with a per-page budget), code share, language ID, Gopher /
C4 / FineWeb quality filters, toxicity, perplexity, URL blocklist and PII redaction, thresholds per source and
language; every decision counted in the metadata. Code-heavy documents may be routed to the side dataset
`cleaned_code` (same schema), published by this partition's manifest."""


from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetDep,
    AssetExecutionContext,
    MetadataValue,
)

from data_assets.automation import stage_automation
from data_assets.batch import PartitionResult, in_group, run_source_partitions, stage_asset
from data_assets.metadata import counts_table, known_keys, markdown_table, prefixed_counts, stage_progress
from data_assets.partitions import partition_check, source_snapshot_partitions
from data_assets.settings import CONFIG
from data_assets.versions import CLEANING_SETTINGS, CODE_VERSIONS, settings_dep
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.clean import DROPPED_DATASET, CleaningStats, CleanTask, clean_part
from sluice.clean.attributes import ATTRIBUTES_DATASET
from sluice.clean.quantiles import Quantiles
from sluice.clean.steps.codeshare import CODE_DATASET
from sluice.config import CleaningSettings, SluiceConfig
from sluice.io.layout import (
    PartitionRef,
    partition_prefix,
    read_manifest,
    required_manifest,
    side_prefix,
    write_manifest,
)
from sluice.io.storage import Store
from sluice.runtime.tasks import (
    RecordedTask,
    TaskCounts,
    record_key,
    record_listing,
    records_prefix,
    run_recorded,
    task_digest,
)

ASSET = "cleaned_documents"
DROP_RATE_CHECK = "drop_rate_within_bounds"
NO_PII_CHECK = "no_pii_left"


def model_deps(config: SluiceConfig) -> list[AssetDep]:
    """The models some source's cleaning scores with: a dependency only then, so cleaning does not wait for
    models it does not use (they are still built, from raw documents)."""
    cleanings = [config.cleaning.for_source(name) for name in config.source_names]
    deps = []
    if any(cleaning.uses_quality_model for cleaning in cleanings):
        deps.append(AssetDep("quality_model"))
    if any(cleaning.uses_perplexity_model for cleaning in cleanings):
        deps.append(AssetDep("perplexity_model"))
    return deps


def _mean_median(summary: Quantiles) -> tuple[float, float]:
    """The mean (exact) and the lower median (within 1 %) of a size or score summary; 0.0 for none."""
    return float(summary.mean()), summary.median()


@stage_asset(
    ASSET,
    partitions_def=source_snapshot_partitions,
    deps=[AssetDep("raw_documents"), settings_dep(CLEANING_SETTINGS), *model_deps(CONFIG)],
    code_version=CODE_VERSIONS[ASSET],
    automation_condition=stage_automation(ASSET),
    **in_group("curation"),
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "Main text (resiliparse or trafilatura, per source) in the detected charset, fastText lid.176 language "
        "and score, Gopher repetition/quality, C4 and FineWeb filters (datatrove's thresholds, overridable per "
        "source), URL blocklist, PII redacted. Dropped documents and their step/reason in the cleaned_dropped dataset."
    ),
    check_specs=[
        partition_check(DROP_RATE_CHECK, ASSET,
            description="The share of documents dropped lies inside the source's cleaning.drop_rate_bounds "
            "(default checks.min/max_cleaned_drop_rate); warns.",
        ),
        partition_check(NO_PII_CHECK, ASSET,
            blocking=True,
            description="No e-mail, IP address or phone pattern is left in the written texts (blocks downstream).",
        ),
    ],
)
def cleaned_documents(
    context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> Iterator[Any]:
    yield from run_source_partitions(context, ASSET, lambda ref: clean_partition(context, ref, settings, storage, compute))


@dataclass
class _Models:
    """The models the source's cleaning scores with, as published (None where unused)."""

    quality_url: str | None = None
    quality_sha: str | None = None
    quality_max_chars: int = 4000
    perplexity_url: str | None = None
    perplexity: dict[str, Any] | None = None  # the perplexity_model manifest


def clean_partition(
    context: AssetExecutionContext, ref: PartitionRef, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> PartitionResult:
    config = settings.config
    cleaning = config.cleaning.for_source(ref.source)
    store = storage.store()
    models = _models(store, cleaning, ref)
    jobs = _jobs(store, ref, config, cleaning, models)
    executor = compute.executor()
    progress = stage_progress(context, f"{ASSET} {ref.key}", len(jobs))
    stats = CleaningStats()

    def fold(result: dict[str, Any]) -> None:
        """Merge a finished task's counts as it ends and keep its result without them: the run process holds
        one CleaningStats, not one per part (merges are exact in any order: sluice.clean.stats)."""
        part_stats = result.pop("stats")
        stats.merge(part_stats)
        progress.update(part_stats["documents_in"], part_stats["chars_in"])

    results = executor.map(run_recorded, jobs, progress=fold)
    counts = TaskCounts.of(results)
    context.log.info(counts.line(f"{ASSET} {ref.key}"))
    files = [r["part"] for r in results]
    _write_manifest(store, ref, stats, results, [job.task.part for job in jobs])
    metadata = {
        **_metadata(context, store, ref, cleaning, stats, files, models),
        **counts.metadata(),
        "compute": executor.describe(),
    }
    return PartitionResult(metadata=metadata, checks=_checks(config, cleaning, stats, ref.source), names=count_names(config))


def count_names(config: SluiceConfig) -> dict[str, list[str]]:
    """The per-name counts every cleaned partition records, 0 where none (data_assets/batch.py fill_counts):
    the drop reasons of every source's chain, the PII kinds, the languages the config names (kept, or with
    settings of their own). Other languages (lid.176 knows 176) are recorded once some partition has seen them."""
    from sluice.clean.chain import drop_reasons
    from sluice.clean.steps.pii import PLACEHOLDERS

    sources = [config.cleaning.for_source(name) for name in config.source_names]
    return {
        "drop": drop_reasons(sources),
        "pii": sorted(PLACEHOLDERS),
        "language": sorted({code for cleaning in sources for code in (*cleaning.keep_languages, *cleaning.languages)}),
    }


def _models(store: Store, cleaning: CleaningSettings, ref: PartitionRef) -> _Models:
    """The quality and perplexity models the source's cleaning needs; an error naming the asset to
    materialize when one is needed and missing."""
    models = _Models()
    if cleaning.uses_quality_model:
        manifest = read_manifest(store, "quality_model")
        if manifest is None:
            raise FileNotFoundError(
                f"cleaning.quality_threshold is set for {ref.source} but {store.uri('quality_model')} has no model: "
                "materialize quality_model first"
            )
        models.quality_url, models.quality_sha = store.uri("quality_model"), manifest["sha256"]
        models.quality_max_chars = int(manifest["max_chars"])
    if cleaning.uses_perplexity_model:
        models.perplexity = read_manifest(store, "perplexity_model")
        if models.perplexity is None:
            raise FileNotFoundError(
                f"cleaning.perplexity is enabled for {ref.source} but {store.uri('perplexity_model')} has no model: "
                "materialize perplexity_model first"
            )
        models.perplexity_url = store.uri("perplexity_model")
    return models


def _jobs(store: Store, ref: PartitionRef, config: SluiceConfig, cleaning: CleaningSettings, models: _Models) -> list[RecordedTask]:
    """One recorded cleaning task per raw part. Each records its completion; a re-run reuses the verified
    outputs of finished tasks (sluice.runtime.tasks). A task's identity: its raw part's digest, the quality model's,
    and the source's cleaning settings."""
    raw_manifest = required_manifest(store, "raw_documents", ref)
    routing = cleaning.code_share.enabled and cleaning.code_share.route_above is not None
    tasks = [
        CleanTask(
            store.uri(partition_prefix("raw_documents", ref)), entry["key"], store.uri(partition_prefix(ASSET, ref)), index, cleaning,
            config.s3, models.quality_url, models.quality_max_chars,
            code_url=store.uri(side_prefix(CODE_DATASET, ref)) if routing else None,
            perplexity_model_url=models.perplexity_url,
            perplexity_models=models.perplexity["models"] if models.perplexity else None,
            source=ref.source,
            snapshot=ref.snapshot,
            dropped_url=store.uri(side_prefix(DROPPED_DATASET, ref)),
            attributes_url=store.uri(side_prefix(ATTRIBUTES_DATASET, ref)),
        )
        for index, entry in enumerate(raw_manifest["files"])
    ]
    records_url = store.uri(records_prefix(ASSET, ref))
    return [
        RecordedTask(
            clean_part, task, f"{ref.key}/{entry['key']}", task_digest(ASSET, task, [entry["sha256"], models.quality_sha or ""]),
            records_url, record_key(task.part),
            (
                ("part", task.output_url), ("dropped", task.dropped_url or task.output_url), ("code", task.code_url or ""),
                ("attributes", task.attributes_url or ""),
            ),
            config.s3, volatile=("worker_cpu_s",),
        )
        for task, entry in zip(tasks, raw_manifest["files"], strict=True)
    ]


def _write_manifest(store: Store, ref: PartitionRef, stats: CleaningStats, results: list[dict[str, Any]], parts: list[int]) -> None:
    """Publish the partition: its parts, the dropped and routed side files, and what the quality report
    draws (sluice.report), as measured while writing."""
    dropped_prefix, code_prefix = side_prefix(DROPPED_DATASET, ref), side_prefix(CODE_DATASET, ref)
    attributes_prefix = side_prefix(ATTRIBUTES_DATASET, ref)
    side_files = (
        [{**r["dropped"], "prefix": dropped_prefix} for r in results]
        + [{**r["code"], "prefix": code_prefix} for r in results if r["code"]]
        + [{**r["attributes"], "prefix": attributes_prefix} for r in results if r.get("attributes")]
    )
    write_manifest(
        store,
        partition_prefix(ASSET, ref),
        {
            "asset": ASSET,
            "partition": {"source": ref.source, "snapshot": ref.snapshot},
            "files": [r["part"] for r in results],
            "side_files": side_files,
            "documents": stats.documents_out,
            "drops": dict(stats.drops),
            "routed": dict(stats.routed),
            "stats": {
                "documents_in": stats.documents_in,
                "funnel": [[name, count, stats.drops_by_step.get(name, 0)] for name, count in stats.reached.items()],
                "languages": dict(sorted(stats.languages.items())),
            },
            "task_records": record_listing(ASSET, ref, parts),
        },
    )


def _drop_rate(stats: CleaningStats) -> float:
    """A routed document is neither kept here nor dropped: it is written to its side dataset."""
    documents_in = stats.documents_in
    return 1 - (stats.documents_out + sum(stats.routed.values())) / documents_in if documents_in else 0.0


def _checks(config: SluiceConfig, cleaning: CleaningSettings, stats: CleaningStats, source: str) -> list[AssetCheckResult]:
    """The drop rate inside its bounds (warns) and no PII pattern in the written texts (blocks), from the counts
    the tasks took while writing."""
    drop_rate, documents_in, residual = _drop_rate(stats), stats.documents_in, stats.residual_pii
    low, high = cleaning.drop_rate_bounds or (config.checks.min_cleaned_drop_rate, config.checks.max_cleaned_drop_rate)
    return [
        AssetCheckResult(
            check_name=DROP_RATE_CHECK,
            passed=documents_in == 0 or low <= drop_rate <= high,
            severity=AssetCheckSeverity.WARN,
            metadata={"drop_rate": drop_rate, "min": low, "max": high},
            description=f"dropped {drop_rate:.1%} of {documents_in} documents (bounds {low:.0%}..{high:.0%})",
        ),
        AssetCheckResult(
            check_name=NO_PII_CHECK,
            passed=not residual,
            severity=AssetCheckSeverity.ERROR,
            metadata={"residual_matches": sum(residual.values()), **prefixed_counts("residual", residual)},
            description=(
                "no PII pattern in the written texts"
                if not residual
                else f"PII patterns left in the output: {dict(sorted(residual.items()))} (is cleaning.pii enabled for {source}?)"
            ),
        ),
    ]


def _metadata(
    context: AssetExecutionContext, store: Store, ref: PartitionRef, cleaning: CleaningSettings, stats: CleaningStats,
    files: list[dict[str, Any]], models: _Models,
) -> dict[str, Any]:
    """What the UI shows and plots per partition: counts as numbers (every reason, language and PII kind seen
    before included, 0 where absent), the funnel and language tables, the models used."""
    known = known_keys(context, ASSET, ("drop", "language", "pii"))
    in_mean, in_median = _mean_median(stats.input_bytes)
    ex_mean, ex_median = _mean_median(stats.extracted_chars)
    out_mean, out_median = _mean_median(stats.output_chars)
    return {
        "dagster/row_count": stats.documents_out,
        "dagster/uri": MetadataValue.path(store.uri(partition_prefix(ASSET, ref))),
        "documents_in": stats.documents_in,
        "documents_out": stats.documents_out,
        "drop_rate": _drop_rate(stats),
        **{f"funnel/{index:02d}_{name}": count for index, (name, count) in enumerate(stats.reached.items())},
        **prefixed_counts("drop", stats.drops, known["drop"]),
        **prefixed_counts("language", stats.languages, known["language"] | set(stats.languages_in)),
        **prefixed_counts("pii", stats.pii, known["pii"]),
        "pii_redactions": sum(stats.pii.values()),
        "input_bytes_mean": in_mean,
        "input_bytes_median": in_median,
        "extracted_chars_mean": ex_mean,
        "extracted_chars_median": ex_median,
        "mean_chars_out": out_mean,
        "median_chars_out": out_median,
        "output_bytes": sum(entry["bytes"] for entry in files),
        **_tables(store, ref, stats),
        **_model_metadata(cleaning, stats, models),
        **prefixed_counts("routed", stats.routed),
        "code_share_mean": _mean_median(stats.code_shares)[0],
        "toxic_documents": stats.toxic_documents,
        "toxic_terms": stats.toxic_terms,
        **_language_thresholds(cleaning, stats),
    }


def _tables(store: Store, ref: PartitionRef, stats: CleaningStats) -> dict[str, Any]:
    """The funnel, drop-reason and language tables, and where the dropped and routed documents are."""
    funnel_rows = [("input", stats.documents_in, "")]
    funnel_rows += [(name, count, stats.drops_by_step.get(name, 0)) for name, count in stats.reached.items()]
    funnel_rows += [(f"routed to {name}", count, "") for name, count in sorted(stats.routed.items())]
    funnel_rows.append(("kept", stats.documents_out, ""))
    language_rows = [
        (language, count, stats.languages.get(language, 0))
        for language, count in sorted(stats.languages_in.items(), key=lambda item: (-item[1], item[0]))
    ]
    return {
        "funnel": markdown_table(["step", "documents reaching it", "dropped by it"], funnel_rows),
        "drop_reasons": counts_table(stats.drops),
        "languages": markdown_table(["language", "identified", "kept"], language_rows),
        "dropped_documents": MetadataValue.md(
            f"Dropped documents with step, reason and detail: `{store.uri(side_prefix(DROPPED_DATASET, ref))}/` "
            "(`polars.scan_parquet(..., hive_partitioning=True)` on `cleaned_dropped/`)."
            + (f" Routed code-heavy documents: `{side_prefix(CODE_DATASET, ref)}/`." if stats.routed else "")
        ),
    }


def _model_metadata(cleaning: CleaningSettings, stats: CleaningStats, models: _Models) -> dict[str, Any]:
    """The models scored with (their digests) and the score summaries; nothing for unused models."""
    metadata: dict[str, Any] = {}
    if models.quality_sha:
        mean, median = _mean_median(stats.quality_scores)
        metadata.update(
            quality_model_sha256=models.quality_sha, quality_threshold=float(cleaning.quality_threshold),
            quality_score_mean=mean, quality_score_median=median,
        )
    if models.perplexity:
        metadata.update(perplexity_model_sha256=models.perplexity["sha256"], perplexity_median=_mean_median(stats.perplexities)[1])
        metadata.update(prefixed_counts("perplexity_bucket", stats.perplexity_buckets))
    return metadata


def _language_thresholds(cleaning: CleaningSettings, stats: CleaningStats) -> dict[str, Any]:
    """Which thresholds applied: the source's per-language overrides of the languages seen in this partition."""
    overrides = {code: cleaning.languages[code] for code in sorted(cleaning.languages) if code in stats.languages_in}
    return {
        "thresholds_by_language": MetadataValue.json(
            {"overridden": overrides, "documents": {code: stats.languages_in[code] for code in overrides}}
        )
    }
