"""`sluice trace`: which documents a training batch held, where they came from and why the filters kept them.

    sluice trace --mix default --step 1200 --batch-size 8 --world-size 64        # a step alone
    sluice trace --mix default --checkpoint ckpt.pt --step 1250                   # steps after a checkpoint
    sluice trace --mix default --provenance spike-step-1250-rank*.json           # what a loss-spike hook saved
    sluice trace --mix default --doc-id web/2026-01/a.warc.gz#12 --doc-id ...     # documents, no batch
    options: --rank R (repeatable; default every rank), --seed, --margin 0.1 (near a threshold: within 10 %),
             --no-measures (skip the cleaning replay), --out DIR (default: the store's batch_traces/mix=<mix>/<label>/),
             --json (print the JSON instead of the table)

Prints the table; writes trace.json, trace.parquet and trace.md (the same trace as the `trace_batch_job` job
in the Dagster UI). A checkpoint is a JSON loader state (`TrainingLoader.state_dict()`), a JSON or torch file
holding one under "loader" (what examples/train.py saves).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path
from typing import Any

PREFIX = "batch_traces"


def load_checkpoint(location: str) -> dict[str, Any]:
    """The loader state of a checkpoint file (JSON, or a torch checkpoint with a "loader" entry)."""
    path = Path(location).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {location} does not exist")
    if path.suffix == ".json":
        data = json.loads(path.read_text())
    else:
        import torch

        data = torch.load(str(path), map_location="cpu", weights_only=True)
    state = data.get("loader", data) if isinstance(data, dict) else None
    if not isinstance(state, dict) or "position" not in state or "num_samples" not in state:
        raise ValueError(f"{location} holds no training-loader state (TrainingLoader.state_dict(), alone or under 'loader')")
    return state


def load_provenance(patterns: list[str]) -> list[dict[str, Any]]:
    """Saved batch provenances (`sluice.trace.batch.batch_provenance`), one or a list per JSON file."""
    items: list[dict[str, Any]] = []
    for pattern in patterns:
        paths = sorted(glob.glob(str(Path(pattern).expanduser()))) or [pattern]
        for path in paths:
            if not Path(path).is_file():
                raise FileNotFoundError(f"provenance file {path} does not exist")
            data = json.loads(Path(path).read_text())
            for item in data if isinstance(data, list) else [data]:
                if item.get("format") != "sluice-batch-provenance":
                    raise ValueError(f"{path} is not a saved batch provenance (format sluice-batch-provenance)")
                items.append(item)
    return items


def run_trace(config_path: str, options: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    """Trace what `options` names (the CLI's and the job's keys) and write it; returns (trace, written URIs)."""
    from sluice.config import load_config
    from sluice.io.layout import named_prefix
    from sluice.io.storage import open_store
    from sluice.trace import BatchSpec, trace_batch

    config = load_config(config_path)
    mix = options.get("mix") or sorted(config.mixes)[0]
    if mix not in config.mixes:
        raise KeyError(f"mix {mix!r} is not in {config_path}; mixes are {sorted(config.mixes)}")
    store = open_store(config.storage.root, config.s3)
    spec = BatchSpec(
        mix=mix, split=options.get("split") or "train", step=options.get("step"), batch_size=options.get("batch_size"),
        world_size=int(options.get("world_size") or 1), ranks=tuple(options["ranks"]) if options.get("ranks") else None, seed=options.get("seed"),
        checkpoint=load_checkpoint(options["checkpoint"]) if options.get("checkpoint") else None,
        provenance=load_provenance(options["provenance"]) if options.get("provenance") else None,
        doc_ids=tuple(options.get("doc_ids") or ()),
    )
    trace = trace_batch(store, config, spec, margin=float(options.get("margin", 0.1)), measures=bool(options.get("measures", True)))
    out = options.get("out")
    if out:
        written = trace.write(open_store(str(out), config.s3), "")
    else:
        written = trace.write(store, f"{named_prefix(PREFIX, 'mix', mix)}/{trace.meta['label']}")
    return trace, written


def config_path() -> str:
    """$SLUICE_CONFIG, else ./sluice.yaml, else the project's (as data_assets.settings, without loading it)."""
    import os

    from sluice.config import CONFIG_ENV_VAR, DEFAULT_CONFIG_NAME

    if os.environ.get(CONFIG_ENV_VAR):
        return str(Path(os.environ[CONFIG_ENV_VAR]).expanduser().resolve())
    local = Path.cwd() / DEFAULT_CONFIG_NAME
    return str(local if local.is_file() else Path(__file__).resolve().parents[1] / DEFAULT_CONFIG_NAME)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice trace", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mix", default=None, help="the mix (default: the first in the config)")
    parser.add_argument("--split", default="train", choices=["train", "validation"])
    parser.add_argument("--step", type=int, default=None, help="the global step (with a checkpoint: default its next step)")
    parser.add_argument("--batch-size", type=int, default=None, help="samples per rank per step, as the loader had")
    parser.add_argument("--world-size", type=int, default=1, help="ranks, as the loader had")
    parser.add_argument("--rank", type=int, action="append", dest="ranks", help="trace only these ranks (repeatable)")
    parser.add_argument("--seed", type=int, default=None, help="the loader's seed (default: the checkpoint's, else the mix's)")
    parser.add_argument("--checkpoint", default=None, help="loader state: JSON, or a torch/JSON checkpoint with a 'loader' entry")
    parser.add_argument("--provenance", action="append", default=[], help="saved batch provenance JSON files (globs allowed)")
    parser.add_argument("--doc-id", action="append", dest="doc_ids", default=[], help="trace these documents (repeatable)")
    parser.add_argument("--margin", type=float, default=0.1, help="relative distance to a threshold that counts as near")
    parser.add_argument("--no-measures", dest="measures", action="store_false", help="skip the cleaning replay (filter values)")
    parser.add_argument("--out", default=None, help="folder (local or s3://) for trace.json / .parquet / .md")
    parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    args = parser.parse_args(argv)
    from sluice.config import ConfigError

    try:
        trace, written = run_trace(config_path(), vars(args))
    except (ConfigError, ValueError, KeyError, FileNotFoundError) as error:
        print(f"sluice trace: {error}", file=sys.stderr)
        return 2
    print(trace.to_json() if args.json else trace.table())
    print("\nwritten: " + ", ".join(written.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
