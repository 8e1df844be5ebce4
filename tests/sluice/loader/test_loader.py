"""Training loader: samples equal the mix's stream, exact and elastic resume, exactly-once delivery, packing
fields consistent with the document index, byte-limited shard cache with furthest-next-use eviction, and
clear errors for truncated or missing shards."""

from __future__ import annotations

import json
import os
from itertools import islice

import numpy as np
import pytest
import torch

from sluice.io.storage import open_store
from sluice.loader import IGNORE_INDEX, MixedTokens, ShardCache, SpanCache, TrainingLoader
from sluice.mix.index import RemoteMixIndex
from sluice.tokens.shards import ShardError, binary_folder
from tests.sluice.loader.conftest import SEQ
from tests.support.counting_store import CountingStore
from tests.support.mix_fixture import (
    build_test_mix,
    mix_shards,
    range_offsets_oracle,
    read_ranges,
    stream_oracle,
)


def take(loader: TrainingLoader, steps: int) -> list[dict]:
    return list(islice(iter(loader), steps))


def same_batches(left: list[dict], right: list[dict]) -> bool:
    if len(left) != len(right):
        return False
    for a, b in zip(left, right, strict=True):
        if a.keys() != b.keys():
            return False
        for name in a:
            if torch.is_tensor(a[name]):
                if not torch.equal(a[name], b[name]):
                    return False
            elif a[name] != b[name]:
                return False
    return True


def test_samples_are_the_concatenated_ranges(data, mix_root):
    stream = stream_oracle(open_store(mix_root))
    assert len(data) == (len(stream) - 1) // SEQ > 100
    for index in range(len(data)):
        inputs, labels = data.sample(index)
        assert np.array_equal(inputs, stream[index * SEQ : index * SEQ + SEQ])
        assert np.array_equal(labels, stream[index * SEQ + 1 : index * SEQ + SEQ + 1])


def test_exactly_once_across_four_ranks_without_overlap(data):
    world, batch = 4, 3
    steps = -(-len(data) // (world * batch)) + 2  # past the end of epoch 0
    per_rank = [take(TrainingLoader(data, batch, seed=5, rank=r, world_size=world), steps) for r in range(world)]
    seen_epoch0 = []
    for step in range(steps):
        ids = [set(zip(per_rank[r][step]["epochs"].tolist(), per_rank[r][step]["sample_ids"].tolist(), strict=True)) for r in range(world)]
        assert sum(len(s) for s in ids) == world * batch and len(set().union(*ids)) == world * batch  # no overlap
        for rank_ids in ids:
            seen_epoch0 += [sample for epoch, sample in rank_ids if epoch == 0]
    assert sorted(seen_epoch0) == list(range(len(data)))  # every sample of the epoch exactly once
    # The batch content is the sample the ids name.
    first = per_rank[2][0]
    for row, sample in enumerate(first["sample_ids"].tolist()):
        assert torch.equal(first["input_ids"][row], torch.from_numpy(data.sample(sample)[0]))


def test_epochs_are_shuffled_differently(data):
    loader = TrainingLoader(data, 4, seed=5)
    batches = take(loader, 2 * len(data) // 4)
    ids = torch.cat([b["sample_ids"] for b in batches])
    epochs = torch.cat([b["epochs"] for b in batches])
    first, second = ids[epochs == 0], ids[epochs == 1][: len(data) // 2]
    assert not torch.equal(first[: len(second)], second)


@pytest.mark.parametrize("stop_after", [1, 7, "before_edge", "straddle"])
def test_resume_yields_exactly_the_uninterrupted_batches(data, stop_after):
    batch = 4
    per_epoch = len(data) // batch
    stop = {"before_edge": per_epoch - 1, "straddle": per_epoch + 1}.get(stop_after, stop_after)
    total = per_epoch + 6
    reference = take(TrainingLoader(data, batch, seed=9, mask_document_boundaries=True), total)
    first = TrainingLoader(data, batch, seed=9, mask_document_boundaries=True)
    head = take(first, stop)
    state = first.state_dict()
    assert set(state) == {"version", "seed", "epoch", "position", "num_samples", "block_size", "step", "global_batch", "index_sha256", "skip"}
    assert all(isinstance(state[key], int) for key in ("version", "seed", "epoch", "position", "num_samples", "block_size", "step", "global_batch"))
    assert state["step"] == stop and state["global_batch"] == batch and state["skip"]["positions"] == []
    resumed = TrainingLoader(data, batch, seed=0, mask_document_boundaries=True)  # the seed comes from the state
    resumed.load_state_dict(json.loads(json.dumps(state)))
    tail = take(resumed, total - stop)
    assert same_batches(head + tail, reference)


def test_resume_exactly_at_an_epoch_edge(data):
    # One sample per step: after N steps the state is exactly (epoch 1, position 0).
    n = len(data)
    reference = take(TrainingLoader(data, 1, seed=3), n + 5)
    first = TrainingLoader(data, 1, seed=3)
    head = take(first, n)
    assert first.state_dict()["epoch"] == 1 and first.state_dict()["position"] == 0
    resumed = TrainingLoader(data, 1, seed=3)
    resumed.load_state_dict(first.state_dict())
    assert same_batches(head + take(resumed, 5), reference)
    # Iterating the same loader again also continues where it stopped.
    assert same_batches(take(first, 5), reference[n:])


def global_stream(per_rank: list[list[dict]]) -> list[tuple[int, int]]:
    """(epoch, sample) in global order: step-major, rank-minor."""
    out = []
    for step in range(len(per_rank[0])):
        for rank_batches in per_rank:
            out += list(zip(rank_batches[step]["epochs"].tolist(), rank_batches[step]["sample_ids"].tolist(), strict=True))
    return out


def test_elastic_resume_from_four_ranks_to_three_continues_the_global_order(data):
    batch = 5
    four = [TrainingLoader(data, batch, seed=1, rank=r, world_size=4) for r in range(4)]
    before = [take(loader, 3) for loader in four]
    states = [loader.state_dict() for loader in four]
    assert all(state == states[0] for state in states)  # every rank saves the same few integers
    three = [TrainingLoader(data, batch, seed=1, rank=r, world_size=3) for r in range(3)]
    for loader in three:
        loader.load_state_dict(states[0])
    steps_after = -(-len(data) // (3 * batch))
    after = [take(loader, steps_after) for loader in three]
    combined = global_stream(before) + global_stream(after)
    single = take(TrainingLoader(data, 1, seed=1), len(combined))
    assert combined == [(b["epochs"].item(), b["sample_ids"].item()) for b in single]
    epoch0 = [sample for epoch, sample in combined if epoch == 0]
    assert sorted(epoch0) == list(range(len(data)))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_elastic_resume_from_two_workers_to_five(data):
    reference = take(TrainingLoader(data, 4, seed=2, rank=1, world_size=2), 23)
    two = TrainingLoader(data, 4, seed=2, rank=1, world_size=2, num_workers=2)
    head = take(two, 9)  # prefetched batches beyond these must not count as consumed
    five = TrainingLoader(data, 4, seed=2, rank=1, world_size=2, num_workers=5)
    five.load_state_dict(two.state_dict())
    tail = take(five, 14)
    assert same_batches(head + tail, reference)


def test_packing_fields_match_the_document_index(mix_root, data):
    offsets = range_offsets_oracle(open_store(mix_root))
    stream = stream_oracle(open_store(mix_root))
    batch = 6
    for masked in (False, True):
        loader = TrainingLoader(data, batch, seed=4, mask_document_boundaries=masked)
        for packed in take(loader, 10):
            cu = packed["cu_seqlens"]
            assert cu.dtype == torch.int32 and cu[0] == 0 and cu[-1] == batch * SEQ
            bounds = []
            for row, sample in enumerate(packed["sample_ids"].tolist()):
                begin = sample * SEQ
                doc_starts = offsets[(offsets > begin) & (offsets <= begin + SEQ)] - begin
                # position ids: distance to the latest document start (or the sample start)
                absolute = np.arange(begin, begin + SEQ)
                doc_begin = offsets[np.searchsorted(offsets, absolute, side="right") - 1]
                expected_positions = absolute - np.maximum(doc_begin, begin)
                assert np.array_equal(packed["position_ids"][row].numpy(), expected_positions)
                bounds += [row * SEQ] + [row * SEQ + int(s) for s in doc_starts if s < SEQ]
                labels = stream[begin + 1 : begin + SEQ + 1].copy()
                if masked:
                    labels[doc_starts - 1] = IGNORE_INDEX  # label j crosses into the document starting at j + 1
                assert np.array_equal(packed["labels"][row].numpy(), labels)
                assert np.array_equal(packed["input_ids"][row].numpy(), stream[begin : begin + SEQ])
            assert cu.tolist() == sorted(set(bounds)) + [batch * SEQ]
            assert packed["max_seqlen"] == int(torch.diff(cu).max())
        if masked:
            assert any((b["labels"] == IGNORE_INDEX).any() for b in take(TrainingLoader(data, batch, seed=4, mask_document_boundaries=True), 3))


def test_position_ids_of_sequences_longer_than_16_bits(tmp_path):
    """Position ids are computed in 16 bits up to 65,536 tokens a sequence; longer ones take the wide path
    (documents here are longer than 65,536 tokens, so 16-bit positions would wrap)."""
    long_sequence = 70_000
    store = open_store(str(tmp_path / "store"))
    build_test_mix(store, sequence_length=long_sequence, token_budget=600_000, docs_per_shard=2, doc_lengths=(150_000, 200_000))
    offsets, stream = range_offsets_oracle(store), stream_oracle(store)
    data = MixedTokens(store, "test", cache_dir=str(tmp_path / "cache"))
    highest = 0
    for packed in take(TrainingLoader(data, 1, seed=4), 6):
        begin = int(packed["sample_ids"][0]) * long_sequence
        absolute = np.arange(begin, begin + long_sequence)
        doc_begin = np.maximum(offsets[np.searchsorted(offsets, absolute, side="right") - 1], begin)
        assert packed["position_ids"].dtype == torch.int64
        assert np.array_equal(packed["position_ids"][0].numpy(), absolute - doc_begin)
        assert np.array_equal(packed["input_ids"][0].numpy(), stream[begin : begin + long_sequence])
        highest = max(highest, int(packed["position_ids"].max()))
    assert highest >= 1 << 16


def test_block_locality_keeps_runs_of_consecutive_samples(data):
    loader = TrainingLoader(data, 8, seed=4, block_size=8)
    runs = [b["sample_ids"] for b in take(loader, 5)]
    assert sum(bool(torch.all(torch.diff(ids) == 1)) for ids in runs) >= 4
    state = loader.state_dict()
    assert state["block_size"] == 8


def test_load_state_dict_rejects_a_state_of_another_mix(data):
    loader = TrainingLoader(data, 2, seed=1)
    state = loader.state_dict() | {"num_samples": len(data) + 1}
    with pytest.raises(ValueError, match="resume on the same mix"):
        loader.load_state_dict(state)


def test_truncated_shard_raises_an_error_naming_it(tmp_path):
    root = str(tmp_path / "store")
    manifest = build_test_mix(open_store(root), sequence_length=SEQ)
    victim = mix_shards(open_store(root), manifest)[1]
    path = os.path.join(root, binary_folder(victim, victim["prefix"]), victim["name"] + ".bin")
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - 10)
    data = MixedTokens(open_store(root), "test", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ShardError, match=rf"{victim['name']}\.bin.*truncated or corrupt"):
        for _ in islice(iter(TrainingLoader(data, 4, seed=0)), len(data)):
            pass


def test_missing_shard_raises_an_error_naming_it(tmp_path):
    root = str(tmp_path / "store")
    manifest = build_test_mix(open_store(root), sequence_length=SEQ)
    victim = mix_shards(open_store(root), manifest)[0]
    os.remove(os.path.join(root, binary_folder(victim, victim["prefix"]), victim["name"] + ".idx"))
    data = MixedTokens(open_store(root), "test", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ShardError, match=rf"{victim['name']}\.idx.*missing"):
        take(TrainingLoader(data, 4, seed=0, num_workers=1), len(data))


def test_split_selection_reads_the_named_index(tmp_path):
    root = str(tmp_path / "store")
    store = open_store(root)
    build_test_mix(store, sequence_length=SEQ, validation_share=0.2)
    with pytest.raises(KeyError, match=r"no split 'holdout'.*\['train', 'validation'\]"):
        MixedTokens(store, "test", split="holdout")
    validation = MixedTokens(store, "test", split="validation", cache_dir=str(tmp_path / "cache"))
    _, _, validation_lengths = read_ranges(store, "test", "validation")
    assert validation.total_tokens == int(validation_lengths.sum()) > 200
    assert np.array_equal(validation.tokens(0, 200), stream_oracle(store, split="validation")[:200])
    _, _, train_lengths = read_ranges(store, "test", "train")
    assert MixedTokens(store, "test").total_tokens == int(train_lengths.sum())
    with pytest.raises(KeyError, match=r"no split 'test'.*\['train', 'validation'\]"):
        MixedTokens(store, "test", split="test")


def shard_total_bytes(data: MixedTokens) -> list[int]:
    return [os.path.getsize(data.store.local_path(ref.bin_key)) + os.path.getsize(data.store.local_path(ref.idx_key)) for ref in data.refs]


def test_cache_evicts_the_shard_needed_furthest_in_the_future(data, tmp_path):
    sizes = shard_total_bytes(data)
    limit = sorted(sizes)[-1] + sorted(sizes)[-2]  # room for any two shards, never three
    cache = ShardCache(data.store, data.refs, data.dtype, str(tmp_path / "c"), limit, prefetch_threads=1)
    try:
        cache.plan([0, 1, 0, 2, 0, 1])  # prefetches 0 and 1; 2 must wait: both are needed before it
        cache.get(0), cache.get(1)
        assert list(cache.stats.evicted) == []
        cache.plan([0, 2, 0, 1])  # 1 is needed after 2, 0 before: evict 1
        assert np.array_equal(cache.get(0)[:5], np.fromfile(data.store.local_path(data.refs[0].bin_key), "<u2")[:5])
        cache.get(2)
        assert list(cache.stats.evicted) == [1]
        cache.plan([0, 1])  # 2 is never needed again: evict it for 1
        cache.get(0), cache.get(1)
        assert list(cache.stats.evicted) == [1, 2]
        assert cache.stats.peak_bytes <= limit and cache.used_bytes <= limit
        assert sorted(os.listdir(tmp_path / "c")) == sorted(
            name.replace("/", "__") for ref in (data.refs[0], data.refs[1]) for name in (ref.bin_key, ref.idx_key)
        )
    finally:
        cache.close()


def test_loader_through_a_cache_smaller_than_the_dataset_matches_memory_maps(mix_root, tmp_path):
    store = open_store(mix_root)
    mapped = MixedTokens(store, "test", cache_dir=str(tmp_path / "a"))
    sizes = shard_total_bytes(mapped)
    limit = int(sum(sizes) * 0.45)
    cached = MixedTokens(store, "test", cache_dir=str(tmp_path / "b"), cache_bytes=limit, cache_shards=True, remote_reads="shards")
    steps = len(mapped) // 4
    expected = take(TrainingLoader(mapped, 4, seed=8), steps)
    got = take(TrainingLoader(cached, 4, seed=8), steps)
    assert same_batches(got, expected)
    stats = cached.shards().stats
    assert stats.evictions > 0 and stats.peak_bytes <= limit
    assert stats.bytes_fetched > sum(sizes)  # evicted shards came back when needed again
    assert stats.prefetched > 0


def test_span_reads_fetch_only_the_tokens_served_through_a_cache_much_smaller_than_the_dataset(mix_root, tmp_path):
    store = open_store(mix_root)
    mapped = MixedTokens(store, "test", cache_dir=str(tmp_path / "a"))
    dataset_bytes = sum(shard_total_bytes(mapped))
    counting = CountingStore(store)
    limit = dataset_bytes // 50  # 2% of the shards
    spans = MixedTokens(counting, "test", cache_dir=str(tmp_path / "b"), cache_bytes=limit, cache_shards=True)
    steps = len(mapped) // 4  # one epoch
    expected = take(TrainingLoader(mapped, 4, seed=8), steps)
    got = take(TrainingLoader(spans, 4, seed=8), steps)
    assert same_batches(got, expected)
    served = steps * 4 * SEQ * 2  # input tokens handed out, uint16
    fetched = counting.token_bytes_fetched()
    assert not [key for key, _ in counting.whole if key.endswith(".bin")]  # no shard fetched whole
    # Each sample's window is L + 1 tokens; the loader also plans (and may fetch) a lookahead past the last step.
    assert served <= fetched <= 2 * served, fetched / served
    stats = spans.shards().stats
    assert stats.bytes_fetched == fetched and stats.peak_bytes <= limit and stats.prefetched > 0
    # The loader packs whole groups of batches: it reads windows (L + 1 tokens) a little past the last step.
    assert stats.tokens_read % (SEQ + 1) == 0 and stats.tokens_read >= steps * 4 * (SEQ + 1)
    # Every GET lies inside its shard's token file.
    sizes = {ref.bin_key: os.path.getsize(store.local_path(ref.bin_key)) for ref in mapped.refs}
    assert all(key in sizes and start >= 0 and start + size <= sizes[key] for key, start, size in counting.ranged)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_span_reads_through_dataloader_workers_match(mix_root, tmp_path):
    """Each worker opens its own span reads and in-place index (everything read as from S3)."""
    store = open_store(mix_root)
    mapped = MixedTokens(store, "test", cache_dir=str(tmp_path / "a"))
    spans = MixedTokens(CountingStore(store, local=False), "test", cache_dir=str(tmp_path / "b"), cache_bytes=1 << 20)
    assert isinstance(spans.index(), RemoteMixIndex)
    steps = len(mapped) // 8
    expected = take(TrainingLoader(mapped, 4, seed=2, rank=1, world_size=2), steps)
    got = take(TrainingLoader(spans, 4, seed=2, rank=1, world_size=2, num_workers=2), steps)
    assert same_batches(got, expected)


def test_span_read_of_a_truncated_shard_names_it(tmp_path):
    root = str(tmp_path / "store")
    manifest = build_test_mix(open_store(root), sequence_length=SEQ)
    victim = mix_shards(open_store(root), manifest)[1]
    path = os.path.join(root, binary_folder(victim, victim["prefix"]), victim["name"] + ".bin")
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)
    data = MixedTokens(open_store(root), "test", cache_dir=str(tmp_path / "cache"), cache_shards=True)
    with pytest.raises(ShardError, match=rf"{victim['name']}\.bin: the mix reads tokens .* truncated"):
        take(TrainingLoader(data, 4, seed=0), len(data))


def test_stall_metric_counts_every_step(data):
    loader = TrainingLoader(data, 4, seed=1)
    take(loader, 12)
    assert loader.stats.steps == 12
    assert loader.stats.wait_seconds >= 0 and loader.stats.last_wait_seconds >= 0
    assert loader.stats.mean_wait_seconds == pytest.approx(loader.stats.wait_seconds / 12)


@pytest.fixture(scope="module")
def s3_mix(mix_root):
    """The test mix uploaded to a bucket on a real SeaweedFS server."""
    from benchmarks.s3_server import shared_server

    with shared_server() as server:
        bucket = server.create_bucket("sluice-loader")
        client = server.client()
        for folder, _, files in os.walk(mix_root):
            for name in files:
                path = os.path.join(folder, name)
                client.upload_file(path, bucket, "data/" + os.path.relpath(path, mix_root))
        yield server, bucket


def test_s3_shards_stream_through_a_byte_limited_cache(s3_mix, mix_root, tmp_path, monkeypatch):
    import sluice.io.storage
    from benchmarks.s3_server import use_credentials
    from sluice.config import S3Settings

    server, bucket = s3_mix
    use_credentials(monkeypatch, server.access_key, server.secret_key)
    try:
        local = MixedTokens(open_store(mix_root), "test", cache_dir=str(tmp_path / "local"))
        limit = int(sum(shard_total_bytes(local)) * 0.45)
        remote = MixedTokens(
            open_store(f"s3://{bucket}/data", S3Settings(endpoint_url=server.endpoint_url)), "test", cache_dir=str(tmp_path / "s3"), cache_bytes=limit,
            remote_reads="shards",
        )
        assert remote.remote
        steps = len(local) // 8
        expected = take(TrainingLoader(local, 8, seed=6, mask_document_boundaries=True), steps)
        got = take(TrainingLoader(remote, 8, seed=6, mask_document_boundaries=True), steps)
        assert same_batches(got, expected)
        stats = remote.shards().stats
        assert stats.evictions > 0 and stats.peak_bytes <= limit and stats.prefetched > 0
        on_disk = sum(entry.stat().st_size for entry in os.scandir(remote.shards().cache_dir))
        assert on_disk <= limit
    finally:
        sluice.io.storage._CLIENTS.clear()


def test_s3_span_reads_stay_proportional_to_the_tokens_served(s3_mix, mix_root, tmp_path, monkeypatch):
    """Against a real S3 server: ranged GETs of just the samples' spans, a cache of 1% of the shards, the
    same batches as the local mix, and S3 bytes (counted around the store) at most twice the tokens served."""
    import sluice.io.storage
    from benchmarks.s3_server import use_credentials
    from sluice.config import S3Settings

    server, bucket = s3_mix
    use_credentials(monkeypatch, server.access_key, server.secret_key)
    try:
        local = MixedTokens(open_store(mix_root), "test", cache_dir=str(tmp_path / "local"))
        limit = sum(shard_total_bytes(local)) // 100
        store = CountingStore(open_store(f"s3://{bucket}/data", S3Settings(endpoint_url=server.endpoint_url)))
        remote = MixedTokens(store, "test", cache_dir=str(tmp_path / "s3"), cache_bytes=limit)
        assert remote.remote and remote.remote_reads == "spans"
        steps = len(local) // 8
        expected = take(TrainingLoader(local, 8, seed=6, mask_document_boundaries=True), steps)
        got = take(TrainingLoader(remote, 8, seed=6, mask_document_boundaries=True), steps)
        assert same_batches(got, expected)
        served = steps * 8 * SEQ * 2
        assert served <= store.token_bytes_fetched() <= 2 * served
        # The index is read in place too (per sample: 16 bytes of sample table, 32 per record), never downloaded.
        assert not [key for key, _ in store.whole if key.endswith(".idx")]
        index_bytes = sum(size for key, _, size in store.ranged if key == remote.index_key)
        print(f"S3 bytes per token byte served: tokens {store.token_bytes_fetched() / served:.3f}, index {index_bytes / served:.3f}")
        assert 0 < index_bytes <= served
        assert remote.shards().stats.peak_bytes <= limit
        # The same batches, byte for byte, from whole shards on the same server, and from spans read by botocore.
        settings = S3Settings(endpoint_url=server.endpoint_url)
        whole = MixedTokens(open_store(f"s3://{bucket}/data", settings), "test", cache_dir=str(tmp_path / "s3w"), cache_bytes=1 << 30, remote_reads="shards")
        assert same_batches(take(TrainingLoader(whole, 8, seed=6, mask_document_boundaries=True), steps), got)
        botocore = MixedTokens(open_store(f"s3://{bucket}/data", settings.model_copy(update={"ranged_reads": "botocore"})), "test",
                               cache_dir=str(tmp_path / "s3b"), cache_bytes=limit)
        assert same_batches(take(TrainingLoader(botocore, 8, seed=6, mask_document_boundaries=True), steps), got)
    finally:
        sluice.io.storage._CLIENTS.clear()


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_s3_span_reads_through_forked_dataloader_workers_match(s3_mix, mix_root, tmp_path, monkeypatch):
    """DataLoader workers forked after the parent has read through S3 open their own connections (a pooled
    socket shared across a fork would mix up responses): the same batches as the local mix."""
    import sluice.io.storage
    from benchmarks.s3_server import use_credentials
    from sluice.config import S3Settings

    server, bucket = s3_mix
    use_credentials(monkeypatch, server.access_key, server.secret_key)
    try:
        local = MixedTokens(open_store(mix_root), "test", cache_dir=str(tmp_path / "local"))
        remote = MixedTokens(open_store(f"s3://{bucket}/data", S3Settings(endpoint_url=server.endpoint_url)), "test", cache_dir=str(tmp_path / "s3"))
        remote.tokens(0, 10)  # the parent's pools hold live connections when the workers fork
        steps = len(local) // 8
        expected = take(TrainingLoader(local, 4, seed=2, rank=1, world_size=2), steps)
        assert same_batches(take(TrainingLoader(remote, 4, seed=2, rank=1, world_size=2, num_workers=2), steps), expected)
        assert remote.tokens(0, 10).tolist() == local.tokens(0, 10).tolist()
    finally:
        sluice.io.storage._CLIENTS.clear()


def test_s3_shard_corrupt_in_the_bucket_is_named(s3_mix, tmp_path, monkeypatch):
    import sluice.io.storage
    from benchmarks.s3_server import use_credentials
    from sluice.config import S3Settings

    server, bucket = s3_mix
    use_credentials(monkeypatch, server.access_key, server.secret_key)
    try:
        store = open_store(f"s3://{bucket}/data", S3Settings(endpoint_url=server.endpoint_url))
        data = MixedTokens(store, "test", cache_dir=str(tmp_path / "s3"), cache_bytes=1 << 30, remote_reads="shards")
        victim = data.refs[2]
        original = store.read_bytes(victim.bin_key)
        body = bytearray(original)
        body[10] ^= 0xFF  # same size, different content: only the checksum can tell
        store.write_bytes(victim.bin_key, bytes(body))
        try:
            with pytest.raises(ShardError, match=rf"{victim.name}\.bin: SHA-256 does not match"):
                take(TrainingLoader(data, 4, seed=0), len(data))
        finally:
            store.write_bytes(victim.bin_key, original)
    finally:
        sluice.io.storage._CLIENTS.clear()


def test_batches_are_placed_on_the_requested_device(data):
    # No GPU here: the "meta" device exercises the device placement path (CUDA adds pinning and a copy stream).
    batch = next(iter(TrainingLoader(data, 4, seed=1, device="meta")))
    assert {name for name, value in batch.items() if torch.is_tensor(value) and value.device.type == "meta"} == {
        "input_ids", "labels", "position_ids", "cu_seqlens", "sample_ids", "epochs"
    }
    assert isinstance(batch["max_seqlen"], int)  # a host int: varlen kernels take it without a device sync


CRASHING_TRAINER = """
import os, sys, time
from sluice.loader import MixedTokens, TrainingLoader
from sluice.io.storage import open_store
data = MixedTokens(open_store(sys.argv[1]), "test", cache_dir=sys.argv[2])
batches = iter(TrainingLoader(data, 4, seed=2, num_workers=2, num_epochs=None))
for _ in range(20):
    next(batches)
print("running", flush=True)
time.sleep(600)  # killed here, with its workers holding shared-memory batches
"""


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(child) for child in listing.read().split()]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def shared_memory_maps(pid: int) -> list[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return [line.split(None, 5)[-1].strip() for line in maps if "/dev/shm/" in line]


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.path.isdir("/proc"), reason="Linux shared memory only")
def test_a_killed_trainer_leaves_no_shared_memory_behind(mix_root, tmp_path):
    """DataLoader workers hand batches over in shared memory; torch's file-descriptor strategy unlinks each
    segment as soon as it is created, so a SIGKILLed trainer (no cleanup code runs) leaves nothing in /dev/shm
    and its workers exit (they watch their parent)."""
    import signal
    import subprocess
    import sys
    import time

    trainer = subprocess.Popen(
        [sys.executable, "-c", CRASHING_TRAINER, mix_root, str(tmp_path / "cache")],
        stdout=subprocess.PIPE, text=True, cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert trainer.stdout.readline().strip() == "running"
        workers = children(trainer.pid)
        assert len(workers) >= 2
        # The mechanism is in use: the trainer maps batches received from its workers as shared memory...
        segments = shared_memory_maps(trainer.pid)
        assert segments, "the trainer maps no shared memory; the test would prove nothing"
        # ...and each of those segments is already unlinked while in use.
        assert all(segment.endswith("(deleted)") for segment in segments), segments
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(alive(worker) for worker in workers):
            assert time.monotonic() < deadline, "DataLoader workers outlived their killed trainer"
            time.sleep(0.2)
    finally:
        if trainer.poll() is None:
            trainer.kill()
    pids = {trainer.pid, *workers}
    left = [name for name in os.listdir("/dev/shm") if name.startswith("torch_") and int(name.split("_")[1]) in pids]
    assert left == []


def test_closing_the_loader_early_stops_its_background_thread(data):
    """Taking some batches and dropping the iterator (as a script that exits after one batch does) stops
    and joins the producer thread, also when its queue is full: no thread is left inside numpy/torch at
    interpreter exit (which can abort the process)."""
    import threading
    import time

    for prefetch in (1, 4):
        batches = iter(TrainingLoader(data, 4, seed=2, prefetch_batches=prefetch, num_epochs=None))
        next(batches)
        time.sleep(0.2)  # the producer fills the queue and blocks on it
        assert any(t.name == "sluice-loader" and t.is_alive() for t in threading.enumerate())
        batches.close()
        assert not any(t.name == "sluice-loader" and t.is_alive() for t in threading.enumerate())


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_worker_refuses_a_mix_rebuilt_under_it(tmp_path):
    """A DataLoader worker re-reads the manifest (nothing of the index's size is pickled to it); if the mix was
    rebuilt meanwhile it says so instead of reading a different index."""
    import pickle

    root = str(tmp_path / "store")
    build_test_mix(open_store(root), sequence_length=SEQ)
    data = MixedTokens(open_store(root), "test", cache_dir=str(tmp_path / "cache"))
    sent = pickle.dumps(data)
    assert len(sent) < 4096
    build_test_mix(open_store(root), sequence_length=SEQ, seed=12)  # another mix under the same name
    with pytest.raises(ShardError, match="was rebuilt while this loader was running"):
        pickle.loads(sent).manifest  # noqa: B018


def test_a_rank_reads_only_the_shard_table_rows_of_the_shards_its_samples_touch(tmp_path, monkeypatch):
    """The shard table (one row group per shard here) is read by row group: reading a few samples decodes the
    rows of the shards those samples' tokens come from (the .bin keys the store served) and no others."""
    import sluice.mix.shard_table

    monkeypatch.setattr(sluice.mix.shard_table, "ROW_GROUP", 1)
    root = str(tmp_path / "store")
    manifest = build_test_mix(open_store(root), sequence_length=SEQ, shards=6)
    rows = mix_shards(open_store(root), manifest)
    assert manifest["shard_table"]["row_group"] == 1 and len(rows) == 12 and "shards" not in manifest
    decoded: list[int] = []
    real_rows = sluice.mix.shard_table._rows

    def counting_rows(table):
        decoded.extend(table.column("id").to_pylist())
        return real_rows(table)

    monkeypatch.setattr(sluice.mix.shard_table, "_rows", counting_rows)
    store = CountingStore(open_store(root), local=False)  # everything through ranged reads and downloads, as on S3
    data = MixedTokens(store, "test", cache_dir=str(tmp_path / "cache"))
    assert data.remote and isinstance(data.shards(), SpanCache)
    samples = [0, len(data) // 2]
    for sample in samples:
        inputs, _ = data.sample(sample)
        assert np.array_equal(inputs, stream_oracle(open_store(root))[sample * SEQ : sample * SEQ + SEQ])
    by_key = {f"{binary_folder(row, row['prefix'])}/{row['name']}.bin": row["id"] for row in rows}
    touched = {by_key[key] for key, _, _ in store.ranged if key.endswith(".bin")}
    assert touched and sorted(set(decoded)) == sorted(touched) and len(decoded) == len(touched) < len(rows)
    assert data.shard_info(min(touched)) == {key: value for key, value in rows[min(touched)].items() if value is not None}
