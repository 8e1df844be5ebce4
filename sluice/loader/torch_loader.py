"""The torch side: this rank's batches as an iterable dataset, DataLoader workers, the `TrainingLoader`.

DataLoader workers take whole local batches in turn (worker w builds batches k = w, w + K, ..., sent in
groups, one shared-memory tensor per group) and the main process hands them out in k order, so the worker
count never changes what a rank sees; the state counts only batches handed to the caller, never prefetched
ones. `state_dict()` is a `sluice.loader.state.LoaderState`: a few integers and the skip list, the same on
every rank.

With a skip list the rank's batches are cut from the kept stream (`KeptStream`): the positions from the
resume position on minus the skipped ones; `provenance=True` adds each batch's `provenance` and `positions`
(`sluice.loader.packing`).
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
from sluice.loader.packing import PACK_TOKENS, pack_arrays, reads_by_batch, split_packed
from sluice.loader.skip import KeptStream, SkipList, SkipPlan
from sluice.loader.state import LoaderState, skip_plan

_COPIED = "_copied_event"  # internal key: the CUDA event of a batch's host-to-device copy
_NEXT = "_next_position"  # internal key: the stream position after the batch's global batch


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
        provenance: bool = False,
        skip: SkipPlan | None = None,
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
        self.provenance = provenance
        self.skip = skip if skip is not None and not skip.empty else None

    def _samples(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
        """Sample ids, epochs and stream positions of this rank's local batch k, and the stream position after
        its global batch (permutations evaluated many batches at a time)."""
        cached = self._ids.get(k)
        if cached is not None:
            return cached
        if self.skip is not None:
            return self._kept_samples(k)
        if self.plan.batch_begin(k) is None:
            return None
        # Evaluate the next `chunk` batches of this worker in one vectorized call (numpy per-call overhead).
        wanted = [j for j in range(k, k + self._chunk * self._stride, self._stride) if self.plan.batch_begin(j) is not None]
        begins = np.array([self.plan.batch_begin(j) for j in wanted], dtype=np.int64)
        positions = (begins[:, None] + np.arange(self.plan.batch_size, dtype=np.int64)).reshape(-1)
        ids, epochs = self.order.at(positions)
        size, step = self.plan.batch_size, self.plan.global_batch
        for index, j in enumerate(wanted):
            part = slice(index * size, (index + 1) * size)
            self._ids[j] = (ids[part], epochs[part], positions[part], self.plan.start + (j + 1) * step)
        return self._ids[k]

    def _kept_samples(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
        """`_samples` with a skip list: global batch k of the kept stream, this rank's slice of it."""
        if self._stream is None:
            stride, offset = self._stride, self._offset
            self._stream = KeptStream(self.plan.start, self.plan.end, self.plan.global_batch, self.skip, self.order, self.data,
                                      keep=lambda j: j % stride == offset)
        positions = self._stream.batch(k)
        if positions is None:
            return None
        size, rank = self.plan.batch_size, self.plan.rank
        mine = positions[rank * size : (rank + 1) * size]
        ids, epochs = self.order.at(mine)
        self._ids[k] = (ids, epochs, mine, int(positions[-1]) + 1)
        return self._ids[k]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        # Permutations cost a fixed numpy overhead per call (cycle walking): evaluate ~4096 positions at once.
        self._ids, self._stride, self._chunk = {}, workers, max(16, 4096 // self.plan.batch_size)
        self._offset, self._stream = worker_id, None
        # Likewise packing: build PACK_TOKENS per call (fixed numpy costs per call; for workers, also the fixed
        # cost of each group crossing the process boundary), then cut them into batches.
        group = max(1, min(64, PACK_TOKENS // (self.plan.batch_size * self.data.sequence_length)))
        shards = self.data.shards()
        ahead: deque[tuple[int, list]] = deque()  # (k, shard ids or spans: `packing.reads_by_batch`) of the batches this worker reads next
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
                planned = []  # the batches newly in the lookahead, their reads found by one index lookup
                while len(ahead) + len(planned) < self.lookahead_batches + group:
                    samples = self._samples(next_planned)
                    if samples is None:
                        break
                    planned.append((next_planned, samples[0]))
                    next_planned += workers
                ahead.extend(zip([j for j, _ in planned], reads_by_batch(self.data, [ids for _, ids in planned]), strict=True))
                while ahead and ahead[0][0] < k:
                    ahead.popleft()
                shards.plan([read for _, batch_reads in ahead for read in batch_reads])
            for index in range(len(batches)):
                self._ids.pop(k + index * workers, None)  # consumed: the cache only holds batches still ahead
            ids = np.concatenate([batch[0] for batch in batches])
            if self.transport:
                buffer = torch.empty((3, len(ids), self.data.sequence_length), dtype=torch.int64).share_memory_()  # filled in place, sent without a copy
                packed = pack_arrays(self.data, ids, self.mask_document_boundaries, out=buffer.numpy(), provenance=self.provenance)
                item = {
                    "group": buffer,
                    "ks": [k + index * workers for index in range(len(batches))],
                    "sample_ids": ids.tolist(),
                    "epochs": np.concatenate([batch[1] for batch in batches]).tolist(),
                    "next_positions": [batch[3] for batch in batches],
                    "segment_starts": packed["segment_starts"].tolist(),
                    "segment_sizes": packed["segment_sizes"].tolist(),
                }
                if self.provenance:
                    item["provenance"] = torch.from_numpy(packed["provenance"])
                    item["positions"] = np.concatenate([batch[2] for batch in batches]).tolist()
                yield item
                k += len(batches) * workers
                continue
            packed = pack_arrays(self.data, ids, self.mask_document_boundaries, provenance=self.provenance)
            for (batch_ids, epochs, positions, after), batch in zip(batches, split_packed(packed, len(batches)), strict=True):
                batch["sample_ids"] = torch.from_numpy(batch_ids)
                batch["epochs"] = torch.from_numpy(epochs)
                if self.provenance:
                    batch["positions"] = torch.from_numpy(positions)
                batch[_NEXT] = after
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
    if "provenance" in item:
        packed["provenance"] = item["provenance"].numpy()
    ks = item["ks"]
    batches = split_packed(packed, len(ks))
    ids = np.asarray(item["sample_ids"], dtype=np.int64).reshape(len(ks), -1)
    epochs = np.asarray(item["epochs"], dtype=np.int64).reshape(len(ks), -1)
    positions = np.asarray(item["positions"], dtype=np.int64).reshape(len(ks), -1) if "positions" in item else None
    for index, batch in enumerate(batches):
        batch["sample_ids"] = torch.from_numpy(ids[index])
        batch["epochs"] = torch.from_numpy(epochs[index])
        if positions is not None:
            batch["positions"] = torch.from_numpy(positions[index])
        batch[_NEXT] = item["next_positions"][index]
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
    `stats` tells how long the caller waited for data. `provenance=True` adds to every batch the identity of
    each packed segment (`provenance`, aligned with cu_seqlens) and the samples' stream `positions`; `skip`
    (or `load_state_dict(state, skip=...)`) leaves samples out (`sluice.loader.skip`).
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
        provenance: bool = False,
        skip: SkipList | dict[str, Any] | None = None,
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
        self.step: int | None = 0  # global batches handed out since position 0 (None: a v1 checkpoint's, unknown)
        self.provenance = provenance
        self.stats = LoaderStats()
        self.skip_list = SkipList()
        self.skip_unresolved: list[str] = []  # doc ids of the skip list not found in this mix
        self._skip_plan: SkipPlan | None = None
        if skip is not None:
            self._set_skip(self._resolve_steps(SkipList(), SkipList.coerce(skip), self.step, self.stream_position, self.global_batch))

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    @property
    def num_samples(self) -> int:
        return self.order.num_samples

    @property
    def seed(self) -> int:
        return self.order.seed

    @property
    def epoch(self) -> int:
        return self.stream_position // self.num_samples

    def state_dict(self) -> dict[str, Any]:
        """This loader's checkpoint (`sluice.loader.state.LoaderState`)."""
        return LoaderState(
            seed=self.order.seed, epoch=self.epoch, position=self.stream_position % self.num_samples, num_samples=self.num_samples,
            block_size=self.order.block_size, step=self.step, global_batch=self.global_batch, index_sha256=self.data.index_sha256,
            skip=self.skip_list,
        ).to_dict()

    def load_state_dict(self, state: dict[str, Any], skip: SkipList | dict[str, Any] | None = None) -> None:
        """Resume from `state` (any world size, batch size or worker count). `skip` adds entries to the
        checkpoint's skip list; its steps are the steps of the run that saved `state` (`sluice.loader.skip`)."""
        saved = LoaderState.from_dict(state)
        saved.check(self.data)
        self.order = saved.order()
        self.stream_position = saved.start
        self.step = saved.step
        added = SkipList.coerce(skip) if skip is not None else SkipList()
        saved_batch = saved.global_batch or self.global_batch
        self._set_skip(saved.skip.merged(self._resolve_steps(saved.skip, added, self.step, self.stream_position, saved_batch)))

    def _resolve_steps(self, saved: SkipList, added: SkipList, step: int | None, position: int, global_batch: int) -> SkipList:
        """`added` with its steps turned into the positions those steps held in the run that saved (step,
        position, global_batch) with the skip list `saved`."""
        ranges = added.step_ranges()
        if not ranges:
            return added
        if step is None:
            raise ValueError("this checkpoint does not count steps (loader state version 1): skip positions instead of steps")
        if ranges[0][0] < step:
            raise ValueError(f"step {ranges[0][0]} is before the checkpoint's step {step}: its samples were consumed already")
        plan = self._resolve_plan(saved)
        stream = KeptStream(position, None, global_batch, plan, self.order, self.data)
        positions = []
        for first, stop in ranges:
            for k in range(first - step, stop - step):
                held = stream.batch(k)
                if held is not None:
                    positions.extend([int(p), int(p) + 1] for p in held)
        resolved = {"steps": [list(r) for r in ranges], "from_step": step, "from_position": position, "global_batch": global_batch,
                    "positions": [list(r) for r in SkipList(positions=positions).positions]}
        out = SkipList(**{**added.to_state(with_version=False), "steps": []})
        out.positions = SkipList(positions=out.positions + positions).positions
        out.resolved_steps = [*out.resolved_steps, resolved]
        return out

    def _resolve_plan(self, skip: SkipList) -> SkipPlan | None:
        plan, self.skip_unresolved = skip_plan(skip, self.data)
        return plan

    def _set_skip(self, skip: SkipList) -> None:
        if skip.steps:
            raise ValueError("unresolved steps in a skip list")
        self.skip_list = skip
        self._skip_plan = self._resolve_plan(skip)
        if self._skip_plan is not None and (self._skip_plan.urls or self._skip_plan.domains):
            self.data.check_urls()

    def set_epoch(self, epoch: int) -> None:
        """Jump to the start of `epoch` (for loops that count epochs themselves)."""
        self.stream_position = int(epoch) * self.num_samples

    def _plan(self) -> RankPlan:
        end = None if self.num_epochs is None else self.num_epochs * self.num_samples
        return RankPlan(self.stream_position, self.batch_size, self.rank, self.world_size, end)

    def _host_batches(self, plan: RankPlan) -> Iterator[dict[str, Any]]:
        dataset = RankBatches(self.data, self.order, plan, self.mask_document_boundaries, transport=self.num_workers > 0,
                              provenance=self.provenance, skip=self._skip_plan)
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
                self.stream_position = ready.pop(_NEXT)
                if self.step is not None:
                    self.step += 1
                self.stats.steps += 1
                self.stats.wait_seconds += waited
                self.stats.last_wait_seconds = waited
                yield self._hand_over(ready)
                ready, waited = (following, 0.0) if cuda else fetch()
        finally:
            source.close()
