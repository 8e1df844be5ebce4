"""The global order: which sample every stream position holds, and which positions each rank reads.

Epoch e visits the N samples in `EpochPermutation(N, seed, e, block_size)` order (a Feistel permutation, O(1)
to build and to evaluate at any position; `sluice.mix.permutation`). The epochs laid end to end form one global
stream of sample positions: position q is epoch q // N, sample perm_e(q % N). A run that starts (or resumes)
at position p cuts the stream into global batches of G = batch_size * world_size samples: global batch k is
positions [p + k*G, p + (k+1)*G), and rank r takes the r-th slice of batch_size positions. So every rank's
batch k is disjoint from the others', the union over ranks is the global batch, and an epoch's samples are
each delivered exactly once (a global batch may straddle an epoch edge: nothing is dropped except, with
`num_epochs`, a final partial global batch). The state is the position, so a restart with another world
size, batch size or worker count continues the same stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sluice.mix.permutation import EpochPermutation


class GlobalOrder:
    """The global stream of sample positions: position q -> (epoch q // N, sample perm_epoch(q % N))."""

    def __init__(self, num_samples: int, seed: int, block_size: int = 1) -> None:
        if num_samples <= 0:
            raise ValueError("the mix has no complete sample (fewer than sequence_length + 1 tokens)")
        self.num_samples = num_samples
        self.seed = seed
        self.block_size = block_size
        self._perms: dict[int, EpochPermutation] = {}

    def permutation(self, epoch: int) -> EpochPermutation:
        perm = self._perms.get(epoch)
        if perm is None:
            if len(self._perms) > 4:
                self._perms.clear()
            perm = self._perms[epoch] = EpochPermutation(self.num_samples, self.seed, epoch, self.block_size)
        return perm

    def samples(self, begin: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Sample ids and epochs of stream positions [begin, begin + count)."""
        return self.at(np.arange(begin, begin + count, dtype=np.int64))

    def at(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sample ids and epochs of the given stream positions."""
        count = len(positions)
        epochs = positions // self.num_samples
        ids = np.empty(count, dtype=np.int64)
        for epoch in np.unique(epochs).tolist():
            mask = epochs == epoch
            ids[mask] = self.permutation(epoch)(positions[mask] - epoch * self.num_samples)
        return ids, epochs


@dataclass(frozen=True)
class RankPlan:
    """What one rank reads from stream position `start` on (absolute position; see the module docstring)."""

    start: int
    batch_size: int
    rank: int
    world_size: int
    end: int | None  # stream position to stop at (the final partial global batch is dropped), None = endless

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def batch_begin(self, k: int) -> int | None:
        """Stream position of this rank's slice of global batch k, or None past the end."""
        if self.end is not None and self.start + (k + 1) * self.global_batch > self.end:
            return None
        return self.start + k * self.global_batch + self.rank * self.batch_size
