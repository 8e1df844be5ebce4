"""Token reads from a mix's shards: local files read in place, S3 shards by ranged GETs or a byte-limited cache.

Tokens are read with `pread` straight into the caller's buffer (`ShardFile.read_into`), not through memory
maps: a mapped read pulls whole page-cache folios into the process's resident set, so random samples over a
large corpus would grow every rank's RSS; a read copies only the bytes asked for, and costs about the same.

`SpanCache` (the default for S3, `MixedTokens(remote_reads="spans")`) fetches only the token spans the
samples read, by ranged GETs planned ahead from the mix index: S3 traffic stays the tokens served (one extra
token per sample), whatever the shards' size and however randomly placed the documents, in memory of at most
`max_bytes`. It checks each GET's length against its span (a shorter object is truncated), not checksums.

`ShardCache` (`remote_reads="shards"`) keeps whole S3 shards in a local folder of at most `max_bytes`. The
read order is known, so `plan(upcoming)` starts background downloads of the shards needed next, evicting the
resident shard whose next use is furthest in the future (Belady's rule over the lookahead window). Downloads are checked against
the partition manifest's size and SHA-256. A missing, truncated or corrupt shard raises `ShardError`.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sluice.io.storage import StorageError, Store
from sluice.tokens.shards import ShardError, sha256_path


def _max_open_shards() -> int:
    """Shard files a process keeps open (least recently used closed): half its file-descriptor limit, <= 4096."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, min(4096, soft // 2 if soft != resource.RLIM_INFINITY else 4096))


MAX_OPEN_SHARDS = _max_open_shards()


@dataclass(frozen=True)
class ShardRef:
    """One tokenized shard of a mix: where its files are and which partition manifest lists them."""

    prefix: str  # the tokenized partition's folder (its manifest)
    name: str
    binary_prefix: str = ""  # folder of its .bin / .idx (sluice.tokens.shards.binary_folder); "" = `prefix`

    @property
    def bin_key(self) -> str:
        return f"{self.binary_prefix or self.prefix}/{self.name}.bin"

    @property
    def idx_key(self) -> str:
        return f"{self.binary_prefix or self.prefix}/{self.name}.idx"


class ShardFile:
    """One shard's token file, read with pread. Opening checks its size against the last entry of its
    `.idx` (8 bytes read, not the whole index). The file closes when the last reference goes."""

    def __init__(self, bin_path: str, idx_path: str, dtype: str, name: str, random_access: bool = True) -> None:
        self.name = name
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.itemsize = self.dtype.itemsize
        tokens = -1
        with open(idx_path, "rb") as index:
            end = index.seek(0, os.SEEK_END)
            if end >= 8:
                index.seek(end - 8)
                tokens = int(np.frombuffer(index.read(8), "<u8")[0])
        self._file = open(bin_path, "rb", buffering=0)  # noqa: SIM115 - closed with the object
        size = os.fstat(self._file.fileno()).st_size
        if tokens < 0 or size != tokens * self.itemsize:
            self._file.close()
            raise ShardError(f"{name}: token file holds {size} bytes but its index says {max(tokens, 0) * self.itemsize}; the shard is truncated or corrupt")
        self.tokens = tokens
        self.fd = self._file.fileno()
        if random_access:  # reads of a few KB at random offsets: no readahead of pages nobody asked for
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)
        self._array: np.ndarray | None = None

    @property
    def array(self) -> np.ndarray:
        """The tokens memory-mapped (for small mixes: `MixedTokens` read_mode; slices cost no syscall)."""
        if self._array is None:
            mapped = np.memmap(self._file, dtype=self.dtype, mode="r") if self.tokens else np.zeros(0, self.dtype)
            self._array = mapped.view(np.ndarray)
        return self._array

    def __len__(self) -> int:
        return self.tokens

    def read_into(self, out: memoryview, start: int, count: int) -> None:
        """Tokens [start, start + count) into `out` (a byte view of exactly count tokens)."""
        got = os.preadv(self.fd, [out], start * self.itemsize) if count else 0
        if got != count * self.itemsize:
            raise ShardError(
                f"{self.name}: the mix reads tokens [{start}, {start + count}) but the shard holds {self.tokens}; "
                "the shard is truncated or does not belong to this mix"
            )

    def __getitem__(self, where: slice) -> np.ndarray:
        begin, end, _ = where.indices(self.tokens)
        out = np.empty(max(0, end - begin), self.dtype)
        self.read_into(memoryview(out).cast("B"), begin, len(out))
        return out


class LocalShards:
    """Shards on a local store, read in place; at most MAX_OPEN_SHARDS kept open (least recently used go): a
    mix of thousands of shards read at random would otherwise re-open a file for most reads."""

    remote = False

    def __init__(self, store: Store, refs: Sequence[ShardRef], dtype: str, mapped: bool = False) -> None:
        self.store = store
        self.refs = refs
        self.dtype = dtype
        self.mapped = mapped
        self._open: OrderedDict[int, ShardFile] = OrderedDict()

    def get(self, shard_id: int) -> ShardFile:
        shard = self._open.get(shard_id)
        if shard is not None:
            self._open.move_to_end(shard_id)
            return shard
        ref = self.refs[shard_id]
        bin_path, idx_path = self.store.local_path(ref.bin_key), self.store.local_path(ref.idx_key)
        for key, path in ((ref.bin_key, bin_path), (ref.idx_key, idx_path)):
            if path is None or not os.path.isfile(path):
                raise ShardError(f"{self.store.uri(key)}: shard file is missing")
        shard = ShardFile(bin_path, idx_path, self.dtype, self.store.uri(ref.bin_key), random_access=not self.mapped)
        self._open[shard_id] = shard
        while len(self._open) > MAX_OPEN_SHARDS:
            self._open.popitem(last=False)
        return shard

    def plan(self, upcoming: Sequence[int]) -> None:
        """Local shards need no fetching ahead."""

    def close(self) -> None:
        self._open.clear()


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
    being fetched (or never). `get(shard_id)` returns the shard, downloading on a miss and evicting the
    shard needed furthest in the future. Evicted files are deleted; a reader still holding one keeps
    reading it (POSIX unlink semantics).
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
        self._resident: dict[int, tuple[int, list[str], ShardFile]] = {}  # id -> (bytes, paths, file)
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
            entries = {entry["key"]: entry for group in ("files", "side_files") for entry in manifest.get(group, [])}
            self._file_entries[prefix] = entries
        return entries

    def shard_bytes(self, shard_id: int) -> int:
        ref = self.refs[shard_id]
        entries = self._entries(ref.prefix)
        total = 0
        for key in (ref.bin_key, ref.idx_key):
            entry = entries.get(key.rsplit("/", 1)[-1])
            if entry is None:
                raise ShardError(f"{self.store.uri(key)}: not listed in its partition manifest (missing shard)")
            total += int(entry["bytes"])
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
            shard = ShardFile(paths[0], paths[1], self.dtype, self.store.uri(ref.bin_key))
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
            self._resident[shard_id] = (size, paths, shard)
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

    def get(self, shard_id: int) -> ShardFile:
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


SPAN_THREADS = 32  # ranged GETs in flight per process (and as many index GETs: the presigned path's pool holds 64)
Span = tuple[int, int, int]  # (shard id, first token in the shard, tokens)


@dataclass
class SpanStats:
    hits: int = 0  # spans read from a prefetched copy
    misses: int = 0  # spans the reader had to wait for (not prefetched in time)
    prefetched: int = 0
    requests: int = 0  # ranged GETs sent
    bytes_fetched: int = 0  # body bytes of those GETs
    tokens_read: int = 0  # tokens handed to the reader
    peak_bytes: int = 0  # most bytes of prefetched spans held at once
    dropped: int = 0  # prefetched spans dropped unread (the plan moved past them)


class SpanCache:
    """S3 shards read by ranged GETs of just the token spans the samples need (`remote_reads="spans"`).

    The mix index gives every sample's spans (shard, first token, tokens), so nothing else of a shard is
    fetched: S3 traffic is the tokens served, plus one token per sample (each window's last label is the
    next sample's first input). `plan(upcoming)` gives the spans of the batches read next, in order;
    threads fetch them ahead into memory while they fit in `max_bytes`. `read_spans` copies them into the
    caller's buffer and frees them; a span not prefetched is fetched then. A GET shorter than its span (the
    object is shorter than the mix says) raises `ShardError` naming the shard. Unlike the whole-shard
    `ShardCache`, no SHA-256 of the shard is checked (that needs the whole file); a shard's size is.
    """

    remote = True
    spans = True

    def __init__(self, store: Store, refs: Sequence[ShardRef], dtype: str, max_bytes: int, threads: int = SPAN_THREADS) -> None:
        if max_bytes <= 0:
            raise ValueError(f"span cache max_bytes must be > 0, got {max_bytes}")
        self.store = store
        self.refs = refs
        self.itemsize = np.dtype(dtype).itemsize
        self.max_bytes = int(max_bytes)
        self.stats = SpanStats()
        self._lock = threading.Lock()
        self._resident: dict[Span, bytes] = {}
        self._inflight: dict[Span, Future] = {}
        self._used = 0
        self._reserved = 0
        self._wanted: dict[Span, int] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="sluice-span-fetch")

    @property
    def used_bytes(self) -> int:
        return self._used

    def _get(self, span: Span) -> bytes:
        """One ranged GET of the span's tokens."""
        shard, start, count = span
        key = self.refs[shard].bin_key
        try:
            raw = self.store.read_range(key, start * self.itemsize, count * self.itemsize)
        except (StorageError, OSError) as error:
            raise ShardError(f"{self.store.uri(key)}: cannot read tokens [{start}, {start + count}) ({error})") from error
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes_fetched += len(raw)
        if len(raw) != count * self.itemsize:
            raise ShardError(
                f"{self.store.uri(key)}: the mix reads tokens [{start}, {start + count}) but the object ends first; "
                "the shard is truncated or does not belong to this mix"
            )
        return raw

    def _prefetch(self, span: Span, size: int) -> bytes:
        try:
            raw = self._get(span)
        finally:
            with self._lock:
                self._reserved -= size
                self._inflight.pop(span, None)
        with self._lock:
            if span in self._wanted and span not in self._resident:
                self._resident[span] = raw
                self._used += size
                self.stats.peak_bytes = max(self.stats.peak_bytes, self._used)
        return raw

    def plan(self, upcoming: Sequence[Span]) -> None:
        """The spans the reader needs next, in order: drops prefetched spans no longer wanted, starts fetches
        of the first missing ones that fit."""
        with self._lock:
            ranks: dict[Span, int] = {}
            for rank, span in enumerate(upcoming):
                ranks.setdefault(span, rank)
            self._wanted = ranks
            for span in [span for span in self._resident if span not in ranks]:
                self._used -= len(self._resident.pop(span))
                self.stats.dropped += 1
            for span in ranks:
                if span in self._resident or span in self._inflight:
                    continue
                size = span[2] * self.itemsize
                if self._used + self._reserved + size > self.max_bytes:
                    break
                self._reserved += size
                self._inflight[span] = self._pool.submit(self._prefetch, span, size)
                self.stats.prefetched += 1

    def read_spans(self, shards: Sequence[int], starts: Sequence[int], counts: Sequence[int], out: memoryview) -> None:
        """The spans' tokens, concatenated in order, into `out` (a byte view of exactly their size)."""
        pending: list[bytes | Future] = []
        with self._lock:
            for span in zip(shards, starts, counts, strict=True):
                raw = self._resident.pop(span, None)
                if raw is not None:
                    self._used -= len(raw)
                    self.stats.hits += 1
                    pending.append(raw)
                    continue
                future = self._inflight.get(span)
                pending.append(future if future is not None else self._pool.submit(self._get, span))
                self.stats.misses += 1
            self.stats.tokens_read += int(sum(counts))
        at = 0
        for item, span in zip(pending, zip(shards, starts, counts, strict=True), strict=True):
            raw = item if isinstance(item, bytes) else item.result()  # re-raises the GET's ShardError
            if not isinstance(item, bytes):
                with self._lock:  # a prefetch that finished while we waited: its copy is ours now
                    if self._resident.get(span) is raw:
                        self._used -= len(self._resident.pop(span))
            out[at : at + len(raw)] = raw
            at += len(raw)
        if at != len(out):
            raise ValueError(f"read_spans: the spans hold {at} bytes but the buffer {len(out)}")

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
