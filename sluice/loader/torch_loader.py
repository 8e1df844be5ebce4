"""The torch side: this rank's batches as an iterable dataset, DataLoader workers, the `TrainingLoader`.

DataLoader workers take whole local batches in turn (worker w builds batches k = w, w + K, ..., sent in
groups, one shared-memory tensor per group) and the main process hands them out in k order, so the worker
count never changes what a rank sees; the state counts only batches handed to the caller, never prefetched
ones. `state_dict()` = {seed, epoch, position (samples of that epoch consumed by all ranks), block_size,
num_samples}: a few integers, the same on every rank (`sluice.loader.order`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from sluice.loader.data import MixedTokens
from sluice.loader.order import GlobalOrder, RankPlan
from sluice.loader.packing import PACK_TOKENS, pack_arrays, split_packed

_COPIED = "_copied_event"  # internal key: the CUDA event of a batch's host-to-device copy
STATE_VERSION = 1


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
                packed = pack_arrays(self.data, ids, self.mask_document_boundaries, out=buffer.numpy())
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
            packed = pack_arrays(self.data, ids, self.mask_document_boundaries)
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
