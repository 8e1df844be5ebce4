"""Batch provenance overhead: training-loader tokens/s with `provenance=True` against the same loader without.

    .venv/bin/python benchmarks/provenance.py [--tokens 16e6] [--seconds 4] [--rounds 5] [--block 64]

Data: benchmarks/loader.py's synthetic tokenized source (random uint16 tokens, documents of log-normal
length, mean ~650 tokens) mixed by `sluice.mix.build_mix`. Configuration: L = 2048, B = 8, one rank, batches
built in the caller (prefetch_batches=0, no worker process: the packing cost is not hidden behind a thread),
warm page cache. What is measured: tokens per second of each loader, the ratio on / off (goal >= 0.97:
provenance costs at most 3 %).

Robust on a shared machine: the two loaders run side by side in paired blocks of --block batches, the order
inside a pair alternating (off-on, on-off: ABBA, so neither side always runs right after the other); each
block is timed by the CPU time of the calling thread (`time.thread_time`: all the loader's work runs there,
and time the machine gives to other processes is not counted) and by wall time. Each pair gives a ratio;
the headline is the median pair ratio over all rounds (CPU time), with its interquartile range and each
round's median; the wall-time median is printed beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.loader import BATCH, SEQ, prepare  # noqa: E402
from benchmarks.peers import figure  # noqa: E402
from sluice.loader import MixedTokens, TrainingLoader  # noqa: E402


@dataclass
class Pairs:
    """Per pair of blocks: tokens/s off and on, by CPU time and by wall time."""

    cpu: list[tuple[float, float]] = field(default_factory=list)
    wall: list[tuple[float, float]] = field(default_factory=list)

    def ratios(self, kind: str = "cpu") -> list[float]:
        return [on / off for off, on in getattr(self, kind)]


def timed_block(iterator: Iterator[dict], batches: int) -> tuple[int, float, float]:
    """(tokens, thread CPU seconds, wall seconds) of `batches` batches."""
    wall, cpu, samples = time.perf_counter(), time.thread_time(), 0
    for _ in range(batches):
        samples += next(iterator)["input_ids"].shape[0]
    return samples * SEQ, time.thread_time() - cpu, time.perf_counter() - wall


def interleaved(data: MixedTokens, seconds: float, block: int = 64) -> Pairs:
    """Two loaders over the same data, timed in paired blocks of `block` batches (off-on, then on-off, ...)
    for about `seconds` of wall time."""
    off = iter(TrainingLoader(data, BATCH, seed=3, prefetch_batches=0))
    on = iter(TrainingLoader(data, BATCH, seed=3, prefetch_batches=0, provenance=True))
    for _ in range(10):
        next(off)
        batch = next(on)
    assert "provenance" in batch and len(batch["provenance"]) == len(batch["cu_seqlens"]) - 1
    pairs, started = Pairs(), time.perf_counter()
    while time.perf_counter() - started < seconds:
        order = ((0, off), (1, on)) if len(pairs.cpu) % 2 == 0 else ((1, on), (0, off))
        timed: dict[int, tuple[int, float, float]] = {side: timed_block(iterator, block) for side, iterator in order}
        pairs.cpu.append(tuple(timed[side][0] / timed[side][1] for side in (0, 1)))  # type: ignore[arg-type]
        pairs.wall.append(tuple(timed[side][0] / timed[side][2] for side in (0, 1)))  # type: ignore[arg-type]
    return pairs


def quantiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile)."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=float, default=16e6)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=64, help="batches per timed block (about 10 ms: shorter blocks time scheduler noise)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-provenance-") as work:
        data, _ = prepare(work, int(args.tokens))
        interleaved(data, 1.0, args.block)  # warm the page cache
        rounds = [interleaved(data, args.seconds, args.block) for _ in range(args.rounds)]
    report(rounds, f"L={SEQ}, B={BATCH}, 1 rank, in the caller, {args.tokens:.3g} tokens, {args.rounds} rounds of {args.seconds:g} s, blocks of {args.block} batches")


def report(rounds: list[Pairs], config: str) -> None:
    cpu = [r for pairs in rounds for r in pairs.ratios("cpu")]
    wall = [r for pairs in rounds for r in pairs.ratios("wall")]
    q1, median, q3 = quantiles(cpu)
    print(f"pairs: {len(cpu)}; per round, median CPU ratio: " + ", ".join(f"{statistics.median(p.ratios()):.3f}" for p in rounds))
    print(f"pair ratios (CPU time): quartiles {q1:.3f} / {median:.3f} / {q3:.3f}; wall time: quartiles " + " / ".join(f"{v:.3f}" for v in quantiles(wall)))
    median_off = statistics.median(off for pairs in rounds for off, _ in pairs.cpu)
    median_on = statistics.median(on for pairs in rounds for _, on in pairs.cpu)
    figure(f"loader_tokens_per_s[provenance off, {config}, CPU time, median block]", median_off, "-")
    figure(f"loader_tokens_per_s[provenance on, {config}, CPU time, median block]", median_on, "-")
    figure(f"loader_provenance_throughput_ratio[on / off, {config}, median of {len(cpu)} paired blocks, CPU time]", median, ">= 0.97")
    figure(f"loader_provenance_throughput_ratio[on / off, {config}, median of {len(wall)} paired blocks, wall time]", statistics.median(wall), ">= 0.97")


if __name__ == "__main__":
    main()
