"""`sluice` command line: register snapshots, materialize the whole graph, print what happened.

    sluice register     add every snapshot found under the source locations as a dynamic partition
    sluice materialize  register, then materialize every asset for every partition and mix, one asset
                        partition per run in the asset graph's order, with progress; a failed partition
                        blocks only what depends on it, everything else completes; prints per-stage wall
                        times, a summary and what failed and why; exit code 1 if anything failed
    sluice demo         the same on the configured crawl (the bundled sample by default), then one
                        decoded training batch
    sluice export       write a built mix's split as Parquet, WebDataset or MDS shards (--mix, --split,
                        --format, --out, --seed)
    sluice cleanup      remove what crashed runs left behind (temp files, scratch folders, stale
                        multipart uploads); never anything a reader can see
    sluice trace        which documents a training batch held, where they came from, why they were kept
                        (data_assets/trace_cli.py; `sluice trace --help`)

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

# Not data_assets.settings: importing it loads the config, and a config error must print as a message.
PROJECT_ROOT = Path(__file__).resolve().parents[1]

DAGSTER_YAML = """\
# Project-local Dagster instance: SQLite storage under this folder (the default when no storage is named).
# For Postgres-backed storage in production, see deploy/dagster.yaml.
# Writes to the global dedup index run one at a time: the `dedup_index` pool (the only pool sluice uses).
concurrency:
  pools:
    default_limit: 1
    granularity: op
telemetry:
  enabled: false
"""


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


class GraphFailed(RuntimeError):
    """Some asset partitions failed (materialize_all with raise_on_failure)."""


def materialize_all(
    instance,
    resources: dict[str, Any],
    log: Callable[[str], None] = print,
    raise_on_failure: bool = True,
    strict: bool = False,
    command: str = "materialize",
) -> dict[str, Any]:
    """Materialize every asset for every registered source x snapshot partition and every mix, one asset
    partition per run in the asset graph's order (data_assets.runner): a failed partition blocks only what
    depends on it. Returns the metadata and check outcomes by partition, the outcomes and per-stage wall
    times; with `raise_on_failure`, raises GraphFailed naming what failed once everything else ran."""
    from dagster import MultiPartitionKey

    from data_assets.definitions import OPTIONAL_ASSETS, defs
    from data_assets.runner import GraphRunner, plan

    config = resources["settings"].config

    def include(asset, key) -> bool:
        if isinstance(key, MultiPartitionKey):
            return key.keys_by_dimension["source"] in config.source_names
        return asset.to_user_string() != "mixed_dataset" or key in config.mixes

    def order(key):
        if isinstance(key, MultiPartitionKey):
            dims = key.keys_by_dimension
            return (dims["snapshot"], dims["source"])
        return (str(key),)

    stages = plan(defs, instance, include, order)
    unavailable = {name: (lambda check=check: check(config)) for name, check in OPTIONAL_ASSETS.items()}
    runner = GraphRunner(defs, instance, resources, unavailable, strict=strict, log=log, tags={"sluice/command": command}, order=order)
    outcomes = runner.run(stages)

    report: dict[str, Any] = {
        "partitions": {}, "quality_model": {}, "tokenizer": {}, "quality_report": {}, "mixes": {}, "checks": [],
        "outcomes": outcomes, "failed": runner.failed, "stage_seconds": runner.stage_seconds, "invocation": runner.invocation,
    }
    for stage in stages:
        for key in stage.partitions:
            if isinstance(key, MultiPartitionKey):
                dims = key.keys_by_dimension
                report["partitions"].setdefault((dims["source"], dims["snapshot"]), {})
    for outcome in outcomes:
        report["checks"].extend(outcome.checks)
        if outcome.status != "ok":
            continue
        if isinstance(outcome.partition, MultiPartitionKey):
            dims = outcome.partition.keys_by_dimension
            report["partitions"][(dims["source"], dims["snapshot"])][outcome.asset] = outcome.metadata
        elif outcome.asset == "mixed_dataset":
            report["mixes"][str(outcome.partition)] = outcome.metadata
        elif outcome.asset in ("quality_model", "tokenizer", "quality_report"):
            report[outcome.asset] = outcome.metadata
    if raise_on_failure and runner.failed:
        raise GraphFailed("; ".join(f"{o.label}: {o.status} ({o.reason})" for o in runner.failed))
    return report


def print_outcomes(report: dict[str, Any], out: Callable[[str], None] = print) -> None:
    """Per-stage wall time and partition counts; skipped optional assets; what failed and why."""
    outcomes = report.get("outcomes") or []
    if not outcomes:
        return
    out("")
    out("Stages (wall time; asset partitions ok / failed / blocked by a failure upstream / skipped)")
    by_stage: dict[str, dict[str, int]] = {}
    for outcome in outcomes:
        counts = by_stage.setdefault(outcome.asset, {"ok": 0, "failed": 0, "blocked": 0, "skipped": 0})
        counts[outcome.status] += 1
    width = max(len(name) for name in by_stage)
    total = 0.0
    for name, counts in by_stage.items():
        seconds = report["stage_seconds"].get(name, 0.0)
        total += seconds
        out(f"  {name.ljust(width)}  {seconds:8.1f} s   {counts['ok']} / {counts['failed']} / {counts['blocked']} / {counts['skipped']}")
    out(f"  {'total'.ljust(width)}  {total:8.1f} s")
    for outcome in outcomes:
        if outcome.status == "skipped":
            out(f"  skipped {outcome.label}: {outcome.reason}")
        elif outcome.without:
            out(f"  {outcome.label} ran without failed upstream partitions: {', '.join(outcome.without)}")
    failed = report.get("failed") or []
    if failed:
        out(f"\nFAILED: {len(failed)} asset partition{'s' if len(failed) != 1 else ''}")
        for outcome in failed:
            where = f" (run {outcome.run_id})" if outcome.run_id else ""
            out(f"  {outcome.label}: {outcome.status}: {outcome.reason}{where}")


def print_summary(report: dict[str, Any], out: Callable[[str], None] = print) -> None:
    print_outcomes(report, out)
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
    if tok:
        out(f"\nTokenizer: vocab {tok.get('vocab_size')}, sha256 {str(tok.get('sha256'))[:16]}..., {tok.get('origin')}")
    else:
        out("\nTokenizer: not built in this run")
    for mix, meta in report["mixes"].items():
        shares = ", ".join(f"{k.split('/', 1)[1]} {v:.3f}" for k, v in meta.items() if k.startswith("share/"))
        out(f"Mix {mix!r}: {meta.get('tokens')} tokens, {meta.get('samples')} samples of {meta.get('sequence_length')}; realized shares: {shares}")
        out(
            f"  validation: {meta.get('validation_documents')} held-out documents, {meta.get('validation_tokens')} tokens; "
            f"decontamination removed {meta.get('contaminated_documents')} documents"
        )
    quality_report = report.get("quality_report") or {}
    if quality_report:
        out(f"Quality report ({quality_report.get('partitions')} partitions; PNG and HTML): {quality_report.get('html')}")
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
    """Errors print as one line (the config's own messages name the file, the key and the fix); the
    traceback only with --debug."""
    from sluice.config import ConfigError

    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except ConfigError as error:  # raised where the code location loads the config (partition keys)
        if debug:
            raise
        print(error, file=sys.stderr)
        return 2
    except Exception as error:
        if debug:
            raise
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(f"sluice: {type(error).__name__}: {message} (run with --debug for the traceback)", file=sys.stderr)
        return 1


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["trace"]:  # its own options (data_assets/trace_cli.py)
        from data_assets.trace_cli import main as trace

        return trace(argv[1:])
    parser = argparse.ArgumentParser(prog="sluice", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["register", "materialize", "demo", "export", "cleanup"])
    parser.add_argument(
        "--strict", action="store_true",
        help="materialize/demo: a failed partition also blocks assets that read every partition (tokenizer, mixes), as a Dagster backfill does",
    )
    parser.add_argument("--mix", default=None, help="export: the mix (default: the first in the config)")
    parser.add_argument("--split", default="train", choices=["train", "validation"], help="export: which split")
    parser.add_argument("--out", default=None, help="export: destination folder, local or s3://bucket/prefix (the split goes to OUT/<split>/)")
    parser.add_argument("--format", default="parquet", choices=["parquet", "webdataset", "mds"], help="export: file format")
    parser.add_argument("--seed", type=int, default=None, help="export: row order = the training loader's with this seed (default: the mix's)")
    parser.add_argument("--debug", action="store_true", help="print the Python traceback of an error")
    args = parser.parse_args(argv)
    if args.command == "export":
        return export_mix(args.mix, args.split, args.out, args.format, args.seed)
    home = ensure_dagster_home()
    # Stage progress: a bar on a terminal, else the progress lines on stderr (logs, pipes).
    os.environ.setdefault("SLUICE_PROGRESS", "bar" if sys.stderr.isatty() else "lines")
    from dagster import DagsterInstance

    from data_assets.definitions import build_resources
    from data_assets.settings import CONFIG_PATH
    from sluice.config import ConfigError

    try:
        resources = build_resources(CONFIG_PATH)
        resources["settings"].config  # noqa: B018 - validate early, with a clear message
    except ConfigError as error:
        if args.debug:
            raise
        print(error, file=sys.stderr)
        return 2
    if args.command in ("register", "materialize", "demo"):
        from sluice.preflight import location_problems

        # Source folders and the storage root, checked before any work: one line per problem.
        problems = location_problems(resources["settings"].config, CONFIG_PATH)
        if problems:
            print("\n".join(problems), file=sys.stderr)
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
        report = materialize_all(instance, resources, raise_on_failure=False, strict=args.strict, command=args.command)
        print_summary(report)
        config = resources["settings"].config
        first_mix = sorted(config.mixes)[0]
        if args.command == "demo" and first_mix in report["mixes"]:
            print_batch(resources, first_mix)
        if report["failed"]:
            print(f"\n{len(report['failed'])} asset partition(s) failed (listed above); runs are in the Dagster UI (make ui), tag sluice/invocation={report['invocation']}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
