"""Feistel permutations: bijective for any size, deterministic, a different shuffle per epoch, O(1) lookups."""

from __future__ import annotations

import numpy as np
import pytest

from sluice.mix.permutation import EpochPermutation, FeistelPermutation


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 17, 100, 1000, 4097, 65_537])
def test_feistel_is_a_bijection_of_zero_to_n(size):
    values = FeistelPermutation(size, key=42)(np.arange(size))
    assert values.min() >= 0 and values.max() < size
    assert np.array_equal(np.sort(values), np.arange(size))


@pytest.mark.parametrize(("size", "block"), [(10, 3), (1000, 7), (1024, 64), (5, 8), (4099, 16)])
def test_block_permutation_is_a_bijection_and_keeps_blocks_together(size, block):
    order = EpochPermutation(size, seed=3, epoch=1, block_size=block)(np.arange(size))
    assert np.array_equal(np.sort(order), np.arange(size))
    # Inside each output block of consecutive positions, samples are consecutive (one input block).
    full_blocks = (size // block) * block
    runs = 0
    for begin in range(0, size, block):
        chunk = order[begin : begin + block]
        if len(chunk) == block and np.all(np.diff(chunk) == 1) and chunk[0] % block == 0:
            runs += 1
    assert runs >= full_blocks // block - 1  # the padded last block may displace at most one run


def test_deterministic_and_different_per_epoch_and_seed():
    size = 10_000
    first = EpochPermutation(size, seed=7, epoch=0)(np.arange(size))
    again = EpochPermutation(size, seed=7, epoch=0)(np.arange(size))
    next_epoch = EpochPermutation(size, seed=7, epoch=1)(np.arange(size))
    other_seed = EpochPermutation(size, seed=8, epoch=0)(np.arange(size))
    assert np.array_equal(first, again)
    assert np.mean(first == next_epoch) < 0.01
    assert np.mean(first == other_seed) < 0.01
    assert not np.array_equal(first, np.arange(size))


def test_shuffle_is_well_mixed():
    size = 100_000
    order = EpochPermutation(size, seed=1, epoch=0)(np.arange(size))
    # Neighbouring positions are not neighbouring samples, and position does not predict the sample.
    assert np.mean(np.abs(np.diff(order)) == 1) < 0.001
    assert abs(np.corrcoef(np.arange(size), order)[0, 1]) < 0.02
    # Each tenth of the positions draws from every tenth of the samples about evenly.
    counts = np.histogram2d(np.arange(size) // (size // 10), order // (size // 10), bins=10)[0]
    assert counts.min() > 0.8 * size / 100 and counts.max() < 1.2 * size / 100


def test_single_lookups_match_vector_lookups_and_work_at_a_billion():
    perm = EpochPermutation(10**12, seed=5, epoch=2)
    positions = np.array([0, 1, 10**3, 10**6, 10**9, 10**12 - 1])
    vector = perm(positions)
    assert [perm(int(p)) for p in positions] == vector.tolist()
    assert all(0 <= value < 10**12 for value in vector.tolist())
    assert len(set(vector.tolist())) == len(positions)


def test_out_of_range_positions_are_rejected():
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        EpochPermutation(10, seed=0, epoch=0)(np.array([10]))
