"""`mixed_dataset` materialization at 10^6 and 10^7 documents: seconds and peak RSS, and their ratios.

    .venv/bin/python benchmarks/mix_scale.py [--sizes 1e6 1e7]

Data (generated vectorized under .bench_data/mix_scale/, git-ignored, reused when present): two sources in
two snapshots each, as the upstream assets publish them: tokenized shards of 2^18 documents (real .idx
offsets, log-normal lengths of mean ~650 tokens; .docs.parquet with doc_id, a 64-bit doc_hash and the
language; the .bin files sparse, the mix never reads tokens), deduplicated-partition manifests, and the
`decontamination` outputs for the mix's evaluation set (~100 flagged documents per partition) with the
identity the mix verifies. `web` is 80 % of the documents, 3:1 English:German; `reference` 20 %.

The mix (weights web:en 0.5, web:de 0.2, reference 0.3; budget 90 % of all tokens, so reference repeats
~1.35 times and the English documents are subsampled; L = 2048; validation_share 0.01) is materialized through
Dagster (`materialize`, in-process executor, the real resources) in a fresh process per size. Reported: wall
seconds of the materialization, the process's peak RSS, and the peak RSS above the RSS after imports.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers import ROOT, figure  # noqa: E402

DOCS_PER_SHARD = 1 << 18
DATA = ROOT / ".bench_data" / "mix_scale"
PARTITIONS = [("web", "2026-01", 0.4), ("web", "2026-02", 0.4), ("reference", "2026-01", 0.1), ("reference", "2026-02", 0.1)]
EVAL_TEXT = "Question: what does the release note say about the new init system and the usual deprecation of components?"


def write_partition(root: Path, source: str, snapshot: str, documents: int, salt: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from sluice.io.layout import PartitionRef, partition_prefix
    from sluice.mix.permutation import splitmix64
    from sluice.tokens.shards import DOCS_SCHEMA

    ref = PartitionRef(source, snapshot)
    folder = root / partition_prefix("tokenized_shards", ref)
    folder.mkdir(parents=True, exist_ok=True)
    entries, files, done = [], [], 0
    rng = np.random.default_rng([salt, documents])
    while done < documents:
        count = min(DOCS_PER_SHARD, documents - done)
        name = f"shard-{len(entries):05d}-00"
        lengths = np.clip(rng.lognormal(6.0, 1.0, size=count), 8, 20_000).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype("<u8")
        offsets.tofile(folder / f"{name}.idx")
        with open(folder / f"{name}.bin", "wb") as handle:
            handle.truncate(int(offsets[-1]) * 2)
        numbers = np.arange(done, done + count, dtype=np.int64)
        doc_ids = pc.binary_join_element_wise(f"{source}/{snapshot}/", pc.cast(pa.array(numbers), pa.string()), "")
        languages = pa.DictionaryArray.from_arrays(pa.array((numbers % 4 == 0).astype(np.int32)), pa.array(["en", "de"]))
        if source != "web":
            languages = pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, np.int32)), pa.array(["en"]))
        hashes = splitmix64(numbers.astype(np.uint64) ^ np.uint64(salt * 0x9E3779B97F4A7C15 % (1 << 64)))
        pq.write_table(pa.table({"doc_id": doc_ids, "doc_hash": pa.array(hashes, pa.uint64()), "language": languages}, schema=DOCS_SCHEMA), folder / f"{name}.docs.parquet")
        for file in (f"{name}.bin", f"{name}.idx", f"{name}.docs.parquet"):
            files.append({"key": file, "rows": None, "bytes": (folder / file).stat().st_size, "sha256": "-"})
        entries.append({"name": name, "documents": count, "tokens": int(offsets[-1])})
        done += count
    manifest = {"format": "sluice-tokens", "version": 1, "dtype": "uint16", "vocab_size": 50_000, "eos_id": 0, "tokenizer_sha256": "synthetic",
                "documents": documents, "tokens": sum(e["tokens"] for e in entries), "files": files, "shards": entries}
    (folder / "_manifest.json").write_text(json.dumps(manifest))


def write_decontamination(root: Path, config) -> None:
    """Deduplicated-partition manifests and their decontamination flags (~100 documents each) for the mix's spec."""
    from sluice.dedup.decontaminate import (
        ASSET,
        FLAGS_FILE,
        EvalSpec,
        eval_sets_digest,
        eval_specs,
        flags_identity,
        flags_table,
    )
    from sluice.io.layout import PartitionRef, partition_prefix, write_manifest, write_parquet
    from sluice.io.storage import open_store

    store = open_store(str(root / "data"))
    spec = EvalSpec.of(config.mixes["scale"])
    digest = eval_sets_digest(eval_specs(config.mixes), config.s3)
    for source, snapshot, _ in PARTITIONS:
        ref = PartitionRef(source, snapshot)
        deduped = partition_prefix("deduped_documents", ref)
        write_manifest(store, deduped, {"asset": "deduped_documents", "files": []})
        documents = json.loads(store.read_bytes(f"{partition_prefix('tokenized_shards', ref)}/_manifest.json"))["documents"]
        flagged = [{"spec": spec.id, "doc_id": f"{source}/{snapshot}/{number}", "matched_ngrams": 1} for number in range(0, documents, max(1, documents // 100))]
        prefix = partition_prefix(ASSET, ref)
        table = flags_table(flagged)
        write_manifest(store, prefix, {"asset": ASSET, "identity": flags_identity(digest, store.read_bytes(f"{deduped}/_manifest.json")),
                                       "specs": [{**spec.describe(), "flagged_documents": len(flagged)}], "documents_scanned": documents,
                                       "files": [write_parquet(store, f"{prefix}/{FLAGS_FILE}", table)]})


def prepare(documents: int) -> Path:
    import yaml

    from sluice.config import load_config

    root = DATA / f"docs={documents}"
    if (root / ".complete").exists():
        return root
    started = time.perf_counter()
    data = root / "data"
    for folder in ("sources/web", "sources/reference", "data/tokenizer"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for salt, (source, snapshot, share) in enumerate(PARTITIONS):
        write_partition(data, source, snapshot, int(documents * share), salt + 1)
    (data / "tokenizer" / "_manifest.json").write_text(json.dumps({"sha256": "synthetic", "vocab_size": 50_000, "eos_id": 0}))
    (root / "eval.jsonl").write_text(json.dumps({"text": EVAL_TEXT}) + "\n")
    tokens = sum(json.loads((data / "tokenized_shards" / f"source={s}" / f"snapshot={n}" / "_manifest.json").read_text())["tokens"] for s, n, _ in PARTITIONS)
    config = {
        "storage": {"root": str(data)},
        "sources": [{"name": "web", "location": str(root / "sources/web"), "format": "warc"},
                    {"name": "reference", "location": str(root / "sources/reference"), "format": "jsonl"}],
        "compute": {"backend": "local", "max_workers": 2},
        "mixes": {"scale": {"weights": {"web:en": 0.5, "web:de": 0.2, "reference": 0.3}, "token_budget": int(tokens * 0.9), "sequence_length": 2048,
                            "seed": 7, "max_epochs": 4, "validation_share": 0.01, "eval_sets": [str(root / "eval.jsonl")]}},
    }
    (root / "sluice.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    write_decontamination(root, load_config(str(root / "sluice.yaml")))
    (root / ".complete").write_text("ok")
    print(f"{documents:.0e} documents: generated in {time.perf_counter() - started:.1f}s", flush=True)
    return root


def measure(root: str) -> dict:
    """Materialize mixed_dataset[scale] once, in this process (SLUICE_CONFIG names the config)."""
    from dagster import DagsterInstance, materialize

    from data_assets.definitions import ASSETS, build_resources

    resources = build_resources(os.path.join(root, "sluice.yaml"))
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with DagsterInstance.ephemeral() as instance:
        started = time.perf_counter()
        result = materialize(ASSETS, selection=["mixed_dataset"], partition_key="scale", instance=instance, resources=resources,
                             run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
        seconds = time.perf_counter() - started
    assert result.success
    checks = {event.check_name: event.passed for event in result.get_asset_check_evaluations()}
    manifest = json.loads(Path(root, "data/mixed_dataset/mix=scale/_manifest.json").read_text())
    return {"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss_after_imports_mb": rss_start,
            "ranges": manifest["splits"]["train"]["ranges_count"], "validation": manifest["splits"]["validation"]["ranges_count"],
            "tokens": manifest["tokens"], "checks": checks, "removed": manifest["decontamination"]["removed_documents"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e6, 1e7], help="documents over all partitions")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    results = {}
    for size in args.sizes:
        documents = int(size)
        root = prepare(documents)
        env = {**os.environ, "SLUICE_CONFIG": str(root / "sluice.yaml"), "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, __file__, "--measure", str(root)], capture_output=True, text=True, env=env, cwd=str(ROOT), check=False)
        if done.returncode != 0:
            raise RuntimeError(f"materializing {documents} documents failed:\n{done.stderr[-4000:]}")
        results[documents] = result = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"{documents:.0e} documents: {result['seconds']:.1f}s, peak RSS {result['peak_rss_mb']:.0f} MB ({result['peak_rss_mb'] - result['rss_after_imports_mb']:.0f} MB "
            f"above the {result['rss_after_imports_mb']:.0f} MB after imports); {result['ranges']:,} training ranges, {result['validation']:,} validation, "
            f"{result['tokens']:,} tokens, {result['removed']} flagged documents removed; checks {result['checks']}",
            flush=True,
        )
    for documents, result in results.items():
        config = f"{documents:.0e} docs, 4 partitions, 3 components"
        figure(f"mix_materialize_s[{config}]", result["seconds"], "-")
        figure(f"mix_peak_rss_mb[{config}]", result["peak_rss_mb"], "-")
    if 10**6 in results and 10**7 in results:
        small, large = results[10**6], results[10**7]
        figure("mix_materialize_time_ratio_1e7_vs_1e6", large["seconds"] / small["seconds"], "<= 12")
        figure("mix_peak_rss_ratio_1e7_vs_1e6", large["peak_rss_mb"] / small["peak_rss_mb"], "<= 1.5")
        growth = (large["peak_rss_mb"] - large["rss_after_imports_mb"]) / max(1.0, small["peak_rss_mb"] - small["rss_after_imports_mb"])
        figure("mix_peak_rss_above_imports_ratio_1e7_vs_1e6", growth, "<= 1.5")


if __name__ == "__main__":
    main()
