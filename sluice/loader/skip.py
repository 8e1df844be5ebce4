"""Skip lists: samples a resumed run leaves out, every other sample keeping its place in the global order.

A skip list names stream positions (directly, or as the training steps that held them), documents (by
crawl `doc_id`, or as (shard, doc) of this mix), URL patterns and domains. What it means:

- **A sample is skipped** when its stream position is listed (or belongs to a listed step), or when its
  window (the L + 1 tokens of inputs and labels) holds any token of a listed document, of a document whose
  URL matches a listed pattern, or of a document on a listed domain. One bad document therefore removes
  every sample that holds a piece of it, all copies included.
- **Skipping step s** of a run skips the samples of that run's global batch s (every rank's slice): the
  positions that batch was cut from, given the run's global batch size G and the skip list it ran with.
  `TrainingLoader.load_state_dict(state, skip=...)` resolves steps against the checkpoint's state (its step
  counter, position, G and skip list), so step numbers are those of the run that saved it.
- **What follows**: the stream from the resume position is every position not skipped, in order, cut into
  global batches of G = batch_size x world_size as before. Batches keep their shape (skipped samples are
  refilled from the following positions); each later sample moves earlier by the number of samples
  skipped before it, and nothing else changes (`KeptStream`). A checkpoint stores the position and the
  skip list, so an elastic restart (another world size, batch size or worker count) continues the same
  kept stream.

Cost. Positions and steps are merged into sorted ranges: the j-th kept position is found by binary search
(O(log ranges)), so they cost nothing per batch. Documents, URL patterns and domains are matched lazily, per
sample, as the stream is read: each rank (and each DataLoader worker) evaluates every position of the
global batch it cuts (G samples per step, not B) with one index probe per sample and, for URL patterns and
domains, one read of the URL of each document not matched yet (the shards' `.urls` side files,
`sluice.tokens.shards`; a small per-process cache). No corpus scan at resume, memory bounded by one chunk of
positions; finding where step s starts after a checkpoint at step c evaluates (s - c) x G positions.

URL patterns are shell-style wildcards (`*` any run of characters, `?` one), matched against the whole URL
as crawled (case-sensitive) by a two-pointer matcher, O(len(url) x len(pattern)) at worst (no regex
backtracking); a domain `example.com` matches the host `example.com` and every subdomain (case-insensitive).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np

if TYPE_CHECKING:
    from sluice.loader.data import MixedTokens
    from sluice.loader.order import GlobalOrder

SKIP_VERSION = 1
CHUNK_POSITIONS = 4096  # positions evaluated per lazy step (one vectorized probe of the index)
URL_CACHE_ENTRIES = 1 << 16  # (shard, doc) -> matched?, per process


def wildcard_match(pattern: str, text: str) -> bool:
    """Shell-style `*` / `?` match of the whole text, by the two-pointer method (no backtracking blow-up)."""
    p = t = 0
    star = -1
    resume = 0
    while t < len(text):
        if p < len(pattern) and (pattern[p] == "?" or pattern[p] == text[t]):
            p += 1
            t += 1
        elif p < len(pattern) and pattern[p] == "*":
            star, resume = p, t
            p += 1
        elif star >= 0:
            p = star + 1
            resume += 1
            t = resume
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def host_of(url: str | None) -> str:
    if not url:
        return ""
    try:
        return (urlsplit(url.strip()).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


def on_domains(host: str, domains: frozenset[str]) -> bool:
    """Whether `host` is one of `domains` or a subdomain of one."""
    labels = host.split(".")
    return any(".".join(labels[i:]) in domains for i in range(len(labels)))


def merge_ranges(ranges: Iterable[Sequence[int]]) -> list[list[int]]:
    """Sorted, merged [begin, end) ranges (empty ones dropped)."""
    out: list[list[int]] = []
    for begin, end in sorted((int(b), int(e)) for b, e in ranges if int(e) > int(b)):
        if out and begin <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([begin, end])
    return out


@dataclass
class SkipList:
    """What to leave out (see the module docstring); `to_state()` is what a checkpoint stores.

    positions   [begin, end) stream position ranges (a single position p is [p, p + 1))
    steps       training steps, ints or [first, stop) ranges; resolved to positions by
                `TrainingLoader.load_state_dict` (then kept in `resolved_steps` for the record)
    documents   (shard, doc) pairs of this mix, as batch provenance names them
    doc_ids     crawl document ids (`source/snapshot/file#ordinal`), located in the mix when loaded
    urls        URL wildcard patterns; domains: hosts, each with its subdomains
    """

    positions: list[list[int]] = field(default_factory=list)
    steps: list[int | list[int]] = field(default_factory=list)
    documents: list[list[int]] = field(default_factory=list)
    doc_ids: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)
    resolved_steps: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.positions = merge_ranges([p, p + 1] if isinstance(p, int | np.integer) else p for p in self.positions)
        self.documents = sorted({(int(s), int(d)) for s, d in self.documents})
        self.documents = [list(pair) for pair in self.documents]
        self.doc_ids = sorted(set(self.doc_ids))
        self.urls = sorted(set(self.urls))
        self.domains = sorted({domain.strip().lower().strip(".") for domain in self.domains if domain.strip(" .")})
        for value in self.steps:
            if not isinstance(value, int | np.integer) and not (isinstance(value, list | tuple) and len(value) == 2):
                raise ValueError(f"a skipped step is an int or a [first, stop) pair, got {value!r}")

    @property
    def empty(self) -> bool:
        return not (self.positions or self.steps or self.documents or self.doc_ids or self.urls or self.domains)

    def step_ranges(self) -> list[tuple[int, int]]:
        return merge_ranges([s, s + 1] if isinstance(s, int | np.integer) else s for s in self.steps)  # type: ignore[misc]

    def merged(self, other: SkipList | None) -> SkipList:
        if other is None:
            return SkipList(**self.to_state(with_version=False))
        return SkipList(
            positions=self.positions + other.positions, steps=list(self.steps) + list(other.steps), documents=self.documents + other.documents,
            doc_ids=self.doc_ids + other.doc_ids, urls=self.urls + other.urls, domains=self.domains + other.domains,
            resolved_steps=self.resolved_steps + other.resolved_steps,
        )

    def to_state(self, with_version: bool = True) -> dict[str, Any]:
        state = {
            "positions": [list(r) for r in self.positions], "steps": [list(s) if not isinstance(s, int) else s for s in self.steps],
            "documents": [list(d) for d in self.documents], "doc_ids": list(self.doc_ids), "urls": list(self.urls), "domains": list(self.domains),
            "resolved_steps": list(self.resolved_steps),
        }
        return {"version": SKIP_VERSION, **state} if with_version else state

    @classmethod
    def from_state(cls, state: dict[str, Any] | None) -> SkipList:
        if not state:
            return cls()
        version = int(state.get("version", SKIP_VERSION))
        if version != SKIP_VERSION:
            raise ValueError(f"skip list version {version} is not {SKIP_VERSION}")
        known = {"positions", "steps", "documents", "doc_ids", "urls", "domains", "resolved_steps"}
        unknown = set(state) - known - {"version"}
        if unknown:
            raise ValueError(f"unknown skip list keys {sorted(unknown)}; known: {sorted(known)}")
        return cls(**{key: list(state.get(key) or []) for key in known})

    @classmethod
    def coerce(cls, value: SkipList | dict[str, Any] | None) -> SkipList:
        return value if isinstance(value, SkipList) else cls.from_state(value)


class SkipPlan:
    """A skip list resolved against one mix: sorted position ranges, document keys, URL matchers. Picklable
    (DataLoader workers get it); `mask` says which of some positions are skipped."""

    def __init__(self, positions: list[list[int]], doc_keys: np.ndarray, urls: Sequence[str], domains: Sequence[str]) -> None:
        ranges = np.asarray(merge_ranges(positions), dtype=np.int64).reshape(-1, 2)
        self.begins, self.ends = ranges[:, 0].copy(), ranges[:, 1].copy()
        self.doc_keys = np.unique(np.asarray(doc_keys, dtype=np.uint64))
        self.urls = tuple(urls)
        self.domains = frozenset(domains)
        self._url_hits: dict[int, bool] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_url_hits": {}}

    @property
    def lazy(self) -> bool:
        """Whether samples must be read to decide (documents, URLs, domains), not only their positions."""
        return bool(len(self.doc_keys) or self.urls or self.domains)

    @property
    def empty(self) -> bool:
        return not (len(self.begins) or self.lazy)

    def in_ranges(self, positions: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self.begins, positions, side="right") - 1
        return (at >= 0) & (positions < self.ends[np.maximum(at, 0)]) if len(self.begins) else np.zeros(len(positions), bool)

    def mask(self, positions: np.ndarray, order: GlobalOrder, data: MixedTokens) -> np.ndarray:
        """Which of `positions` are skipped."""
        positions = np.asarray(positions, dtype=np.int64)
        skipped = self.in_ranges(positions)
        if not self.lazy or skipped.all():
            return skipped
        todo = np.flatnonzero(~skipped)
        ids, _ = order.at(positions[todo])
        records, counts = data.index().sample_records(ids)
        hits = self._record_hits(records, data).astype(np.int64)
        starts = np.cumsum(counts) - counts  # every sample has at least one record
        skipped[todo] = np.add.reduceat(hits, starts) > 0
        return skipped

    def _record_hits(self, records: np.ndarray, data: MixedTokens) -> np.ndarray:
        keys = (records["shard"].astype(np.uint64) << np.uint64(32)) | records["doc"].astype(np.uint64)
        hits = np.isin(keys, self.doc_keys) if len(self.doc_keys) else np.zeros(len(keys), bool)
        if self.urls or self.domains:
            todo = np.unique(keys[~hits])
            cache = self._url_hits
            unknown = [key for key in todo.tolist() if key not in cache]
            if unknown:
                if len(cache) + len(unknown) > URL_CACHE_ENTRIES:
                    cache.clear()
                shard = (np.asarray(unknown, np.uint64) >> np.uint64(32)).astype(np.int64)
                doc = (np.asarray(unknown, np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.int64)
                for key, url in zip(unknown, data.document_urls(shard, doc), strict=True):
                    cache[key] = self.url_matches(url)
            matched = np.array([key for key in todo.tolist() if cache[key]], dtype=np.uint64)
            if len(matched):
                hits |= np.isin(keys, matched)
        return hits

    def url_matches(self, url: str | None) -> bool:
        if not url:
            return False
        if self.domains and on_domains(host_of(url), self.domains):
            return True
        return any(wildcard_match(pattern, url) for pattern in self.urls)


def kth_kept(start: int, begins: np.ndarray, ends: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Positions of the j-th kept positions from `start` on (0-based), with [begins, ends) skipped."""
    j = np.asarray(j, dtype=np.int64)
    keep = ends > start
    b, e = np.maximum(begins[keep], start), ends[keep]
    lengths = e - b
    before = np.concatenate([[0], np.cumsum(lengths)])  # skipped positions before range i
    kept_before = (b - start) - before[:-1]  # kept positions before range i
    i = np.searchsorted(kept_before, j, side="right")
    return start + j + before[i]


class KeptStream:
    """The global batches of the stream from `start` (absolute position) to `end` (None: endless), skipped
    positions left out: global batch k = the kept positions [k G, (k + 1) G) counted from `start`.

    Without lazy entries any batch is computed directly; with them, batches are formed in order (positions
    evaluated CHUNK_POSITIONS at a time), so `batch(k)` must be asked with non-decreasing k, and only the
    batches `keep(k)` accepts are held until asked for."""

    def __init__(
        self, start: int, end: int | None, global_batch: int, skip: SkipPlan | None, order: GlobalOrder, data: MixedTokens,
        keep: Callable[[int], bool] | None = None,
    ) -> None:
        self.start, self.end, self.global_batch = int(start), end, int(global_batch)
        self.skip = skip if skip is not None and not skip.empty else None
        self.order, self.data = order, data
        self.keep = keep or (lambda k: True)
        self._formed = 0  # global batches formed so far (lazy)
        self._cursor = self.start  # next position to evaluate (lazy)
        self._pending = np.zeros(0, np.int64)  # kept positions not yet in a batch (lazy)
        self._held: dict[int, np.ndarray] = {}

    def batch(self, k: int) -> np.ndarray | None:
        """Positions of global batch k (G of them, increasing), or None past the end."""
        if self.skip is None or not self.skip.lazy:
            j = np.arange(k * self.global_batch, (k + 1) * self.global_batch, dtype=np.int64)
            if self.skip is None:
                positions = self.start + j
            else:
                positions = kth_kept(self.start, self.skip.begins, self.skip.ends, j)
            return None if self.end is not None and int(positions[-1]) >= self.end else positions
        if k in self._held:
            return self._held.pop(k)
        if k < self._formed:
            raise RuntimeError(f"global batch {k} was formed and released already (batches are asked in order)")
        while self._formed <= k:
            positions = self._form()
            if positions is None:
                return None
            if self._formed == k:
                self._formed += 1
                return positions
            if self.keep(self._formed):
                self._held[self._formed] = positions
            self._formed += 1
        return None

    def _form(self) -> np.ndarray | None:
        size = self.global_batch
        while len(self._pending) < size:
            stop = self._cursor + max(CHUNK_POSITIONS, size)
            if self.end is not None:
                stop = min(stop, self.end)
            if stop <= self._cursor:
                return None
            positions = np.arange(self._cursor, stop, dtype=np.int64)
            kept = positions[~self.skip.mask(positions, self.order, self.data)]
            self._pending = np.concatenate([self._pending, kept])
            self._cursor = stop
        out, self._pending = self._pending[:size], self._pending[size:]
        return out
