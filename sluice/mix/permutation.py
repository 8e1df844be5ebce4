"""Seeded bijective permutations of [0, n) with O(1) state: a Feistel network with cycle walking.

A training loader needs a fresh global shuffle of N samples every epoch, and the position inside it
after a restart. Materializing `np.random.permutation(N)` costs O(N) time and memory at every start
(8 GB at N = 10^9); this module computes `perm(i)` for any i directly, from (seed, epoch) alone.

Construction: the smallest even bit width 2h with 2^(2h) >= n; a balanced Feistel network over
2h-bit integers (`ROUNDS` rounds, round function = splitmix64 of (round key + right half)) is a
bijection of [0, 2^(2h)); an output >= n is encrypted again ("cycle walking") until it lands in
[0, n), which keeps the map a bijection of [0, n). The domain is < 4n, so the expected number of
walks is < 4. Round keys are derived from (seed, epoch), so each epoch is a different shuffle.

Block locality (`block_size` > 1) permutes blocks of consecutive indices instead of single ones:
index i lies in block i // block_size, and the block goes to a permuted block position while keeping
its offset, so runs of block_size neighbours stay together (fewer distinct reads from object stores).
The padded last block is cycle-walked the same way.

Everything is vectorized over numpy uint64 arrays (wrap-around arithmetic is the intended hash).
"""

from __future__ import annotations

import numpy as np

ROUNDS = 6
_U64 = np.uint64


def splitmix64(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, elementwise on a uint64 array (a fast, well-mixed 64-bit hash)."""
    x = values.astype(np.uint64, copy=True)
    x ^= x >> _U64(30)
    x *= _U64(0xBF58476D1CE4E5B9)
    x ^= x >> _U64(27)
    x *= _U64(0x94D049BB133111EB)
    x ^= x >> _U64(31)
    return x


def _key(*parts: int) -> int:
    """A 64-bit key from integers (seed, epoch, ...), each folded in through splitmix64."""
    state = np.array([0x9E3779B97F4A7C15], dtype=np.uint64)
    for part in parts:
        state = splitmix64(state ^ np.array([part & ((1 << 64) - 1)], dtype=np.uint64))
    return int(state[0])


class FeistelPermutation:
    """A bijection of [0, size) chosen by `key`; `perm(indices)` maps an int array (or an int)."""

    def __init__(self, size: int, key: int, rounds: int = ROUNDS) -> None:
        if size < 0:
            raise ValueError(f"permutation size must be >= 0, got {size}")
        self.size = int(size)
        bits = max(2, (max(self.size, 2) - 1).bit_length())
        self.half_bits = (bits + 1) // 2
        self.mask = _U64((1 << self.half_bits) - 1)
        self.round_keys = [_U64(_key(key, r)) for r in range(rounds)]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        half = _U64(self.half_bits)
        left = x >> half
        right = x & self.mask
        for round_key in self.round_keys:
            left, right = right, left ^ (splitmix64(right + round_key) & self.mask)
        return (left << half) | right

    def __call__(self, indices):
        scalar = np.isscalar(indices)
        x = np.asarray(indices, dtype=np.int64).reshape(-1)
        if x.size and (x.min() < 0 or x.max() >= self.size):
            raise IndexError(f"permutation index out of range [0, {self.size})")
        out = self._encrypt(x.astype(np.uint64))
        size = _U64(self.size)
        outside = np.flatnonzero(out >= size)
        while outside.size:  # cycle walking: re-encrypt until the value is inside [0, size)
            out[outside] = self._encrypt(out[outside])
            outside = outside[out[outside] >= size]
        result = out.astype(np.int64)
        return int(result[0]) if scalar else result


class EpochPermutation:
    """The shuffle of `num_samples` sample indices for one epoch: `order(positions) -> sample indices`.

    Depends only on (seed, epoch, num_samples, block_size); built in O(1), evaluated in O(1) per index.
    """

    def __init__(self, num_samples: int, seed: int, epoch: int, block_size: int = 1) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_samples = int(num_samples)
        self.seed = int(seed)
        self.epoch = int(epoch)
        self.block_size = int(block_size)
        blocks = -(-self.num_samples // self.block_size)
        self.blocks = FeistelPermutation(blocks, _key(self.seed, self.epoch, 0x5EED))

    def __call__(self, positions):
        scalar = np.isscalar(positions)
        x = np.asarray(positions, dtype=np.int64).reshape(-1)
        if x.size and (x.min() < 0 or x.max() >= self.num_samples):
            raise IndexError(f"position out of range [0, {self.num_samples})")
        out = self._map(x)
        outside = np.flatnonzero(out >= self.num_samples)
        while outside.size:  # only the padding of the last block can land outside; walk it back in
            out[outside] = self._map(out[outside])
            outside = outside[out[outside] >= self.num_samples]
        return int(out[0]) if scalar else out

    def _map(self, x: np.ndarray) -> np.ndarray:
        if self.block_size == 1:
            return self.blocks(x)
        return self.blocks(x // self.block_size) * self.block_size + x % self.block_size
