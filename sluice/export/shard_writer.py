"""The part every export format shares: cutting the sample stream into shard files of bounded size.

A format says how many bytes each sample adds to a shard (`prepare`), how to write samples into the open
shard file (`write`) and how to finish it (`finish`). A shard is closed before the sample that would take it
past `shard_bytes` (a sample larger than that gets a shard of its own), so the cut points depend only on the
samples: the same export gives the same shards. Each shard is written in a local scratch folder, then
published (`Store.put_file`: temp + rename locally, one upload on S3) and its local copy removed, so local
disk holds one shard at a time.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from sluice.export.samples import Block
from sluice.io.layout import sha256_file
from sluice.io.storage import Store


class ShardWriter(ABC):
    """Writes blocks of samples into numbered shard files under `prefix` of `destination`."""

    shard_overhead = 0  # bytes a shard has before its first sample (headers, trailers)

    def __init__(self, destination: Store, prefix: str, scratch: str, shard_bytes: int, info: dict[str, Any]) -> None:
        self.destination = destination
        self.prefix = prefix
        self.scratch = scratch
        self.shard_bytes = shard_bytes
        self.info = info
        self.entries: list[dict[str, Any]] = []
        self.path: str | None = None  # the open shard's local file
        self.used = 0
        self.samples = 0
        self.tokens = 0

    @abstractmethod
    def shard_name(self, number: int) -> str:
        """File name of shard `number`."""

    @abstractmethod
    def prepare(self, block: Block) -> tuple[np.ndarray, list[Any] | None]:
        """Bytes each sample adds to a shard (int64 [n]), and per-sample encoded items if the format has them."""

    @abstractmethod
    def open(self, path: str) -> None:
        """Start a shard file at `path`."""

    @abstractmethod
    def write(self, block: Block, items: list[Any] | None) -> None:
        """Append samples to the open shard."""

    @abstractmethod
    def finish(self) -> None:
        """Complete the open shard file (trailers, headers that need the sample count)."""

    def add(self, block: Block) -> None:
        sizes, items = self.prepare(block)
        begin = 0
        while begin < len(block):
            if self.path is None:
                self.path = os.path.join(self.scratch, self.shard_name(len(self.entries)))
                self.used, self.samples = self.shard_overhead, 0
                self.open(self.path)
            totals = np.cumsum(sizes[begin:])
            fit = int(np.searchsorted(totals, self.shard_bytes - self.used, side="right"))
            if fit == 0 and self.samples == 0:
                fit = 1
            if fit == 0:
                self._publish()
                continue
            end = begin + fit
            self.write(block.slice(begin, end), items[begin:end] if items is not None else None)
            self.used += int(totals[fit - 1])
            self.samples += fit
            self.tokens += fit * block.input_ids.shape[1]
            begin = end
            if begin < len(block):
                self._publish()

    def close(self) -> list[dict[str, Any]]:
        """Publish the last shard; returns every shard's manifest entry {key, rows, bytes, sha256}."""
        if self.path is not None:
            self._publish()
        return self.entries

    def _publish(self) -> None:
        self.finish()
        path, name = self.path, os.path.basename(self.path)
        entry = {"key": name, "rows": self.samples, "bytes": os.path.getsize(path), "sha256": sha256_file(path)}
        self.destination.put_file(path, f"{self.prefix}/{name}")
        self.entries.append(entry)
        self.path = None
