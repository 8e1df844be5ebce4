"""`sluice` command line: register snapshots, have Dagster materialize what is missing or stale, print what happened.

    sluice register     add every snapshot found under the source locations as a dynamic partition
    sluice materialize  register, record what changed (crawl folders, settings), then submit every asset
                        partition that is missing or stale (data_assets/freshness.py) as one Dagster asset
                        backfill, have the instance's daemon execute it (starting one for the command when
                        none runs) and follow it: each run as it starts and ends, then per-stage wall times,
                        the summary, and what failed and why. Nothing to do: nothing is submitted. --force
                        submits every partition. Ctrl-C (or SIGTERM) cancels the backfill and its runs
                        through Dagster and exits 128 + the signal (130 for Ctrl-C); exit code 1 if
                        anything failed. --select ASSET[,ASSET...] (Dagster's asset selection syntax:
                        +name, name+, *name, name*, *, key:name+ ...) and --partition SOURCE/SNAPSHOT
                        narrow the plan to those asset partitions (data_assets/selection.py); with
                        --force they are rebuilt even when up to date
    sluice demo         the same on the configured crawl (the bundled sample by default), then one
                        decoded training batch
    sluice export       write a built mix's split as Parquet, WebDataset or MDS shards (--mix, --split,
                        --format, --out, --seed)
    sluice cleanup      remove what crashed runs left behind (temp files, scratch folders, stale
                        multipart uploads); never anything a reader can see
    sluice trace        which documents a training batch held, where they came from, why they were kept
                        (data_assets/trace_cli.py; `sluice trace --help`)
    sluice whatif       what another config's cleaning settings (--config OTHER.yaml) would keep and drop,
                        from the stored statistics, without a run (data_assets/whatif_cli.py)

Runs go through the Dagster instance at $DAGSTER_HOME (default: .dagster_home/ in the project root,
SQLite storage): the UI (`make ui`) shows the backfill, its runs and their events.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_assets.instance import ensure_dagster_home

# Not data_assets.settings: importing it loads the config, and a config error must print as a message.
PROJECT_ROOT = Path(__file__).resolve().parents[1]

def discover(resources: dict[str, Any], log: Callable[[str], None] = print) -> list[tuple[str, str]]:
    """The (source, snapshot) folders with data; folders that cannot be a partition key are reported."""
    from data_assets.sensors import discover_snapshots

    rejected: list[str] = []
    pairs = discover_snapshots(resources["settings"], rejected)
    for line in rejected:
        log(f"not registered as a snapshot partition: {line}")
    return pairs


def new_snapshots(instance, pairs: list[tuple[str, str]]) -> list[str]:
    from data_assets.partitions import SNAPSHOTS

    known = set(instance.get_dynamic_partitions(SNAPSHOTS))
    return sorted({snapshot for _, snapshot in pairs} - known)


def register_snapshots(
    instance, resources: dict[str, Any], log: Callable[[str], None] = print, pairs: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """Register every snapshot folder (`pairs`, as `discover` found them; found now when not given) as a
    dynamic partition and record the new partitions' crawl versions."""
    from data_assets.partitions import SNAPSHOTS
    from data_assets.versions import observe
    from sluice.io.layout import PartitionRef

    pairs = discover(resources, log) if pairs is None else pairs
    new = new_snapshots(instance, pairs)
    if new:
        instance.add_dynamic_partitions(SNAPSHOTS, new)
        config = resources["settings"].config
        observe(instance, config, [PartitionRef(source, snapshot) for snapshot in new for source in config.source_names])
    return pairs


def plan_work(
    instance, resources: dict[str, Any], force: bool = False, log: Callable[[str], None] = print, pending: list[str] | None = None, selection: Any = None
) -> Any:
    """Record what changed (crawl folders, settings) and return what is missing or stale; `pending`:
    snapshots about to be registered (planned as missing); `selection`: the assets and partition the plan
    is narrowed to (data_assets/selection.py; None: everything)."""
    from data_assets.definitions import defs, unavailable_assets
    from data_assets.freshness import Planner
    from data_assets.summary import registered_refs
    from data_assets.versions import observe

    config = resources["settings"].config
    changed = observe(instance, config, registered_refs(instance, config))
    if changed:
        log(f"Recorded changed inputs: {', '.join(changed[:6])}" + (f" and {len(changed) - 6} more" if len(changed) > 6 else ""))
    skipped = unavailable_assets(config)
    for name in sorted(skipped):
        reason = config.quality_model_unavailable() if name == "quality_model" else config.perplexity_model_unavailable()
        log(f"Skipped (optional, this config cannot feed it): {name}: {reason}")
    allows = selection.allows if selection is not None else (lambda asset, partition: True)

    def in_scope(asset: Any, partition: Any) -> bool:
        return asset.to_user_string() not in skipped and in_config(config, partition) and allows(asset, partition)

    return Planner(defs, instance, in_scope=in_scope, new_snapshots=pending or ()).plan(force=force)


def log_selection(selection: Any, pending: list[str], log: Callable[[str], None]) -> None:
    """What --select/--partition keep and leave out."""
    from data_assets.partitions import ref_of

    assets = "every asset" if selection.assets is None else ", ".join(sorted(key.to_user_string() for key in selection.assets))
    log(f"Selected: {assets}" + (f" [{ref_of(selection.partition).key}]" if selection.partition else ""))
    if selection.left_out:
        log(f"Left out (no source/snapshot partitions, --partition names one): {', '.join(selection.left_out)}")
    if pending:
        log(f"Not registered (a selective command registers no snapshot): {', '.join(pending)}; `sluice register` adds them")


def in_config(config: Any, partition: Any) -> bool:
    """Whether a partition belongs to this config: its source, or its mix (the code location's partitions
    come from the config it loaded; a test process may have loaded another)."""
    dims = getattr(partition, "keys_by_dimension", None)
    if dims:
        return dims["source"] in config.source_names
    return partition is None or str(partition) in config.mixes


def materialize(
    instance, resources: dict[str, Any], command: str = "materialize", force: bool = False, log: Callable[[str], None] = print, selection: Any = None
) -> Any:
    """Plan, submit the plan as an asset backfill, have a daemon run it, follow it. Returns the Outcome, or
    None when there was nothing to do. With a narrowed `selection` (--select/--partition) only those asset
    partitions are planned and no snapshot is registered (automation would build a new one whole)."""
    from data_assets.backfill import DaemonProcess, Follower, in_progress, submit, wait_until_quiet
    from data_assets.definitions import defs

    with DaemonProcess(instance, log) as daemon:
        if in_progress(instance):  # what is in progress needs a daemon to end
            daemon.ensure()
            wait_until_quiet(instance, log, daemon)
        pairs = discover(resources, log=lambda _: None)
        pending = new_snapshots(instance, pairs)
        narrowed = selection is not None and selection.narrowed
        if narrowed:
            log_selection(selection, pending, log)
            pending = []
        plan = plan_work(instance, resources, force, log, pending, selection)
        if not plan.count:
            log(f"Up to date: {plan.checked} asset partitions checked, none missing or stale; nothing submitted")
            return None
        log(f"To run: {plan.count} asset partitions")
        for line in plan.lines():
            log(f"  {line}")
        # Registered only now, the backfill right after: automation never sees the new partitions missing
        # and not yet in progress (it would request them too).
        if not narrowed:
            register_snapshots(instance, resources, pairs=pairs)  # the folders the plan saw
        backfill_id = submit(instance, defs, plan, command)
        log(f"Submitted backfill {backfill_id} (the UI: Overview -> Backfills); following it")
        daemon.ensure()
        return Follower(instance, backfill_id, log, daemon).follow()


def narrowed_selection(instance, resources: dict[str, Any], select: str | None, partition: str | None) -> Any:
    """The Selection of --select/--partition (None when neither is given)."""
    if select is None and partition is None:
        return None
    from data_assets.definitions import defs
    from data_assets.partitions import SNAPSHOTS
    from data_assets.selection import make_selection

    registered = list(instance.get_dynamic_partitions(SNAPSHOTS))
    return make_selection(select, partition, defs.resolve_asset_graph(), resources["settings"].config, registered)


def report(instance, resources: dict[str, Any], outcome: Any, command: str) -> int:
    """Print what happened; the exit code."""
    from dagster._core.execution.backfill import BulkActionStatus

    from data_assets import summary

    config = resources["settings"].config
    if outcome is not None and outcome.interrupted:
        why = signal.Signals(outcome.signal).name if outcome.signal else "a run was canceled"
        if outcome.status == BulkActionStatus.CANCELED:
            print(f"Interrupted ({why}): backfill {outcome.backfill_id} canceled, every run ended; `sluice {command}` resumes where it stopped", file=sys.stderr)
        else:  # the signal came as the backfill ended: nothing was left to cancel
            print(f"Interrupted ({why}) as backfill {outcome.backfill_id} ended ({outcome.status.value}): nothing was canceled", file=sys.stderr)
        return 128 + (outcome.signal or 2)
    if outcome is not None:
        summary.print_stages(summary.backfill_stages(instance, outcome.backfill_id))
        refs = summary.backfill_partitions(instance, outcome.backfill_id) or summary.registered_refs(instance, config)
    else:
        refs = summary.registered_refs(instance, config)
    collected = summary.collect(instance, config, refs)
    summary.print_partitions(collected)
    summary.print_products(collected)
    if outcome is not None:
        summary.print_checks(summary.backfill_checks(instance, outcome.backfill_id))
    first_mix = sorted(config.mixes)[0]
    if command == "demo" and collected["mixes"].get(first_mix):
        summary.print_batch(resources, first_mix)
    if outcome is not None and outcome.failed:
        print(f"\nFAILED: {len(outcome.failed)} run(s) of backfill {outcome.backfill_id}", file=sys.stderr)
        for run in outcome.failed:
            print(f"  {run.label}: {run.reason} (run {run.run_id})", file=sys.stderr)
        return 1
    if outcome is not None and outcome.status.value != "COMPLETED_SUCCESS":
        print(f"\nbackfill {outcome.backfill_id} ended {outcome.status.value} (the UI: Overview -> Backfills says why)", file=sys.stderr)
        return 1
    return 0


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
    except KeyboardInterrupt:  # before or after Dagster has the work (the backfill is followed with its own handler)
        print("sluice: interrupted (nothing this command submitted is running)", file=sys.stderr)
        return 130
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["register", "materialize", "demo", "export", "cleanup", "trace", "whatif"], help="what to do (see above; `sluice trace --help`, `sluice whatif --help` for their options)")
    parser.add_argument("--force", action="store_true", help="materialize/demo: submit every asset partition (of the selection), not only the missing or stale ones")
    parser.add_argument(
        "--select", default=None, metavar="ASSET[,ASSET...]",
        help="materialize: only these assets, in Dagster's asset selection syntax: a name, +name / name+ (one level up / down), "
        "*name / name* (every level), * (all), key:name+, group:..., or/and/not (data_assets/selection.py)",
    )
    parser.add_argument("--partition", default=None, metavar="SOURCE/SNAPSHOT", help="materialize: only this source x snapshot partition (a registered snapshot)")
    parser.add_argument("--mix", default=None, help="export: the mix (default: the first in the config)")
    parser.add_argument("--split", default="train", choices=["train", "validation"], help="export: which split")
    parser.add_argument("--out", default=None, help="export: destination folder, local or s3://bucket/prefix (the split goes to OUT/<split>/)")
    parser.add_argument("--format", default="parquet", choices=["parquet", "webdataset", "mds"], help="export: file format")
    parser.add_argument("--seed", type=int, default=None, help="export: row order = the training loader's with this seed (default: the mix's)")
    parser.add_argument("--debug", action="store_true", help="print the Python traceback of an error")
    return parser


def check_before_work() -> int | None:
    """The whole config check before any work (sluice.runtime.preflight.check_config_file: schema, cross-references,
    source folders, the storage root, the files it names), before the code location's modules load the
    config (data_assets.settings would stop at its schema): every problem printed in one list, exit code 2."""
    from resources.settings import resolve_config_path
    from sluice.config import ConfigError
    from sluice.runtime.preflight import check_config_file

    try:
        check_config_file(resolve_config_path())
    except ConfigError as error:  # a located problem needs no traceback, --debug or not
        print(error, file=sys.stderr)
        return 2
    return None


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["trace"]:  # its own options (data_assets/trace_cli.py)
        from data_assets.trace_cli import main as trace

        return trace(argv[1:])
    if argv[:1] == ["whatif"]:  # its own options (data_assets/whatif_cli.py)
        from data_assets.whatif_cli import main as whatif

        return whatif(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.select is not None or args.partition is not None) and args.command != "materialize":
        parser.error("--select and --partition go with materialize")
    if args.command in ("trace", "whatif"):  # reached only with an option before it
        parser.error(f"{args.command} takes its own options: put it first (`sluice {args.command} --help`)")
    if args.command == "export":
        return export_mix(args.mix, args.split, args.out, args.format, args.seed)
    if args.command in ("register", "materialize", "demo") and (code := check_before_work()) is not None:
        return code
    home = ensure_dagster_home()
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
        problems: list[str] = []  # a snapshot folder that cannot be a partition key is never skipped silently
        pairs = discover(resources, log=problems.append)
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 2
    if args.command == "cleanup":
        from sluice.runtime.maintenance import cleanup

        for what, items in cleanup(resources["settings"].config).items():
            print(f"{what}: {len(items)} removed" + "".join(f"\n  {item}" for item in items))
        return 0
    with DagsterInstance.get() as instance:
        if args.command == "register":
            register_snapshots(instance, resources, pairs=pairs)
        print(f"Config {CONFIG_PATH}; Dagster instance {home}")
        print(f"Snapshots: {sorted({s for _, s in pairs})} ({len(pairs)} source x snapshot folders with data)")
        if args.command == "register":
            return 0
        try:
            selection = narrowed_selection(instance, resources, args.select, args.partition)
        except ValueError as error:  # SelectionError: what the graph has instead
            print(error, file=sys.stderr)
            return 2
        outcome = materialize(instance, resources, args.command, force=args.force, selection=selection)
        return report(instance, resources, outcome, args.command)


if __name__ == "__main__":
    sys.exit(main())
