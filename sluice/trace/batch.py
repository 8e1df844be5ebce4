"""Which segments (document pieces) a batch held: from a step, a loader checkpoint or a saved provenance."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sluice.loader.data import MixedTokens
from sluice.loader.order import GlobalOrder
from sluice.loader.packing import PROVENANCE_COLUMNS, locate_segments
from sluice.loader.skip import KeptStream
from sluice.loader.state import LoaderState, skip_plan


@dataclass
class BatchSpec:
    """What names the traced batch (see `sluice.trace`). Exactly one of step / checkpoint / provenance /
    doc_ids is needed; with a checkpoint, `step` picks a later step (default: the checkpoint's next one)."""

    mix: str
    split: str = "train"
    step: int | None = None
    batch_size: int | None = None  # per rank; with a checkpoint, default: its global batch / world_size
    world_size: int = 1
    ranks: tuple[int, ...] | None = None  # None: every rank (the global batch)
    seed: int | None = None  # None: the checkpoint's, else the mix's
    block_size: int = 1
    checkpoint: dict[str, Any] | None = None  # a TrainingLoader.state_dict()
    provenance: list[dict[str, Any]] | None = None  # saved batch provenances (`batch_provenance`), one per rank
    doc_ids: tuple[str, ...] = ()

    def label(self) -> str:
        if self.provenance:
            steps = sorted({int(p.get("step", -1)) for p in self.provenance})
            return f"provenance-step-{steps[0]}" if len(steps) == 1 else "provenance"
        if self.doc_ids:
            import hashlib

            return "documents-" + hashlib.sha256("\n".join(sorted(self.doc_ids)).encode()).hexdigest()[:12]
        return f"step-{self.resolved_step()}"

    def resolved_step(self) -> int:
        if self.step is not None:
            return int(self.step)
        if self.checkpoint is not None and self.checkpoint.get("step") is not None:
            return int(self.checkpoint["step"])
        raise ValueError("name a step (or give a loader checkpoint, a saved provenance or document ids)")


@dataclass
class Segment:
    """One piece of one document in one sample of the batch (a row of `provenance`)."""

    rank: int
    row: int  # sample row in the rank's batch
    position: int  # stream position of the sample
    sample: int  # sample id in the mix
    epoch: int
    record: int  # record index in the mix index
    shard: int
    doc: int
    token_begin: int  # the segment's tokens inside the document
    token_end: int
    component: str = ""
    copy: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("extra")
        return out


def batch_provenance(batch: dict[str, Any], loader: Any, step: int | None = None) -> dict[str, Any]:
    """What a loss-spike hook saves for one rank's batch (JSON-able): its provenance, positions and the
    loader's geometry. Needs a loader built with provenance=True."""
    if "provenance" not in batch:
        raise ValueError("the batch carries no provenance: build the TrainingLoader with provenance=True")
    return {
        "format": "sluice-batch-provenance",
        "version": 1,
        "mix": loader.data.mix,
        "split": loader.data.split,
        "index_sha256": loader.data.index_sha256,
        "step": step,
        "rank": loader.rank,
        "world_size": loader.world_size,
        "batch_size": loader.batch_size,
        "seed": loader.seed,
        "sequence_length": loader.data.sequence_length,
        "columns": list(PROVENANCE_COLUMNS),
        "provenance": batch["provenance"].cpu().tolist(),
        "cu_seqlens": batch["cu_seqlens"].cpu().tolist(),
        "positions": batch["positions"].cpu().tolist(),
        "sample_ids": batch["sample_ids"].cpu().tolist(),
        "epochs": batch["epochs"].cpu().tolist(),
    }


def global_positions(data: MixedTokens, spec: BatchSpec) -> tuple[np.ndarray, int, GlobalOrder]:
    """(positions of the global batch in rank-major order, batch size per rank, the order)."""
    if spec.checkpoint is not None:
        state = LoaderState.from_dict(spec.checkpoint)
        state.check(data)
        order = state.order()
        global_batch = state.global_batch or (spec.batch_size or 0) * spec.world_size
        batch_size = spec.batch_size or global_batch // spec.world_size
        if batch_size * spec.world_size != global_batch:
            raise ValueError(f"batch_size x world_size = {batch_size * spec.world_size}, the checkpoint's global batch is {global_batch}")
        if state.step is None:
            raise ValueError("the checkpoint does not count steps (loader state version 1)")
        step = spec.resolved_step()
        if step < state.step:
            raise ValueError(f"step {step} is before the checkpoint's step {state.step}: trace it from an earlier checkpoint")
        plan, _ = skip_plan(state.skip, data)
        positions = KeptStream(state.start, None, global_batch, plan, order, data).batch(step - state.step)
        return positions, batch_size, order
    if spec.batch_size is None or spec.step is None:
        raise ValueError("a step needs the loader's batch_size and world_size (or give a loader checkpoint)")
    seed = spec.seed if spec.seed is not None else int(data.manifest["seed"])
    order = GlobalOrder(len(data), seed, spec.block_size)
    global_batch = spec.batch_size * spec.world_size
    return np.arange(spec.step * global_batch, (spec.step + 1) * global_batch, dtype=np.int64), spec.batch_size, order


def batch_segments(data: MixedTokens, spec: BatchSpec) -> list[Segment]:
    """The segments of the batch (rank, row order), as the loader packed them."""
    components = data.manifest["components"]
    if spec.provenance:
        return _saved_segments(data, spec.provenance, components)
    positions, batch_size, order = global_positions(data, spec)
    world = len(positions) // batch_size
    ranks = list(range(world)) if spec.ranks is None else list(spec.ranks)
    for rank in ranks:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in [0, {world})")
    mine = np.concatenate([positions[rank * batch_size : (rank + 1) * batch_size] for rank in ranks])
    ids, epochs = order.at(mine)
    packed = locate_segments(data, ids)  # the index alone: no token read
    rows = packed["segment_starts"] // data.sequence_length
    records = packed["segment_records"]
    out = []
    for index, (record, shard, doc, begin, end) in enumerate(packed["provenance"].tolist()):
        row = int(rows[index])
        out.append(Segment(ranks[row // batch_size], row % batch_size, int(mine[row]), int(ids[row]), int(epochs[row]), record, shard, doc, begin, end,
                           components[int(records["component"][index])], int(records["copy"][index])))
    return out


def _saved_segments(data: MixedTokens, saved: list[dict[str, Any]], components: list[str]) -> list[Segment]:
    out = []
    for item in saved:
        if item.get("index_sha256") not in (None, data.index_sha256):
            raise ValueError(f"the saved provenance of rank {item.get('rank')} is from another build of mix {data.mix!r}")
        length = int(item["sequence_length"])
        starts = np.asarray(item["cu_seqlens"][:-1], dtype=np.int64)
        positions, ids, epochs = item["positions"], item["sample_ids"], item["epochs"]
        for (record, shard, doc, begin, end), start in zip(item["provenance"], starts.tolist(), strict=True):
            row = start // length
            meta = data.index().records(int(record), int(record) + 1)
            if not len(meta) or (int(meta["shard"][0]), int(meta["doc"][0])) != (shard, doc):
                raise ValueError(f"record {record} of mix {data.mix!r} is not shard {shard} doc {doc}: the provenance is from another build")
            out.append(Segment(int(item.get("rank", 0)), row, int(positions[row]), int(ids[row]), int(epochs[row]), int(record), int(shard), int(doc),
                               int(begin), int(end), components[int(meta["component"][0])], int(meta["copy"][0])))
    return out
