"""What `sluice materialize` / `demo` print once Dagster has done the work, read back from the instance: per
stage the backfill's wall time and asset partitions (materialized / failed / not run), the per-partition
document funnel, drops by reason, languages, models, tokenizer, mixes, checks, and one training batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from dagster import AssetKey, AssetRecordsFilter, DagsterEventType
from dagster._core.storage.dagster_run import RunsFilter

from data_assets.partitions import SNAPSHOTS, partition_key
from sluice.io.layout import PartitionRef

STAGE_ROWS = ("raw_documents", "cleaned_documents", "deduped_documents", "tokenized_shards")
MAX_ROWS = 40  # partitions listed one per line; the totals cover all of them


def latest_metadata(instance: Any, asset: str, partition: str | None = None) -> dict[str, Any]:
    """The metadata of the latest materialization of an asset (partition), as plain values."""
    return _latest_materialization(instance, asset, partition)[1]


def _latest_materialization(instance: Any, asset: str, partition: str | None) -> tuple[float | None, dict[str, Any]]:
    """(when, metadata as plain values) of the latest materialization of an asset (partition); (None, {})."""
    records_filter = AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition] if partition else None)
    records = instance.fetch_materializations(records_filter, limit=1).records
    if not records:
        return None, {}
    materialization = records[0].event_log_entry.asset_materialization
    return records[0].timestamp, {key: getattr(value, "value", value) for key, value in (materialization.metadata or {}).items()}


def _raw_row(instance: Any, partition: str) -> dict[str, Any]:
    """What the summary shows of a raw_documents partition: its latest materialization's metadata, or, when
    its blocking quarantine check failed after that (the partition then is not materialized), the counts
    that check recorded, with `failed` saying why."""
    from dagster import AssetCheckKey
    from dagster._core.event_api import PartitionKeyFilter
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

    from data_assets.raw import QUARANTINE_CHECK

    materialized_at, metadata = _latest_materialization(instance, "raw_documents", partition)
    key = AssetCheckKey(AssetKey("raw_documents"), QUARANTINE_CHECK)
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key([key], partition_filter=PartitionKeyFilter(key=partition)).get(key)
    if latest is None or latest.status != AssetCheckExecutionRecordStatus.FAILED or latest.event is None:
        return metadata
    if materialized_at is not None and latest.event.timestamp <= materialized_at:
        return metadata
    evaluation = latest.event.dagster_event.event_specific_data
    counts = {name: getattr(value, "value", value) for name, value in (evaluation.metadata or {}).items()}
    return {**counts, "failed": f"blocking check {QUARANTINE_CHECK} failed: {evaluation.description}"}


def _counts(subset: Any) -> Counter[str]:
    return Counter(pair.asset_key.to_user_string() for pair in subset.iterate_asset_partitions()) if subset is not None else Counter()


def backfill_stages(instance: Any, backfill_id: str) -> list[tuple[str, float, int, int, int]]:
    """(asset, wall seconds of its steps, materialized, failed, not run) for each asset the backfill targeted."""
    data = instance.get_backfill(backfill_id).asset_backfill_data
    target, done, failed = _counts(data.target_subset), _counts(data.materialized_subset), _counts(data.failed_and_downstream_subset)
    seconds: Counter[str] = Counter()
    for run in instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id})):
        for step in instance.get_run_step_stats(run.run_id):
            if step.start_time and step.end_time:
                seconds[step.step_key] += step.end_time - step.start_time
    return [
        (asset, seconds.get(asset, 0.0), done[asset], failed[asset], max(0, target[asset] - done[asset] - failed[asset]))
        for asset in target
    ]


def backfill_checks(instance: Any, backfill_id: str) -> list[tuple[str, str, bool]]:
    checks = []
    for run in instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id})):
        for record in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION):
            evaluation = record.dagster_event.event_specific_data
            checks.append((evaluation.asset_key.to_user_string(), evaluation.check_name, evaluation.passed))
    return checks


def failed_runs(instance: Any, backfill_id: str) -> list[tuple[str, str]]:
    """(what the run materialized, why it failed) for each failed run of a backfill."""
    from dagster import DagsterRunStatus

    from data_assets.backfill import failure_reason, run_label

    runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}, statuses=[DagsterRunStatus.FAILURE]))
    return [(run_label(run), failure_reason(instance, run.run_id)) for run in reversed(runs)]


def backfill_partitions(instance: Any, backfill_id: str) -> list[PartitionRef]:
    """The source x snapshot partitions a backfill targeted, in dedup order."""
    from data_assets.partitions import ref_of

    data = instance.get_backfill(backfill_id).asset_backfill_data
    refs = {ref_of(pair.partition_key) for pair in data.target_subset.iterate_asset_partitions() if pair.partition_key and "|" in str(pair.partition_key)}
    return sorted(refs, key=PartitionRef.sort_key)


def collect(instance: Any, config: Any, refs: Iterable[PartitionRef]) -> dict[str, Any]:
    """What the summary prints about these partitions and the unpartitioned assets."""
    report: dict[str, Any] = {"partitions": {}, "mixes": {}}
    for ref in refs:
        key = partition_key(ref)
        report["partitions"][(ref.source, ref.snapshot)] = {
            asset: _raw_row(instance, key) if asset == "raw_documents" else latest_metadata(instance, asset, key) for asset in STAGE_ROWS
        }
    for asset in ("quality_model", "tokenizer", "quality_report"):
        report[asset] = latest_metadata(instance, asset)
    for mix in sorted(config.mixes):
        report["mixes"][mix] = latest_metadata(instance, "mixed_dataset", mix)
    return report


def registered_refs(instance: Any, config: Any) -> list[PartitionRef]:
    return sorted(
        (PartitionRef(source, snapshot) for snapshot in instance.get_dynamic_partitions(SNAPSHOTS) for source in config.source_names),
        key=PartitionRef.sort_key,
    )


def print_stages(stages: list[tuple[str, float, int, int, int]], out: Callable[[str], None] = print) -> None:
    if not stages:
        return
    out("")
    out("Stages (wall time of their steps; asset partitions materialized / failed / not run)")
    width = max(len(stage[0]) for stage in stages)
    for asset, seconds, done, failed, not_run in stages:
        out(f"  {asset.ljust(width)}  {seconds:8.1f} s   {done} / {failed} / {not_run}")
    out(f"  {'total'.ljust(width)}  {sum(stage[1] for stage in stages):8.1f} s")


def print_partitions(report: dict[str, Any], out: Callable[[str], None] = print) -> None:
    rows = []
    failed = []
    all_drops: Counter[str] = Counter()
    for (source, snapshot), meta in report["partitions"].items():
        raw, cleaned, deduped, tokenized = (meta.get(asset, {}) for asset in STAGE_ROWS)
        drops = {k.split("/", 1)[1]: v for k, v in cleaned.items() if k.startswith("drop/")}
        all_drops.update(drops)
        if raw.get("failed"):
            failed.append(f"{source}/{snapshot}: raw_documents {raw['failed']}")
        rows.append((
            f"{source}/{snapshot}" + (" (failed)" if raw.get("failed") else ""), raw.get("documents_out", 0), raw.get("quarantined_records", 0), cleaned.get("documents_out", 0),
            sum(drops.values()), deduped.get("documents_out", 0), deduped.get("removed_exact", 0), deduped.get("removed_fuzzy", 0),
            tokenized.get("tokens", 0),
        ))
    header = ("partition", "raw docs", "quarantined", "cleaned", "dropped", "deduped", "exact dups", "near dups", "tokens")
    shown = rows[:MAX_ROWS]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *shown, strict=True)]
    out("")
    out("Per-stage summary (documents in -> out at each stage)")
    for row in [header, *shown]:
        out("  " + "  ".join(str(value).ljust(width) for value, width in zip(row, widths, strict=True)))
    if len(rows) > len(shown):
        out(f"  ... and {len(rows) - len(shown)} more partitions")
    totals = [sum(row[i] for row in rows) for i in (1, 2, 3, 5, 6, 7, 8)]
    out(
        f"  total: raw {totals[0]}, quarantined {totals[1]}, cleaned {totals[2]}, deduped {totals[3]} "
        f"({totals[4]} exact and {totals[5]} near duplicates removed), {totals[6]} tokens"
    )
    languages: Counter[str] = Counter()
    pii = 0
    for meta in report["partitions"].values():
        cleaned = meta.get("cleaned_documents", {})
        pii += cleaned.get("pii_redactions", 0)
        languages.update({key.split("/", 1)[1]: value for key, value in cleaned.items() if key.startswith("language/") and value})
    kept = ", ".join(f"{language} {count}" for language, count in sorted(languages.items(), key=lambda item: (-item[1], item[0])))
    reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(all_drops.items(), key=lambda item: (-item[1], item[0])) if count)
    for line in failed:
        out(f"  failed partition {line}")
    _print_unread_files(report, out)
    out(f"  cleaning drops by reason: {reasons or '-'}")
    out(f"  cleaning kept by language: {kept or '-'}; PII redactions: {pii}")


def _print_unread_files(report: dict[str, Any], out: Callable[[str], None]) -> None:
    """The crawl files not read because their name matches no known suffix (raw_documents' `unrecognized_files`)."""
    names: list[str] = []
    count = 0
    for meta in report["partitions"].values():
        raw = meta.get("raw_documents", {})
        count += raw.get("unrecognized_files", 0)
        names.extend(raw.get("unrecognized_file_names") or [])
    recovered = sum(meta.get("raw_documents", {}).get("recovered_records", 0) for meta in report["partitions"].values())
    if count:
        shown = ", ".join(names[:10]) + (f" and {count - 10} more" if count > 10 else "")
        out(f"  files not read (no known suffix for their source's format): {count}: {shown}")
    if recovered:
        out(f"  records recovered from gzip members cut in their trailer: {recovered}")


def print_products(report: dict[str, Any], out: Callable[[str], None] = print) -> None:
    quality = report.get("quality_model") or {}
    if quality:
        out(
            f"\nQuality model: fastText, {quality.get('positives')} positives / {quality.get('negatives')} negatives, "
            f"held-out accuracy {quality.get('held_out_accuracy', 0):.3f} (scores documents when cleaning.quality_threshold is set)"
        )
    tok = report.get("tokenizer") or {}
    if tok:
        out(f"\nTokenizer: vocab {tok.get('vocab_size')}, sha256 {str(tok.get('sha256'))[:16]}..., {tok.get('origin')}")
    else:
        out("\nTokenizer: not built yet")
    for mix, meta in report["mixes"].items():
        if not meta:
            out(f"Mix {mix!r}: not built yet")
            continue
        shares = ", ".join(f"{k.split('/', 1)[1]} {v:.3f}" for k, v in meta.items() if k.startswith("share/"))
        out(f"Mix {mix!r}: {meta.get('tokens')} tokens, {meta.get('samples')} samples of {meta.get('sequence_length')}; realized shares: {shares}")
        out(
            f"  validation: {meta.get('validation_documents')} held-out documents, {meta.get('validation_tokens')} tokens; "
            f"decontamination removed {meta.get('contaminated_documents')} documents"
        )
    quality_report = report.get("quality_report") or {}
    if quality_report:
        out(f"Quality report ({quality_report.get('partitions')} partitions; PNG and HTML): {quality_report.get('html')}")


def print_checks(checks: list[tuple[str, str, bool]], out: Callable[[str], None] = print) -> None:
    failed = [check for check in checks if not check[2]]
    out(f"Asset checks: {len(checks) - len(failed)} passed, {len(failed)} failed" + (f": {failed}" if failed else ""))


def print_batch(resources: dict[str, Any], mix: str, out: Callable[[str], None] = print) -> None:
    from resources import TrainingLoaderResource

    loader = TrainingLoaderResource(settings=resources["settings"], mix=mix, batch_size=4, device="cpu")
    batch = next(iter(loader.batches()))
    tokenizer = resources["tokenizer_resource"].load()
    out(f"\nOne training batch of mix {mix!r}: input_ids {tuple(batch['input_ids'].shape)} {batch['input_ids'].dtype}, labels {tuple(batch['labels'].shape)}")
    text = tokenizer.decode(batch["input_ids"][0].tolist(), skip_special_tokens=False)
    out("  row 0, decoded (first 400 characters):")
    out("  " + repr(text[:400]))
