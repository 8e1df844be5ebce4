"""Stream a built mix (`sluice.mix`) into PyTorch: exact global shuffle, exact/elastic resume, packed batches.

Data. The mix index (`ranges.parquet`, or the split's ranges file named in the manifest's `splits`) is a
list of token ranges over tokenized shards (`sluice.shards`); the token stream is those ranges
concatenated, each range one document (or the cut piece of one). Sample i is stream[i*L : i*L + L + 1]
(L = sequence_length): inputs are the first L tokens, labels the last L. N = (tokens - 1) // L samples.

Global order. Epoch e visits the samples in `EpochPermutation(N, seed, e, block_size)` order (a Feistel
permutation, O(1) to build and to evaluate at any position; `sluice.permutation`). The epochs laid end to
end form one global stream of sample positions: position q is epoch q // N, sample perm_e(q % N). A run
that starts (or resumes) at position p cuts the stream into global batches of G = batch_size * world_size
samples: global batch k is positions [p + k*G, p + (k+1)*G), and rank r takes the r-th slice of
batch_size positions. So every rank's batch k is disjoint from the others', the union over ranks is the
global batch, and an epoch's samples are each delivered exactly once (a global batch may straddle an
epoch edge: nothing is dropped except, with `num_epochs`, a final partial global batch).

State. `state_dict()` = {seed, epoch, position (samples of that epoch consumed by all ranks), block_size,
num_samples}: a few integers, the same on every rank. Resuming from it with any world size, batch size
or worker count continues the same global stream (elastic), because the order depends on the position
only. DataLoader workers take whole local batches in turn (worker w builds batches k = w, w + K, ...,
sent in groups, one shared-memory tensor per group) and the main process hands them out in k order, so
the worker count never changes what a rank sees; the state counts only batches handed to the caller,
never prefetched ones.

Batches (`pack_samples`), all computed on the CPU from the range offsets:
    input_ids, labels   int64 [B, L]; labels = -100 where the label crosses a document boundary if
                        `mask_document_boundaries` (the first token of a document is not predicted from
                        the previous document)
    position_ids        int64 [B, L], restarting at 0 at every document start (and at each sample start)
    cu_seqlens          int32 [segments + 1], cumulative segment lengths over the flattened [B * L]
                        tokens, for variable-length attention (flash_attn_varlen_func and the like)
    max_seqlen          int, the longest segment
    sample_ids, epochs  int64 [B]: which samples of which epoch this batch holds (for audits)

I/O. Shards on a local store are memory-mapped in place. Shards on S3 go through `ShardCache`: a local
folder with a byte limit; since the read order is known, it prefetches the shards needed next in
background threads and evicts the resident shard whose next use is furthest in the future (Belady's
rule over a lookahead window). Downloaded shards are checked against their partition manifest's size
and SHA-256. A missing, truncated or corrupt shard raises `ShardError` naming the file.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from sluice.permutation import EpochPermutation
from sluice.shards import ShardError, ShardView, sha256_path
from sluice.storage import StorageError, Store

IGNORE_INDEX = -100  # the label value torch's cross_entropy ignores
_COPIED = "_copied_event"  # internal key: the CUDA event of a batch's host-to-device copy
STATE_VERSION = 1


def default_cache_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "sluice")


@dataclass(frozen=True)
class ShardRef:
    """One tokenized shard of a mix: where its files are and which partition manifest lists them."""

    prefix: str
    name: str

    @property
    def bin_key(self) -> str:
        return f"{self.prefix}/{self.name}.bin"

    @property
    def idx_key(self) -> str:
        return f"{self.prefix}/{self.name}.idx"


class LocalShards:
    """Shards on a local store, memory-mapped in place on first use."""

    remote = False

    def __init__(self, store: Store, refs: Sequence[ShardRef], dtype: str) -> None:
        self.store = store
        self.refs = refs
        self.dtype = dtype
        self._views: dict[int, np.ndarray] = {}

    def get(self, shard_id: int) -> np.ndarray:
        tokens = self._views.get(shard_id)
        if tokens is None:
            ref = self.refs[shard_id]
            bin_path, idx_path = self.store.local_path(ref.bin_key), self.store.local_path(ref.idx_key)
            for key, path in ((ref.bin_key, bin_path), (ref.idx_key, idx_path)):
                if path is None or not os.path.isfile(path):
                    raise ShardError(f"{self.store.uri(key)}: shard file is missing")
            tokens = ShardView.open(bin_path, idx_path, self.dtype, name=self.store.uri(ref.bin_key)).tokens.view(np.ndarray)
            self._views[shard_id] = tokens
        return tokens

    def plan(self, upcoming: Sequence[int]) -> None:
        """Local shards need no fetching ahead."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0  # shards the reader had to wait for (not prefetched in time)
    prefetched: int = 0
    evictions: int = 0
    bytes_fetched: int = 0
    peak_bytes: int = 0
    over_limit: int = 0  # times one sample's shards alone exceeded the byte limit
    evicted: deque[int] = field(default_factory=lambda: deque(maxlen=4096))  # the latest evicted shard ids


class ShardCache:
    """S3 shards copied into a local folder holding at most `max_bytes`, fetched ahead of need.

    `plan(upcoming)` gives the shard ids the reader will need, in order; prefetch threads download the
    first ones that are missing as long as they fit, evicting only shards needed later than the one
    being fetched (or never). `get(shard_id)` returns the memory-mapped tokens, downloading on a miss
    and evicting the shard needed furthest in the future. Evicted files are deleted; a reader that
    still maps one keeps valid pages (POSIX unlink semantics).
    """

    remote = True

    def __init__(
        self,
        store: Store,
        refs: Sequence[ShardRef],
        dtype: str,
        cache_dir: str,
        max_bytes: int,
        prefetch_threads: int = 2,
        verify_checksums: bool = True,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(f"cache max_bytes must be > 0, got {max_bytes}")
        self.store = store
        self.refs = refs
        self.dtype = dtype
        self.cache_dir = cache_dir
        self.max_bytes = int(max_bytes)
        self.verify_checksums = verify_checksums
        shutil.rmtree(cache_dir, ignore_errors=True)  # files a previous run left are not in this run's accounting
        os.makedirs(cache_dir, exist_ok=True)
        self.stats = CacheStats()
        self._lock = threading.Condition()
        self._resident: dict[int, tuple[int, list[str], np.ndarray]] = {}  # id -> (bytes, paths, tokens)
        self._inflight: dict[int, Future] = {}
        self._reserved = 0  # bytes of downloads in flight
        self._upcoming: dict[int, int] = {}  # shard id -> rank of its next use in the plan
        self._file_entries: dict[str, dict[str, dict[str, Any]]] = {}  # partition prefix -> key -> entry
        self._pool = ThreadPoolExecutor(max_workers=max(1, prefetch_threads), thread_name_prefix="sluice-shard-fetch")

    # -- sizes and verification from the tokenized partition's manifest
    def _entries(self, prefix: str) -> dict[str, dict[str, Any]]:
        entries = self._file_entries.get(prefix)
        if entries is None:
            key = f"{prefix}/_manifest.json"
            try:
                manifest = json.loads(self.store.read_bytes(key))
            except (StorageError, FileNotFoundError) as error:
                raise ShardError(f"{self.store.uri(key)}: cannot read the shard manifest ({error})") from error
            entries = {entry["key"]: entry for entry in manifest.get("files", [])}
            self._file_entries[prefix] = entries
        return entries

    def shard_bytes(self, shard_id: int) -> int:
        ref = self.refs[shard_id]
        entries = self._entries(ref.prefix)
        total = 0
        for key in (f"{ref.name}.bin", f"{ref.name}.idx"):
            if key not in entries:
                raise ShardError(f"{self.store.uri(f'{ref.prefix}/{key}')}: not listed in its partition manifest (missing shard)")
            total += int(entries[key]["bytes"])
        return total

    @property
    def used_bytes(self) -> int:
        return sum(size for size, _, _ in self._resident.values())

    # -- planning and eviction (call with the lock held)
    def _next_use(self, shard_id: int) -> float:
        return self._upcoming.get(shard_id, float("inf"))

    def _make_room(self, size: int, need_rank: float, forced: bool) -> bool:
        """Evict shards needed after `need_rank` (furthest first) until `size` more bytes fit."""
        victims = sorted(self._resident, key=self._next_use, reverse=True)
        for victim in victims:
            if self.used_bytes + self._reserved + size <= self.max_bytes:
                break
            if not forced and self._next_use(victim) <= need_rank:
                break
            self._evict(victim)
        return self.used_bytes + self._reserved + size <= self.max_bytes

    def _evict(self, shard_id: int) -> None:
        _, paths, _ = self._resident.pop(shard_id)
        for path in paths:
            Path(path).unlink(missing_ok=True)
        self.stats.evictions += 1
        self.stats.evicted.append(shard_id)

    def plan(self, upcoming: Sequence[int]) -> None:
        """The shard ids the reader needs next, in order; starts background fetches that fit."""
        with self._lock:
            ranks: dict[int, int] = {}
            for rank, shard_id in enumerate(upcoming):
                ranks.setdefault(int(shard_id), rank)
            self._upcoming = ranks
            for shard_id, rank in sorted(ranks.items(), key=lambda item: item[1]):
                if shard_id in self._resident or shard_id in self._inflight:
                    continue
                size = self.shard_bytes(shard_id)
                if not self._make_room(size, rank, forced=False):
                    break  # the rest is needed later than everything resident: wait for room
                self._start_fetch(shard_id, size, prefetch=True)

    def _start_fetch(self, shard_id: int, size: int, prefetch: bool) -> Future:
        self._reserved += size
        future = self._pool.submit(self._download, shard_id, size)
        self._inflight[shard_id] = future
        if prefetch:
            self.stats.prefetched += 1
        return future

    def _download(self, shard_id: int, size: int) -> None:
        ref = self.refs[shard_id]
        paths: list[str] = []
        try:
            entries = self._entries(ref.prefix)
            for key in (ref.bin_key, ref.idx_key):
                try:
                    path = self._fetch(key)
                except (StorageError, OSError) as error:
                    raise ShardError(f"{self.store.uri(key)}: cannot fetch shard file ({error})") from error
                paths.append(path)
                entry = entries[key.rsplit("/", 1)[-1]]
                actual = os.path.getsize(path)
                if actual != int(entry["bytes"]):
                    raise ShardError(f"{self.store.uri(key)}: {actual} bytes, its manifest says {entry['bytes']}; the shard is truncated or corrupt")
                if self.verify_checksums and sha256_path(path) != entry["sha256"]:
                    raise ShardError(f"{self.store.uri(key)}: SHA-256 does not match its manifest; the shard is corrupt")
            tokens = ShardView.open(paths[0], paths[1], self.dtype, name=self.store.uri(ref.bin_key)).tokens.view(np.ndarray)
        except BaseException:
            for path in paths:
                Path(path).unlink(missing_ok=True)
            with self._lock:
                self._reserved -= size
                self._inflight.pop(shard_id, None)
                self._lock.notify_all()
            raise
        with self._lock:
            self._reserved -= size
            self._inflight.pop(shard_id, None)
            self._resident[shard_id] = (size, paths, tokens)
            self.stats.bytes_fetched += size
            self.stats.peak_bytes = max(self.stats.peak_bytes, self.used_bytes)
            self._lock.notify_all()

    def _fetch(self, key: str) -> str:
        local = self.store.local_path(key)
        if local is None:
            return self.store.fetch(key, self.cache_dir)
        # A local store (tests, NFS mounts): copy, since eviction deletes the cached file.
        target = os.path.join(self.cache_dir, key.replace("/", "__"))
        shutil.copyfile(local, target + ".part")
        os.replace(target + ".part", target)
        return target

    def get(self, shard_id: int) -> np.ndarray:
        with self._lock:
            entry = self._resident.get(shard_id)
            if entry is not None:
                self.stats.hits += 1
                return entry[2]
            future = self._inflight.get(shard_id)
            if future is None:
                size = self.shard_bytes(shard_id)
                if not self._make_room(size, -1, forced=True):
                    self.stats.over_limit += 1
                future = self._start_fetch(shard_id, size, prefetch=False)
            self.stats.misses += 1
        future.result()  # re-raises the download's ShardError
        with self._lock:
            return self._resident[shard_id][2]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class MixedTokens:
    """Random access to the samples of one split of a built mix."""

    def __init__(
        self,
        store: Store,
        mix: str,
        cache_dir: str | None = None,
        split: str = "train",
        cache_bytes: int = 8 << 30,
        prefetch_threads: int = 2,
        verify_checksums: bool = True,
        cache_shards: bool | None = None,
    ) -> None:
        prefix = f"mixed_dataset/{mix}"
        manifest_key = f"{prefix}/_manifest.json"
        if not store.exists(manifest_key):
            raise FileNotFoundError(f"{store.uri(manifest_key)} does not exist: materialize mixed_dataset[{mix}] first")
        self.store = store
        self.mix = mix
        self.split = split
        self.manifest: dict[str, Any] = json.loads(store.read_bytes(manifest_key))
        splits = self.manifest.get("splits", {})
        if split not in splits and not (split == "train" and not splits):
            allowed = sorted(splits) or ["train"]
            raise KeyError(f"mix {mix!r} has no split {split!r}; its splits are {allowed}")
        ranges_name = splits.get(split, {}).get("ranges", "ranges.parquet")
        self.sequence_length = int(self.manifest["sequence_length"])
        self.dtype = str(self.manifest["dtype"])
        self.cache_dir = cache_dir or default_cache_dir()
        self.cache_bytes = int(cache_bytes)
        self.prefetch_threads = prefetch_threads
        self.verify_checksums = verify_checksums
        ranges_key = f"{prefix}/{ranges_name}"
        os.makedirs(self.cache_dir, exist_ok=True)
        try:
            ranges_path = store.fetch(ranges_key, self.cache_dir)
            ranges = pq.read_table(ranges_path, columns=["shard", "start", "length"])
        except (StorageError, FileNotFoundError, OSError) as error:
            raise FileNotFoundError(f"{store.uri(ranges_key)}: cannot read the mix's ranges ({error})") from error
        self.shard_ids = ranges.column("shard").to_numpy().astype(np.int64)
        self.starts = ranges.column("start").to_numpy().astype(np.int64)
        self.lengths = ranges.column("length").to_numpy().astype(np.int64)
        self.range_offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.total_tokens = int(self.range_offsets[-1])
        self.refs = [ShardRef(shard["prefix"], shard["name"]) for shard in self.manifest["shards"]]
        if len(self.shard_ids) and (self.shard_ids.min() < 0 or self.shard_ids.max() >= len(self.refs)):
            raise ShardError(f"{store.uri(ranges_key)}: refers to shard {int(self.shard_ids.max())} but the manifest lists {len(self.refs)} shards")
        # Remote stores always go through the byte-limited cache; local ones are memory-mapped in place.
        self.remote = store.local_path(manifest_key) is None if cache_shards is None else cache_shards
        self.cache_slot = "rank0"  # TrainingLoader sets its rank here: ranks on one host get separate caches
        self._provider_pid: int | None = None
        self._provider: LocalShards | ShardCache | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_provider"], state["_provider_pid"] = None, None  # threads and maps are per process
        return state

    def shards(self) -> LocalShards | ShardCache:
        """This process's shard access (memory maps, or the S3 cache); DataLoader workers get their own."""
        if self._provider is None or self._provider_pid != os.getpid():
            if self.remote:
                worker = get_worker_info()
                # One folder per (rank, worker): a restart reuses it (ShardCache clears what a dead run left).
                folder = os.path.join(self.cache_dir, f"mix-{self.mix}", self.split, f"{self.cache_slot}-worker{worker.id if worker else 0}")
                budget = self.cache_bytes // (worker.num_workers if worker else 1)
                self._provider = ShardCache(
                    self.store, self.refs, self.dtype, folder, budget, self.prefetch_threads, self.verify_checksums
                )
            else:
                self._provider = LocalShards(self.store, self.refs, self.dtype)
            self._provider_pid = os.getpid()
        return self._provider

    def __len__(self) -> int:
        return max(0, (self.total_tokens - 1) // self.sequence_length)

    def read(self, begin: int, out: np.ndarray) -> list[int]:
        """Fill `out` with stream tokens [begin, begin + len(out)); returns the offsets (relative to begin,
        inside (0, len(out))) where a new range, i.e. a new document, starts."""
        end = begin + len(out)
        shards = self.shards()
        index = int(np.searchsorted(self.range_offsets, begin, side="right")) - 1
        position = begin
        starts: list[int] = []
        while position < end:
            range_begin = int(self.range_offsets[index])
            if range_begin > begin:
                starts.append(range_begin - begin)
            within = position - range_begin
            take = min(int(self.lengths[index]) - within, end - position)
            tokens = shards.get(int(self.shard_ids[index]))
            start = int(self.starts[index]) + within
            piece = tokens[start : start + take]
            if len(piece) != take:
                ref = self.refs[int(self.shard_ids[index])]
                raise ShardError(
                    f"{self.store.uri(ref.bin_key)}: the mix reads tokens [{start}, {start + take}) but the shard holds "
                    f"{len(tokens)}; the shard is truncated or does not belong to this mix"
                )
            out[position - begin : position - begin + take] = piece
            position += take
            index += 1
        return starts

    def tokens(self, begin: int, end: int) -> np.ndarray:
        """Tokens [begin, end) of the mix's token stream."""
        out = np.empty(end - begin, dtype=np.int64)
        self.read(begin, out)
        return out

    def sample(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        length = self.sequence_length
        window = self.tokens(index * length, index * length + length + 1)
        return window[:-1], window[1:]

    def shards_of(self, sample_ids: Sequence[int]) -> list[int]:
        """Shard ids the given samples read, in read order (repeats kept; for the cache's plan)."""
        length = self.sequence_length
        out: list[int] = []
        for sample in sample_ids:
            begin = int(sample) * length
            first = int(np.searchsorted(self.range_offsets, begin, side="right")) - 1
            last = int(np.searchsorted(self.range_offsets, begin + length + 1, side="left"))
            out.extend(self.shard_ids[first:last].tolist())
        return out


# Tokens packed per call: batches are built this many at a time, then cut apart (per-call numpy costs are
# amortized over more batches; 2^18 int64 tokens x 3 fields is 6 MiB of host memory per call).
PACK_TOKENS = 1 << 18
_ARANGES: dict[tuple[int, str], np.ndarray] = {}


def _arange(size: int, dtype: type) -> np.ndarray:
    """A cached, read-only np.arange(size) (batches have one shape, so this is built once)."""
    key = (size, np.dtype(dtype).str)
    values = _ARANGES.get(key)
    if values is None:
        values = _ARANGES[key] = np.arange(size, dtype=dtype)
        values.flags.writeable = False
    return values


def _pack_arrays(
    data: MixedTokens, sample_ids: Sequence[int] | np.ndarray, mask_document_boundaries: bool, out: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Rows of samples with their document-boundary fields, as numpy arrays (see `pack_samples`).

    `out`, an int64 array [3, rows, length], receives input_ids, labels and position_ids (one buffer, so a
    DataLoader worker sends one tensor per group of batches).

    Vectorized over the batch: the segments (pieces of one range inside one sample's window) are computed
    with a few numpy calls, then one concatenate copies their slices out of the memory-mapped shards.
    """
    length = data.sequence_length
    ids = np.asarray(sample_ids, dtype=np.int64)
    count = len(ids)
    width = length + 1
    offsets = data.range_offsets
    begins = ids * length
    first = np.searchsorted(offsets, begins, side="right") - 1
    last = np.searchsorted(offsets, begins + width, side="left")  # ranges first..last-1 cover the window
    counts = last - first
    row = np.repeat(np.arange(count), counts)
    ranges = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    seg_begin = np.maximum(offsets[ranges] - begins[row], 0)  # inside the window
    seg_end = np.minimum(offsets[ranges + 1] - begins[row], width)
    source = data.starts[ranges] + begins[row] + seg_begin - offsets[ranges]  # token offset inside the shard
    sizes = seg_end - seg_begin
    window = np.empty(count * width, dtype=data.dtype)  # token dtype: the copies move 2 (or 4) bytes a token
    shards = data.shards()
    segment_shards = data.shard_ids[ranges].tolist()
    # Local maps stay open for the process, so look each up once here (a call per segment costs ~10 % of the
    # batch); the remote cache is asked per segment, as its residency may change between two of them.
    get = {shard: shards.get(shard) for shard in set(segment_shards)}.__getitem__ if not shards.remote else shards.get
    # The segments tile the windows in order: one concatenate of their shard slices fills all of them.
    pieces = [get(shard)[a:b] for shard, a, b in zip(segment_shards, source.tolist(), (source + sizes).tolist(), strict=True)]
    if sum(map(len, pieces)) != len(window):  # a slice came out shorter than its range
        for shard, piece, a, size in zip(segment_shards, pieces, source.tolist(), sizes.tolist(), strict=True):
            if len(piece) != size:
                raise ShardError(
                    f"{data.store.uri(data.refs[shard].bin_key)}: the mix reads tokens [{a}, {a + size}) but the shard holds "
                    f"{len(get(shard))}; the shard is truncated or does not belong to this mix"
                )
    if pieces:
        np.concatenate(pieces, out=window)
    window = window.reshape(count, width)
    # A document starts at every segment start except each window's first (that one starts the sample).
    new_doc = seg_begin > 0
    doc_row, doc_at = row[new_doc], seg_begin[new_doc]
    # Segments of the inputs (the window without its last token): flat starts and lengths; position ids
    # count up from 0 inside each, and cu_seqlens lists their starts over the flattened [count * length].
    in_inputs = seg_begin < length
    input_starts = row[in_inputs] * length + seg_begin[in_inputs]
    input_sizes = np.minimum(seg_end[in_inputs], length) - seg_begin[in_inputs]
    if out is None:
        out = np.empty((3, count, length), dtype=np.int64)
    inputs, labels, positions = out[0], out[1], out[2]
    # Position ids are j minus the start of j's document inside the row: computed in 16 bits (a third of
    # the memory traffic of int64; positions are < length), then widened once.
    narrow = np.uint16 if length <= 1 << 16 else np.int64
    document_start = np.repeat(seg_begin[in_inputs].astype(narrow), input_sizes).reshape(count, length)
    np.copyto(positions, np.subtract(_arange(length, narrow), document_start, out=document_start))
    np.copyto(labels, window[:, 1:])
    np.copyto(inputs, window[:, :-1])
    if mask_document_boundaries:
        labels[doc_row, doc_at - 1] = IGNORE_INDEX  # label j is token j + 1, the first of another document
    return {
        "input_ids": inputs,
        "labels": labels,
        "position_ids": positions,
        "segment_starts": input_starts,
        "segment_sizes": input_sizes,
    }


def pack_samples(data: MixedTokens, sample_ids: Sequence[int] | np.ndarray, mask_document_boundaries: bool = False) -> dict[str, Any]:
    """One batch of samples with document-boundary fields for variable-length attention (all on the CPU)."""
    return split_packed(_pack_arrays(data, sample_ids, mask_document_boundaries), 1)[0]


def split_packed(packed: dict[str, np.ndarray], pieces: int) -> list[dict[str, Any]]:
    """Cut packed rows into `pieces` batches of equal size, each with its own cu_seqlens / max_seqlen."""
    rows, length = packed["input_ids"].shape
    size = rows // pieces
    starts, sizes = packed["segment_starts"], packed["segment_sizes"]
    # Every row begins a segment, so segments never straddle two pieces: piece p owns segments
    # edges[p]..edges[p+1]-1, and its cu_seqlens are their starts relative to the piece, then its token count.
    edges = np.searchsorted(starts, np.arange(pieces + 1, dtype=np.int64) * size * length)
    relative = starts - np.repeat(np.arange(pieces, dtype=np.int64) * size * length, np.diff(edges))
    bounds = np.insert(relative, edges[1:], size * length).astype(np.int32)  # piece p: bounds[edges[p]+p : edges[p+1]+p+1]
    nonempty = edges[:-1] < edges[1:]
    max_seqlen = np.zeros(pieces, dtype=np.int64)
    if nonempty.any():
        max_seqlen[nonempty] = np.maximum.reduceat(sizes, edges[:-1][nonempty])
    inputs, labels, positions = packed["input_ids"], packed["labels"], packed["position_ids"]
    out = []
    for piece, (a, b, longest) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist(), max_seqlen.tolist(), strict=True)):
        rows_slice = slice(piece * size, (piece + 1) * size)
        out.append(
            {
                # (numpy slices wrapped by from_numpy cost less than slicing tensors)
                "input_ids": torch.from_numpy(inputs[rows_slice]),
                "labels": torch.from_numpy(labels[rows_slice]),
                "position_ids": torch.from_numpy(positions[rows_slice]),
                "cu_seqlens": torch.from_numpy(bounds[a + piece : b + piece + 1]),
                "max_seqlen": longest,
            }
        )
    return out


class GlobalOrder:
    """The global stream of sample positions: position q -> (epoch q // N, sample perm_epoch(q % N))."""

    def __init__(self, num_samples: int, seed: int, block_size: int = 1) -> None:
        if num_samples <= 0:
            raise ValueError("the mix has no complete sample (fewer than sequence_length + 1 tokens)")
        self.num_samples = num_samples
        self.seed = seed
        self.block_size = block_size
        self._perms: dict[int, EpochPermutation] = {}

    def permutation(self, epoch: int) -> EpochPermutation:
        perm = self._perms.get(epoch)
        if perm is None:
            if len(self._perms) > 4:
                self._perms.clear()
            perm = self._perms[epoch] = EpochPermutation(self.num_samples, self.seed, epoch, self.block_size)
        return perm

    def samples(self, begin: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Sample ids and epochs of stream positions [begin, begin + count)."""
        return self.at(np.arange(begin, begin + count, dtype=np.int64))

    def at(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sample ids and epochs of the given stream positions."""
        count = len(positions)
        epochs = positions // self.num_samples
        ids = np.empty(count, dtype=np.int64)
        for epoch in np.unique(epochs).tolist():
            mask = epochs == epoch
            ids[mask] = self.permutation(epoch)(positions[mask] - epoch * self.num_samples)
        return ids, epochs


@dataclass(frozen=True)
class RankPlan:
    """What one rank reads from stream position `start` on (absolute position; see module docstring)."""

    start: int
    batch_size: int
    rank: int
    world_size: int
    end: int | None  # stream position to stop at (the final partial global batch is dropped), None = endless

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def batch_begin(self, k: int) -> int | None:
        """Stream position of this rank's slice of global batch k, or None past the end."""
        if self.end is not None and self.start + (k + 1) * self.global_batch > self.end:
            return None
        return self.start + k * self.global_batch + self.rank * self.batch_size


class RankBatches(IterableDataset):
    """This rank's batches as an iterable dataset; worker w of K builds local batches w, w + K, ... whole."""

    def __init__(
        self,
        data: MixedTokens,
        order: GlobalOrder,
        plan: RankPlan,
        mask_document_boundaries: bool,
        lookahead_batches: int = 16,
        transport: bool = False,
    ) -> None:
        # transport=True (DataLoader workers): yield one item per group of batches, its big arrays in one
        # tensor, because every tensor crossing the process boundary costs a shared-memory segment;
        # `unpack_group` turns it back into batches, `in_order` restores the batch order.
        self.transport = transport
        self.data = data
        self.order = order
        self.plan = plan
        self.mask_document_boundaries = mask_document_boundaries
        self.lookahead_batches = lookahead_batches

    def _samples(self, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Sample ids and epochs of this rank's local batch k (permutations evaluated many batches at a time)."""
        cached = self._ids.get(k)
        if cached is not None:
            return cached
        if self.plan.batch_begin(k) is None:
            return None
        # Evaluate the next `chunk` batches of this worker in one vectorized call (numpy per-call overhead).
        wanted = [j for j in range(k, k + self._chunk * self._stride, self._stride) if self.plan.batch_begin(j) is not None]
        begins = np.array([self.plan.batch_begin(j) for j in wanted], dtype=np.int64)
        positions = (begins[:, None] + np.arange(self.plan.batch_size, dtype=np.int64)).reshape(-1)
        ids, epochs = self.order.at(positions)
        size = self.plan.batch_size
        for index, j in enumerate(wanted):
            self._ids[j] = (ids[index * size : (index + 1) * size], epochs[index * size : (index + 1) * size])
        return self._ids[k]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        # Permutations cost a fixed numpy overhead per call (cycle walking): evaluate ~4096 positions at once.
        self._ids, self._stride, self._chunk = {}, workers, max(16, 4096 // self.plan.batch_size)
        # Likewise packing: build PACK_TOKENS per call (fixed numpy costs per call; for workers, also the fixed
        # cost of each group crossing the process boundary), then cut them into batches.
        group = max(1, min(64, PACK_TOKENS // (self.plan.batch_size * self.data.sequence_length)))
        shards = self.data.shards()
        ahead: deque[tuple[int, list[int]]] = deque()  # (k, shard ids) of the batches this worker reads next
        next_planned = worker_id
        k = worker_id
        while True:
            batches = []
            while len(batches) < group:
                current = self._samples(k + len(batches) * workers)
                if current is None:
                    break
                batches.append(current)
            if not batches:
                return
            if shards.remote:
                while len(ahead) < self.lookahead_batches + group:
                    planned = self._samples(next_planned)
                    if planned is None:
                        break
                    ahead.append((next_planned, self.data.shards_of(planned[0])))
                    next_planned += workers
                while ahead and ahead[0][0] < k:
                    ahead.popleft()
                shards.plan([shard for _, batch_shards in ahead for shard in batch_shards])
            for index in range(len(batches)):
                self._ids.pop(k + index * workers, None)  # consumed: the cache only holds batches still ahead
            ids = np.concatenate([batch_ids for batch_ids, _ in batches])
            if self.transport:
                buffer = torch.empty((3, len(ids), self.data.sequence_length), dtype=torch.int64).share_memory_()  # filled in place, sent without a copy
                packed = _pack_arrays(self.data, ids, self.mask_document_boundaries, out=buffer.numpy())
                yield {
                    "group": buffer,
                    "ks": [k + index * workers for index in range(len(batches))],
                    "sample_ids": ids.tolist(),
                    "epochs": np.concatenate([epochs for _, epochs in batches]).tolist(),
                    "segment_starts": packed["segment_starts"].tolist(),
                    "segment_sizes": packed["segment_sizes"].tolist(),
                }
                k += len(batches) * workers
                continue
            packed = _pack_arrays(self.data, ids, self.mask_document_boundaries)
            for (batch_ids, epochs), batch in zip(batches, split_packed(packed, len(batches)), strict=True):
                batch["sample_ids"] = torch.from_numpy(batch_ids)
                batch["epochs"] = torch.from_numpy(epochs)
                yield batch
            k += len(batches) * workers


def unpack_group(item: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(k, batch) pairs of one transported group (see RankBatches.transport)."""
    buffer = item["group"].numpy()
    packed = {
        "input_ids": buffer[0],
        "labels": buffer[1],
        "position_ids": buffer[2],
        "segment_starts": np.asarray(item["segment_starts"], dtype=np.int64),
        "segment_sizes": np.asarray(item["segment_sizes"], dtype=np.int64),
    }
    ks = item["ks"]
    batches = split_packed(packed, len(ks))
    ids = np.asarray(item["sample_ids"], dtype=np.int64).reshape(len(ks), -1)
    epochs = np.asarray(item["epochs"], dtype=np.int64).reshape(len(ks), -1)
    for index, batch in enumerate(batches):
        batch["sample_ids"] = torch.from_numpy(ids[index])
        batch["epochs"] = torch.from_numpy(epochs[index])
    return list(zip(ks, batches, strict=True))


def in_order(groups: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Batches of transported groups in batch order k = 0, 1, 2, ... (workers hand groups round-robin, so a
    group of worker w holds batches w, w + K, ...: hold them until their turn)."""
    waiting: dict[int, dict[str, Any]] = {}
    expected = 0
    for item in groups:
        waiting.update(unpack_group(item))
        while expected in waiting:
            yield waiting.pop(expected)
            expected += 1
    for k in sorted(waiting):  # nothing is left when every worker ran to the same end; kept for safety
        yield waiting[k]


@dataclass
class LoaderStats:
    """Data-stall accounting: seconds the caller spent waiting for each batch."""

    steps: int = 0
    wait_seconds: float = 0.0
    last_wait_seconds: float = 0.0

    @property
    def mean_wait_seconds(self) -> float:
        return self.wait_seconds / self.steps if self.steps else 0.0

    def stall_share(self, elapsed_seconds: float) -> float:
        """Share of `elapsed_seconds` (the caller's wall time) spent waiting for data."""
        return self.wait_seconds / elapsed_seconds if elapsed_seconds > 0 else 0.0


_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _background(iterable, depth: int) -> Iterator[Any]:
    """Run an iterator in a thread, `depth` items ahead; errors re-raise in the consumer."""
    items: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def offer(item: Any) -> bool:
        """Queue `item` unless the consumer stopped (then False): never blocks past a stop."""
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in iterable:
                if not offer(item):
                    return
            offer(_END)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer
            offer(_Failure(error))

    thread = threading.Thread(target=produce, name="sluice-loader", daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        # Wait for the producer to see the stop (it finishes the batch in hand first): a daemon thread left
        # running inside numpy/torch when the interpreter exits can abort the process
        # ("terminate called without an active exception"), e.g. after taking one batch and exiting.
        stop.set()
        thread.join()


class TrainingLoader:
    """Batches of one rank, on `device`, in the global order; `state_dict()` / `load_state_dict()` resume.

    Iterating continues from the current state; breaking out and iterating again goes on where it left.
    `stats` tells how long the caller waited for data.
    """

    def __init__(
        self,
        data: MixedTokens,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 0,
        device: str | torch.device = "cpu",
        block_size: int = 1,
        mask_document_boundaries: bool = False,
        num_epochs: int | None = None,
        prefetch_batches: int = 4,  # 0 = build batches synchronously in the caller (no thread)
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.data = data
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.num_workers = num_workers
        self.device = torch.device(device)
        self.mask_document_boundaries = mask_document_boundaries
        self.num_epochs = num_epochs
        self.prefetch_batches = prefetch_batches
        data.cache_slot = f"rank{rank}"
        self.order = GlobalOrder(len(data), seed, block_size)
        self._copy_stream = None  # CUDA side stream for host-to-device copies
        self.stream_position = 0  # absolute: epoch * N + samples of that epoch consumed
        self.stats = LoaderStats()

    @property
    def num_samples(self) -> int:
        return self.order.num_samples

    @property
    def seed(self) -> int:
        return self.order.seed

    @property
    def epoch(self) -> int:
        return self.stream_position // self.num_samples

    def state_dict(self) -> dict[str, int]:
        return {
            "version": STATE_VERSION,
            "seed": self.order.seed,
            "epoch": self.epoch,
            "position": self.stream_position % self.num_samples,
            "num_samples": self.num_samples,
            "block_size": self.order.block_size,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state.get("version", STATE_VERSION)) != STATE_VERSION:
            raise ValueError(f"loader state version {state.get('version')} is not {STATE_VERSION}")
        if int(state["num_samples"]) != self.num_samples:
            raise ValueError(
                f"the saved loader state is for a mix of {state['num_samples']} samples but mix {self.data.mix!r} "
                f"({self.data.split}) has {self.num_samples}: resume on the same mix"
            )
        position = int(state["position"])
        if not 0 <= position < self.num_samples:
            raise ValueError(f"loader state position {position} is outside [0, {self.num_samples})")
        self.order = GlobalOrder(self.num_samples, int(state["seed"]), int(state.get("block_size", 1)))
        self.stream_position = int(state["epoch"]) * self.num_samples + position

    def set_epoch(self, epoch: int) -> None:
        """Jump to the start of `epoch` (for loops that count epochs themselves)."""
        self.stream_position = int(epoch) * self.num_samples

    def _plan(self) -> RankPlan:
        end = None if self.num_epochs is None else self.num_epochs * self.num_samples
        return RankPlan(self.stream_position, self.batch_size, self.rank, self.world_size, end)

    def _host_batches(self, plan: RankPlan) -> Iterator[dict[str, Any]]:
        dataset = RankBatches(self.data, self.order, plan, self.mask_document_boundaries, transport=self.num_workers > 0)
        cuda = self.device.type == "cuda"
        if self.num_workers > 0:
            loader = DataLoader(dataset, batch_size=None, num_workers=self.num_workers, pin_memory=cuda, prefetch_factor=2)
            yield from in_order(iter(loader))
            return

        def produced() -> Iterator[dict[str, Any]]:
            for batch in dataset:
                if cuda:
                    batch = {name: value.pin_memory() if torch.is_tensor(value) else value for name, value in batch.items()}
                yield batch

        if self.prefetch_batches <= 0:  # synchronous in the caller (CPU-bound loops gain nothing from a thread)
            yield from produced()
        else:
            yield from _background(produced(), self.prefetch_batches)

    def _to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Start the batch's copy to the device. On CUDA: from pinned memory, non_blocking, on a side stream,
        with an event the compute stream waits on (so the copy overlaps the previous step). Every tensor goes,
        cu_seqlens included; max_seqlen stays a host int (no device-to-host sync)."""
        if self.device.type == "cpu":
            return batch
        if self.device.type != "cuda":
            return {name: value.to(self.device) if torch.is_tensor(value) else value for name, value in batch.items()}
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(self._copy_stream):
            moved = {name: value.to(self.device, non_blocking=True) if torch.is_tensor(value) else value for name, value in batch.items()}
            copied = torch.cuda.Event()
            copied.record(self._copy_stream)
        moved[_COPIED] = copied
        return moved

    def _hand_over(self, batch: dict[str, Any]) -> dict[str, Any]:
        """On CUDA: make the caller's stream wait for this batch's copy, and tell the allocator it uses it."""
        copied = batch.pop(_COPIED, None)
        if copied is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(copied)
            for value in batch.values():
                if torch.is_tensor(value):
                    value.record_stream(compute)
        return batch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        plan = self._plan()
        source = self._host_batches(plan)
        cuda = self.device.type == "cuda"
        consumed = 0

        def fetch() -> tuple[dict[str, Any] | None, float]:
            mark = time.perf_counter()
            host = next(source, None)
            return (None if host is None else self._to_device(host)), time.perf_counter() - mark

        try:
            ready, waited = fetch()
            while ready is not None:
                following = None
                if cuda:  # start the next batch's copy before handing out this one, so it overlaps the step
                    following, more = fetch()
                    waited += more
                consumed += 1
                self.stream_position = plan.start + consumed * plan.global_batch
                self.stats.steps += 1
                self.stats.wait_seconds += waited
                self.stats.last_wait_seconds = waited
                yield self._hand_over(ready)
                ready, waited = (following, 0.0) if cuda else fetch()
        finally:
            source.close()
