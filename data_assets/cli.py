"""`sluice` command line: register snapshots, materialize the whole graph, print what happened.

    sluice register   add every snapshot found under the source locations as a dynamic partition
    sluice demo       register, materialize every asset for every partition and mix, print a summary
                      and one decoded training batch
    sluice export     write a built mix's split as Parquet, WebDataset or MDS shards (--mix, --split,
                      --format, --out, --seed)
    sluice cleanup    remove what crashed runs left behind (temp files, scratch folders, stale
                      multipart uploads); never anything a reader can see

Runs go through the Dagster instance at $DAGSTER_HOME (default: .dagster_home/ in the project root,
SQLite storage), so `dagster dev` shows them afterwards.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_assets.settings import PROJECT_ROOT

DAGSTER_YAML = """\
# Project-local Dagster instance: SQLite storage under this folder (the default when no storage is named).
# For Postgres-backed storage in production, see deploy/dagster.yaml.
telemetry:
  enabled: false
"""


QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def ensure_dagster_home() -> str:
    home = os.environ.get("DAGSTER_HOME") or str(PROJECT_ROOT / ".dagster_home")
    os.environ["DAGSTER_HOME"] = home
    Path(home).mkdir(parents=True, exist_ok=True)
    config = Path(home) / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    return home


def register_snapshots(instance, resources: dict[str, Any]) -> list[tuple[str, str]]:
    from data_assets.partitions import SNAPSHOTS
    from data_assets.sensors import discover_snapshots

    pairs = discover_snapshots(resources["settings"])
    snapshots = sorted({snapshot for _, snapshot in pairs})
    known = set(instance.get_dynamic_partitions(SNAPSHOTS))
    new = [s for s in snapshots if s not in known]
    if new:
        instance.add_dynamic_partitions(SNAPSHOTS, new)
    return pairs


def _metadata_of(result) -> dict[str, dict[str, Any]]:
    """asset name -> metadata values (plain Python) of the materializations in a run result."""
    out: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        out[materialization.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    return out


def _checks_of(result) -> list[tuple[str, str, bool]]:
    checks = []
    for event in result.get_asset_check_evaluations():
        checks.append((event.asset_key.to_user_string(), event.check_name, event.passed))
    return checks


def materialize_all(
    instance, resources: dict[str, Any], log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Materialize every asset for every registered source x snapshot partition and every mix, in the order
    the dedup rule needs (partitions by (snapshot, source)). Returns the metadata and check outcomes."""
    from dagster import materialize

    from data_assets.definitions import ASSETS
    from data_assets.partitions import SNAPSHOTS, multi_key

    config = resources["settings"].config
    snapshots = sorted(instance.get_dynamic_partitions(SNAPSHOTS))
    keys = [(source, snapshot) for snapshot in snapshots for source in sorted(config.source_names)]
    report: dict[str, Any] = {"partitions": {}, "quality_model": {}, "tokenizer": {}, "mixes": {}, "checks": []}

    def run(selection: list[str], partition_key=None):
        result = materialize(
            ASSETS,
            selection=selection,
            partition_key=partition_key,
            instance=instance,
            resources=resources,
            run_config=QUIET_CONSOLE,  # the events still go to the instance (and the UI)
            raise_on_error=True,
        )
        report["checks"].extend(_checks_of(result))
        return _metadata_of(result)

    for source, snapshot in keys:
        log(f"  materializing raw_documents for {source}/{snapshot}")
        report["partitions"][(source, snapshot)] = run(["raw_documents"], multi_key(source, snapshot))
    if config.quality_model.positive_source:
        # Trained on raw documents of every partition, before cleaning (which scores with it when
        # cleaning.quality_threshold is set).
        log("  materializing quality_model")
        report["quality_model"] = run(["quality_model"]).get("quality_model", {})
    for source, snapshot in keys:
        log(f"  materializing cleaned -> deduped -> decontamination for {source}/{snapshot}")
        report["partitions"][(source, snapshot)].update(run(["cleaned_documents", "deduped_documents", "decontamination"], multi_key(source, snapshot)))
    log("  materializing tokenizer")
    report["tokenizer"] = run(["tokenizer"]).get("tokenizer", {})
    for source, snapshot in keys:
        log(f"  materializing tokenized_shards for {source}/{snapshot}")
        report["partitions"][(source, snapshot)].update(run(["tokenized_shards"], multi_key(source, snapshot)))
    for mix in sorted(config.mixes):
        log(f"  materializing mixed_dataset for mix {mix}")
        report["mixes"][mix] = run(["mixed_dataset"], mix).get("mixed_dataset", {})
    return report


def print_summary(report: dict[str, Any], out: Callable[[str], None] = print) -> None:
    rows = []
    all_drops: dict[str, int] = {}
    for (source, snapshot), meta in report["partitions"].items():
        raw = meta.get("raw_documents", {})
        cleaned = meta.get("cleaned_documents", {})
        deduped = meta.get("deduped_documents", {})
        tokenized = meta.get("tokenized_shards", {})
        drops = {k.split("/", 1)[1]: v for k, v in cleaned.items() if k.startswith("drop/")}
        for reason, count in drops.items():
            all_drops[reason] = all_drops.get(reason, 0) + count
        rows.append(
            (
                f"{source}/{snapshot}",
                raw.get("documents_out", 0),
                raw.get("quarantined_records", 0),
                cleaned.get("documents_out", 0),
                sum(drops.values()),
                deduped.get("documents_out", 0),
                deduped.get("removed_exact", 0),
                deduped.get("removed_fuzzy", 0),
                tokenized.get("tokens", 0),
            )
        )
    header = ("partition", "raw docs", "quarantined", "cleaned", "dropped", "deduped", "exact dups", "near dups", "tokens")
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    out("")
    out("Per-stage summary (documents in -> out at each stage)")
    for row in [header, *rows]:
        out("  " + "  ".join(str(value).ljust(width) for value, width in zip(row, widths, strict=True)))
    totals = [sum(row[i] for row in rows) for i in (1, 2, 3, 5, 6, 7, 8)]
    out(
        f"  total: raw {totals[0]}, quarantined {totals[1]}, cleaned {totals[2]}, deduped {totals[3]} "
        f"({totals[4]} exact and {totals[5]} near duplicates removed), {totals[6]} tokens"
    )
    languages: dict[str, int] = {}
    pii = 0
    for meta in report["partitions"].values():
        cleaned = meta.get("cleaned_documents", {})
        pii += cleaned.get("pii_redactions", 0)
        for key, value in cleaned.items():
            if key.startswith("language/"):
                languages[key.split("/", 1)[1]] = languages.get(key.split("/", 1)[1], 0) + value
    kept = ", ".join(f"{language} {count}" for language, count in sorted(languages.items(), key=lambda item: (-item[1], item[0])))
    reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(all_drops.items(), key=lambda item: (-item[1], item[0])))
    out(f"  cleaning drops by reason: {reasons or '-'}")
    out(f"  cleaning kept by language: {kept or '-'}; PII redactions: {pii}")
    quality = report.get("quality_model") or {}
    if quality:
        out(
            f"\nQuality model: fastText, {quality.get('positives')} positives / {quality.get('negatives')} negatives, "
            f"held-out accuracy {quality.get('held_out_accuracy', 0):.3f} (scores documents when cleaning.quality_threshold is set)"
        )
    tok = report["tokenizer"]
    out(f"\nTokenizer: vocab {tok.get('vocab_size')}, sha256 {str(tok.get('sha256'))[:16]}..., {tok.get('origin')}")
    for mix, meta in report["mixes"].items():
        shares = ", ".join(f"{k.split('/', 1)[1]} {v:.3f}" for k, v in meta.items() if k.startswith("share/"))
        out(f"Mix {mix!r}: {meta.get('tokens')} tokens, {meta.get('samples')} samples of {meta.get('sequence_length')}; realized shares: {shares}")
        out(
            f"  validation: {meta.get('validation_documents')} held-out documents, {meta.get('validation_tokens')} tokens; "
            f"decontamination removed {meta.get('contaminated_documents')} documents"
        )
    failed = [c for c in report["checks"] if not c[2]]
    out(f"Asset checks: {len(report['checks']) - len(failed)} passed, {len(failed)} failed" + (f": {failed}" if failed else ""))


def print_batch(resources: dict[str, Any], mix: str, out: Callable[[str], None] = print) -> None:
    from resources import TrainingLoaderResource

    loader = TrainingLoaderResource(settings=resources["settings"], mix=mix, batch_size=4, device="cpu")
    batch = next(iter(loader.batches()))
    tokenizer = resources["tokenizer_resource"].load()
    out(f"\nOne training batch of mix {mix!r}: input_ids {tuple(batch['input_ids'].shape)} {batch['input_ids'].dtype}, labels {tuple(batch['labels'].shape)}")
    text = tokenizer.decode(batch["input_ids"][0].tolist(), skip_special_tokens=False)
    out("  row 0, decoded (first 400 characters):")
    out("  " + repr(text[:400]))


def export_mix(mix: str | None, split: str, out: str | None, fmt: str = "parquet", seed: int | None = None) -> int:
    """Write a built mix's split as Parquet, WebDataset or MDS shards (see data_assets/export.py)."""
    from data_assets.export import export_from_config
    from data_assets.settings import CONFIG_PATH
    from sluice.config import ConfigError, load_config
    from sluice.export import ExportError

    try:
        config = load_config(CONFIG_PATH)
        manifest = export_from_config(config, mix or sorted(config.mixes)[0], split, fmt, out, seed, log=print)
    except (ConfigError, ExportError) as error:
        print(error, file=sys.stderr)
        return 2
    print(
        f"Exported mix {manifest['mix']!r} ({split}) as {fmt}: {manifest['samples']} samples of {manifest['sequence_length']} tokens "
        f"in {len(manifest['files'])} files -> {manifest['uri']}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["register", "demo", "export", "cleanup"])
    parser.add_argument("--mix", default=None, help="export: the mix (default: the first in the config)")
    parser.add_argument("--split", default="train", choices=["train", "validation"], help="export: which split")
    parser.add_argument("--out", default=None, help="export: destination folder, local or s3://bucket/prefix (the split goes to OUT/<split>/)")
    parser.add_argument("--format", default="parquet", choices=["parquet", "webdataset", "mds"], help="export: file format")
    parser.add_argument("--seed", type=int, default=None, help="export: row order = the training loader's with this seed (default: the mix's)")
    args = parser.parse_args(argv)
    if args.command == "export":
        return export_mix(args.mix, args.split, args.out, args.format, args.seed)
    home = ensure_dagster_home()
    from dagster import DagsterInstance

    from data_assets.definitions import build_resources
    from data_assets.settings import CONFIG_PATH
    from sluice.config import ConfigError

    try:
        resources = build_resources(CONFIG_PATH)
        resources["settings"].config  # noqa: B018 - validate early, with a clear message
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    if args.command == "cleanup":
        from sluice.maintenance import cleanup

        for what, items in cleanup(resources["settings"].config).items():
            print(f"{what}: {len(items)} removed" + "".join(f"\n  {item}" for item in items))
        return 0
    with DagsterInstance.get() as instance:
        pairs = register_snapshots(instance, resources)
        print(f"Config {CONFIG_PATH}; Dagster instance {home}")
        print(f"Registered snapshots: {sorted({s for _, s in pairs})} ({len(pairs)} source x snapshot folders with data)")
        if args.command == "register":
            return 0
        report = materialize_all(instance, resources)
        print_summary(report)
        config = resources["settings"].config
        print_batch(resources, sorted(config.mixes)[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
