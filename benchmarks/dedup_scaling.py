"""Cost growth of deduplication: time and peak memory at 1x, 4x, 16x the input.

Input: `--base` pages of ../shared/corpus; scale s holds s copies of them (copy 0 the originals, the
others each page with its own controlled word edits at rate 0.02, so every copy is a near duplicate
of the original), cut into cleaned partitions of `--partition-docs` documents: the partition size
stays fixed and a larger input means more partitions, as more snapshots would. Every partition is
deduplicated in order with `sluice.dedup.deduplicate_partition` (every step: signing, the global index,
clusters against all earlier partitions, outputs), single process. Each scale runs in a fresh process
(generation in another one), which reports its CPU time and peak resident memory (VmHWM of that process,
from /proc/self/status: not ru_maxrss, which Linux carries across exec, so a child would report its
parent's peak if that were larger) and its resident memory after imports; each scale
runs `--repeat` times on the same generated input and the run with the least CPU time counts.

Goals (issue 4): time ~linear in the input; peak memory flat (<= 1.2x from 1x to 16x).

`--verify-min-jaccard` (default: the config default, 0.8; `null`: LSH only, datatrove's rule). With
verification, copies whose Jaccard to every kept document is below the bound are kept (two copies
edited independently at 2 % are at J ~0.7 to each other), so the kept near-copies of a page pile up
with the scale and every new copy is an LSH candidate of more of them, in more earlier partitions.

    PYTHONPATH=. .venv/bin/python benchmarks/dedup_scaling.py [--base 480 --partition-docs 120 --verify-min-jaccard null]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.peers import figure  # noqa: E402

SCALES = (1, 4, 16)


def generate(folder: str, scale: int, base: int, partition_docs: int) -> None:
    from datetime import UTC, datetime

    import pyarrow as pa

    from benchmarks.minhash_corpus import corpus_texts, edit_words
    from sluice.clean import CLEANED_SCHEMA, text_hash
    from sluice.io.layout import PartitionRef, partition_prefix, write_manifest, write_parquet
    from sluice.io.storage import open_store

    texts = corpus_texts()[:base]
    store = open_store(folder)
    docs = []
    for copy in range(scale):
        rng = random.Random(copy)
        docs.extend((f"c{copy}-{i}", text if copy == 0 else edit_words(text, 0.02, rng)) for i, text in enumerate(texts))
    for index in range(0, len(docs), partition_docs):
        ref = PartitionRef("web", f"s{index // partition_docs:05d}")
        rows = [
            {
                "doc_id": doc_id, "source": ref.source, "snapshot": ref.snapshot, "url": None,
                "fetch_date": datetime(2026, 1, 1, tzinfo=UTC), "text": text, "language": "en",
                "language_score": 1.0, "n_chars": len(text), "text_hash": text_hash(text),
                "pii_redactions": 0, "quality_score": None,
            }
            for doc_id, text in docs[index : index + partition_docs]
        ]
        prefix = partition_prefix("cleaned_documents", ref)
        entry = write_parquet(store, f"{prefix}/part-00000.parquet", pa.Table.from_pylist(rows, schema=CLEANED_SCHEMA))
        write_manifest(store, prefix, {"asset": "cleaned_documents", "files": [entry]})


def run(folder: str, verify: float | None) -> dict:
    from sluice.config import DedupSettings
    from sluice.dedup import deduplicate_partition
    from sluice.io.layout import list_partitions
    from sluice.io.storage import open_store

    store = open_store(folder)
    refs = list_partitions(store, "cleaned_documents")
    baseline = status_kb("VmRSS")
    cpu, wall = time.process_time(), time.perf_counter()
    documents = removed_exact = removed_fuzzy = 0
    last = 0.0
    for ref in refs:
        started = time.process_time()
        result = deduplicate_partition(store, ref, settings=DedupSettings(verify_min_jaccard=verify))
        documents += result.documents_in
        removed_exact += result.removed_exact
        removed_fuzzy += result.removed_fuzzy
        last = time.process_time() - started
    return {
        "partitions": len(refs),
        "documents": documents,
        "removed_exact": removed_exact,
        "removed_fuzzy": removed_fuzzy,
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
        "last_partition_cpu_s": last,
        "peak_rss_mb": status_kb("VmHWM") / 1024,
        "baseline_rss_mb": baseline / 1024,
    }


def status_kb(field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of this process, in kB."""
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith(f"{field}:")).split()[1])


def verify_setting(value: str) -> float | None:
    from sluice.config import DedupSettings

    return DedupSettings().verify_min_jaccard if value == "default" else None if value == "null" else float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=int, default=480)
    parser.add_argument("--partition-docs", type=int, default=120)
    parser.add_argument("--generate", nargs=2, metavar=("FOLDER", "SCALE"), help=argparse.SUPPRESS)
    parser.add_argument("--run", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--verify-min-jaccard", default="default", help="dedup.verify_min_jaccard: a number, null, or default (the config's)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per scale (fresh process each); the least CPU time is kept")
    args = parser.parse_args()
    if args.generate:
        generate(args.generate[0], int(args.generate[1]), args.base, args.partition_docs)
        return
    if args.run:
        print(json.dumps(run(args.run, verify_setting(args.verify_min_jaccard))))
        return

    results = {}
    env_python = sys.executable
    print(f"dedup.verify_min_jaccard = {verify_setting(args.verify_min_jaccard)}")
    for scale in SCALES:
        with tempfile.TemporaryDirectory(prefix="sluice-dedup-scale-") as folder:
            common = ["--base", str(args.base), "--partition-docs", str(args.partition_docs)]
            subprocess.run([env_python, __file__, *common, "--generate", folder, str(scale)], check=True)
            runs = []
            for _ in range(args.repeat):  # the machine may be shared: the least disturbed run counts
                for generated in ("dedup_signatures", "dedup_shingles", "dedup_index", "dedup_clusters", "deduped_documents", "deduped_removed"):
                    shutil.rmtree(os.path.join(folder, generated), ignore_errors=True)
                out = subprocess.run(
                    [env_python, __file__, "--run", folder, "--verify-min-jaccard", args.verify_min_jaccard], check=True, capture_output=True, text=True
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            results[scale] = min(runs, key=lambda r: r["cpu_s"])
        r = results[scale]
        print(
            f"  {scale:>2}x: {r['documents']:>6} documents in {r['partitions']:>3} partitions, removed {r['removed_exact']} exact + "
            f"{r['removed_fuzzy']} near; {r['cpu_s']:.1f} s CPU ({r['wall_s']:.1f} s wall, last partition {r['last_partition_cpu_s']:.2f} s), "
            f"peak RSS {r['peak_rss_mb']:.0f} MB (VmHWM; {r['baseline_rss_mb']:.0f} MB after imports)",
            flush=True,
        )
    base, top = results[SCALES[0]], results[SCALES[-1]]
    per_doc = [results[s]["cpu_s"] / results[s]["documents"] for s in SCALES]
    print("  CPU ms per document: " + ", ".join(f"{s}x {1000 * p:.2f}" for s, p in zip(SCALES, per_doc, strict=True)))
    config = (f"{base['documents']} -> {top['documents']} documents in {base['partitions']} -> {top['partitions']} partitions, "
              f"verify_min_jaccard {verify_setting(args.verify_min_jaccard)}, best of {args.repeat}")
    figure("dedup_time_ratio_16x_over_1x", top["cpu_s"] / base["cpu_s"], "~16 (linear)", config + ", CPU time")
    figure("dedup_peak_memory_ratio_16x_over_1x", top["peak_rss_mb"] / base["peak_rss_mb"], "<= 1.2", config)


if __name__ == "__main__":
    main()
