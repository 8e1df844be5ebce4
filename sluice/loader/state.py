"""The loader's checkpoint, one owner: what `TrainingLoader.state_dict()` writes and what both the loader's
`load_state_dict` and `sluice trace` read.

    {version: 2, seed, epoch, position, num_samples, block_size, step, global_batch, index_sha256, skip}

`position` counts the samples of `epoch` consumed by all ranks, `step` the global batches handed out since
position 0 (None in version 1 states), `global_batch` the samples per step, `index_sha256` the mix build it
was saved on, `skip` the skip list (`sluice.loader.skip`). A few integers and the skip list, the same on every
rank: any world size, batch size or worker count resumes from it. `skip_plan` resolves a skip list against a
mix (document ids to shard keys) for the kept stream (`KeptStream`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.loader.order import GlobalOrder
from sluice.loader.skip import SkipList, SkipPlan

if TYPE_CHECKING:
    from sluice.loader.data import MixedTokens

STATE_VERSION = 2


@dataclass(frozen=True)
class LoaderState:
    """A loader checkpoint (see the module docstring for its fields)."""

    seed: int
    epoch: int
    position: int
    num_samples: int
    block_size: int = 1
    step: int | None = None
    global_batch: int | None = None
    index_sha256: str | None = None
    skip: SkipList = field(default_factory=SkipList)

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LoaderState:
        """Read a saved state (version 1 or 2); a position outside the mix is refused."""
        version = int(state.get("version", 1))
        if version not in (1, STATE_VERSION):
            raise ValueError(f"loader state version {version} is not {STATE_VERSION} (or 1)")
        num_samples, position = int(state["num_samples"]), int(state["position"])
        if not 0 <= position < num_samples:
            raise ValueError(f"loader state position {position} is outside [0, {num_samples})")
        return cls(
            seed=int(state["seed"]),
            epoch=int(state["epoch"]),
            position=position,
            num_samples=num_samples,
            block_size=int(state.get("block_size", 1)),
            step=None if state.get("step") is None else int(state["step"]),
            global_batch=int(state["global_batch"]) if state.get("global_batch") else None,
            index_sha256=state.get("index_sha256"),
            skip=SkipList.from_state(state.get("skip")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            "num_samples": self.num_samples,
            "block_size": self.block_size,
            "step": self.step,
            "global_batch": self.global_batch,
            "index_sha256": self.index_sha256,
            "skip": self.skip.to_state(),
        }

    def check(self, data: MixedTokens) -> None:
        """The state belongs to this mix build: same sample count, same index (when both name one)."""
        if self.num_samples != len(data):
            raise ValueError(
                f"the saved loader state is for a mix of {self.num_samples} samples but mix {data.mix!r} "
                f"({data.split}) has {len(data)}: resume on the same mix"
            )
        if self.index_sha256 is not None and data.index_sha256 is not None and self.index_sha256 != data.index_sha256:
            raise ValueError(
                f"the saved loader state is for another build of mix {data.mix!r} (index {self.index_sha256[:12]}..., now "
                f"{data.index_sha256[:12]}...): the order changed; resume on the build it was saved with"
            )

    def order(self) -> GlobalOrder:
        return GlobalOrder(self.num_samples, self.seed, self.block_size)

    @property
    def start(self) -> int:
        """The stream position the state resumes at (epochs x samples + position)."""
        return self.epoch * self.num_samples + self.position


def skip_plan(skip: SkipList, data: MixedTokens) -> tuple[SkipPlan | None, list[str]]:
    """The skip list resolved against `data` (None when empty), and the document ids not found in it."""
    if skip.empty:
        return None, []
    keys = [(shard << 32) | doc for shard, doc in skip.documents]
    unresolved: list[str] = []
    if skip.doc_ids:
        found = data.locate_documents(skip.doc_ids)
        keys += [(shard << 32) | doc for places in found.values() for shard, doc in places]
        unresolved = [doc_id for doc_id in skip.doc_ids if not found.get(doc_id)]
    return SkipPlan(skip.positions, np.asarray(keys, dtype=np.uint64), skip.urls, skip.domains), unresolved
