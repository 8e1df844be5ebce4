"""Batch provenance overhead: training-loader tokens/s with `provenance=True` against the same loader without.

    .venv/bin/python benchmarks/provenance.py [--tokens 16e6] [--seconds 4] [--rounds 3]

Data: benchmarks/loader.py's synthetic tokenized source (random uint16 tokens, documents of log-normal
length, mean ~650 tokens) mixed by `sluice.mix.build_mix`. Configuration: L = 2048, B = 8, one rank, batches
built in the caller (prefetch_batches=0, no worker process: the packing cost is not hidden behind a thread),
warm page cache. The two loaders run side by side, timed in alternating blocks of 16 batches (off, on, off,
...) so that load on a shared machine hits both alike; per round of --seconds, the ratio of their tokens/s;
reported: each side's best round and the median round's ratio (goal >= 0.97: provenance costs at most 3 %).
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


def interleaved(data: MixedTokens, seconds: float, block: int = 16) -> tuple[float, float]:
    """(tokens/s off, tokens/s on): two loaders over the same data, timed in alternating blocks of `block`
    batches, so that load on a shared machine falls on both alike."""
    off = iter(TrainingLoader(data, BATCH, seed=3, prefetch_batches=0))
    on = iter(TrainingLoader(data, BATCH, seed=3, prefetch_batches=0, provenance=True))
    for _ in range(10):
        next(off)
        batch = next(on)
    assert "provenance" in batch and len(batch["provenance"]) == len(batch["cu_seqlens"]) - 1
    spent, samples = [0.0, 0.0], [0, 0]
    while sum(spent) < seconds:
        for side, iterator in enumerate((off, on)):
            started = time.perf_counter()
            for _ in range(block):
                samples[side] += next(iterator)["input_ids"].shape[0]
            spent[side] += time.perf_counter() - started
    return samples[0] * SEQ / spent[0], samples[1] * SEQ / spent[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=float, default=16e6)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-provenance-") as work:
        data, _ = prepare(work, int(args.tokens))
        interleaved(data, 1.0)  # warm the page cache
        rounds = [interleaved(data, args.seconds) for _ in range(args.rounds)]
        ratios = sorted(on / off for off, on in rounds)
        config = f"L={SEQ}, B={BATCH}, 1 rank, in the caller, {args.tokens:.0e} tokens, {args.rounds} rounds of {args.seconds:g} s"
        print("rounds (off, on) tokens/s: " + ", ".join(f"({off:.3g}, {on:.3g})" for off, on in rounds))
        figure(f"loader_tokens_per_s[provenance off, {config}, best]", max(off for off, _ in rounds), "-")
        figure(f"loader_tokens_per_s[provenance on, {config}, best]", max(on for _, on in rounds), "-")
        figure(f"loader_provenance_throughput_ratio[on / off, {config}, median round]", ratios[len(ratios) // 2], ">= 0.97")


if __name__ == "__main__":
    main()
