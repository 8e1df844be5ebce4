"""`MixedTokens`: one split of a built mix as random-access samples, opened lazily in every process.

The split's token stream is its index's ranges concatenated (`sluice.mix.index`); sample i is stream
[i*L, i*L + L + 1). Nothing of the index's size is loaded: the index file is read per lookup, on a local
store in place and from S3 through a copy in the local cache (downloaded once per host and index version,
its SHA-256 checked against the mix manifest).

Reads (`read_mode`): "pread" copies exactly the bytes asked for, so a rank's RSS stays flat however large
the mix; "mmap" maps the index and shards, which is faster when they stay mapped (no syscall per piece) but
each random probe maps whole page-cache folios (up to 2 MB on ext4/xfs with large folios) into the
process, so RSS grows towards the mix's size. "auto" (default) maps a local mix of at most `mmap_max_bytes`
(1 GiB: index + shards) and preads anything larger or remote. Pickling (to DataLoader workers) sends the
store, the mix name and a few numbers; each process re-opens the manifest, index and shards itself.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import get_worker_info

from sluice.io.layout import sha256_file
from sluice.io.storage import StorageError, Store
from sluice.loader.cache import SPAN_THREADS, LocalShards, ShardCache, ShardRef, SpanCache
from sluice.mix import ShardTable, mix_prefix
from sluice.mix.index import MixIndex, RemoteMixIndex
from sluice.tokens.shards import ShardError, binary_folder

MMAP_MAX_BYTES = 1 << 30  # read_mode="auto": local mixes up to this size (index + shards) are memory-mapped


class ShardRefs:
    """`ShardRef`s by shard id over the mix's `ShardTable` (a sequence; rows decoded as they are asked for)."""

    def __init__(self, table: ShardTable) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, shard_id: int) -> ShardRef:
        if not 0 <= shard_id < len(self.table):
            raise IndexError(shard_id)
        row = self.table[shard_id]
        return ShardRef(row["prefix"], row["name"], row.get("binary_prefix") or "")


def default_cache_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "sluice")


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
        read_mode: str = "auto",
        mmap_max_bytes: int = MMAP_MAX_BYTES,
        remote_reads: str = "spans",
    ) -> None:
        self.store = store
        self.mix = mix
        self.split = split
        self.manifest_key = f"{mix_prefix(mix)}/_manifest.json"
        if not store.exists(self.manifest_key):
            raise FileNotFoundError(f"{store.uri(self.manifest_key)} does not exist: materialize mixed_dataset[{mix}] first")
        self.cache_dir = cache_dir or default_cache_dir()
        self.cache_bytes = int(cache_bytes)
        self.prefetch_threads = prefetch_threads
        self.verify_checksums = verify_checksums
        if remote_reads not in ("spans", "shards"):
            raise ValueError(f"remote_reads must be spans or shards, got {remote_reads!r}")
        self.remote_reads = remote_reads
        self._manifest: dict[str, Any] | None = None
        self._refs: ShardRefs | None = None
        self.index_sha256: str | None = None  # set below; a process that re-reads the manifest checks it
        manifest = self.manifest
        splits = manifest.get("splits", {})
        if split not in splits:
            raise KeyError(f"mix {mix!r} has no split {split!r}; its splits are {sorted(splits)}")
        info = splits[split]
        self.index_key = info["index"]
        entry = next((e for e in manifest.get("side_files", []) if f"{e.get('prefix')}/{e['key']}" == self.index_key), None)
        if entry is None:
            raise ShardError(f"{store.uri(self.manifest_key)}: lists no file {self.index_key} (the {split} index)")
        self.index_sha256, self.index_bytes = entry["sha256"], int(entry["bytes"])
        self.sequence_length = int(manifest["sequence_length"])
        self.dtype = str(manifest["dtype"])
        self.total_tokens = int(info["tokens"])
        self.num_samples = int(info["samples"])
        # Remote stores always go through the byte-limited cache; local ones are read in place.
        self.remote = store.local_path(self.manifest_key) is None if cache_shards is None else cache_shards
        self.mapped = self._choose_mapped(read_mode, mmap_max_bytes)
        self.cache_slot = "rank0"  # TrainingLoader sets its rank here: ranks on one host get separate caches
        self._pid: int | None = None
        self._index: MixIndex | None = None
        self._provider: LocalShards | ShardCache | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # Per process: the manifest (a few kB) is re-read, the shard table's rows, files, threads re-opened.
        state.update(_manifest=None, _refs=None, _pid=None, _index=None, _provider=None, _url_files={})
        return state

    def _choose_mapped(self, read_mode: str, mmap_max_bytes: int) -> bool:
        """Memory maps for a small local mix (fastest; RSS grows at most by its size), pread otherwise."""
        if read_mode not in ("auto", "mmap", "pread"):
            raise ValueError(f"read_mode must be auto, mmap or pread, got {read_mode!r}")
        if self.remote or read_mode == "pread":
            return False
        if read_mode == "mmap":
            return True
        tokens = self.refs.table.tokens
        return tokens is not None and self.index_bytes + tokens * np.dtype(self.dtype).itemsize <= mmap_max_bytes

    # -- the manifest, index and shards of this process
    @property
    def manifest(self) -> dict[str, Any]:
        if self._manifest is None:
            try:
                manifest = json.loads(self.store.read_bytes(self.manifest_key))
            except (StorageError, FileNotFoundError) as error:
                raise FileNotFoundError(f"{self.store.uri(self.manifest_key)}: cannot read the mix manifest ({error})") from error
            if self.index_sha256 is not None and self._listed_sha(manifest) != self.index_sha256:
                raise ShardError(f"mix {self.mix!r} was rebuilt while this loader was running ({self.store.uri(self.manifest_key)}); restart the loader")
            self._manifest = manifest
        return self._manifest

    def _listed_sha(self, manifest: dict[str, Any]) -> str | None:
        key = manifest.get("splits", {}).get(self.split, {}).get("index")
        return next((e["sha256"] for e in manifest.get("side_files", []) if f"{e.get('prefix')}/{e['key']}" == key), None)

    @property
    def refs(self) -> ShardRefs:
        """The mix's shards by id, read from its shard table on demand (only the row groups touched)."""
        if self._refs is None:
            self._refs = ShardRefs(ShardTable(self.store, self.manifest))
        return self._refs

    def shard_info(self, shard: int) -> dict[str, Any]:
        """Shard `shard`'s row of the mix's shard table (`sluice.mix.shard_table`)."""
        return self.refs.table[shard]

    def _own_process(self) -> None:
        if self._pid != os.getpid():
            self._index, self._provider, self._pid = None, None, os.getpid()

    def index(self) -> MixIndex:
        """This process's reader of the split's index: in place on a local store; on S3 by ranged GETs of the
        samples' entries (`remote_reads="spans"`) or from a SHA-256-checked copy in the local cache."""
        self._own_process()
        if self._index is None and self.remote and self.remote_reads == "spans" and self.store.local_path(self.index_key) is None:
            self._index = RemoteMixIndex(self.store, self.index_key, self.index_bytes, max(self.prefetch_threads, SPAN_THREADS))
            self._check_header(self._index)
        if self._index is None:
            local = None if self.remote else self.store.local_path(self.index_key)
            path = local if local is not None else self._cached_index()
            if not os.path.isfile(path):
                raise ShardError(f"{self.store.uri(self.index_key)}: the mix index is missing")
            index = MixIndex(path, name=self.store.uri(self.index_key), mapped=self.mapped)
            self._check_header(index)
            self._index = index
        return self._index

    def _check_header(self, index: MixIndex) -> None:
        if (index.header.tokens, index.header.samples, index.header.sequence_length) != (self.total_tokens, self.num_samples, self.sequence_length):
            raise ShardError(f"{self.store.uri(self.index_key)}: its header does not match the mix manifest; the mix was rebuilt or the file is corrupt")

    def _cached_index(self) -> str:
        """A verified local copy of the index: one download per host and index version (a file lock keeps ranks
        and workers from fetching it twice)."""
        folder = os.path.join(self.cache_dir, f"mix-{self.mix}", "index")
        os.makedirs(folder, exist_ok=True)
        target = os.path.join(folder, f"{self.split}-{self.index_sha256[:16]}.idx")
        with open(target + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.isfile(target) and os.path.getsize(target) == self.index_bytes:
                return target
            download = os.path.join(folder, f".download-{os.getpid()}")
            os.makedirs(download, exist_ok=True)
            try:
                local = self.store.local_path(self.index_key)
                if local is not None:  # a local store read through the cache (tests, NFS): copy, never move
                    path = os.path.join(download, "index")
                    shutil.copyfile(local, path)
                else:
                    path = self.store.fetch(self.index_key, download)
                if self.verify_checksums and sha256_file(path) != self.index_sha256:
                    raise ShardError(f"{self.store.uri(self.index_key)}: SHA-256 does not match the mix manifest; the index is corrupt")
                os.replace(path, target)
            except (StorageError, OSError) as error:
                raise ShardError(f"{self.store.uri(self.index_key)}: cannot fetch the mix index ({error})") from error
            finally:
                for name in os.listdir(download):
                    os.remove(os.path.join(download, name))
                os.rmdir(download)
            for name in os.listdir(folder):  # older versions of this split's index
                if name.startswith(f"{self.split}-") and name.endswith(".idx") and name != os.path.basename(target):
                    os.remove(os.path.join(folder, name))
        return target

    def shards(self) -> LocalShards | ShardCache | SpanCache:
        """This process's shard access (local files, ranged reads of S3 spans, or the S3 shard cache);
        DataLoader workers get their own."""
        self._own_process()
        if self._provider is None:
            worker = get_worker_info()
            if self.remote and self.remote_reads == "spans":
                budget = self.cache_bytes // (worker.num_workers if worker else 1)
                self._provider = SpanCache(self.store, self.refs, self.dtype, budget, max(self.prefetch_threads, SPAN_THREADS))
            elif self.remote:
                # One folder per (rank, worker): a restart reuses it (ShardCache clears what a dead run left).
                folder = os.path.join(self.cache_dir, f"mix-{self.mix}", self.split, f"{self.cache_slot}-worker{worker.id if worker else 0}")
                budget = self.cache_bytes // (worker.num_workers if worker else 1)
                self._provider = ShardCache(self.store, self.refs, self.dtype, folder, budget, self.prefetch_threads, self.verify_checksums)
            else:
                self._provider = LocalShards(self.store, self.refs, self.dtype, self.mapped)
        return self._provider

    # -- samples and token reads
    def __len__(self) -> int:
        return self.num_samples

    @property
    def token_dtype(self) -> np.dtype:
        return np.dtype(self.dtype).newbyteorder("<")

    def read(self, begin: int, out: np.ndarray) -> list[int]:
        """Fill `out` with stream tokens [begin, begin + len(out)); returns the offsets (relative to begin,
        inside (0, len(out))) where a new range, i.e. a new document, starts."""
        end = begin + len(out)
        if begin < 0 or end > self.total_tokens:
            raise IndexError(f"tokens [{begin}, {end}) are outside the mix's {self.total_tokens} tokens")
        records = self.index().covering(begin, end)
        window = np.empty(len(out), self.token_dtype)
        view = memoryview(window).cast("B")
        item = window.itemsize
        starts = []
        for offset, start, shard, length in zip(*(records[name].astype(np.int64).tolist() for name in ("offset", "start", "shard", "length")), strict=True):
            first, last = max(offset, begin), min(offset + length, end)
            if offset > begin:
                starts.append(offset - begin)
            self.read_shard(shard, start + first - offset, view[(first - begin) * item : (last - begin) * item], last - first)
        out[:] = window
        return starts

    def read_shard(self, shard: int, start: int, out: memoryview, count: int) -> None:
        """Tokens [start, start + count) of shard `shard` into `out` (a byte view of exactly count tokens)."""
        shards = self.shards()
        if isinstance(shards, SpanCache):
            shards.read_spans([shard], [start], [count], out)
        else:
            shards.get(shard).read_into(out, start, count)

    def tokens(self, begin: int, end: int) -> np.ndarray:
        """Tokens [begin, end) of the split's token stream."""
        out = np.empty(end - begin, dtype=np.int64)
        self.read(begin, out)
        return out

    def sample(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        length = self.sequence_length
        window = self.tokens(index * length, index * length + length + 1)
        return window[:-1], window[1:]

    # -- document identity (skip lists, trace)
    def locate_documents(self, doc_ids: Sequence[str]) -> dict[str, list[tuple[int, int]]]:
        """doc_id -> [(shard id, document index)] in this mix's shards (`sluice.mix.lineage.locate_in_mix`)."""
        from sluice.mix.lineage import RowReader, locate_in_mix

        with RowReader(self.store) as reader:
            return locate_in_mix(reader, self.refs.table.all(), list(doc_ids))

    def _url_file(self, shard: int):
        from sluice.tokens.shards import UrlFile

        files = self.__dict__.setdefault("_url_files", {})
        url_file = files.get(shard)
        if url_file is None:
            info = self.shard_info(shard)
            key = f"{binary_folder(info, info['prefix'])}/{info['name']}.urls"
            path = self.store.local_path(key)
            if path is None:  # remote: the (small) URL file of a shard, fetched once into the local cache
                folder = os.path.join(self.cache_dir, f"mix-{self.mix}", "urls", f"{self.index_sha256[:16]}-{os.getpid()}")
                os.makedirs(folder, exist_ok=True)
                path = os.path.join(folder, f"{shard}.urls")
                if not os.path.exists(path):
                    os.replace(self.store.fetch(key, folder), path)
            elif not os.path.exists(path):
                raise ShardError(
                    f"{self.store.uri(key)} does not exist: shards tokenized before sluice recorded URLs cannot be skipped by URL or "
                    "domain; re-materialize tokenized_shards"
                )
            if len(files) >= 256:
                files.pop(next(iter(files))).close()
            url_file = files[shard] = UrlFile(path, int(info["documents"]), self.store.uri(key))
        return url_file

    def document_urls(self, shards: np.ndarray, docs: np.ndarray) -> list[str | None]:
        """The crawl URL of each (shard, document) (the shards' `.urls` files)."""
        return [self._url_file(int(shard)).get([int(doc)])[0] for shard, doc in zip(np.asarray(shards).tolist(), np.asarray(docs).tolist(), strict=True)]

    def check_urls(self) -> None:
        """Fail early, naming the shard, when the shards carry no URLs (skip lists by URL or domain need them)."""
        self._url_file(0)
