"""The test mix the loader tests read (tests/support/mix_fixture.py), built once per module, and read both
ways."""

from __future__ import annotations

import pytest

from sluice.io.storage import open_store
from sluice.loader import MixedTokens
from tests.support.mix_fixture import build_test_mix

SEQ = 64  # the test mix's sequence length


@pytest.fixture(scope="module")
def mix_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("mix_store"))
    build_test_mix(open_store(root), sequence_length=SEQ)
    return root


@pytest.fixture(params=["mmap", "pread"])
def data(mix_root, tmp_path, request) -> MixedTokens:
    """The test mix read both ways: memory-mapped (what "auto" picks for a small mix) and with pread."""
    mixed = MixedTokens(open_store(mix_root), "test", cache_dir=str(tmp_path / "cache"), read_mode=request.param)
    assert mixed.mapped == (request.param == "mmap")
    return mixed
