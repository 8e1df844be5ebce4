"""The mix index: which token ranges of which shards make up one split of a mix, in stream order.

One little-endian file per split, fixed-width, readable with numpy alone (like Megatron's `.idx`):

    header   64 bytes  magic b"SLUICEMX", version u4 = 1, record_bytes u4 = 32, ranges u8 (N), tokens u8 (T),
                       sequence_length u8 (L), samples u8 (S = (T - 1) // L), records_at u8, samples_at u8
    records  N x 32 B  at records_at, in stream order (`RECORD`):
                       offset u8 (stream position of the range's first token; the next range starts at
                       offset + length), start u8 (token offset in its shard's .bin), shard u4 (index into the
                       mix manifest's `shards`), doc u4 (document index in that shard, its .idx entry),
                       length u4, component u2 (index into the manifest's `components`), copy u2 (repetition
                       of the document: 0 in the first epoch). A range is one document or its cut head.
    samples  (S+1) x u8 at samples_at: entry s is the index of the record holding stream token s*L

Sample s is stream tokens [s*L, s*L + L + 1) (inputs and labels shifted by one): records samples[s] ..
samples[s+1], inclusive. So a sample costs one 16-byte probe and one contiguous read whatever N, and every
record carries its document's identity (shard, doc, component, copy) for provenance.

    header = np.fromfile(path, HEADER, count=1)[0]
    records = np.memmap(path, RECORD, "r", offset=header["records_at"], shape=(header["ranges"],))

The loader reads with `pread` (`MixIndex`), not a memory map: a mapped lookup pulls whole page-cache folios
(up to megabytes on ext4 with large folios) into the process's resident set, so random probes over a large
index would grow every rank's RSS with the index size; a read copies only the bytes asked for.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sluice.io.storage import Store

MAGIC = b"SLUICEMX"
VERSION = 1
HEADER = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("record_bytes", "<u4"),
        ("ranges", "<u8"),
        ("tokens", "<u8"),
        ("sequence_length", "<u8"),
        ("samples", "<u8"),
        ("records_at", "<u8"),
        ("samples_at", "<u8"),
    ]
)
RECORD = np.dtype(
    [
        ("offset", "<u8"),
        ("start", "<u8"),
        ("shard", "<u4"),
        ("doc", "<u4"),
        ("length", "<u4"),
        ("component", "<u2"),
        ("copy", "<u2"),
    ]
)
SAMPLE = np.dtype("<u8")
assert HEADER.itemsize == 64 and RECORD.itemsize == 32
U32_MAX = (1 << 32) - 1


class MixIndexError(ValueError):
    """A mix index file that is not one, is truncated, or disagrees with its manifest."""


@dataclass(frozen=True)
class IndexHeader:
    ranges: int
    tokens: int
    sequence_length: int
    samples: int
    records_at: int
    samples_at: int

    @classmethod
    def layout(cls, ranges: int, tokens: int, sequence_length: int) -> IndexHeader:
        samples = max(0, (tokens - 1) // sequence_length) if tokens else 0
        records_at = HEADER.itemsize
        return cls(ranges, tokens, sequence_length, samples, records_at, records_at + ranges * RECORD.itemsize)

    @property
    def file_bytes(self) -> int:
        return self.samples_at + (self.samples + 1) * SAMPLE.itemsize

    def to_bytes(self) -> bytes:
        header = np.zeros(1, HEADER)
        header[0] = (MAGIC, VERSION, RECORD.itemsize, self.ranges, self.tokens, self.sequence_length, self.samples, self.records_at, self.samples_at)
        return header.tobytes()

    @classmethod
    def from_bytes(cls, raw: bytes, name: str) -> IndexHeader:
        if len(raw) < HEADER.itemsize:
            raise MixIndexError(f"{name}: {len(raw)} bytes, shorter than the 64-byte mix index header")
        header = np.frombuffer(raw[: HEADER.itemsize], HEADER)[0]
        if bytes(header["magic"]) != MAGIC or int(header["version"]) != VERSION or int(header["record_bytes"]) != RECORD.itemsize:
            raise MixIndexError(f"{name}: not a version-{VERSION} sluice mix index (magic {bytes(header['magic'])!r}, version {int(header['version'])})")
        values = cls(*(int(header[field]) for field in ("ranges", "tokens", "sequence_length", "samples", "records_at", "samples_at")))
        if values != cls.layout(values.ranges, values.tokens, values.sequence_length):
            raise MixIndexError(f"{name}: inconsistent header {values}")
        return values


class MixIndexWriter:
    """Writes one split's index file from chunks of ranges given in stream order (bounded memory).

    The range count and token total are known before writing (the mix plans them), so every chunk goes
    straight to its place: records at records_at + i*32, the sample entries of the samples starting in it.
    """

    def __init__(self, path: str, ranges: int, tokens: int, sequence_length: int) -> None:
        self.path = path
        self.header = IndexHeader.layout(ranges, tokens, sequence_length)
        self.written_ranges = 0
        self.written_tokens = 0
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.pwrite(self._fd, self.header.to_bytes(), 0)
        if self.header.samples == 0:
            os.pwrite(self._fd, np.zeros(1, SAMPLE).tobytes(), self.header.samples_at)

    def append(self, shard: np.ndarray, start: np.ndarray, doc: np.ndarray, length: np.ndarray, component: np.ndarray, copy: np.ndarray) -> np.ndarray:
        """Append ranges; returns their stream offsets."""
        count = len(length)
        if self.written_ranges + count > self.header.ranges:
            raise MixIndexError(f"{self.path}: more than the {self.header.ranges} planned ranges")
        records = np.empty(count, RECORD)
        lengths = np.asarray(length, np.int64)
        if count and (lengths.min() <= 0 or lengths.max() > U32_MAX):
            raise MixIndexError(f"{self.path}: range lengths must be in [1, 2^32)")
        ends = self.written_tokens + np.cumsum(lengths)
        offsets = ends - lengths
        records["offset"], records["start"], records["shard"], records["doc"] = offsets, start, shard, doc
        records["length"], records["component"], records["copy"] = lengths, component, copy
        os.pwrite(self._fd, records.tobytes(), self.header.records_at + self.written_ranges * RECORD.itemsize)
        if count:
            # Samples whose first token s*L falls in this chunk: their entry is the record holding that token.
            step = self.header.sequence_length
            end = int(ends[-1])
            first_sample = -(-self.written_tokens // step)
            last_sample = min(self.header.samples, (end - 1) // step)
            if last_sample >= first_sample:
                points = np.arange(first_sample, last_sample + 1, dtype=np.int64) * step
                holders = self.written_ranges + np.searchsorted(offsets, points, side="right") - 1
                os.pwrite(self._fd, holders.astype(SAMPLE).tobytes(), self.header.samples_at + first_sample * SAMPLE.itemsize)
            self.written_tokens = end
        self.written_ranges += count
        return offsets

    def abort(self) -> None:
        os.close(self._fd)

    def close(self) -> None:
        try:
            if self.written_ranges != self.header.ranges or self.written_tokens != self.header.tokens:
                raise MixIndexError(
                    f"{self.path}: wrote {self.written_ranges} ranges / {self.written_tokens} tokens, planned "
                    f"{self.header.ranges} / {self.header.tokens}"
                )
            os.fsync(self._fd)
        finally:
            os.close(self._fd)


def write_index(path: str, ranges: dict[str, np.ndarray], sequence_length: int) -> IndexHeader:
    """Write a whole index from in-memory columns (tests and small tools)."""
    lengths = np.asarray(ranges["length"], np.int64)
    writer = MixIndexWriter(path, len(lengths), int(lengths.sum()), sequence_length)
    zeros = np.zeros(len(lengths), np.int64)
    writer.append(*(np.asarray(ranges.get(name, zeros)) for name in ("shard", "start", "doc")), lengths, ranges.get("component", zeros), ranges.get("copy", zeros))
    writer.close()
    return writer.header


class MixIndex:
    """Reads an index file, opened lazily per process, so pickling sends the path and header.

    By default each lookup is a pread. `mapped=True` maps the file instead and gathers with numpy: faster,
    but every probe maps page-cache folios into the process (RSS grows towards the file's size), so the
    loader maps only small mixes (`MixedTokens`, read_mode)."""

    def __init__(self, path: str, name: str | None = None, mapped: bool = False) -> None:
        self.path = path
        self.name = name or path
        self.mapped = mapped
        self._fd: int | None = None
        self._pid: int | None = None
        self._maps: tuple[np.ndarray, np.ndarray] | None = None
        with open(path, "rb") as handle:
            self.header = IndexHeader.from_bytes(handle.read(HEADER.itemsize), self.name)
        size = os.path.getsize(path)
        if size != self.header.file_bytes:
            raise MixIndexError(f"{self.name}: {size} bytes, its header says {self.header.file_bytes}; the index is truncated or corrupt")

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "mapped": self.mapped, "header": self.header, "_fd": None, "_pid": None, "_maps": None}

    def __len__(self) -> int:
        return self.header.ranges

    @property
    def tokens(self) -> int:
        return self.header.tokens

    @property
    def samples(self) -> int:
        return self.header.samples

    def _file(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            self._fd, self._maps = os.open(self.path, os.O_RDONLY), None
            self._pid = os.getpid()
            if not self.mapped:  # probes are random: no readahead of pages nobody asked for
                os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
        return self._fd

    def _mapped(self) -> tuple[np.ndarray, np.ndarray]:
        """(records, sample table) mapped read-only (plain ndarrays over the maps)."""
        self._file()
        if self._maps is None:
            header = self.header
            records = np.memmap(self.path, RECORD, "r", offset=header.records_at, shape=(header.ranges,)) if header.ranges else np.zeros(0, RECORD)
            samples = np.memmap(self.path, SAMPLE, "r", offset=header.samples_at, shape=(header.samples + 1,))
            self._maps = (records.view(np.ndarray), samples.view(np.ndarray))
        return self._maps

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd, self._maps = None, None

    def _read(self, dtype: np.dtype, offset: int, count: int) -> np.ndarray:
        size = count * dtype.itemsize
        raw = os.pread(self._file(), size, offset)
        if len(raw) != size:
            raise MixIndexError(f"{self.name}: short read at byte {offset}; the index is truncated")
        return np.frombuffer(raw, dtype)

    def records(self, first: int, stop: int) -> np.ndarray:
        """Records [first, stop) (read-only structured array)."""
        first, stop = max(0, first), min(stop, self.header.ranges)
        if stop <= first:
            return np.zeros(0, RECORD)
        return self._read(RECORD, self.header.records_at + first * RECORD.itemsize, stop - first)

    def sample_entries(self, first: int, stop: int) -> np.ndarray:
        """Sample-table entries [first, stop) as int64 (entry s: the record holding token s*L)."""
        return self._read(SAMPLE, self.header.samples_at + first * SAMPLE.itemsize, stop - first).astype(np.int64)

    def sample_records(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The records covering each sample's window, concatenated in sample order, and how many per sample."""
        records, counts, _ = self.sample_records_at(sample_ids)
        return records, counts

    def sample_records_at(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`sample_records` plus the index of each sample's first record (its records are consecutive), which
        names a record in the whole index (batch provenance)."""
        records, counts, first, _ = self.sample_records_indexed(sample_ids)
        return records, counts, first

    def sample_records_indexed(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """`sample_records_at` plus each returned record's index in the whole index where the read computed
        it anyway (memory-mapped: the gather's positions), else None."""
        ids = np.asarray(sample_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.header.samples):
            raise IndexError(f"sample index out of range [0, {self.header.samples})")
        if self.mapped:
            records, table = self._mapped()
            first = table[ids].astype(np.int64)
            counts = table[ids + 1].astype(np.int64) - first + 1
            wanted = np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
            return records[wanted], counts, first, wanted
        fd, table, size = self._file(), self.header.samples_at, SAMPLE.itemsize
        probe = b"".join([os.pread(fd, 2 * size, table + sample * size) for sample in ids.tolist()])
        bounds = np.frombuffer(probe, SAMPLE).reshape(-1, 2).astype(np.int64)
        if len(bounds) != len(ids):
            raise MixIndexError(f"{self.name}: short read in the sample table; the index is truncated")
        counts = bounds[:, 1] - bounds[:, 0] + 1
        at, record = self.header.records_at, RECORD.itemsize
        pieces = [os.pread(fd, int(n) * record, at + int(a) * record) for a, n in zip(bounds[:, 0].tolist(), counts.tolist(), strict=True)]
        records = np.frombuffer(b"".join(pieces), RECORD)
        if len(records) != int(counts.sum()):
            raise MixIndexError(f"{self.name}: short read of records; the index is truncated")
        return records, counts, bounds[:, 0], None

    def covering(self, begin: int, end: int) -> np.ndarray:
        """The records holding stream tokens [begin, end)."""
        if end <= begin:
            return np.zeros(0, RECORD)
        step, samples = self.header.sequence_length, self.header.samples
        # From the record holding the last sample point <= begin to the one holding the first point >= end.
        first = int(self.sample_entries(min(begin // step, samples), min(begin // step, samples) + 1)[0])
        after = (end - 1) // step + 1
        stop = int(self.sample_entries(after, after + 1)[0]) + 1 if after <= samples else self.header.ranges
        records = self.records(first, stop)
        offsets = records["offset"].astype(np.int64)
        keep = (offsets < end) & (offsets + records["length"].astype(np.int64) > begin)
        return records[keep]

    def iter_chunks(self, chunk: int = 1 << 20):
        """Every record in stream order, `chunk` at a time (sequential reads)."""
        for first in range(0, self.header.ranges, chunk):
            yield self.records(first, first + chunk)


class RemoteMixIndex(MixIndex):
    """An index on an object store read in place by ranged GETs, so a rank fetches O(its samples) of it,
    never the whole file: per sample its two sample-table entries (16 bytes) and its records (32 bytes
    each), the samples of one call fetched by `threads` at once. A sample's records are kept for the next
    `CACHED_SAMPLES` lookups (the loader looks a sample up when planning its reads and again when reading it).
    The header is checked against the file size the manifest lists (`size`); no checksum of the whole file."""

    CACHED_SAMPLES = 1 << 16

    def __init__(self, store: Store, key: str, size: int, threads: int = 8) -> None:
        self.store, self.key, self.threads = store, key, threads
        self.path, self.name, self.mapped = key, store.uri(key), False
        self.header = IndexHeader.from_bytes(store.read_range(key, 0, HEADER.itemsize), self.name)
        if int(size) != self.header.file_bytes:
            raise MixIndexError(f"{self.name}: {size} bytes listed, its header says {self.header.file_bytes}; the index is truncated or corrupt")
        self._start()

    def _start(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pid: int | None = None
        self._cache: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self.store, "key": self.key, "threads": self.threads, "path": self.path, "name": self.name, "mapped": False, "header": self.header}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start()

    def _read(self, dtype: np.dtype, offset: int, count: int) -> np.ndarray:
        size = count * dtype.itemsize
        raw = self.store.read_range(self.key, offset, size) if size else b""
        if len(raw) != size:
            raise MixIndexError(f"{self.name}: short read at byte {offset}; the index is truncated")
        return np.frombuffer(raw, dtype)

    def _sample(self, sample: int) -> tuple[np.ndarray, int]:
        first, last = self.sample_entries(sample, sample + 2).tolist()
        return self.records(first, last + 1), first

    def sample_records_indexed(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        ids = np.asarray(sample_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.header.samples):
            raise IndexError(f"sample index out of range [0, {self.header.samples})")
        if self._pool is None or self._pid != os.getpid():
            self._pool, self._pid = ThreadPoolExecutor(max_workers=max(1, self.threads), thread_name_prefix="sluice-index-fetch"), os.getpid()
        with self._lock:
            missing = sorted({sample for sample in ids.tolist() if sample not in self._cache})
        found = dict(zip(missing, self._pool.map(self._sample, missing), strict=True))
        with self._lock:
            for sample in ids.tolist():
                if sample in self._cache:
                    found.setdefault(sample, self._cache[sample])
                    self._cache.move_to_end(sample)
            self._cache.update(found)
            while len(self._cache) > self.CACHED_SAMPLES:
                self._cache.popitem(last=False)
        parts = [found[sample] for sample in ids.tolist()]
        records = np.concatenate([part[0] for part in parts]) if parts else np.zeros(0, RECORD)
        counts = np.array([len(part[0]) for part in parts], np.int64)
        first = np.array([part[1] for part in parts], np.int64)
        return records, counts, first, None

    def close(self) -> None:
        if self._pool is not None and self._pid == os.getpid():
            self._pool.shutdown(wait=False)
        self._pool = None
