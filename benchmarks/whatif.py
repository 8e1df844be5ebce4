"""`sluice whatif` speed and memory: a five-threshold change over 10^5 and 10^6 documents' cleaned_attributes.

    python benchmarks/whatif.py [--sizes 100000,1000000] [--files-rows 100000]

Synthetic attributes: the columns the default chain (`CleaningSettings()`) writes, values drawn around the
sample's distributions (seeded), decisions as the default config makes them, in files of `--files-rows`
rows (one cleaning task's part each) published by cleaned manifests, as cleaning lays them out. For each
size a fresh process with one polars thread (POLARS_MAX_THREADS=1) runs `what_if` for five changed
thresholds (Gopher min words, mean word length, FineWeb line punctuation, C4 sentences, language score) and
writes flips.parquet and summary.json; printed: its wall time, CPU time and peak RSS. Re-materializing
answers the same question by cleaning the documents again: its time is the default chain's measured rate on
the bundled sample (CleaningPipeline on the sample's raw documents, one core) times the documents;
`whatif_speedup_vs_rematerialize` is that over whatif's time at 10^6.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.peers import figure  # noqa: E402

CHANGE = {
    "gopher_quality": {"min_doc_words": 80, "max_avg_word_length": 8},
    "fineweb_quality": {"line_punct_thr": 0.2},
    "c4": {"min_num_sentences": 7},
    "min_language_score": 0.75,
}


def _config(root: str, change: dict | None = None) -> dict:
    """The project's config (benchmarks/sample_config.py) with storage at `root`, its cleaning with `change` merged in."""
    from benchmarks.sample_config import base_config

    raw = base_config(root)
    raw["cleaning"]["step_cpu_budget_s"] = None
    for key, value in (change or {}).items():
        raw["cleaning"][key] = {**raw["cleaning"].get(key, {}), **value} if isinstance(value, dict) else value
    return raw


def generate(root: str, documents: int, file_rows: int) -> None:
    """Attribute files of `documents` synthetic rows under `root`, with cleaned manifests naming them."""
    import numpy as np
    import polars as pl

    from sluice.clean import CleaningPipeline
    from sluice.config import SluiceConfig
    from sluice.io.layout import PartitionRef, partition_prefix, side_prefix, write_manifest
    from sluice.io.storage import open_store
    from sluice.whatif.engine import _decision, decision_rule

    config = SluiceConfig.model_validate(_config(root))
    names = CleaningPipeline.from_settings(config.cleaning.for_source("web"), attributes=True).attribute_names()
    store = open_store(root, config.s3)
    rng = np.random.default_rng(41)
    languages = np.array(["en", "de", "fr", "ja", "ru", "zh"])
    ref = PartitionRef("web", "2026-01")
    entries = []
    for part, start in enumerate(range(0, documents, file_rows)):
        n = min(file_rows, documents - start)
        chars = rng.lognormal(8.5, 1.2, n).astype(np.int64)
        columns = {"doc_id": [f"doc-{start + i}" for i in range(n)], "language": languages[rng.integers(0, 6, n)], "chars": chars, "tokens": chars // 4}
        for name in names:
            if name.endswith(".reason"):
                columns[name] = np.where(rng.random(n) < 0.01, "extraction_failed" if name == "extract.reason" else "", "")
            elif name == "language.language":
                columns[name] = columns["language"]
            elif name in ("gopher_quality.words", "gopher_quality.stop_words", "c4.sentences", "fineweb_quality.non_blank_lines"):
                columns[name] = rng.lognormal(6.0 if name.endswith(".words") else 3.0, 1.0, n).round()
            elif name.endswith(("characters",)):
                columns[name] = chars.astype(np.float64)
            elif name in ("c4.lorem_ipsum", "c4.curly_bracket"):
                columns[name] = (rng.random(n) < 0.01).astype(np.float64)
            elif name == "gopher_quality.mean_word_length":
                columns[name] = rng.normal(5.2, 1.0, n)
            elif name in ("language.score", "fineweb_quality.line_punct_ratio"):
                columns[name] = rng.beta(8, 1.5, n)
            elif name == "gopher_quality.words_with_a_letter":
                columns[name] = rng.beta(40, 2, n)
            else:  # shares of lines, characters, n-grams: mostly small
                columns[name] = rng.beta(1, 80, n)
        frame = pl.DataFrame(columns).with_columns(step=pl.lit(None, pl.String), reason=pl.lit(None, pl.String))
        rule = frame.select(decision_rule(config.cleaning.for_source("web"), languages.tolist()).alias("rule"))["rule"]
        frame = frame.with_columns(reason=rule, decision=frame.select(_decision(pl.lit(rule)))[:, 0], step=rule)
        order = ["doc_id", "decision", "step", "reason", "language", "chars", "tokens", *names]
        key = f"{side_prefix('cleaned_attributes', ref)}/attributes-{part:05d}.parquet"
        path = Path(root, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.select(order).write_parquet(path, compression="zstd")
        entries.append({"key": path.name, "rows": n, "prefix": side_prefix("cleaned_attributes", ref)})
    write_manifest(store, partition_prefix("cleaned_documents", ref), {"files": [], "side_files": entries})


def measure(root: str, out: str) -> dict:
    """One whatif run (this process: POLARS_MAX_THREADS=1 set by the caller): seconds, CPU s, peak RSS."""
    from sluice.config import SluiceConfig
    from sluice.whatif.engine import what_if
    from sluice.whatif.report import write

    current = SluiceConfig.model_validate(_config(root))
    other = SluiceConfig.model_validate(_config(root, CHANGE))
    started, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as scratch:
        result = what_if(current, other, scratch)
        write(result, out)
    summary = json.loads(Path(out, "summary.json").read_text())
    return {
        "seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "flips": summary["flipped_documents"],
        "unanswered": summary["unanswered"],
    }


def cleaning_rate() -> tuple[float, int]:
    """Documents per CPU second of the default chain on the sample's web documents (ingested here; one core,
    in process)."""
    import pyarrow.parquet as pq

    from sluice.clean import CleaningPipeline
    from sluice.clean.steps import Document
    from sluice.config import CleaningSettings, S3Settings
    from sluice.ingest.raw import ingest_file, plan_ingest
    from sluice.io.layout import PartitionRef

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for snapshot in ("2026-01", "2026-02"):
            out = Path(scratch, snapshot)
            for task in plan_ingest(str(ROOT / "sample_data" / "web"), PartitionRef("web", snapshot), "warc", {}, str(out), S3Settings()):
                ingest_file(task)
            rows += [row for path in sorted(out.glob("part-*.parquet")) for row in pq.read_table(path).to_pylist()]
    pipeline = CleaningPipeline.from_settings(CleaningSettings(step_cpu_budget_s=None))
    pipeline.run(Document("warm", "b", "b", None, None, "text/html", b"<p>warm up</p>", "utf-8"))
    cpu = time.process_time()
    for row in rows:
        doc = Document(row["doc_id"], "web", "s", row["url"], row["fetch_date"], row["content_type"], row["content"], row["charset"])
        pipeline.run(doc)
    pipeline.close()
    return len(rows) / (time.process_time() - cpu), len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--file-rows", type=int, default=100_000)
    parser.add_argument("--measure", nargs=2, metavar=("ROOT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    rate, pages = cleaning_rate()
    print(f"re-cleaning: the default chain cleans {rate:.1f} documents per CPU second ({pages} sample pages)")
    results = {}
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as scratch:
            root = str(Path(scratch, "data"))
            generate(root, size, args.file_rows)
            env = {**os.environ, "POLARS_MAX_THREADS": "1", "PYTHONPATH": str(ROOT)}
            done = subprocess.run(
                [sys.executable, __file__, "--measure", root, str(Path(scratch, "out"))], env=env, capture_output=True, text=True, check=True
            )
            results[size] = json.loads(done.stdout.strip().splitlines()[-1])
        r = results[size]
        print(f"{size:>9,d} documents: whatif {r['seconds']:.2f} s ({r['cpu_seconds']:.2f} CPU s), peak RSS {r['peak_rss_mib']:.0f} MiB, {r['flips']:,d} flips")
    config = "five thresholds changed, one polars thread, synthetic default-chain attributes"
    for size, r in results.items():
        label = f"{size:.0e}".replace("+0", "").replace("+", "")
        figure(f"whatif_s_{label}", r["seconds"], "<= 10" if size == 1_000_000 else "-", config + ", wall")
        figure(f"whatif_cpu_s_{label}", r["cpu_seconds"], "<= 10" if size == 1_000_000 else "-", config + ", CPU time of the process")
        figure(f"whatif_peak_rss_mib_{label}", r["peak_rss_mib"], "flat in documents", config)
    largest = max(results)
    figure(
        "whatif_speedup_vs_rematerialize", largest / rate / results[largest]["seconds"], ">= 100",
        f"{largest:,d} documents; re-cleaning at the default chain's measured {rate:.0f} docs/CPU s (extrapolated), one core each",
    )


if __name__ == "__main__":
    main()
