"""MinHash signature throughput, docs/s per core, on the same real documents in one run, same hash function.

sluice (`MinHasher.signatures`: normalization, word splitting, shingling, hashing, 112 permutations) against
datasketch computing the SAME signatures, with the same hash function on the same shingles:
- `hash shingle_hash32` (the headline): sluice's default `poly` hash, vectorized inside sluice, passed to
  datasketch as `hashfunc=sluice.dedup.minhash.shingle_hash32` (its scalar definition);
- `hash sha1`: sluice with `dedup.hash_function: sha1` against datasketch's default (SHA-1).
Each datasketch way: the documented per-document `MinHash(num_perm=112, seed=1, hashfunc=...)` with
`update()` per shingle, and `MinHash.bulk` (permutations vectorized per document). datasketch is handed
sluice's shingles, computed outside its timing, so it does less work than sluice (whose time includes
normalizing, splitting and shingling the texts); every signature is checked equal to sluice's.
Also: datatrove 0.10.1 `MinhashDedupSignature` (`get_shingles` + `get_signature`: its own spaCy word
splitting and its own 64-bit hash, not the same output), in its peer environment (benchmarks/peers.py).
Each side runs single-threaded in one process; docs/s = documents / CPU seconds of that process (CPU time,
because this machine is shared and wall time is noisy; wall time is printed too).

    PYTHONPATH=. .venv/bin/python benchmarks/minhash_throughput.py [--docs 400]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.minhash_corpus import corpus_texts  # noqa: E402
from benchmarks.peers import datatrove_python, figure  # noqa: E402

NUM_PERM = 112

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


def timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    value = fn()
    return value, time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=400)
    args = parser.parse_args()

    import numpy as np
    from datasketch import MinHash

    from sluice.dedup import minhash
    from sluice.dedup.minhash import (
        MinHasher,
        _char_classes,
        _numeric_table,
        sha1_hash32,
        shingle_hash32,
        shingles,
    )

    texts = corpus_texts()[: args.docs]
    words = sum(len(t.split()) for t in texts)
    print(f"{len(texts)} documents (en, de, zh-CN, ru handbook pages), {sum(map(len, texts)) / len(texts):.0f} characters "
          f"and {words / len(texts):.0f} whitespace words on average")
    _, setup, _ = timed(lambda: (_char_classes(), _numeric_table()))
    print(f"  (sluice one-time per-process setup, the code point lookup tables: {setup:.2f} s CPU, not counted)")
    shingle_lists = [shingles(text, 5) for text in texts]  # datasketch's input, outside its timing

    results: dict[str, tuple[float, float]] = {}
    for hash_name, hashfunc in (("shingle_hash32", shingle_hash32), ("sha1", sha1_hash32)):
        hasher = MinHasher(hash_function="poly" if hash_name == "shingle_hash32" else "sha1")
        hasher.signatures(texts[:2])  # warm the power tables
        ours, cpu, wall = timed(lambda hasher=hasher: hasher.signatures(texts))
        results[f"sluice, hash {hash_name}"] = (cpu, wall)

        def per_document(hashfunc=hashfunc):
            out = []
            for items in shingle_lists:
                m = MinHash(num_perm=NUM_PERM, seed=1, hashfunc=hashfunc)
                for shingle in items:
                    m.update(shingle)
                out.append(m.hashvalues)
            return out

        for way, run in (
            ("update", per_document),
            ("bulk", lambda hashfunc=hashfunc: [m.hashvalues for m in MinHash.bulk(shingle_lists, num_perm=NUM_PERM, seed=1, hashfunc=hashfunc)]),
        ):
            minhash._word_hash_int.cache_clear()  # shingle_hash32's word cache starts cold for each run
            values, cpu, wall = timed(run)
            results[f"datasketch {way}, hash {hash_name}"] = (cpu, wall)
            differ = [index for index, row in enumerate(values) if not np.array_equal(row, ours[index])]
            assert not differ, f"datasketch {way} ({hash_name}) differs from sluice on documents {differ[:5]}"
        print(f"  hash {hash_name}: sluice's signatures equal datasketch's (update and bulk) on all {len(texts)} documents")

    python = datatrove_python()
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch, "texts.json")
        data.write_text(json.dumps(texts))
        script = Path(scratch, "datatrove_minhash.py")
        script.write_text(DATATROVE_SCRIPT)
        out = subprocess.run([str(python), str(script), str(data), str(Path(scratch, "sigs"))], check=True, capture_output=True, text=True)
        timing = json.loads(out.stdout.strip().splitlines()[-1])
        results["datatrove MinhashDedupSignature"] = (timing["cpu"], timing["wall"])

    rates = {name: len(texts) / cpu for name, (cpu, _) in results.items()}
    print(f"\n  {'':40} {'CPU s':>8} {'wall s':>8} {'docs/s/core':>12}")
    for name, (cpu, wall) in results.items():
        print(f"  {name:40} {cpu:8.2f} {wall:8.2f} {rates[name]:12.0f}")
    corpus = f"{len(texts)} docs en/de/zh/ru, 112 perm, 5-grams, CPU time"
    same = ", datasketch given sluice's shingles untimed, equal signatures"
    figure("minhash_docs_per_s_per_core", round(rates["sluice, hash shingle_hash32"]), "as high as possible", f"sluice default poly hash, {corpus}")
    for hash_name, goals in (("shingle_hash32", (">= 10x", ">= 2x")), ("sha1", ("-", "-"))):
        ours = rates[f"sluice, hash {hash_name}"]
        config = f"hash {hash_name} both sides, {corpus}{same}"
        suffix = "" if hash_name == "shingle_hash32" else "_sha1"
        figure(f"minhash_speedup_vs_datasketch_update{suffix}", ours / rates[f"datasketch update, hash {hash_name}"], goals[0], config)
        figure(f"minhash_speedup_vs_datasketch_bulk{suffix}", ours / rates[f"datasketch bulk, hash {hash_name}"], goals[1], config)
    config = f"sluice default poly hash vs datasketch default SHA-1 (different hash, not the same output), {corpus}{same.split(', equal')[0]}"
    figure("minhash_speedup_vs_datasketch_update_defaults", rates["sluice, hash shingle_hash32"] / rates["datasketch update, hash sha1"], "-", config)
    figure("minhash_speedup_vs_datasketch_bulk_defaults", rates["sluice, hash shingle_hash32"] / rates["datasketch bulk, hash sha1"], "-", config)
    figure(
        "minhash_speedup_vs_datatrove",
        rates["sluice, hash shingle_hash32"] / rates["datatrove MinhashDedupSignature"],
        ">= 20x",
        f"sluice poly vs datatrove's own spaCy words and 64-bit hash (not the same output), {corpus}",
    )


if __name__ == "__main__":
    main()
