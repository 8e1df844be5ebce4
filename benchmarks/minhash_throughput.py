"""MinHash signature throughput, docs/s per core, on the same real documents in one run.

sluice (`MinHasher.signatures`: normalization, word splitting, shingling, hashing, 112 permutations)
against
- datasketch, the documented per-document way: `MinHash(num_perm=112)`, `update()` per shingle;
- datasketch's `MinHash.bulk` (hashes in a Python loop, permutations vectorized per document);
- datatrove 0.10.1 `MinhashDedupSignature` (`get_shingles` + `get_signature`, its own spaCy word
  splitting), in its peer environment (benchmarks/peers.py).
datasketch gets the cheapest reasonable shingling (`re.findall(r"\\w+")` on lowercased text, 5-grams
joined by spaces), counted in its time, as sluice's word splitting is counted in sluice's.
Each side runs single-threaded in one process; docs/s = documents / CPU seconds of that process
(CPU time, because this machine is shared and wall time is noisy; wall time is printed too).

    PYTHONPATH=. .venv/bin/python benchmarks/minhash_throughput.py [--docs 400]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.minhash_corpus import corpus_texts  # noqa: E402
from benchmarks.peers import figure, peer_python  # noqa: E402

DATATROVE = ["datatrove[processing,io,s3]==0.10.1", "boto3>=1.43.115,<1.43.118", "botocore>=1.43.115,<1.43.118", "spacy"]
NUM_PERM = 112
WORD = re.compile(r"\w+")

DATATROVE_SCRIPT = r"""
import json, sys, time
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature

if __name__ == "__main__":
    texts = json.load(open(sys.argv[1]))
    step = MinhashDedupSignature(output_folder=sys.argv[2], config=MinhashConfig())
    step.get_signature(step.get_shingles(texts[0]))  # load spaCy's tokenizer outside the timing
    cpu, wall = time.process_time(), time.perf_counter()
    for text in texts:
        shingles = step.get_shingles(text)
        if shingles.size:
            step.get_signature(shingles)
    print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}))
"""


def simple_shingles(text: str, n: int = 5) -> list[bytes]:
    words = WORD.findall(text.lower())
    if len(words) < n:
        return [" ".join(words).encode()] if words else []
    return [" ".join(words[i : i + n]).encode() for i in range(len(words) - n + 1)]


def timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=400)
    args = parser.parse_args()

    from datasketch import MinHash

    from sluice.minhash import MinHasher, _char_classes, _numeric_table, shingle_hash32, shingles

    texts = corpus_texts()[: args.docs]
    words = sum(len(t.split()) for t in texts)
    print(f"{len(texts)} documents (en, de, zh-CN, ru handbook pages), {sum(map(len, texts)) / len(texts):.0f} characters "
          f"and {words / len(texts):.0f} whitespace words on average")

    setup, _ = timed(lambda: (_char_classes(), _numeric_table()))
    hasher = MinHasher()
    hasher.signatures(texts[:2])  # warm the power tables
    results: dict[str, tuple[float, float]] = {}
    signatures = None

    def run_sluice() -> None:
        nonlocal signatures
        signatures = hasher.signatures(texts)

    results["sluice"] = timed(run_sluice)
    print(f"  (sluice one-time per-process setup, the code point lookup tables: {setup:.2f} s CPU, not counted)")

    def per_document() -> None:
        for text in texts:
            m = MinHash(num_perm=NUM_PERM, seed=1)
            for shingle in simple_shingles(text):
                m.update(shingle)

    results["datasketch per-document update"] = timed(per_document)
    results["datasketch MinHash.bulk"] = timed(lambda: MinHash.bulk([simple_shingles(t) for t in texts], num_perm=NUM_PERM, seed=1))

    python = peer_python("datatrove", DATATROVE)
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch, "texts.json")
        data.write_text(json.dumps(texts))
        script = Path(scratch, "datatrove_minhash.py")
        script.write_text(DATATROVE_SCRIPT)
        out = subprocess.run([str(python), str(script), str(data), str(Path(scratch, "sigs"))], check=True, capture_output=True, text=True)
        timing = json.loads(out.stdout.strip().splitlines()[-1])
        results["datatrove MinhashDedupSignature"] = (timing["cpu"], timing["wall"])

    # The values sluice computed are datasketch's (same seed, permutations, shingle hash) - spot check.
    for index in range(0, len(texts), max(1, len(texts) // 10)):
        reference = MinHash(num_perm=NUM_PERM, seed=1, hashfunc=shingle_hash32)
        reference.update_batch(shingles(texts[index], 5))
        assert (reference.hashvalues == signatures[index]).all(), f"document {index} differs from datasketch"
    print("  sluice signatures equal datasketch.MinHash(hashfunc=shingle_hash32) on the spot-checked documents")

    rates = {name: len(texts) / cpu for name, (cpu, _) in results.items()}
    print(f"\n  {'':34} {'CPU s':>8} {'wall s':>8} {'docs/s/core':>12}")
    for name, (cpu, wall) in results.items():
        print(f"  {name:34} {cpu:8.2f} {wall:8.2f} {rates[name]:12.0f}")
    ours = rates["sluice"]
    figure("minhash_docs_per_s_per_core", round(ours), "as high as possible")
    figure("minhash_speedup_vs_datasketch_update", ours / rates["datasketch per-document update"], ">= 10x")
    figure("minhash_speedup_vs_datasketch_bulk", ours / rates["datasketch MinHash.bulk"], ">= 2x")
    figure("minhash_speedup_vs_datatrove", ours / rates["datatrove MinhashDedupSignature"], ">= 20x")


if __name__ == "__main__":
    main()
