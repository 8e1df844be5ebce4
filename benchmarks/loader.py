"""Training-loader benchmarks: tokens/s per rank against MosaicML Streaming and LitData, and (on CUDA
machines) the data-stall share of a small GPT's step time. Start/resume time and memory at 10^6-10^8
documents: `benchmarks/loader_scale.py`.

    SLUICE_BENCH_ENVS=/work/wt/bench_envs .venv/bin/python benchmarks/loader.py [--tokens 40e6] [--seconds 6]

1. Throughput (CPU, local, warm page cache). One synthetic tokenized source (random uint16 tokens, documents of
   log-normal length, written with `sluice.tokens.shards.ShardWriter`) is mixed by `sluice.mix.build_mix`; the mix's
   token stream is then written as MDS shards (MosaicML Streaming 0.13, `StreamingDataset`, shuffled) and as
   LitData chunks (`optimize` + `TokensLoader(block_size=L+1)`, `StreamingDataset` shuffled), each in its own
   virtual environment (`benchmarks/peers.py`). Each loader delivers [batch, L] int64 `input_ids` + `labels`
   (sluice also builds position_ids / cu_seqlens) in a single rank with no DataLoader worker processes
   (sluice: its one background thread; the peers: their in-process iteration); a pass over the data warms
   the page cache first. Reported: tokens/s per rank and sluice's ratio to each peer.
2. CUDA stall share: examples/train.py's TinyGPT fed by the loader on the GPU; skipped without CUDA.
3. S3 traffic: the mix uploaded to the SeaweedFS S3 server the tests use (`benchmarks/s3_server.py`), read by
   one rank with a cache of 1% of the shards: S3 bytes of tokens fetched per byte of input tokens served
   (`remote_reads="spans"`, ranged GETs of the samples' spans and index entries; the whole-shard cache for
   contrast), counted around the store: every byte read (tokens, index, shard table, manifests), by kind.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers import ROOT, figure, peer_python  # noqa: E402
from sluice.config import MixSettings  # noqa: E402
from sluice.io.layout import sha256_file  # noqa: E402
from sluice.io.storage import open_store  # noqa: E402
from sluice.loader import MixedTokens, TrainingLoader  # noqa: E402
from sluice.mix import build_mix  # noqa: E402
from sluice.tokens.shards import ShardWriter  # noqa: E402

SEQ = 2048
BATCH = 8
VOCAB = 50_000
MOSAIC = ("mosaicml-streaming", ["mosaicml-streaming==0.13.0", "torch==2.13.0"], ["torchvision"])
LITDATA = ("litdata", ["litdata==0.2.76", "torch==2.13.0"], [])


# -- data ------------------------------------------------------------------------------------------------

def write_source(root: str, tokens: int, shards: int = 8, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    prefix = "tokenized_shards/source=synthetic/snapshot=2026-01"
    folder = os.path.join(root, prefix)
    os.makedirs(folder, exist_ok=True)
    files, entries = [], []
    per_shard = tokens // shards
    for number in range(shards):
        writer = ShardWriter(folder, f"shard-{number:05d}", VOCAB)
        body = rng.integers(1, VOCAB, size=per_shard, dtype=np.uint16)
        lengths = np.clip(rng.lognormal(6.0, 1.0, size=per_shard // 100 + 10).astype(np.int64), 8, 20_000)
        cuts = np.cumsum(lengths)
        cuts = cuts[cuts < per_shard]
        for begin, end in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [per_shard]]), strict=True):
            doc = body[begin:end].copy()
            doc[-1] = 0  # EOS
            writer.add(doc)
        writer.close()
        docs_path = os.path.join(folder, f"{writer.name}.docs.parquet")
        pq.write_table(pa.table({"doc_id": [f"synthetic/{writer.name}#{i}" for i in range(writer.documents)]}), docs_path)
        for path in (writer.bin_path, writer.idx_path, docs_path):
            files.append({"key": os.path.basename(path), "rows": None, "bytes": os.path.getsize(path), "sha256": sha256_file(path)})
        entries.append({"name": writer.name, "documents": writer.documents, "tokens": writer.tokens})
    manifest = {
        "format": "sluice-tokens", "version": 1, "dtype": "uint16", "vocab_size": VOCAB, "eos_id": 0, "tokenizer_sha256": "synthetic",
        "documents": sum(e["documents"] for e in entries), "tokens": sum(e["tokens"] for e in entries), "files": files, "shards": entries,
    }
    Path(folder, "_manifest.json").write_text(json.dumps(manifest))


def prepare(work: str, tokens: int) -> tuple[MixedTokens, str]:
    root = os.path.join(work, "store")
    write_source(root, tokens)
    store = open_store(root)
    budget = tokens - 1000
    settings = MixSettings(weights={"synthetic": 1.0}, token_budget=budget, sequence_length=SEQ, seed=1, max_epochs=1.0)
    build_mix(store, "bench", settings)
    data = MixedTokens(store, "bench", cache_dir=os.path.join(work, "cache"))
    stream_path = os.path.join(work, "stream.u16")
    data.tokens(0, len(data) * SEQ + 1).astype(np.uint16).tofile(stream_path)  # the same tokens for the peers
    return data, stream_path


# -- sluice ----------------------------------------------------------------------------------------------

def run_sluice(data: MixedTokens, seconds: float, threaded: bool, workers: int = 0) -> float:
    # prefetch_batches=0: batches built synchronously in the caller, like the peers' in-process iteration.
    iterator = iter(TrainingLoader(data, BATCH, seed=3, prefetch_batches=4 if threaded else 0, num_workers=workers))
    for _ in range(10):
        next(iterator)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        batch = next(iterator)
        count += batch["input_ids"].shape[0]
    return count * SEQ / (time.perf_counter() - started)


# -- peers (run in their own environments) ---------------------------------------------------------------

PEER_SCRIPT = r'''
import json, os, sys, time
import numpy as np
import torch

def chunk(item):
    path, seq, begin, end = item
    return torch.from_numpy(np.array(np.memmap(path, np.uint16, "r")[begin * seq : end * seq], dtype=np.int32))

def main():
    kind, stream_path, work, seq, batch, seconds, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
    tokens = np.fromfile(stream_path, dtype=np.uint16)
    samples = (len(tokens) - 1) // seq
    if kind == "mosaic":
        from streaming import MDSWriter, StreamingDataset
        out = os.path.join(work, "mds")
        with MDSWriter(out=out, columns={"tokens": "bytes"}, size_limit=1 << 26) as writer:
            for i in range(samples):
                writer.write({"tokens": tokens[i * seq : i * seq + seq + 1].tobytes()})

        class Tokens(StreamingDataset):
            def __getitem__(self, index):
                window = torch.from_numpy(np.frombuffer(super().__getitem__(index)["tokens"], np.uint16).astype(np.int64))
                return {"input_ids": window[:-1], "labels": window[1:]}

        dataset = Tokens(local=out, shuffle=True, shuffle_seed=3, batch_size=batch)
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=0)
    else:
        from litdata import StreamingDataLoader, StreamingDataset, TokensLoader, optimize
        out = os.path.join(work, "litdata")
        per_chunk = 64
        inputs = [(stream_path, seq, i * per_chunk, min(samples, (i + 1) * per_chunk)) for i in range((samples + per_chunk - 1) // per_chunk)]
        optimize(fn=chunk, inputs=inputs, output_dir=out,
                 chunk_size=per_chunk * seq * 4, item_loader=TokensLoader(), num_workers=1, verbose=False)
        class Tokens(StreamingDataset):
            def __getitem__(self, index):
                window = super().__getitem__(index).to(torch.int64)
                return {"input_ids": window[:-1], "labels": window[1:]}
        dataset = Tokens(input_dir=out, item_loader=TokensLoader(block_size=seq + 1), shuffle=True, seed=3)
        loader = StreamingDataLoader(dataset, batch_size=batch, num_workers=0)

    def endless():
        while True:
            yield from loader

    it = endless()
    warm = 0
    for b in it:  # one pass warms the page cache
        warm += b["input_ids"].shape[0]
        if warm >= samples:
            break
    best = 0.0
    for _ in range(rounds):  # best of `rounds`, as for sluice
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds / rounds:
            b = next(it)
            count += b["input_ids"].shape[0]
        best = max(best, count * seq / (time.perf_counter() - started))
    assert tuple(b["input_ids"].shape) == (batch, seq), b["input_ids"].shape
    print(json.dumps({"tokens_per_s": best}))

if __name__ == "__main__":
    main()
'''


def run_peer(spec: tuple[str, list[str], list[str]], kind: str, stream_path: str, work: str, seconds: float, rounds: int) -> float:
    name, requirements, uninstall = spec
    python = peer_python(name, requirements, uninstall)
    script = Path(work, "peer_loader.py")
    script.write_text(PEER_SCRIPT)
    env = dict(os.environ)
    if kind == "mosaic":
        # streaming imports torchvision, whose PyPI build needs CUDA libraries: an empty stand-in lets it import.
        stub = Path(work, "stub", "torchvision")
        (stub / "transforms").mkdir(parents=True, exist_ok=True)
        (stub / "__init__.py").write_text("")
        (stub / "datasets.py").write_text("class VisionDataset:  # stand-in, never used for tokens\n    pass\n")
        (stub / "transforms" / "__init__.py").write_text("")
        (stub / "transforms" / "functional.py").write_text("def to_tensor(*args):\n    raise NotImplementedError\n")
        env["PYTHONPATH"] = str(stub.parent)
    peer_work = Path(work, kind)
    peer_work.mkdir(exist_ok=True)
    done = subprocess.run(
        [str(python), str(script), kind, stream_path, str(peer_work), str(SEQ), str(BATCH), str(seconds), str(rounds)],
        capture_output=True, text=True, env=env, cwd=str(peer_work), check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{kind} peer failed:\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["tokens_per_s"])


# -- S3 traffic ------------------------------------------------------------------------------------------

class _CountingStore:
    """Counts the bytes every read of a store returns (ranged GETs and whole downloads), per kind of file."""

    def __init__(self, store) -> None:
        self._store = store
        self.bytes: dict[str, int] = {}

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    def _count(self, key: str, size: int) -> None:
        kind = key.rsplit(".", 1)[-1]
        self.bytes[kind] = self.bytes.get(kind, 0) + size

    def read_range(self, key: str, start: int, length: int) -> bytes:
        raw = self._store.read_range(key, start, length)
        self._count(key, len(raw))
        return raw

    def read_bytes(self, key: str) -> bytes:
        raw = self._store.read_bytes(key)
        self._count(key, len(raw))
        return raw

    def fetch(self, key: str, local_dir: str) -> str:
        path = self._store.fetch(key, local_dir)
        self._count(key, os.path.getsize(path))
        return path


def s3_traffic(data: MixedTokens, work: str, batches: int) -> dict[str, dict[str, float]]:
    """Per `remote_reads` mode: S3 bytes fetched per input-token byte served (all, and by file kind), tokens/s."""
    from benchmarks.s3_server import shared_server
    from sluice.config import S3Settings

    root = data.store.local_path("")
    shard_bytes = sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(root) for name in names if name.endswith((".bin", ".idx")))
    results = {}
    with shared_server() as server:
        os.environ.update(server.env())
        bucket, client = server.create_bucket("sluice-bench-loader"), server.client()
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                client.upload_file(path, bucket, "data/" + os.path.relpath(path, root))
        for mode in ("spans", "shards"):
            store = _CountingStore(open_store(f"s3://{bucket}/data", S3Settings(endpoint_url=server.endpoint_url)))
            limit = max(1, shard_bytes // 100) if mode == "spans" else shard_bytes // 4  # a shard cache needs room for whole shards
            remote = MixedTokens(store, "bench", cache_dir=os.path.join(work, f"s3-{mode}"), cache_bytes=limit, remote_reads=mode)
            loader = iter(TrainingLoader(remote, BATCH, seed=3))
            started = time.perf_counter()
            for _ in range(batches):
                next(loader)
            seconds = time.perf_counter() - started
            served = batches * BATCH * SEQ * remote.token_dtype.itemsize
            results[mode] = {"per_token": sum(store.bytes.values()) / served, "by_kind": {kind: size / served for kind, size in sorted(store.bytes.items())},
                             "cache_bytes": limit, "tokens_per_s": batches * BATCH * SEQ / seconds}
            remote.shards().close()
    return results


# -- CUDA stall share ------------------------------------------------------------------------------------

def cuda_stall_share(data: MixedTokens, steps: int = 200) -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    spec = importlib.util.spec_from_file_location("train_example", ROOT / "examples" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TinyGPT(VOCAB, width=512, layers=8, heads=8).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = TrainingLoader(data, BATCH, seed=5, device="cuda", mask_document_boundaries=True)
    started = None
    for step, batch in enumerate(loader):
        if step == 10:  # after warm-up (CUDA context, allocator)
            torch.cuda.synchronize()
            loader.stats.wait_seconds, started = 0.0, time.perf_counter()
        logits = model(batch["input_ids"], batch["position_ids"])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step == steps + 10:
            break
    torch.cuda.synchronize()
    return loader.stats.wait_seconds / (time.perf_counter() - started)


def s3_figures(args: argparse.Namespace, traffic: dict[str, dict[str, float]]) -> None:
    """The S3 part's lines: bytes per token served, and tokens/s of span reads against the whole-shard cache."""
    shard_bytes = traffic["spans"]["cache_bytes"] * 100
    for mode, row in traffic.items():
        kinds = ", ".join(f".{kind} {share:.3f}" for kind, share in row["by_kind"].items())
        print(f"S3, remote_reads={mode!r}: {row['per_token']:.3f} bytes fetched per token byte served ({kinds}), cache {row['cache_bytes'] / 1e6:.1f} MB "
              f"({row['cache_bytes'] / shard_bytes:.0%} of the shards), {row['tokens_per_s'] / 1e6:.2f} M tokens/s")
    config = f"SeaweedFS S3, {args.tokens / 1e6:.0f} M tokens, {args.s3_batches} batches of {BATCH}x{SEQ}, cache 1% of the shards, all bytes read"
    figure("loader_bytes_fetched_per_token_served", traffic["spans"]["per_token"], "<= 2", config)
    figure("loader_span_reads_tokens_per_s", traffic["spans"]["tokens_per_s"], "-", config)
    figure("loader_span_over_whole_shard_tokens_per_s", traffic["spans"]["tokens_per_s"] / traffic["shards"]["tokens_per_s"], ">= 0.5",
           f"{config}; whole shards through a cache of 25% of the shards")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=float, default=40e6, help="tokens in the synthetic mix")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per loader")
    parser.add_argument("--rounds", type=int, default=3, help="measurements per loader; the best is reported")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--s3-batches", type=int, default=200, help="batches read through S3 for the traffic figure")
    parser.add_argument("--s3-only", action="store_true", help="only the S3 part (traffic and span-read throughput)")
    args = parser.parse_args()
    if args.s3_only:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-loader-") as work:
            data, _ = prepare(work, int(args.tokens))
            s3_figures(args, s3_traffic(data, work, args.s3_batches))
        return
    with tempfile.TemporaryDirectory(prefix="sluice-bench-loader-") as work:
        started = time.perf_counter()
        data, stream_path = prepare(work, int(args.tokens))
        print(f"mix: {data.total_tokens:,} tokens, {len(data):,} samples of {SEQ}, {len(data.index()):,} ranges ({time.perf_counter() - started:.1f}s to build)")
        run_sluice(data, 1.0, threaded=False)  # warm the page cache
        # Best of `rounds` short runs for every loader: the machine is shared, so the best run is the least disturbed.
        ours = max(run_sluice(data, args.seconds / args.rounds, threaded=False) for _ in range(args.rounds))
        ours_thread = max(run_sluice(data, args.seconds / args.rounds, threaded=True) for _ in range(args.rounds))
        print(f"sluice TrainingLoader:           {ours / 1e6:8.2f} M tokens/s per rank (prefetch_batches=0, in the caller)")
        ours_worker = run_sluice(data, args.seconds / args.rounds + 2, threaded=True, workers=1)
        print(f"sluice TrainingLoader, thread:   {ours_thread / 1e6:8.2f} M tokens/s per rank (prefetch_batches=4; GIL-bound when the caller only iterates)")
        print(f"sluice TrainingLoader, 1 worker: {ours_worker / 1e6:8.2f} M tokens/s per rank (num_workers=1: one DataLoader process)")
        peers = {}
        if not args.skip_peers:
            for label, spec, kind in (("MosaicML Streaming 0.13", MOSAIC, "mosaic"), ("LitData 0.2.76 TokensLoader", LITDATA, "litdata")):
                peers[kind] = run_peer(spec, kind, stream_path, work, args.seconds, args.rounds)
                print(f"{label + ':':32} {peers[kind] / 1e6:8.2f} M tokens/s per rank  (sluice x{ours / peers[kind]:.2f})")

        stall = cuda_stall_share(data)
        if stall is None:
            print("CUDA stall share: skipped (no CUDA device)")
        traffic = s3_traffic(data, work, args.s3_batches)

    config = f"{args.tokens / 1e6:.0f} M synthetic tokens, L={SEQ}, B={BATCH}, one rank, no workers, best of {args.rounds}"
    figure("loader_tokens_per_s_per_rank", ours, ">= 5e6 on CPU", config)
    if peers:
        figure("loader_vs_mosaic_streaming", ours / peers["mosaic"], ">= 2", config)
        figure("loader_vs_litdata_tokensloader", ours / peers["litdata"], ">= 2", config)
    figure("cuda_data_stall_share", "skipped (no CUDA)" if stall is None else stall, "< 0.01", "CUDA device, train loop")
    s3_figures(args, traffic)


if __name__ == "__main__":
    main()
