"""Export throughput and memory: sluice's export of a mix split, and its shard writers against each format's own.

    SLUICE_BENCH_ENVS=/work/bench_envs .venv/bin/python benchmarks/export.py [--tokens 2e6]

Data: one synthetic source (benchmarks/loader.py's `write_source`: random uint16 tokens, log-normal document
lengths) mixed with L=2048 by `sluice.mix.build_mix`, at 1x, 4x and 16x `--tokens`.

Whole export: `export_split` of the train split from the mix on local disk (document-id table, packing in
the loader's order, encoding, shard files, SHA-256, publish), in a child process per format and size so its
peak RSS is its own. Shards of 64 MiB. Figures: tokens/s per format (input tokens: samples x L), and per
format seconds per token and peak RSS at 16x over 1x (cost grows with the work; memory does not).

Writers, like for like, at 4x: the rows of sluice's Parquet export are read into memory before any clock
starts; then each writer turns the same rows into shard files of 64 MiB with the same fields and encodings:
- sluice: the format's `ShardWriter` (encoding, cutting, SHA-256 of every shard, publish) fed the rows in
  the export's blocks of 128 samples;
- WebDataset: `webdataset.ShardWriter` (maxsize 64 MiB), {cu_seqlens,input_ids,labels}.npy + json members;
- MDS: `streaming.MDSWriter` (MosaicML Streaming 0.13, its own virtual environment), size_limit 64 MiB, no
  hashes, no compression;
- Parquet: pyarrow's `pq.write_table` of the same table slices sluice's files hold (zstd level 3, row
  groups of the same rows): the raw library sluice writes through, so the ratio is sluice's overhead.
Each writer runs 3 times, interleaved with the others; its best time counts. Figure: peer writer seconds /
sluice writer seconds (>= 1: sluice is as fast or faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.loader import MOSAIC, write_source  # noqa: E402
from benchmarks.peers import figure, peer_python  # noqa: E402
from sluice.config import MixSettings  # noqa: E402
from sluice.export import FORMATS, export_split  # noqa: E402
from sluice.export.parquet import ROW_GROUP_BYTES  # noqa: E402
from sluice.export.run import WRITERS  # noqa: E402
from sluice.export.samples import Block  # noqa: E402
from sluice.io.storage import open_store  # noqa: E402
from sluice.loader import PACK_TOKENS  # noqa: E402
from sluice.mix import build_mix  # noqa: E402

SEQ = 2048
SHARD_BYTES = 64 << 20
SCALES = (1, 4, 16)
REPEATS = 3

MDS_SCRIPT = """
import json, sys, time
import numpy as np
from streaming import MDSWriter

rows_path, out, seq, size_limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = dict(np.load(rows_path))  # an NpzFile would re-read an array on every access
doc_ids = json.loads(open(rows_path + ".doc_ids.json").read())
cu, offsets = data["cu_values"], data["cu_offsets"]
columns = {"cu_seqlens": "ndarray:int32", "doc_ids": "json", "input_ids": f"ndarray:int32:{seq}", "labels": f"ndarray:int32:{seq}", "sample_id": "int64"}
rows = [{"sample_id": int(data["sample_id"][i]), "input_ids": data["input_ids"][i], "labels": data["labels"][i],
         "cu_seqlens": cu[offsets[i]:offsets[i + 1]], "doc_ids": doc_ids[i]} for i in range(len(data["sample_id"]))]
start = time.perf_counter()
with MDSWriter(out=out, columns=columns, size_limit=size_limit) as writer:
    for row in rows:
        writer.write(row)
print(json.dumps({"seconds": time.perf_counter() - start, "samples": len(rows)}))
"""


def rss_bytes(field: str = "VmRSS") -> int:
    """This process's resident set now (VmRSS) or its peak (VmHWM).

    Not getrusage's ru_maxrss: Linux carries it across exec, so a child started by a large parent reports
    the parent's size at fork time as its own peak."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(f"{field}:"))
    return int(line.split()[1]) * 1024


def child(fmt: str, root: str, out: str) -> None:
    """One export in this process: prints its seconds, RSS before it (after imports) and peak RSS."""
    baseline = rss_bytes()
    start = time.perf_counter()
    manifest = export_split(open_store(root), "bench", "train", fmt, open_store(out), shard_bytes=SHARD_BYTES)
    seconds = time.perf_counter() - start
    peak = rss_bytes("VmHWM")
    print(json.dumps({"seconds": seconds, "tokens": manifest["tokens"], "files": len(manifest["files"]), "baseline_rss": baseline, "peak_rss": peak}))


def run_child(fmt: str, root: str, out: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", fmt, root, out], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def build(work: str, tokens: int) -> str:
    root = os.path.join(work, "store")
    write_source(root, tokens)
    settings = MixSettings(weights={"synthetic": 1.0}, token_budget=tokens - 1000, sequence_length=SEQ, seed=1, max_epochs=1.0)
    build_mix(open_store(root), "bench", settings)
    return root


def parquet_rows(folder: str) -> dict:
    """The exported rows as arrays (what every writer is given), the export's description and its files."""
    manifest = json.loads(Path(folder, "_manifest.json").read_text())
    table = pq.read_table(folder)
    flat = {name: table.column(name).combine_chunks() for name in ("input_ids", "labels", "cu_seqlens", "doc_ids")}
    count = table.num_rows
    return {
        "table": table,
        "info": {key: value for key, value in manifest.items() if key not in ("files", "extra_keys", "checks")},
        "file_rows": [entry["rows"] for entry in manifest["files"]],
        "sample_id": table.column("sample_id").to_numpy(),
        "input_ids": flat["input_ids"].values.to_numpy().reshape(count, SEQ),
        "labels": flat["labels"].values.to_numpy().reshape(count, SEQ),
        "cu_values": flat["cu_seqlens"].values.to_numpy(),
        "cu_offsets": flat["cu_seqlens"].offsets.to_numpy().astype(np.int64),
        "doc_id_values": flat["doc_ids"].values,
        "doc_ids": table.column("doc_ids").to_pylist(),
    }


def blocks(rows: dict) -> list[Block]:
    """The rows cut into the blocks `export_split` hands its writer (PACK_TOKENS tokens each)."""
    per_block = max(1, PACK_TOKENS // SEQ)
    count = len(rows["sample_id"])
    cu = rows["cu_offsets"]
    docs = cu - np.arange(len(cu), dtype=np.int64)
    out = []
    for begin in range(0, count, per_block):
        end = min(count, begin + per_block)
        out.append(Block(
            rows=np.arange(begin, end, dtype=np.int64), sample_ids=rows["sample_id"][begin:end],
            input_ids=rows["input_ids"][begin:end], labels=rows["labels"][begin:end],
            cu_offsets=cu[begin : end + 1] - cu[begin], cu_values=rows["cu_values"][cu[begin] : cu[end]],
            doc_ids=rows["doc_id_values"].slice(docs[begin], docs[end] - docs[begin]),
        ))
    return out


def sluice_writer(fmt: str, rows: dict, work: str) -> float:
    """Seconds sluice's shard writer of `fmt` takes to write the rows (encoding, cutting, SHA-256, publish)."""
    chunks = blocks(rows)
    scratch = os.path.join(work, f"scratch-{fmt}")
    os.makedirs(scratch)
    start = time.perf_counter()
    writer = WRITERS[fmt](open_store(os.path.join(work, f"sluice-{fmt}")), "train", scratch, SHARD_BYTES, {**rows["info"], "export_format": fmt})
    for block in chunks:
        writer.add(block)
    writer.close()
    if fmt == "mds":
        writer.destination.write_bytes("train/index.json", writer.index())
    return time.perf_counter() - start


def parquet_writer(rows: dict, out: str) -> float:
    """pyarrow writing the same files: sluice's table slices, zstd 3, row groups of sluice's size."""
    os.makedirs(out, exist_ok=True)
    table = rows["table"]
    group_rows = max(1, ROW_GROUP_BYTES // (8 * SEQ))
    begin = 0
    start = time.perf_counter()
    for number, count in enumerate(rows["file_rows"]):
        pq.write_table(table.slice(begin, count), os.path.join(out, f"part-{number:05d}.parquet"), row_group_size=group_rows,
                       compression="zstd", compression_level=3, write_statistics=["sample_id"])
        begin += count
    return time.perf_counter() - start


def webdataset_writer(rows: dict, out: str) -> float:
    import webdataset as wds

    os.makedirs(out, exist_ok=True)
    cu, offsets = rows["cu_values"], rows["cu_offsets"]
    samples = [
        {"__key__": f"{i:012d}", "input_ids.npy": rows["input_ids"][i], "labels.npy": rows["labels"][i],
         "cu_seqlens.npy": cu[offsets[i] : offsets[i + 1]], "json": {"sample_id": int(rows["sample_id"][i]), "doc_ids": rows["doc_ids"][i]}}
        for i in range(len(rows["sample_id"]))
    ]
    start = time.perf_counter()
    with wds.ShardWriter(os.path.join(out, "shard-%06d.tar"), maxsize=SHARD_BYTES, maxcount=1 << 40, verbose=0) as writer:
        for sample in samples:
            writer.write(sample)
    return time.perf_counter() - start


def mds_writer(rows: dict, work: str) -> float:
    python = peer_python(*MOSAIC)
    stub = Path(work, "stub", "torchvision")  # streaming imports torchvision (CUDA build on PyPI): a stand-in
    (stub / "transforms").mkdir(parents=True, exist_ok=True)
    for name, text in (("__init__.py", ""), ("datasets.py", "class VisionDataset:\n    pass\n"), ("transforms/__init__.py", ""),
                       ("transforms/functional.py", "def to_tensor(*args):\n    raise NotImplementedError\n")):
        (stub / name).write_text(text)
    rows_path = os.path.join(work, "rows.npz")
    np.savez(rows_path, **{key: rows[key] for key in ("sample_id", "input_ids", "labels", "cu_values", "cu_offsets")})
    Path(rows_path + ".doc_ids.json").write_text(json.dumps(rows["doc_ids"]))
    script = Path(work, "mds_writer.py")
    script.write_text(MDS_SCRIPT)
    out = os.path.join(work, "mds-peer")
    done = subprocess.run([str(python), str(script), rows_path, out, str(SEQ), str(SHARD_BYTES)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(stub.parent)}, cwd=work, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"MDSWriter failed:\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=2e6, help="tokens at 1x")
    parser.add_argument("--child", nargs=3, metavar=("FORMAT", "ROOT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    results: dict[int, dict[str, dict]] = {}
    writers: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sluice-export-bench-") as work:
        for scale in SCALES:
            folder = os.path.join(work, f"x{scale}")
            root = build(folder, int(args.tokens * scale))
            results[scale] = {}
            for fmt in FORMATS:
                results[scale][fmt] = r = run_child(fmt, root, os.path.join(folder, f"out-{fmt}"))
                print(f"{scale:>2}x {fmt:<10} {r['tokens']:>10} tokens {r['seconds']:7.2f} s {r['tokens'] / r['seconds'] / 1e6:7.1f} M tokens/s "
                      f"{r['files']:>3} files  RSS {r['baseline_rss'] / 2**20:4.0f} MiB before, peak {r['peak_rss'] / 2**20:4.0f} MiB", flush=True)
            if scale == 4:
                rows = parquet_rows(os.path.join(folder, "out-parquet", "train"))
                writers = {fmt: {"sluice": [], "peer": []} for fmt in FORMATS}
                for attempt in range(REPEATS):  # interleaved, best of REPEATS: a busy machine slows one run, not one writer
                    run = os.path.join(folder, f"writers-{attempt}")
                    os.makedirs(run)
                    for fmt in FORMATS:
                        writers[fmt]["sluice"].append(sluice_writer(fmt, rows, run))
                    writers["webdataset"]["peer"].append(webdataset_writer(rows, os.path.join(run, "wds-peer")))
                    writers["mds"]["peer"].append(mds_writer(rows, run))
                    writers["parquet"]["peer"].append(parquet_writer(rows, os.path.join(run, "pyarrow-peer")))
                    shutil.rmtree(run)
                writers = {fmt: {who: min(times) for who, times in entry.items()} for fmt, entry in writers.items()}
                del rows
            shutil.rmtree(folder)
    for fmt in FORMATS:
        r = results[4][fmt]
        figure(f"export_tokens_per_s/{fmt} (whole export, 4x = {r['tokens']} tokens, L={SEQ}, 64 MiB shards)", r["tokens"] / r["seconds"], "report")
    tokens4 = results[4]["parquet"]["tokens"]
    peers = {"webdataset": "webdataset.ShardWriter", "mds": "streaming.MDSWriter", "parquet": "pyarrow pq.write_table"}
    for fmt in FORMATS:
        times = writers[fmt]
        print(f"writers at 4x, {fmt}: sluice {tokens4 / times['sluice'] / 1e6:.1f} M tokens/s, {peers[fmt]} {tokens4 / times['peer'] / 1e6:.1f} M tokens/s")
    for fmt in FORMATS:
        figure(f"export_writer_{fmt}_vs_{peers[fmt]} (4x, same rows in memory, 64 MiB shards; sluice's includes SHA-256)",
               writers[fmt]["peer"] / writers[fmt]["sluice"], ">= 1" if fmt != "parquet" else ">= 0.8 (sluice's overhead over pyarrow)")
    for fmt in FORMATS:
        small, large = results[1][fmt], results[16][fmt]
        per_token = (large["seconds"] / large["tokens"]) / (small["seconds"] / small["tokens"])
        figure(f"export_seconds_per_token_16x_over_1x/{fmt}", per_token, "<= 1.25")
        figure(f"export_peak_rss_16x_over_1x/{fmt}", large["peak_rss"] / small["peak_rss"], "<= 1.25")
        print(f"  {fmt}: RSS growth during the export {(small['peak_rss'] - small['baseline_rss']) / 2**20:.0f} MiB at 1x, "
              f"{(large['peak_rss'] - large['baseline_rss']) / 2**20:.0f} MiB at 16x")


if __name__ == "__main__":
    main()
