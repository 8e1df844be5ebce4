"""`LoaderState`, the one owner of the loader's checkpoint format (the loader and `sluice trace` read it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sluice.loader.skip import SkipList
from sluice.loader.state import STATE_VERSION, LoaderState

SAVED = {
    "version": STATE_VERSION, "seed": 7, "epoch": 2, "position": 30, "num_samples": 100, "block_size": 4, "step": 57,
    "global_batch": 8, "index_sha256": "ab" * 32, "skip": SkipList(positions=[[3, 5]], doc_ids=["d1"]).to_state(),
}


class Mix(SimpleNamespace):
    def __len__(self) -> int:
        return self.samples


def test_a_saved_state_reads_back_to_the_same_dict_and_resumes_at_its_stream_position():
    state = LoaderState.from_dict(SAVED)
    assert state.to_dict() == SAVED
    assert state.start == 2 * 100 + 30
    assert (state.order().seed, state.order().block_size) == (7, 4)


def test_a_version_1_state_has_no_step_and_defaults_its_block_size():
    old = {"seed": 1, "epoch": 0, "position": 5, "num_samples": 10}
    state = LoaderState.from_dict(old)
    assert state.step is None and state.block_size == 1 and state.skip.empty


@pytest.mark.parametrize(
    ("change", "message"),
    [({"version": 3}, "loader state version 3 is not 2"), ({"position": 100}, "position 100 is outside [0, 100)")],
)
def test_unreadable_states_are_refused(change, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)")):
        LoaderState.from_dict({**SAVED, **change})


def test_a_state_is_checked_against_the_mix_build():
    state = LoaderState.from_dict(SAVED)
    state.check(Mix(samples=100, mix="default", split="train", index_sha256="ab" * 32))
    state.check(Mix(samples=100, mix="default", split="train", index_sha256=None))
    with pytest.raises(ValueError, match="mix of 100 samples but mix 'default'"):
        state.check(Mix(samples=99, mix="default", split="train", index_sha256="ab" * 32))
    with pytest.raises(ValueError, match="another build of mix 'default'"):
        state.check(Mix(samples=100, mix="default", split="train", index_sha256="cd" * 32))
