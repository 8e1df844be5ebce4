"""A store wrapper that records every read, to count what a reader fetched (independent of its own stats)."""

from __future__ import annotations

import os
import shutil


class CountingStore:
    """A store that records what each read returned (key, bytes), an oracle independent of the loader's stats."""

    def __init__(self, store, local: bool = True) -> None:
        self._store = store
        self.local = local  # False: no local paths, so every read goes through read_range / fetch (as on S3)
        self.ranged: list[tuple[str, int, int]] = []  # (key, start, bytes returned)
        self.whole: list[tuple[str, int]] = []

    def __getattr__(self, name: str):
        if name.startswith("_"):  # unpickling (DataLoader workers) looks attributes up before __dict__ is set
            raise AttributeError(name)
        return getattr(self._store, name)

    def local_path(self, key: str) -> str | None:
        return self._store.local_path(key) if self.local else None

    def read_range(self, key: str, start: int, length: int) -> bytes:
        raw = self._store.read_range(key, start, length)
        self.ranged.append((key, start, len(raw)))
        return raw

    def read_bytes(self, key: str) -> bytes:
        raw = self._store.read_bytes(key)
        self.whole.append((key, len(raw)))
        return raw

    def fetch(self, key: str, local_dir: str) -> str:
        path = self._store.fetch(key, local_dir)
        if not self.local:  # a download, as from S3 (the caller may move or delete it)
            copy = os.path.join(local_dir, key.replace("/", "__"))
            shutil.copyfile(path, copy)
            path = copy
        self.whole.append((key, os.path.getsize(path)))
        return path

    def token_bytes_fetched(self) -> int:
        return sum(size for key, _, size in self.ranged if key.endswith(".bin")) + sum(size for key, size in self.whole if key.endswith(".bin"))
