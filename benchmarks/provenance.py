"""Batch provenance overhead: training-loader tokens/s with `provenance=True` against the same loader without.

    .venv/bin/python benchmarks/provenance.py [--tokens 16e6] [--seconds 4] [--rounds 3]

Data: benchmarks/loader.py's synthetic tokenized source (random uint16 tokens, documents of log-normal
length, mean ~650 tokens) mixed by `sluice.mix.build_mix`. Configuration: L = 2048, B = 8, one rank, batches
built in the caller (prefetch_batches=0, no worker process: the packing cost is not hidden behind a thread),
warm page cache. The two loaders run in alternating rounds of --seconds each (off, on, off, on, ...) so that
load on a shared machine hits both alike; each side's best round is reported, and their ratio
(goal >= 0.97: provenance costs at most 3 % of throughput).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.loader import BATCH, SEQ, prepare  # noqa: E402
from benchmarks.peers import figure  # noqa: E402
from sluice.loader import MixedTokens, TrainingLoader  # noqa: E402


def tokens_per_second(data: MixedTokens, provenance: bool, seconds: float) -> float:
    iterator = iter(TrainingLoader(data, BATCH, seed=3, prefetch_batches=0, provenance=provenance))
    for _ in range(10):
        batch = next(iterator)
    if provenance:
        assert "provenance" in batch and len(batch["provenance"]) == len(batch["cu_seqlens"]) - 1
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        count += next(iterator)["input_ids"].shape[0]
    return count * SEQ / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=float, default=16e6)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-provenance-") as work:
        data, _ = prepare(work, int(args.tokens))
        tokens_per_second(data, False, 1.0)  # warm the page cache
        off, on = [], []
        for _ in range(args.rounds):
            off.append(tokens_per_second(data, False, args.seconds))
            on.append(tokens_per_second(data, True, args.seconds))
        config = f"L={SEQ}, B={BATCH}, 1 rank, in the caller, {args.tokens:.0e} tokens, best of {args.rounds} alternating rounds"
        print(f"rounds off: {[round(x) for x in off]}  on: {[round(x) for x in on]}")
        figure(f"loader_tokens_per_s[provenance off, {config}]", max(off), "-")
        figure(f"loader_tokens_per_s[provenance on, {config}]", max(on), "-")
        figure("loader_provenance_throughput_ratio (on / off)", max(on) / max(off), ">= 0.97")


if __name__ == "__main__":
    main()
