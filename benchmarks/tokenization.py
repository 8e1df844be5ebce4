"""Tokenization throughput: sluice (cleaned Parquet -> shards on disk) against the raw library and datatrove.

On the same texts, extracted from `../shared/corpus/` WARC pages, in one run:
  raw        `tokenizers.Tokenizer.encode_batch_fast` on the texts already in memory (ids only, no offsets:
             the same output as sluice's; the headline baseline), and `encode_batch` (with offsets, which
             sluice does not compute) for reference
  sluice     `sluice.tokens.tokenize.tokenize_part`: read a Parquet part, encode, write .bin/.idx/.docs.parquet shards
             (its word-cache fast path, see sluice/tokens/tokenize.py)
  datatrove  `DocumentTokenizer` behind a `ParquetReader`, same file, same tokenizer.json, without and with
             its default in-file document shuffle (in its own virtual environment, see benchmarks/peers.py)
each with one tokenizer thread (RAYON_NUM_THREADS=1; rate = tokens per CPU second of the process, which other
jobs on a shared machine disturb least) and with all cores (tokens per wall second). The tokenizer is a byte-level BPE
with a 32k vocabulary trained on the same texts. Each measurement runs in a fresh process (so sluice's word
cache starts empty). sluice's fast path splits and looks words up in Python, so the tokenizer's threads speed
up only its encoding of unseen words; the tokenized_shards asset gets its parallelism from the compute pool
(one process per part file). So all cores are also measured that way: the texts split into one part per
core, sluice through its local process pool and datatrove with tasks = workers = cores, one tokenizer thread
per process, start-up included; `sluice_vs_datatrove_all_cores_best_mode` compares each tool's faster mode.

    .venv/bin/python benchmarks/tokenization.py [--snapshot web] [--repeat 2]

The default input is every web page of the corpus (both snapshots, 13 MB of text, 5.65 M tokens): with one
snapshot (`--snapshot web/2026-01`, 2.65 M tokens) each of two pool processes works ~1.3 s against ~1 s of
start-up and a cold word cache, which is what dominates there (see docs/benchmarks/method.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers import SHARED, datatrove_python, figure  # noqa: E402

RAW = """
import sys, time, json, pyarrow.parquet as pq
from tokenizers import Tokenizer
texts = pq.read_table(sys.argv[1], columns=["text"]).column("text").to_pylist()
tok = Tokenizer.from_file(sys.argv[2])
start, cpu = time.perf_counter(), time.process_time()
encodings = tok.encode_batch(texts, add_special_tokens=False)
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "tokens": sum(len(e.ids) + 1 for e in encodings)}))
"""

RAW_FAST = RAW.replace("encode_batch(", "encode_batch_fast(")

SLUICE = """
import sys, time, json, os
from sluice.tokens.tokenize import TokenizeTask, tokenize_part
folder, name = os.path.split(sys.argv[1])
task = TokenizeTask(folder, name, sys.argv[3], 0, open(sys.argv[2]).read(), "<|endoftext|>")
start, cpu = time.perf_counter(), time.process_time()
result = tokenize_part(task)
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "tokens": result["tokens"]}))
"""

SLUICE_POOL = """
import sys, time, json, os
if __name__ == "__main__":
    from sluice.runtime.compute import LocalPoolExecutor
    from sluice.tokens.tokenize import TokenizeTask, tokenize_part
    folder, tokenizer, out, workers = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3], int(sys.argv[4])
    parts = sorted(name for name in os.listdir(folder) if name.startswith("part-"))
    tasks = [TokenizeTask(folder, name, out, index, tokenizer, "<|endoftext|>") for index, name in enumerate(parts)]
    start = time.perf_counter()
    results = LocalPoolExecutor(workers).map(tokenize_part, tasks)  # as the tokenized_shards asset runs it
    elapsed = time.perf_counter() - start
    print(json.dumps({"seconds": elapsed, "tokens": sum(r["tokens"] for r in results)}))
"""

DATATROVE_TASKS = """
import sys, time, json, os
if __name__ == "__main__":
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    folder, tokenizer, out, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    pipeline = [
        ParquetReader(folder, glob_pattern="part-*.parquet", text_key="text", id_key="doc_id"),
        DocumentTokenizer(out, tokenizer_name_or_path=tokenizer, eos_token="<|endoftext|>", shuffle_documents=False),
    ]
    executor = LocalPipelineExecutor(pipeline=pipeline, tasks=workers, workers=workers, logging_dir=out + "_logs")
    start = time.perf_counter()
    executor.run()
    elapsed = time.perf_counter() - start
    tokens = sum(os.path.getsize(os.path.join(out, p)) // 2 for p in os.listdir(out) if p.endswith(".ds"))
    print(json.dumps({"seconds": elapsed, "tokens": tokens}))
"""

DATATROVE = """
import sys, time, json, os
if __name__ == "__main__":
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    folder, name = os.path.split(sys.argv[1])
    pipeline = [
        ParquetReader(folder, glob_pattern=name, text_key="text", id_key="doc_id"),
        DocumentTokenizer(sys.argv[3], tokenizer_name_or_path=sys.argv[2], eos_token="<|endoftext|>", shuffle_documents=sys.argv[4] == "shuffle"),
    ]
    executor = LocalPipelineExecutor(pipeline=pipeline, tasks=1, workers=1, logging_dir=sys.argv[3] + "_logs")
    start, cpu = time.perf_counter(), time.process_time()
    executor.run()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    tokens = 0
    for path in os.listdir(sys.argv[3]):
        if path.endswith(".ds"):
            tokens += os.path.getsize(os.path.join(sys.argv[3], path)) // 2
    print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "tokens": tokens}))
"""


def extract_texts(snapshot: Path, out: Path) -> int:
    """Main text of every HTML response page of the WARC files under `snapshot` (a snapshot folder, or a
    source folder for all its snapshots), as a cleaned-like Parquet part."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    from warcio.archiveiterator import ArchiveIterator

    ids, texts = [], []
    for path in sorted(snapshot.rglob("*.warc.gz")):
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type != "response":
                    continue
                body = record.content_stream().read()
                text = extract_plain_text(bytes_to_str(body, detect_encoding(body)), main_content=True)
                if len(text) >= 200:
                    ids.append(f"{path.name}#{len(ids)}")
                    texts.append(text)
    pq.write_table(pa.table({"doc_id": ids, "text": texts}), out)
    return len(texts)


def split_parts(parquet: Path, folder: Path, parts: int) -> None:
    """The same documents as `parts` contiguous Parquet parts (per-file parallelism, as a pipeline runs)."""
    import pyarrow.parquet as pq

    table = pq.read_table(parquet)
    folder.mkdir()
    size = -(-table.num_rows // parts)
    for index in range(parts):
        pq.write_table(table.slice(index * size, size), folder / f"part-{index:05d}.parquet")


def train_tokenizer(parquet: Path, out: Path) -> None:
    import pyarrow.parquet as pq

    from sluice.tokens.tokenize import train_bpe

    texts = pq.read_table(parquet, columns=["text"]).column("text").to_pylist()
    out.write_text(train_bpe(iter(texts), 32_000, "<|endoftext|>").to_str())


def measure(python: str, code: str, args: list[str], threads: int) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true" if threads > 1 else "false"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([python, "-c", code, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{python} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshot", default="web", help="folder under ../shared/corpus (a source: all its snapshots)")
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs per measurement")
    parser.add_argument("--skip-datatrove", action="store_true")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    datatrove = None if args.skip_datatrove else str(datatrove_python())
    with tempfile.TemporaryDirectory(prefix="sluice-bench-tok-") as scratch:
        work = Path(scratch)
        parquet = work / "part-00000.parquet"
        documents = extract_texts(SHARED / "corpus" / args.snapshot, parquet)
        tokenizer = work / "tokenizer.json"
        train_tokenizer(parquet, tokenizer)
        print(f"{documents} documents from corpus/{args.snapshot}, {parquet.stat().st_size / 1e6:.1f} MB Parquet; BPE 32k; {cores} cores")
        results: dict[tuple[str, int], float] = {}
        for threads in (1, cores):
            runs = (
                ("raw", sys.executable, RAW, []),
                ("raw_encode_batch_fast", sys.executable, RAW_FAST, []),
                ("sluice", sys.executable, SLUICE, []),
                ("datatrove", datatrove, DATATROVE, ["no-shuffle"]),
                ("datatrove_default_shuffle", datatrove, DATATROVE, ["shuffle"]),
            )
            for name, python, code, extra in runs:
                if python is None:
                    continue
                best = None
                for attempt in range(args.repeat):
                    out = work / f"out-{name}-{threads}-{attempt}"
                    result = measure(python, code, [str(parquet), str(tokenizer), str(out), *extra], threads)
                    # One thread: tokens per CPU second of the process (what other jobs on a shared machine
                    # disturb least); all cores: tokens per wall second.
                    rate = result["tokens"] / (result["cpu_seconds"] if threads == 1 else result["seconds"])
                    best = rate if best is None else max(best, rate)
                results[(name, threads)] = best
                if name == "sluice":
                    tokens = result["tokens"]
                print(f"  {name:26s} {threads} thread(s): {best / 1e3:8.0f} k tokens/s ({result['tokens']} tokens)", flush=True)
        # All cores the way pipelines use them: one single-threaded process per part file, worker start-up
        # included (sluice: its local process pool, as the tokenized_shards asset runs; datatrove: tasks=workers).
        parts = work / "parts"
        split_parts(parquet, parts, cores)
        for name, python, code in (("sluice_pool", sys.executable, SLUICE_POOL), ("datatrove_tasks", datatrove, DATATROVE_TASKS)):
            if python is None:
                continue
            best = None
            for attempt in range(args.repeat):
                out = work / f"out-{name}-{attempt}"
                result = measure(python, code, [str(parts), str(tokenizer), str(out), str(cores)], 1)
                rate = result["tokens"] / result["seconds"]
                best = rate if best is None else max(best, rate)
            results[(name, cores)] = best
            print(f"  {name:26s} {cores} processes, 1 thread each: {best / 1e3:8.0f} k tokens/s ({result['tokens']} tokens)", flush=True)
        for threads, label in ((1, "one_thread"), (cores, "all_cores")):
            config = (f"{'1 thread, CPU time' if threads == 1 else f'{cores} threads, wall'}, {documents} docs corpus/{args.snapshot}, "
                      f"{tokens / 1e6:.2f} M tokens, BPE 32k")
            fast = results[("raw_encode_batch_fast", threads)]
            figure(f"tokenization_tokens_per_s_per_core_sluice_{label}", f"{results[('sluice', threads)] / threads:.0f}", "-", config)
            figure(f"tokenization_vs_encode_batch_fast_{label}", results[("sluice", threads)] / fast, ">= 0.9", config + ", raw ids only")
            figure(f"tokenization_vs_encode_batch_offsets_{label}", results[("sluice", threads)] / results[("raw", threads)], "-", config + ", raw with offsets")
            if ("datatrove", threads) in results:
                figure(f"tokenization_vs_datatrove_{label}", results[("sluice", threads)] / results[("datatrove", threads)], ">= 1.3", config + ", DocumentTokenizer no shuffle")
                figure(
                    f"tokenization_vs_datatrove_default_shuffle_{label}",
                    results[("sluice", threads)] / results[("datatrove_default_shuffle", threads)],
                    ">= 1.3",
                    config + ", DocumentTokenizer default shuffle",
                )
        if ("datatrove_tasks", cores) in results:
            # Each tool at its best on all cores: tokenizer threads on one file, or one process per file.
            ours = max(results[("sluice", cores)], results[("sluice_pool", cores)])
            theirs = max(results[("datatrove", cores)], results[("datatrove_tasks", cores)])
            config = f"{cores} cores, wall, each tool's faster mode (threads or one process per part), {documents} docs, BPE 32k"
            figure("tokenization_vs_datatrove_all_cores_best_mode", ours / theirs, ">= 1.3", config)
            figure("tokenization_vs_encode_batch_fast_all_cores_best_mode", ours / results[("raw_encode_batch_fast", cores)], ">= 0.9", config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
