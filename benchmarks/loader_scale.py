"""Training loader at growing mix size: start, resume, memory and throughput with 10^6, 10^7 and 10^8 documents.

    .venv/bin/python benchmarks/loader_scale.py [--sizes 1e6 1e7 1e8] [--seconds 6]

Data (generated vectorized under .bench_data/loader_scale/, git-ignored, reused when present): one synthetic
source of N documents in shards of 2^18 documents of log-normal length (mean ~650 tokens, 8..20,000; the
same distribution as benchmarks/loader.py; ~1.7e8 tokens a shard, below the default max_shard_tokens of
2^28), random token ids. Every shard is a hard link to the same .bin/.idx pair: 10^8 distinct documents would
be 130 GB of tokens, which no page cache here holds, and the figure would measure the disk; with one token
file the working set of token reads is the same at every size, and what grows is what the loader itself
touches (the index, the number of shard files). The mix index (`sluice.mix.index`, one range per document,
ranges shuffled within blocks of ~10^7 documents) and its manifest are written as `sluice.mix` lays them
out. A size whose files do not fit the free disk is skipped.

Measured per size, each in a fresh process, after reading the index and token files once (a warm page
cache, as benchmarks/loader.py; on this shared machine other jobs evict it, so each throughput round re-warms)
(L = 2048, B = 8, one rank, read_mode auto: every size here is above the 1 GiB map limit, so index and
tokens are read with pread):
  first_batch_s            opening the mix to holding the first batch
  resume_s at step k       opening the mix + load_state_dict at global step k (k*B samples into the stream,
                           across epochs) to holding the first batch, k = 10^3, 10^6, 10^9
  rss_growth_mb_per_rank   VmRSS after the 100th batch minus VmRSS before opening the mix (RssAnon printed too)
  worker_pickle_mb         the pickled IterableDataset a DataLoader sends to each worker
  tokens/s per rank        batches built in the caller (prefetch_batches=0) for --seconds, after 20 warm-up
                           batches, best of 3 rounds; the 10^8 figure against the 10^6 one
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers import ROOT, figure  # noqa: E402

SEQ = 2048
BATCH = 8
DOCS_PER_SHARD = 1 << 18
VOCAB = 50_000
CHUNK_SHARDS = 38  # shards per generation chunk (~10^7 documents): the block the ranges are shuffled within
DATA = ROOT / ".bench_data" / "loader_scale"
PREFIX = "tokenized_shards/source=synthetic/snapshot=s1"


def shard_lengths(seed: int, shard: int, documents: int) -> np.ndarray:
    """Document lengths of the template shard."""
    rng = np.random.default_rng([seed, shard])
    return np.clip(rng.lognormal(6.0, 1.0, size=documents), 8, 20_000).astype(np.int64)


def layout(documents: int) -> list[int]:
    """Documents per shard."""
    full, rest = divmod(documents, DOCS_PER_SHARD)
    return [DOCS_PER_SHARD] * full + ([rest] if rest else [])


def needed_bytes(documents: int) -> int:
    samples = documents * 660 // SEQ
    return documents * 32 + samples * 8 + DOCS_PER_SHARD * 660 * 2 * 2  # index records + sample table + token file(s)


def generate(root: Path, documents: int, seed: int = 0) -> None:
    """Shards (real .idx, sparse .bin) and a mix index over all their documents, written chunk by chunk."""
    from sluice.io.layout import sha256_file
    from sluice.mix.index import MixIndexWriter

    counts = layout(documents)
    folder = root / PREFIX
    folder.mkdir(parents=True, exist_ok=True)
    # One real shard (random tokens); every shard of the mix is a hard link to it (see the module docstring).
    lengths = shard_lengths(seed, 0, DOCS_PER_SHARD)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype("<u8")
    offsets.tofile(folder / "template.idx")
    np.random.default_rng([seed, 2]).integers(1, VOCAB, int(offsets[-1]), dtype=np.uint16).astype("<u2").tofile(folder / "template.bin")
    totals = [int(offsets[count]) for count in counts]
    shards = []
    for shard, count in enumerate(counts):
        if count != DOCS_PER_SHARD:  # the last, partial shard: its own prefix of the template
            offsets[: count + 1].tofile(folder / f"shard-{shard:05d}.idx")
            np.fromfile(folder / "template.bin", "<u2", count=totals[shard]).tofile(folder / f"shard-{shard:05d}.bin")
        else:
            for suffix in (".bin", ".idx"):
                os.link(folder / f"template{suffix}", folder / f"shard-{shard:05d}{suffix}")
        shards.append({"id": shard, "prefix": PREFIX, "name": f"shard-{shard:05d}", "source": "synthetic", "partition": "synthetic/s1",
                       "documents": count, "tokens": totals[shard]})
    index_folder = root / "mixed_index" / "mix=scale"
    index_folder.mkdir(parents=True, exist_ok=True)
    index_path = index_folder / "train.idx"
    tokens = sum(totals)
    writer = MixIndexWriter(str(index_path), documents, tokens, SEQ)
    rng = np.random.default_rng([seed, 1])
    for first in range(0, len(counts), CHUNK_SHARDS):
        chunk = list(range(first, min(first + CHUNK_SHARDS, len(counts))))
        lengths = [shard_lengths(seed, 0, DOCS_PER_SHARD)[: counts[shard]] for shard in chunk]
        shard_ids = np.concatenate([np.full(counts[shard], shard, np.int64) for shard in chunk])
        docs = np.concatenate([np.arange(counts[shard]) for shard in chunk])
        starts = np.concatenate([np.cumsum(lens) - lens for lens in lengths])
        all_lengths = np.concatenate(lengths)
        order = rng.permutation(len(all_lengths))
        zeros = np.zeros(len(order), np.int64)
        writer.append(shard_ids[order], starts[order], docs[order], all_lengths[order], zeros, zeros)
    writer.close()
    samples = (tokens - 1) // SEQ
    entry = {"key": "train.idx", "prefix": "mixed_index/mix=scale", "rows": documents, "bytes": index_path.stat().st_size, "sha256": sha256_file(str(index_path))}
    manifest = {
        "format": "sluice-mix", "version": 3, "mix": "scale", "seed": 1, "sequence_length": SEQ, "dtype": "uint16", "vocab_size": VOCAB,
        "eos_id": 0, "tokenizer_sha256": "synthetic", "tokens": tokens, "samples": samples, "components": ["synthetic"],
        "splits": {"train": {"index": "mixed_index/mix=scale/train.idx", "ranges_count": documents, "tokens": tokens, "samples": samples}},
        "shards": shards, "files": [], "side_files": [entry],
    }
    (root / "mixed_dataset" / "mix=scale").mkdir(parents=True, exist_ok=True)
    (root / "mixed_dataset" / "mix=scale" / "_manifest.json").write_text(json.dumps(manifest))


def prepared(documents: int) -> Path | None:
    root = DATA / f"docs={documents}"
    stamp = root / ".complete"
    if stamp.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    free = shutil.disk_usage(ROOT).free
    if needed_bytes(documents) > free * 0.8:
        print(f"{documents:.0e} documents: skipped, needs ~{needed_bytes(documents) / 1e9:.1f} GB, {free / 1e9:.1f} GB free", flush=True)
        return None
    started = time.perf_counter()
    generate(root, documents)
    stamp.write_text("ok")
    files = {(f.stat().st_ino): f.stat().st_blocks * 512 for f in root.rglob("*") if f.is_file()}  # hard links once
    print(f"{documents:.0e} documents: generated in {time.perf_counter() - started:.1f}s ({sum(files.values()) / 1e9:.2f} GB on disk)", flush=True)
    return root


# -- measurements (in a fresh process per size) ----------------------------------------------------------

def status_mb(field: str) -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def open_loader(root: str, cache: str):
    from sluice.io.storage import open_store
    from sluice.loader import MixedTokens, TrainingLoader

    data = MixedTokens(open_store(root), "scale", cache_dir=cache)
    return data, TrainingLoader(data, BATCH, seed=1, prefetch_batches=0)


def warm(root: str) -> float:
    """Read the index and the token files once (as benchmarks/loader.py's warm-up pass does): the figures are
    the loader's with a warm page cache, at every size. Returns the bytes read."""
    seen, total = set(), 0
    for path in sorted(Path(root).rglob("*")):
        if path.suffix in (".idx", ".bin") and path.is_file() and path.stat().st_ino not in seen:
            seen.add(path.stat().st_ino)
            with open(path, "rb") as handle:
                while block := handle.read(1 << 24):
                    total += len(block)
    return total


def index_resident_share(root: str) -> float | None:
    """Share of the index file in the page cache now (util-linux fincore; None where it is missing)."""
    path = Path(root, "mixed_index", "mix=scale", "train.idx")
    try:
        done = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE", str(path)], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    resident, size = (int(value) for value in done.stdout.split())
    return resident / size if size else None


def measure(root: str, seconds: float) -> dict:
    from sluice.loader import RankBatches

    cache = os.path.join(root, ".cache")
    result: dict = {"warmed_gb": warm(root) / 1e9}
    rss_before, anon_before = status_mb("VmRSS"), status_mb("RssAnon")
    started = time.perf_counter()
    data, loader = open_loader(root, cache)
    batches = iter(loader)
    next(batches)
    result["first_batch_s"] = time.perf_counter() - started
    for _ in range(99):
        next(batches)
    result["rss_growth_mb"] = status_mb("VmRSS") - rss_before
    result["anon_growth_mb"] = status_mb("RssAnon") - anon_before
    result["samples"], result["ranges"], result["mapped"] = len(data), len(data.index()), data.mapped
    result["worker_pickle_mb"] = len(pickle.dumps(RankBatches(data, loader.order, loader._plan(), False, transport=True))) / 1e6
    resume = {}
    for step in (10**3, 10**6, 10**9):
        position = step * BATCH
        started = time.perf_counter()
        data, loader = open_loader(root, cache)
        loader.load_state_dict({"version": 1, "seed": 1, "epoch": position // len(data), "position": position % len(data), "num_samples": len(data), "block_size": 1})
        next(iter(loader))
        resume[step] = time.perf_counter() - started
    result["resume_s"] = resume
    best = 0.0
    for _ in range(3):
        warm(root)
        _, loader = open_loader(root, cache)
        loader.load_state_dict({"version": 1, "seed": 1, "epoch": 0, "position": int(np.random.default_rng(len(resume)).integers(len(data))), "num_samples": len(data), "block_size": 1})
        batches = iter(loader)
        for _ in range(20):
            next(batches)
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds / 3:
            count += next(batches)["input_ids"].shape[0]
        best = max(best, count * SEQ / (time.perf_counter() - started))
    result["tokens_per_s"] = best
    result["index_resident_after"] = index_resident_share(root)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e6, 1e7, 1e8], help="documents per mix")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds of throughput per size")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # child mode: measure one prepared root
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.seconds)))
        return
    results = {}
    for size in args.sizes:
        documents = int(size)
        root = prepared(documents)
        if root is None:
            continue
        done = subprocess.run([sys.executable, __file__, "--measure", str(root), "--seconds", str(args.seconds)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"measuring {documents} documents failed:\n{done.stderr[-3000:]}")
        results[documents] = result = json.loads(done.stdout.strip().splitlines()[-1])
        resume = ", ".join(f"step {step}: {seconds * 1000:.0f} ms" for step, seconds in result["resume_s"].items())
        print(
            f"{documents:.0e} documents ({result['ranges']:,} ranges, {result['samples']:,} samples, mapped={result['mapped']}): first batch "
            f"{result['first_batch_s'] * 1000:.0f} ms; resume {resume}; RSS +{result['rss_growth_mb']:.1f} MB (anonymous "
            f"+{result['anon_growth_mb']:.1f} MB) by the 100th batch; worker pickle {result['worker_pickle_mb'] * 1000:.1f} kB; "
            f"{result['tokens_per_s'] / 1e6:.1f} M tokens/s per rank (index {100 * (result['index_resident_after'] or float('nan')):.0f} % in the page cache after the rounds)",
            flush=True,
        )
    for documents, result in results.items():
        config = f"{documents:.0e} docs, L={SEQ}, B={BATCH}"
        figure(f"first_batch_s[{config}]", result["first_batch_s"], "< 0.5")
        for step, seconds in result["resume_s"].items():
            figure(f"resume_s_at_step_1e{len(str(step)) - 1}[{config}]", seconds, "< 0.5")
        figure(f"rss_growth_mb_per_rank[{config}, open to 100th batch]", result["rss_growth_mb"], "< 64 at 1e8")
        figure(f"worker_pickle_mb[{config}]", result["worker_pickle_mb"], "< 1")
        figure(f"loader_tokens_per_s_per_rank[{config}, in the caller]", result["tokens_per_s"], "-")
    if 10**6 in results and 10**8 in results:
        figure("loader_tokens_per_s_1e8_vs_1e6", results[10**8]["tokens_per_s"] / results[10**6]["tokens_per_s"], ">= 0.9")
    elif 10**6 in results and 10**7 in results:
        figure("loader_tokens_per_s_1e7_vs_1e6 (1e8 skipped)", results[10**7]["tokens_per_s"] / results[10**6]["tokens_per_s"], ">= 0.9")


if __name__ == "__main__":
    main()
