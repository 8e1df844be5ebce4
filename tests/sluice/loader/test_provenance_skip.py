"""Batch provenance and skip lists of the training loader, against oracles built from the mix's files.

Provenance: every segment's tokens are the named document's tokens in its shard file, read with numpy.
Skip lists: a resumed run (any world size / batch size / worker count) delivers exactly the uninterrupted
stream of positions minus the skipped samples, where "skipped" is computed here from the Parquet view of
the ranges, the fixture's URLs (fnmatch) and plain position arithmetic, not by the loader's code.
"""

from __future__ import annotations

import fnmatch
import json
from itertools import islice
from urllib.parse import urlsplit

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from sluice.io.storage import open_store
from sluice.loader import MixedTokens, TrainingLoader
from sluice.loader.order import GlobalOrder
from sluice.loader.packing import PROVENANCE_COLUMNS
from sluice.loader.skip import SkipList, kth_kept, wildcard_match
from sluice.tokens.shards import binary_folder
from tests.sluice.loader.conftest import SEQ
from tests.support.mix_fixture import fixture_url, mix_shards, stream_oracle

SEED = 5


class Oracle:
    """The mix read from its Parquet ranges view and shard files."""

    def __init__(self, root: str) -> None:
        store = open_store(root)
        self.manifest = json.loads(store.read_bytes("mixed_dataset/mix=test/_manifest.json"))
        table = pq.read_table(store.local_path("mixed_dataset/mix=test/train.parquet"))
        self.offset, self.shard, self.doc, self.length = (table.column(c).to_numpy().astype(np.int64) for c in ("offset", "shard", "doc", "length"))
        self.stream = stream_oracle(store)
        self.samples = (len(self.stream) - 1) // SEQ
        self.shards = mix_shards(store, self.manifest)
        self.shard_tokens = [np.fromfile(store.local_path(f"{binary_folder(s, s['prefix'])}/{s['name']}.bin"), "<u2") for s in self.shards]
        self.shard_offsets = [np.fromfile(store.local_path(f"{binary_folder(s, s['prefix'])}/{s['name']}.idx"), "<u8") for s in self.shards]

    def window_docs(self, sample: int) -> set[tuple[int, int]]:
        begin, end = sample * SEQ, sample * SEQ + SEQ + 1
        hit = (self.offset < end) & (self.offset + self.length > begin)
        return set(zip(self.shard[hit].tolist(), self.doc[hit].tolist(), strict=True))

    def url(self, shard: int, doc: int) -> str | None:
        info = self.shards[shard]
        return fixture_url(info["source"], info["name"], doc)


@pytest.fixture(scope="module")
def oracle(mix_root) -> Oracle:
    return Oracle(mix_root)


def run_ranks(data: MixedTokens, batch: int, world: int, steps: int, state=None, skip=None, workers: int = 0) -> tuple[list[np.ndarray], list[dict]]:
    """Global batches (positions, rank-major) of `steps` steps of every rank, and each rank's final state."""
    per_rank, states = [], []
    for rank in range(world):
        loader = TrainingLoader(data, batch, seed=SEED, rank=rank, world_size=world, provenance=True, num_workers=workers, prefetch_batches=0)
        if state is not None:
            loader.load_state_dict(json.loads(json.dumps(state)), skip=skip)
        elif skip is not None:
            loader = TrainingLoader(data, batch, seed=SEED, rank=rank, world_size=world, provenance=True, num_workers=workers, prefetch_batches=0, skip=skip)
        batches = list(islice(iter(loader), steps))
        per_rank.append(batches)
        states.append(loader.state_dict())
    globals_ = [np.concatenate([per_rank[rank][k]["positions"].numpy() for rank in range(world)]) for k in range(min(len(b) for b in per_rank))]
    return globals_, states, per_rank


# -- provenance ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 1])
def test_provenance_names_every_segment(data, oracle, workers):
    loader = TrainingLoader(data, 3, seed=SEED, provenance=True, num_workers=workers, prefetch_batches=0)
    order = GlobalOrder(len(data), SEED)
    for step, batch in enumerate(islice(iter(loader), 25)):
        provenance, bounds = batch["provenance"].numpy(), batch["cu_seqlens"].numpy()
        assert provenance.shape == (len(bounds) - 1, len(PROVENANCE_COLUMNS))
        assert np.array_equal(batch["positions"].numpy(), step * 3 + np.arange(3))
        assert np.array_equal(order.at(batch["positions"].numpy())[0], batch["sample_ids"].numpy())
        flat = batch["input_ids"].reshape(-1).numpy()
        for (record, shard, doc, begin, end), a, b in zip(provenance.tolist(), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            assert end - begin == b - a
            assert (oracle.shard[record], oracle.doc[record]) == (shard, doc)  # record i of the index = row i of the Parquet view
            doc_start = int(oracle.shard_offsets[shard][doc])
            assert np.array_equal(flat[a:b], oracle.shard_tokens[shard][doc_start + begin : doc_start + end])
            assert 0 <= begin < end <= oracle.length[record]


def test_provenance_is_off_by_default(data):
    batch = next(iter(TrainingLoader(data, 2, seed=SEED, prefetch_batches=0)))
    assert "provenance" not in batch and "positions" not in batch and not any(key.startswith("_") for key in batch)


# -- skip lists ------------------------------------------------------------------------------------------------------


def oracle_skipped(oracle: Oracle, order: GlobalOrder, position: int, skip: dict) -> bool:
    if any(begin <= position < end for begin, end in skip.get("positions", [])):
        return True
    sample = int(order.at(np.array([position]))[0][0])
    docs = oracle.window_docs(sample)
    if docs & {tuple(d) for d in skip.get("documents", [])}:
        return True
    for shard, doc in docs:
        url = oracle.url(shard, doc)
        if not url:
            continue
        host = urlsplit(url).hostname or ""
        if any(host == d or host.endswith("." + d) for d in skip.get("domains", [])):
            return True
        if any(fnmatch.fnmatchcase(url, pattern) for pattern in skip.get("urls", [])):
            return True
    return False


def oracle_stream(oracle: Oracle, start: int, count: int, skip: dict) -> list[int]:
    """The first `count` kept positions from `start` on."""
    order = GlobalOrder(oracle.samples, SEED)
    out, position = [], start
    while len(out) < count:
        if not oracle_skipped(oracle, order, position, skip):
            out.append(position)
        position += 1
    return out


SKIPS = {
    "positions": {"positions": [[30, 41], [44, 45], [90, 130]]},
    "documents": {"documents": [[0, 5], [2, 17], [4, 33], [5, 2]]},
    "urls": {"urls": ["https://gamma.test/web/*", "*/page-1?.html"]},
    "domains": {"domains": ["alpha.example"]},
    "mixed": {"positions": [[40, 48]], "documents": [[1, 9]], "domains": ["news.beta.example"], "urls": ["*reference/shard-00001/*"]},
}


@pytest.mark.parametrize("kind", sorted(SKIPS))
@pytest.mark.parametrize(("before", "after"), [((4, 1), (4, 1)), ((2, 3), (3, 2))])  # (batch, world) saved -> resumed
def test_skip_resume_equals_the_uninterrupted_stream_minus_the_skipped(data, oracle, kind, before, after):
    skip = SKIPS[kind]
    head, states, _ = run_ranks(data, *before, steps=5)
    assert all(state == states[0] for state in states)  # every rank saves the same state
    start = 5 * before[0] * before[1]
    assert np.array_equal(np.concatenate(head), np.arange(start))
    tail, resumed_states, per_rank = run_ranks(data, *after, steps=12, state=states[0], skip=skip)
    expected = oracle_stream(oracle, start, 12 * after[0] * after[1], skip)
    assert np.concatenate(tail).tolist() == expected
    assert len(set(expected)) < len(range(start, expected[-1] + 1))  # something was skipped
    # The samples are the stream's tokens (nothing but the order changed).
    order = GlobalOrder(len(data), SEED)
    for rank_batches in per_rank:
        for batch in rank_batches:
            for row, sample in enumerate(order.at(batch["positions"].numpy())[0].tolist()):
                assert np.array_equal(batch["input_ids"][row].numpy(), oracle.stream[sample * SEQ : sample * SEQ + SEQ])
    # The skip list is part of the state, and an elastic restart from it continues the same kept stream.
    state = resumed_states[0]
    assert state["skip"]["positions"] == SkipList(positions=skip.get("positions", [])).positions
    assert state["position"] == expected[-1] + 1 and state["step"] == 5 + 12
    again, _, _ = run_ranks(data, 5, 1, steps=4, state=state)
    assert np.concatenate(again).tolist() == oracle_stream(oracle, expected[-1] + 1, 20, skip)


def test_skipping_steps_of_the_run_that_saved_the_checkpoint(data, oracle):
    # A run (batch 3, 2 ranks) saves at step 4; it spiked at steps 6 and 9. Resume on 1 rank of batch 4.
    _, states, _ = run_ranks(data, 3, 2, steps=4)
    tail, states2, _ = run_ranks(data, 4, 1, steps=10, state=states[0], skip={"steps": [6, [9, 10]]})
    bad = [[p, p + 1] for step in (6, 9) for p in range(step * 6, step * 6 + 6)]
    assert np.concatenate(tail).tolist() == oracle_stream(oracle, 24, 40, {"positions": bad})
    resolved = states2[0]["skip"]["resolved_steps"]
    assert resolved[0]["steps"] == [[6, 7], [9, 10]] and resolved[0]["global_batch"] == 6 and resolved[0]["from_step"] == 4
    # That run (4 x 1, steps counted on) spikes again at its step 20; its checkpoint at step 14 carries the
    # skip list, so "step 20" is the 20th global batch of the kept stream, not of the plain one.
    at_14 = states2[0]
    mid, _, _ = run_ranks(data, 4, 1, steps=0, state=at_14)
    kept = oracle_stream(oracle, at_14["position"], 40, {"positions": bad})
    step20 = kept[(20 - 14) * 4 : (20 - 14) * 4 + 4]
    tail3, _, _ = run_ranks(data, 2, 2, steps=12, state=at_14, skip={"steps": [20]})
    assert np.concatenate(tail3).tolist() == oracle_stream(oracle, at_14["position"], 48, {"positions": bad + [[p, p + 1] for p in step20]})
    with pytest.raises(ValueError, match="before the checkpoint"):
        TrainingLoader(data, 4, seed=SEED).load_state_dict(at_14, skip={"steps": [3]})


def test_skip_with_workers_equals_in_process(data):
    skip = SKIPS["mixed"]
    _, states, _ = run_ranks(data, 4, 1, steps=3)
    in_process, _, _ = run_ranks(data, 3, 2, steps=8, state=states[0], skip=skip)
    workers, _, _ = run_ranks(data, 3, 2, steps=8, state=states[0], skip=skip, workers=2)
    assert np.concatenate(workers).tolist() == np.concatenate(in_process).tolist()


def test_a_fresh_run_with_a_skip_list_and_epoch_end(data, oracle):
    skip = {"documents": [[0, 1], [3, 3]], "positions": [[0, 3]]}
    loader = TrainingLoader(data, 4, seed=SEED, provenance=True, num_epochs=1, skip=skip, prefetch_batches=0)
    positions = np.concatenate([batch["positions"].numpy() for batch in loader]).tolist()
    kept = [p for p in range(len(data)) if not oracle_skipped(oracle, GlobalOrder(len(data), SEED), p, skip)]
    assert positions == kept[: len(kept) // 4 * 4]  # the last partial global batch of the epoch is dropped


def test_wildcards_match_like_fnmatch():
    rng = np.random.default_rng(0)
    alphabet = list("ab*?/.")
    for _ in range(3000):
        pattern = "".join(rng.choice(alphabet, size=int(rng.integers(0, 7))))
        text = "".join(rng.choice(list("ab/."), size=int(rng.integers(0, 9))))
        assert wildcard_match(pattern, text) == fnmatch.fnmatchcase(text, pattern.replace("[", "[[]")), (pattern, text)
    assert wildcard_match("*a" * 30 + "b", "a" * 5000) is False  # no exponential backtracking


def test_kth_kept_matches_a_set_walk():
    rng = np.random.default_rng(1)
    for _ in range(200):
        start = int(rng.integers(0, 50))
        skip = SkipList(positions=[[int(b), int(b + rng.integers(1, 6))] for b in rng.integers(0, 120, size=int(rng.integers(0, 8)))])
        ranges = np.asarray(skip.positions, dtype=np.int64).reshape(-1, 2)
        banned = {p for b, e in skip.positions for p in range(b, e)}
        walk = [p for p in range(start, 400) if p not in banned][:100]
        assert kth_kept(start, ranges[:, 0], ranges[:, 1], np.arange(100)).tolist() == walk


def test_skip_list_state_round_trip_and_errors():
    skip = SkipList(positions=[5, [7, 9], [8, 12]], documents=[[1, 2], [1, 2]], urls=["*x*"], domains=["Example.COM."], steps=[3])
    assert skip.positions == [[5, 6], [7, 12]] and skip.documents == [[1, 2]] and skip.domains == ["example.com"]
    assert SkipList.from_state(json.loads(json.dumps(skip.to_state()))) == skip
    with pytest.raises(ValueError, match="unknown skip list keys"):
        SkipList.from_state({"version": 1, "position": [1]})
    with pytest.raises(ValueError, match="version"):
        SkipList.from_state({"version": 7})


def test_a_state_from_another_build_of_the_mix_is_refused(data):
    state = TrainingLoader(data, 2, seed=SEED).state_dict()
    state["index_sha256"] = "0" * 64
    with pytest.raises(ValueError, match="another build"):
        TrainingLoader(data, 2, seed=SEED).load_state_dict(state)


def test_version_1_states_still_load(data):
    v1 = {"version": 1, "seed": SEED, "epoch": 0, "position": 8, "num_samples": len(data), "block_size": 1}
    loader = TrainingLoader(data, 2, seed=0, provenance=True, prefetch_batches=0)
    loader.load_state_dict(v1)
    assert next(iter(loader))["positions"].tolist() == [8, 9]
    with pytest.raises(ValueError, match="does not count steps"):
        loader.load_state_dict(v1, skip={"steps": [10]})


def test_skip_by_url_needs_url_files(mix_root, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(mix_root, copy)
    for path in copy.rglob("*.urls"):
        path.unlink()
    data = MixedTokens(open_store(str(copy)), "test", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(Exception, match="re-materialize tokenized_shards"):
        TrainingLoader(data, 2, seed=SEED, skip={"domains": ["alpha.example"]})
    TrainingLoader(data, 2, seed=SEED, skip={"documents": [[0, 1]]})  # documents need no URLs


def test_batches_keep_their_shape(data):
    loader = TrainingLoader(data, 5, seed=SEED, skip=SKIPS["mixed"], prefetch_batches=0)
    for batch in islice(iter(loader), 20):
        assert batch["input_ids"].shape == (5, SEQ) and batch["sample_ids"].dtype == torch.int64


def test_locate_segments_reads_no_token_and_agrees_with_packing(data, monkeypatch):
    from sluice.loader import packing

    ids = np.random.default_rng(5).integers(0, len(data), 40)
    packed = packing.pack_arrays(data, ids, False, provenance=True)
    monkeypatch.setattr(type(data), "shards", lambda self: (_ for _ in ()).throw(AssertionError("a token read")))
    located = packing.locate_segments(data, ids)
    assert np.array_equal(located["provenance"], packed["provenance"])
    assert np.array_equal(located["segment_starts"], packed["segment_starts"])
    assert np.array_equal(located["segment_records"], packed["segment_records"])
