"""Mix selection: exact token targets by weight, deterministic, epoch cap enforced."""

from __future__ import annotations

import numpy as np
import pytest

from sluice.mix import MixError, SourceDocs, _targets, select_source


def docs(name, lengths):
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return SourceDocs(name, np.zeros(len(lengths), np.int32), starts, lengths)


def test_targets_split_budget_exactly_by_weight():
    targets = _targets({"a": 0.7, "b": 0.2, "c": 0.1}, 1001)
    assert sum(targets.values()) == 1001
    assert targets == {"a": 701, "b": 200, "c": 100}


def test_selection_meets_target_exactly_and_is_deterministic():
    source = docs("web", [100, 250, 30, 400, 75] * 20)
    first = select_source(source, 3333, seed=7, max_epochs=2)
    again = select_source(source, 3333, seed=7, max_epochs=2)
    other = select_source(source, 3333, seed=8, max_epochs=2)
    assert int(first[2].sum()) == 3333
    assert all(np.array_equal(x, y) for x, y in zip(first[:3], again[:3], strict=True))
    assert not np.array_equal(first[1], other[1])
    # Every range lies inside its document.
    by_start = dict(zip(source.starts.tolist(), source.lengths.tolist(), strict=True))
    assert all(0 < length <= by_start[start] for start, length in zip(first[1].tolist(), first[2].tolist(), strict=True))


def test_skewed_source_is_upsampled_within_the_epoch_cap():
    small = docs("small", [10] * 10)  # 100 tokens
    _, _, lengths, epochs = select_source(small, 250, seed=1, max_epochs=3)
    assert int(lengths.sum()) == 250 and epochs == pytest.approx(2.5)


def test_weight_beyond_the_epoch_cap_is_a_clear_error():
    small = docs("small", [10] * 10)
    with pytest.raises(MixError, match=r"source 'small'.*400 tokens.*100.*4\.00 epochs.*max_epochs=3"):
        select_source(small, 400, seed=1, max_epochs=3)
