"""Tokenization into shards: text -> shards -> text, EOS after every document, shard size bound, doc table."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sluice.tokens.shards import ShardView
from sluice.tokens.tokenize import TokenizeTask, load_tokenizer, tokenize_part, train_bpe

TEXTS = [
    "The quick brown fox jumps over the lazy dog.\nSecond line, with punctuation; and digits 12345.",
    "Die Katze schläft auf dem Sofa. Überall ist es ruhig.",
    "配置 APT 之后，系统会自动升级。",
    "Код на русском: apt-get install -y nginx\n\tотступ и пробелы  двойные",
    "emoji 🙂 and combining marks: e\u0301 and a zero-width joiner \u200d here",
] * 8


def deduped_part(folder, texts):
    os.makedirs(folder, exist_ok=True)
    table = pa.table(
        {
            "doc_id": [f"doc-{i}" for i in range(len(texts))],
            "text": texts,
            "language": ["en", "de", "zh", "ru", "en"] * (len(texts) // 5),
        }
    )
    pq.write_table(table, os.path.join(folder, "part-00000.parquet"))


def run(tmp_path, max_shard_tokens=1 << 28):
    deduped_part(tmp_path / "deduped", TEXTS)
    tokenizer = train_bpe(iter(TEXTS), 400, "<|endoftext|>")
    task = TokenizeTask(str(tmp_path / "deduped"), "part-00000.parquet", str(tmp_path / "out"), 0, tokenizer.to_str(), "<|endoftext|>", max_shard_tokens=max_shard_tokens)
    return tokenize_part(task), load_tokenizer(tokenizer.to_str())


def test_text_round_trips_through_shards_with_eos_after_every_document(tmp_path):
    result, tokenizer = run(tmp_path)
    (shard,) = result["shards"]
    view = ShardView.open(str(tmp_path / "out" / f"{shard['name']}.bin"), str(tmp_path / "out" / f"{shard['name']}.idx"), result["dtype"])
    assert len(view) == len(TEXTS)
    for index, text in enumerate(TEXTS):
        ids = view.doc(index)
        assert int(ids[-1]) == result["eos_id"]
        assert tokenizer.decode(ids[:-1].tolist(), skip_special_tokens=False) == text
    docs = pq.read_table(tmp_path / "out" / f"{shard['name']}.docs.parquet")
    assert docs.column("doc_id").to_pylist() == [f"doc-{i}" for i in range(len(TEXTS))]
    assert docs.column("language").cast(pa.string()).to_pylist()[:5] == ["en", "de", "zh", "ru", "en"]
    assert docs.column("doc_hash").type == pa.uint64()


def test_shards_are_closed_at_the_configured_token_bound(tmp_path):
    whole, _ = run(tmp_path / "a")
    bound = 1024
    split, _ = run(tmp_path / "b", max_shard_tokens=bound)
    assert len(split["shards"]) > 1
    assert all(shard["tokens"] <= bound for shard in split["shards"])
    # Same tokens in the same order, whatever the bound.
    def stream(result, folder):
        return np.concatenate([np.fromfile(folder / "out" / f"{s['name']}.bin", dtype=result["dtype"]) for s in result["shards"]])

    assert np.array_equal(stream(whole, tmp_path / "a"), stream(split, tmp_path / "b"))


def test_the_task_reports_its_own_checks_from_what_it_wrote(tmp_path):
    """The checks the asset reports come from the task: every published file verified, the largest id, a
    decoded sample, and a length histogram instead of per-document lengths."""
    deduped_part(tmp_path / "deduped", TEXTS)
    tokenizer = train_bpe(iter(TEXTS), 400, "<|endoftext|>")
    task = TokenizeTask(str(tmp_path / "deduped"), "part-00000.parquet", str(tmp_path / "out"), 0, tokenizer.to_str(), "<|endoftext|>",
                        max_shard_tokens=1024, sample_documents=10)
    result = tokenize_part(task)
    assert "lengths" not in result
    assert result["publish_problems"] == [] and result["round_trip_mismatched"] == []
    assert result["round_trip_checked"] >= 10
    written = np.concatenate([np.fromfile(tmp_path / "out" / f"{s['name']}.bin", dtype=result["dtype"]) for s in result["shards"]])
    assert result["max_token_id"] == int(written.max())
    sizes = np.concatenate([np.diff(np.fromfile(tmp_path / "out" / f"{s['name']}.idx", "<u8")) for s in result["shards"]])
    from sluice.tokens.tokenize import LENGTH_BINS

    assert result["length_histogram"] == np.histogram(sizes, bins=LENGTH_BINS)[0].tolist()


def test_a_bad_round_trip_or_publish_is_reported_by_the_task(tmp_path, monkeypatch):
    import sluice.tokens.tokenize
    from sluice.io.layout import sha256_file
    from sluice.io.storage import open_store
    from sluice.tokens.tokenize import verify_published

    deduped_part(tmp_path / "deduped", TEXTS)
    tokenizer = train_bpe(iter(TEXTS), 400, "<|endoftext|>")
    encoder = sluice.tokens.tokenize.cached_encoder(tokenizer.to_str())
    real = encoder.tokenizer

    class Garbling:  # decodes one text wrongly, as a broken tokenizer or shard write would
        def __getattr__(self, name):
            return getattr(real, name)

        def decode(self, ids, **kwargs):
            return real.decode(ids, **kwargs).replace("fox", "cat")

    monkeypatch.setattr(encoder, "tokenizer", Garbling())
    task = TokenizeTask(str(tmp_path / "deduped"), "part-00000.parquet", str(tmp_path / "out"), 0, tokenizer.to_str(), "<|endoftext|>", sample_documents=40)
    result = tokenize_part(task)
    assert result["round_trip_mismatched"] and all(int(doc.split("-")[1]) % 5 == 0 for doc in result["round_trip_mismatched"])
    # A published file that differs from what was written is named.
    store = open_store(str(tmp_path / "out"))
    (tmp_path / "local.bin").write_bytes(b"abc")
    entry = {"bytes": 3, "sha256": sha256_file(str(tmp_path / "local.bin"))}
    (tmp_path / "out" / "x.bin").write_bytes(b"abd")
    assert "does not match" in verify_published(store, "x.bin", str(tmp_path / "local.bin"), entry)
    (tmp_path / "out" / "x.bin").write_bytes(b"abc")
    assert verify_published(store, "x.bin", str(tmp_path / "local.bin"), entry) is None


def _pid(_: object) -> int:
    return os.getpid()


def test_training_from_the_store_in_a_worker_equals_training_in_process(tmp_path):
    from sluice.runtime.compute import LocalPoolExecutor
    from sluice.tokens.tokenize import TrainingTask, train_from_store

    store = two_partition_store(tmp_path)
    executor = LocalPoolExecutor(1)
    assert executor.isolated(_pid, None) != os.getpid()  # a worker process, even with one worker
    json_text, used = executor.isolated(train_from_store, TrainingTask(store.spec, ("web",), 30, 400, "<|endoftext|>"))
    assert used == ["web/2026-01", "web/2026-02"]
    assert json_text == train_bpe(iter(TEXTS[:30]), 400, "<|endoftext|>").to_str()  # the first 30 texts in partition order


def two_partition_store(tmp_path):
    from sluice.io.layout import PartitionRef, partition_prefix, write_manifest
    from sluice.io.storage import open_store

    store = open_store(str(tmp_path / "store"))
    for snapshot, texts in (("2026-01", TEXTS[:20]), ("2026-02", TEXTS[20:])):
        prefix = partition_prefix("deduped_documents", PartitionRef("web", snapshot))
        deduped_part(tmp_path / "store" / prefix, texts)
        write_manifest(store, prefix, {"files": [{"key": "part-00000.parquet"}]})
    return store


def test_training_reads_at_most_max_training_bytes_and_cuts_the_last_text_at_a_character(tmp_path):
    """The byte bound: whole texts while they fit, then the crossing text's first bytes (a multi-byte
    character that does not fit is left out), nothing after; a partition past the bound is not read."""
    from sluice.tokens.tokenize import TrainingTask, train_from_store

    store = two_partition_store(tmp_path)
    sizes = [len(text.encode()) for text in TEXTS]
    crossing = 22  # the Chinese text of the second partition: 3-byte characters
    assert "配置" in TEXTS[crossing]
    bound = sum(sizes[:crossing]) + 4  # one whole character (3 bytes) and a third of the next
    expected = [*TEXTS[:crossing], TEXTS[crossing][:1]]
    json_text, used = train_from_store(TrainingTask(store.spec, ("web",), 1000, 400, "<|endoftext|>", max_bytes=bound))
    assert used == ["web/2026-01", "web/2026-02"]
    assert json_text == train_bpe(iter(expected), 400, "<|endoftext|>").to_str()
    assert json_text != train_bpe(iter(TEXTS[: crossing + 1]), 400, "<|endoftext|>").to_str()  # the cut matters

    json_text, used = train_from_store(TrainingTask(store.spec, ("web",), 1000, 400, "<|endoftext|>", max_bytes=sum(sizes[:20])))
    assert used == ["web/2026-01"]  # the bound is reached at the end of the first partition
    assert json_text == train_bpe(iter(TEXTS[:20]), 400, "<|endoftext|>").to_str()


def test_binary_files_go_to_their_side_folder_and_the_manifest_names_it(tmp_path):
    """With `binary_url`, the .bin / .idx / .urls files are written there and the partition folder holds only
    the .docs.parquet files (one Parquet dataset); the manifest publishes the side files under their prefix."""
    from sluice.tokens.shards import binary_folder
    from sluice.tokens.tokenize import shard_manifest

    deduped_part(tmp_path / "deduped", TEXTS)
    tokenizer = train_bpe(iter(TEXTS), 400, "<|endoftext|>")
    task = TokenizeTask(str(tmp_path / "deduped"), "part-00000.parquet", str(tmp_path / "out"), 0, tokenizer.to_str(), "<|endoftext|>",
                        max_shard_tokens=1024, binary_url=str(tmp_path / "binary"))
    result = tokenize_part(task)
    names = [shard["name"] for shard in result["shards"]]
    assert len(names) > 1
    assert sorted(os.listdir(tmp_path / "out")) == sorted(f"{name}.docs.parquet" for name in names)
    assert sorted(os.listdir(tmp_path / "binary")) == sorted(f"{name}{suffix}" for name in names for suffix in (".bin", ".idx", ".urls"))
    manifest = shard_manifest([result], "sha", result["vocab_size"], result["eos_id"], "tokenized_binary/source=web/snapshot=1")
    assert [entry["key"] for entry in manifest["files"]] == [f"{name}.docs.parquet" for name in names]
    assert {entry["prefix"] for entry in manifest["side_files"]} == {"tokenized_binary/source=web/snapshot=1"}
    assert binary_folder(manifest, "tokenized_shards/source=web/snapshot=1") == "tokenized_binary/source=web/snapshot=1"
    assert binary_folder({}, "tokenized_shards/source=web/snapshot=1") == "tokenized_shards/source=web/snapshot=1"
    total = sum(len(ShardView.open(str(tmp_path / "binary" / f"{n}.bin"), str(tmp_path / "binary" / f"{n}.idx"), result["dtype"])) for n in names)
    assert total == len(TEXTS)
