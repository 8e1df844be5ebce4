"""Render a built mix's composition as a PNG from its manifest: configured weight vs realized token share,
epochs and validation tokens per component.

    .venv/bin/python scripts/plot_mix.py [--mix default] [--out mix-default.png]

Reads `<storage root>/mixed_dataset/mix=<mix>/_manifest.json` through the config at $SLUICE_CONFIG (else ./sluice.yaml).
Needs matplotlib (`pip install '.[plot]'`; the test extras include it).
"""

from __future__ import annotations

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402


def plot_manifest(manifest: dict, out: str) -> None:
    rows = manifest["sources"]
    names = [row.get("component", row["source"]) for row in rows]
    train_tokens = manifest["splits"]["train"]["tokens"] if "splits" in manifest else manifest["tokens"]
    weights = [row["weight"] for row in rows]
    realized = [row.get("tokens", row["target_tokens"]) / train_tokens if train_tokens else 0.0 for row in rows]
    epochs = [row["epochs"] for row in rows]
    validation = [row.get("validation_tokens", 0) for row in rows]
    figure, (shares_axis, epochs_axis) = plt.subplots(1, 2, figsize=(10, 4))
    positions = range(len(names))
    shares_axis.bar([p - 0.2 for p in positions], weights, width=0.4, label="weight")
    shares_axis.bar([p + 0.2 for p in positions], realized, width=0.4, label="realized share")
    shares_axis.set_xticks(list(positions), names, rotation=30, ha="right")
    shares_axis.set_ylabel("share of training tokens")
    shares_axis.legend()
    epochs_axis.bar(list(positions), epochs, color="tab:gray")
    epochs_axis.set_xticks(list(positions), names, rotation=30, ha="right")
    epochs_axis.set_ylabel("epochs over the source's training tokens")
    for position, value in zip(positions, validation, strict=True):
        epochs_axis.annotate(f"val {value:,}", (position, 0), ha="center", va="bottom", fontsize=8)
    figure.suptitle(f"mix {manifest['mix']!r}: {train_tokens:,} training tokens, seq {manifest['sequence_length']}")
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mix", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from sluice.config import load_config
    from sluice.io.storage import open_store
    from sluice.mix import mix_prefix

    config = load_config()
    mix = args.mix or sorted(config.mixes)[0]
    store = open_store(config.storage.root, config.s3)
    key = f"{mix_prefix(mix)}/_manifest.json"
    if not store.exists(key):
        print(f"{store.uri(key)} does not exist: materialize mixed_dataset[{mix}] first", file=sys.stderr)
        return 2
    out = args.out or f"mix-{mix}.png"
    plot_manifest(json.loads(store.read_bytes(key)), out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
