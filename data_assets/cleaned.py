"""`cleaned_documents`: charset + HTML extraction (with a per-page budget), code share, language ID, Gopher /
C4 / FineWeb quality filters, toxicity, perplexity, URL blocklist and PII redaction, thresholds per source and
language; every decision counted in the metadata. Code-heavy documents may be routed to the side dataset
`cleaned_code` (same schema), published by this partition's manifest."""


import statistics
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetDep,
    AssetExecutionContext,
    MetadataValue,
)

from data_assets.automation import stage_automation
from data_assets.batch import PartitionResult, in_group, stage_asset
from data_assets.metadata import counts_table, known_keys, markdown_table, prefixed_counts, stage_progress
from data_assets.partitions import partition_check, run_source_partitions, source_snapshot_partitions
from data_assets.settings import CONFIG
from data_assets.versions import CLEANING_SETTINGS, CODE_VERSIONS, settings_dep
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.clean import DROPPED_DATASET, CleanTask, clean_part
from sluice.codeshare import CODE_DATASET
from sluice.config import SluiceConfig
from sluice.layout import (
    PartitionRef,
    partition_prefix,
    read_manifest,
    required_manifest,
    side_prefix,
    write_manifest,
)
from sluice.tasks import (
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


def _mean_median(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    return float(statistics.fmean(values)), float(statistics.median(values))


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


def clean_partition(
    context: AssetExecutionContext, ref: PartitionRef, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> PartitionResult:
    config = settings.config
    cleaning = config.cleaning.for_source(ref.source)
    store = storage.store()
    raw_prefix = partition_prefix("raw_documents", ref)
    raw_manifest = required_manifest(store, "raw_documents", ref)
    prefix = partition_prefix(ASSET, ref)
    quality_url, quality_sha, quality_max_chars = None, None, 4000
    if cleaning.uses_quality_model:
        model_manifest = read_manifest(store, "quality_model")
        if model_manifest is None:
            raise FileNotFoundError(
                f"cleaning.quality_threshold is set for {ref.source} but {store.uri('quality_model')} has no model: "
                "materialize quality_model first"
            )
        quality_url, quality_sha = store.uri("quality_model"), model_manifest["sha256"]
        quality_max_chars = int(model_manifest["max_chars"])
    perplexity_url, perplexity_manifest = None, None
    if cleaning.perplexity.enabled or any(o.get("perplexity", {}).get("enabled") for o in cleaning.languages.values()):
        perplexity_manifest = read_manifest(store, "perplexity_model")
        if perplexity_manifest is None:
            raise FileNotFoundError(
                f"cleaning.perplexity is enabled for {ref.source} but {store.uri('perplexity_model')} has no model: "
                "materialize perplexity_model first"
            )
        perplexity_url = store.uri("perplexity_model")
    code_prefix = side_prefix(CODE_DATASET, ref)
    dropped_prefix = side_prefix(DROPPED_DATASET, ref)
    routing = cleaning.code_share.enabled and cleaning.code_share.route_above is not None
    tasks = [
        CleanTask(
            store.uri(raw_prefix), entry["key"], store.uri(prefix), index, cleaning, config.s3, quality_url, quality_max_chars,
            code_url=store.uri(code_prefix) if routing else None,
            perplexity_model_url=perplexity_url,
            perplexity_models=perplexity_manifest["models"] if perplexity_manifest else None,
            source=ref.source,
            snapshot=ref.snapshot,
            dropped_url=store.uri(dropped_prefix),
        )
        for index, entry in enumerate(raw_manifest["files"])
    ]
    # Each task records its completion; a re-run reuses the verified outputs of finished tasks (sluice.tasks).
    # A task's identity: its raw part's digest, the quality model's, and the source's cleaning settings.
    records_url = store.uri(records_prefix(ASSET, ref))
    jobs = [
        RecordedTask(
            clean_part, task, f"{ref.key}/{entry['key']}", task_digest(ASSET, task, [entry["sha256"], quality_sha or ""]),
            records_url, record_key(task.part),
            (("part", task.output_url), ("dropped", task.dropped_url or task.output_url), ("code", task.code_url or "")),
            config.s3, volatile=("worker_cpu_s",),
        )
        for task, entry in zip(tasks, raw_manifest["files"], strict=True)
    ]
    executor = compute.executor()
    progress = stage_progress(context, f"{ASSET} {ref.key}", len(tasks))
    results = executor.map(run_recorded, jobs, progress=lambda r: progress.update(r["stats"]["documents_in"], r["stats"]["chars_in"]))
    counts = TaskCounts.of(results)
    context.log.info(counts.line(f"{ASSET} {ref.key}"))

    stats = [r["stats"] for r in results]
    documents_in = sum(s["documents_in"] for s in stats)
    documents_out = sum(s["documents_out"] for s in stats)
    drops: Counter[str] = Counter()
    drops_by_step: Counter[str] = Counter()
    reached: Counter[str] = Counter()
    languages: Counter[str] = Counter()
    languages_in: Counter[str] = Counter()
    pii: Counter[str] = Counter()
    residual_pii: Counter[str] = Counter()
    input_bytes: list[int] = []
    extracted_chars: list[int] = []
    output_chars: list[int] = []
    quality_scores: list[float] = []
    routed: Counter[str] = Counter()
    code_shares: list[float] = []
    perplexities: list[float] = []
    buckets: Counter[str] = Counter()
    toxic_documents = toxic_terms = 0
    step_order: list[str] = []
    for s in stats:
        drops.update(s["drops"])
        drops_by_step.update(s["drops_by_step"])
        reached.update(s["reached"])
        languages.update(s["languages"])
        languages_in.update(s["languages_in"])
        pii.update(s["pii"])
        residual_pii.update(s["residual_pii"])
        input_bytes += s["input_bytes"]
        extracted_chars += s["extracted_chars"]
        output_chars += s["output_chars"]
        quality_scores += s["quality_scores"]
        routed.update(s["routed"])
        code_shares += s["code_shares"]
        perplexities += s["perplexities"]
        buckets.update(s["perplexity_buckets"])
        toxic_documents += s["toxic_documents"]
        toxic_terms += s["toxic_terms"]
        step_order += [name for name in s["reached"] if name not in step_order]
    files = [r["part"] for r in results]
    side_files = [{**r["dropped"], "prefix": dropped_prefix} for r in results] + [{**r["code"], "prefix": code_prefix} for r in results if r["code"]]
    write_manifest(
        store,
        prefix,
        {
            "asset": ASSET,
            "partition": {"source": ref.source, "snapshot": ref.snapshot},
            "files": files,
            "side_files": side_files,
            "documents": documents_out,
            "drops": dict(drops),
            "routed": dict(routed),
            # what the quality report draws (sluice.report), as measured while writing
            "stats": {
                "documents_in": documents_in,
                "funnel": [[name, reached[name], drops_by_step.get(name, 0)] for name in step_order],
                "languages": dict(sorted(languages.items())),
            },
            "task_records": record_listing(ASSET, ref, (task.part for task in tasks)),
        },
    )
    # A routed document is neither kept here nor dropped: it is written to its side dataset.
    drop_rate = 1 - (documents_out + sum(routed.values())) / documents_in if documents_in else 0.0
    low, high = cleaning.drop_rate_bounds or (config.checks.min_cleaned_drop_rate, config.checks.max_cleaned_drop_rate)
    checks = [
        AssetCheckResult(
            check_name=DROP_RATE_CHECK,
            passed=documents_in == 0 or low <= drop_rate <= high,
            severity=AssetCheckSeverity.WARN,
            metadata={"drop_rate": drop_rate, "min": low, "max": high},
            description=f"dropped {drop_rate:.1%} of {documents_in} documents (bounds {low:.0%}..{high:.0%})",
        ),
        AssetCheckResult(
            check_name=NO_PII_CHECK,
            passed=not residual_pii,
            severity=AssetCheckSeverity.ERROR,
            metadata={"residual_matches": sum(residual_pii.values()), **prefixed_counts("residual", residual_pii)},
            description=(
                "no PII pattern in the written texts"
                if not residual_pii
                else f"PII patterns left in the output: {dict(residual_pii)} (is cleaning.pii enabled for {ref.source}?)"
            ),
        ),
    ]
    funnel_rows = [("input", documents_in, "")]
    for name in step_order:
        funnel_rows.append((name, reached[name], drops_by_step.get(name, 0)))
    funnel_rows += [(f"routed to {name}", count, "") for name, count in sorted(routed.items())]
    funnel_rows.append(("kept", documents_out, ""))
    # Which thresholds applied: the source's per-language overrides of the languages seen in this partition.
    overrides = {code: cleaning.languages[code] for code in sorted(cleaning.languages) if code in languages_in}
    in_mean, in_median = _mean_median(input_bytes)
    ex_mean, ex_median = _mean_median(extracted_chars)
    out_mean, out_median = _mean_median(output_chars)
    language_rows = [
        (language, count, languages.get(language, 0))
        for language, count in sorted(languages_in.items(), key=lambda item: (-item[1], item[0]))
    ]
    known = known_keys(context, ASSET, ("drop", "language", "pii"))
    return PartitionResult(
        metadata={
            "dagster/row_count": documents_out,
            "dagster/uri": MetadataValue.path(store.uri(prefix)),
            "documents_in": documents_in,
            "documents_out": documents_out,
            "drop_rate": drop_rate,
            # Numbers, so the UI plots them across partitions.
            **{f"funnel/{index:02d}_{name}": reached[name] for index, name in enumerate(step_order)},
            # Every reason / language / PII kind seen before (or identified here) is recorded, 0 included.
            **prefixed_counts("drop", drops, known["drop"]),
            **prefixed_counts("language", languages, known["language"] | set(languages_in)),
            **prefixed_counts("pii", pii, known["pii"]),
            "pii_redactions": sum(pii.values()),
            "input_bytes_mean": in_mean,
            "input_bytes_median": in_median,
            "extracted_chars_mean": ex_mean,
            "extracted_chars_median": ex_median,
            "mean_chars_out": out_mean,
            "median_chars_out": out_median,
            "output_bytes": sum(entry["bytes"] for entry in files),
            "funnel": markdown_table(["step", "documents reaching it", "dropped by it"], funnel_rows),
            "drop_reasons": counts_table(drops),
            "languages": markdown_table(["language", "identified", "kept"], language_rows),
            "dropped_documents": MetadataValue.md(
                f"Dropped documents with step, reason and detail: `{store.uri(dropped_prefix)}/` "
                "(`polars.scan_parquet(..., hive_partitioning=True)` on `cleaned_dropped/`)."
                + (f" Routed code-heavy documents: `{code_prefix}/`." if routed else "")
            ),
            **(
                {
                    "quality_model_sha256": quality_sha,
                    "quality_threshold": float(cleaning.quality_threshold),
                    "quality_score_mean": _mean_median(quality_scores)[0],
                    "quality_score_median": _mean_median(quality_scores)[1],
                }
                if quality_sha
                else {}
            ),
            **prefixed_counts("routed", routed),
            "code_share_mean": _mean_median(code_shares)[0],
            "toxic_documents": toxic_documents,
            "toxic_terms": toxic_terms,
            "thresholds_by_language": MetadataValue.json(
                {"overridden": overrides, "documents": {code: languages_in[code] for code in overrides}}
            ),
            **(
                {
                    "perplexity_model_sha256": perplexity_manifest["sha256"],
                    "perplexity_median": _mean_median(perplexities)[1],
                    **prefixed_counts("perplexity_bucket", buckets),
                }
                if perplexity_manifest
                else {}
            ),
            **counts.metadata(),
            "compute": executor.describe(),
        },
        checks=checks,
    )
