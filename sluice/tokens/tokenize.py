r"""Tokenizer training and tokenization of deduplicated documents into shards (`sluice.tokens.shards`).

The tokenizer is a HF `tokenizers` byte-level BPE trained on chosen sources, or any `tokenizer.json`.
Its SHA-256 (of the canonical JSON) goes into every shard manifest, and mixing refuses shards from
another tokenizer.

Fast path (`WordCachedEncoder`, used by `tokenize_part`), the way tiktoken gets its speed. With a byte-level
BPE a document's ids are the concatenation of the BPE ids of its pre-tokens ("words"), and a word's ids depend
on the word alone. Most of `Tokenizer.encode_batch` time goes into the pre-tokenizer (its Oniguruma regex and
offset bookkeeping), not the BPE. So each text is split with the same regex in Python (the `regex` module,
BYTE_LEVEL_PATTERN), the words are looked up in a per-process cache (word -> packed ids; at most
WORD_CACHE_ENTRIES, emptied when over), and only the words not seen yet go, all at once, to the same BPE
model inside `tokenizers` (joined by NUL into one text per WORDS_PER_CHUNK words, behind a pre-tokenizer that
only splits at NUL and maps bytes; each token's word index splits the result back). The ids are identical to
`tokenizer.encode(text, add_special_tokens=False).ids` (tests/sluice/tokens/test_tokenize_fast.py). It applies
  - to a tokenizer with no normalizer, truncation or padding; a ByteLevel pre-tokenizer with use_regex
    (add_prefix_space honoured); a BPE model without dropout; no post-processor, or ByteLevel or
    TemplateProcessing (they add no ids without special tokens). Any other tokenizer.json is encoded with
    `encode_batch_fast` as before; `fast_path_blocker` says why, and so does the `encoder` metadata;
  - per document, except: an empty text; a text containing an added token's content (tokenizers splits those
    out before pre-tokenizing) or a NUL; a text with a character that the two regex engines class differently
    (\p{L}, \p{N} or \s: their Unicode versions differ, e.g. letters assigned in newer versions; each character is
    checked against tokenizers' own engine the first time it is seen). Those take `encode_batch_fast`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import filterfalse
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.config import S3Settings
from sluice.io.layout import _remove_tree, list_partitions, partition_prefix, read_manifest, sha256_file
from sluice.io.storage import Store, StoreSpec, local_temp_dir
from sluice.tokens.shards import (
    DOCS_ROW_GROUP,
    DOCS_SCHEMA,
    FORMAT_NAME,
    FORMAT_VERSION,
    ShardWriter,
    doc_hashes,
    dtype_name,
    token_dtype,
    write_urls,
)

ENCODE_BATCH = 1024  # documents per encode call: large enough for the tokenizer's thread pool


def train_bpe(texts: Iterator[str] | Iterator[list[str]], vocab_size: int, eos_token: str) -> Any:
    """Train a byte-level BPE on texts (or batches of texts: the same training). Deterministic for the same
    texts in the same order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[eos_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


@dataclass(frozen=True)
class TrainingTask:
    """Train a BPE on the deduplicated documents of `sources` (at most `limit` documents and `max_bytes`
    UTF-8 bytes of text), reading `store`."""

    store: StoreSpec
    sources: tuple[str, ...]
    limit: int
    vocab_size: int
    eos_token: str
    max_bytes: int = 1 << 62


TRAINING_BATCH = 256  # texts per list handed to the trainer (one Parquet batch)


def training_texts(store: Store, sources: Sequence[str], limit: int, used: list[str], scratch: str,
                   max_bytes: int = 1 << 62) -> Iterator[list[str]]:
    """Batches of texts of deduplicated partitions of `sources`, in the global partition order: the first
    `limit` texts, and no more than `max_bytes` UTF-8 bytes of them (the text that reaches it is cut there, at
    a character boundary). Appends each partition read to `used`; remote parts are downloaded into
    `scratch`, one at a time. BPE training holds every distinct word it is given, so the byte bound is what
    bounds its memory, whatever the crawl's size."""
    documents = size = 0
    for ref in list_partitions(store, "deduped_documents"):
        if ref.source not in sources:
            continue
        if documents >= limit or size >= max_bytes:
            return
        prefix = partition_prefix("deduped_documents", ref)
        manifest = read_manifest(store, prefix) or {"files": []}
        used.append(ref.key)
        for entry in manifest["files"]:
            path = store.fetch(f"{prefix}/{entry['key']}", scratch)
            try:
                for batch in pq.ParquetFile(path).iter_batches(batch_size=TRAINING_BATCH, columns=["text"]):
                    column = batch.column("text").slice(0, limit - documents)
                    ends = size + np.cumsum(pc.binary_length(column).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
                    whole = int(np.searchsorted(ends, max_bytes, side="right"))  # texts that end within the bound
                    texts = [text for text in column.slice(0, whole).to_pylist() if text is not None]
                    before = int(ends[whole - 1]) if whole else size
                    if whole < len(column) and before < max_bytes:  # the text that crosses the bound: its bytes up to it
                        texts.append(column[whole].as_py().encode()[: max_bytes - before].decode("utf-8", "ignore"))
                    documents += len(column) if whole == len(column) else whole + 1
                    size = min(int(ends[-1]) if len(ends) else size, max_bytes)
                    if texts:
                        yield texts
                    if documents >= limit or size >= max_bytes:
                        return
            finally:
                if path.startswith(scratch):  # a download: scratch holds one part at a time
                    os.remove(path)


def train_from_store(task: TrainingTask) -> tuple[str, list[str]]:
    """The trained tokenizer's JSON and the partitions it read. A task for `Executor.isolated`: BPE
    training holds every distinct word of its texts, and that memory should leave with the worker."""
    used: list[str] = []
    scratch = local_temp_dir()
    try:
        texts = training_texts(task.store.open(), task.sources, task.limit, used, scratch, task.max_bytes)
        return train_bpe(texts, task.vocab_size, task.eos_token).to_str(), used
    finally:
        _remove_tree(scratch)


def tokenizer_sha256(tokenizer_json: str) -> str:
    return hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest()


def load_tokenizer(json_text: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(json_text)


# tokenizers' ByteLevel pre-tokenizer regex (GPT-2's), as in tokenizers/src/pre_tokenizers/byte_level.rs.
BYTE_LEVEL_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# The character classes that pattern depends on: the only place the two regex engines can disagree.
CHARACTER_CLASSES = (r"\p{L}", r"\p{N}", r"\s")
WORD_CACHE_ENTRIES = 1 << 18  # ~40 MB per process at most; Zipf's law makes the frequent words hit long before
WORD_SEPARATOR = "\0"  # joins the cache misses into one text per chunk; documents containing it take the fallback
WORDS_PER_CHUNK = 4096  # cache misses per text given to encode_batch: chunks spread over its thread pool
FAST_POST_PROCESSORS = (None, "ByteLevel", "TemplateProcessing")


def fast_path_blocker(config: dict[str, Any]) -> str | None:
    """Why `WordCachedEncoder` cannot reproduce this tokenizer's ids exactly, or None when it can.

    `config` is the tokenizer's own serialization (`json.loads(tokenizer.to_str())`), which names every field.
    """
    if config.get("truncation") is not None:
        return "truncation is set"
    if config.get("padding") is not None:
        return "padding is set"
    if config.get("normalizer") is not None:
        return f"normalizer {config['normalizer'].get('type')}"
    pre = config.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel":
        return f"pre-tokenizer {pre.get('type')} (only ByteLevel)"
    if not pre.get("use_regex", False):
        return "ByteLevel pre-tokenizer without use_regex"
    model = config.get("model") or {}
    if model.get("type") != "BPE":
        return f"model {model.get('type')} (only BPE)"
    if model.get("dropout") is not None:
        return "BPE dropout (not deterministic per word)"
    post = (config.get("post_processor") or {}).get("type")
    if post not in FAST_POST_PROCESSORS:
        return f"post-processor {post}"
    if any(WORD_SEPARATOR in token["content"] for token in config.get("added_tokens", [])):
        return "an added token contains NUL (the separator of the words the fast path encodes together)"
    return None


class WordCachedEncoder:
    """Encodes texts to token ids exactly as `tokenizer.encode_batch_fast(texts, add_special_tokens=False)`.

    Uses the word cache fast path (module docstring) when `fast_path_blocker` allows, else that call itself.
    One per process (`cached_encoder`): the cache is what makes it fast.
    """

    def __init__(self, tokenizer_json: str) -> None:
        import json

        self.tokenizer = load_tokenizer(tokenizer_json)
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self.dtype = token_dtype(self.vocab_size)
        config = json.loads(self.tokenizer.to_str())
        self.unsupported = fast_path_blocker(config)
        if self.unsupported is None:
            try:
                import regex
            except ImportError:  # a declared dependency; without it the ids are still right, only slower
                self.unsupported = "the regex module is not installed"
        self.fallback_documents = 0  # documents that took encode_batch_fast although the tokenizer allows the fast path
        self._lock = threading.Lock()  # one encode at a time: the cache is emptied at the start of a call
        if self.unsupported is not None:
            return
        from tokenizers import Regex, pre_tokenizers

        self._split_words = regex.compile(BYTE_LEVEL_PATTERN).findall
        self._python_classes = [regex.compile(cls + "+") for cls in CHARACTER_CLASSES]
        self._tokenizers_classes = [pre_tokenizers.Split(Regex(cls + "+"), behavior="removed", invert=True) for cls in CHARACTER_CLASSES]
        self._add_prefix_space = bool(config["pre_tokenizer"]["add_prefix_space"])
        # The same model (vocabulary, merges, options) behind a pre-tokenizer that only splits at the separator
        # and maps bytes: each cache miss is one pre-token, BPE'd exactly as inside a document.
        word_config = dict(config, truncation=None, padding=None, post_processor=None)
        word_config["pre_tokenizer"] = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"String": WORD_SEPARATOR}, "behavior": "Removed", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        }
        self._word_tokenizer = load_tokenizer(json.dumps(word_config))
        self._markers = [token["content"] for token in config.get("added_tokens", []) if token["content"]] + [WORD_SEPARATOR]
        self._cache: dict[str, bytes] = {}
        self._checked_characters: set[str] = set()
        self._unsafe_characters: set[str] = set()

    @property
    def cached_words(self) -> int:
        return len(self._cache) if self.unsupported is None else 0

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of each text (no special tokens added), in the shard dtype (read-only arrays)."""
        return self.encode_counting(texts)[0]

    def encode_counting(self, texts: list[str]) -> tuple[list[np.ndarray], int]:
        """`encode`, and how many of the texts took the `encode_batch_fast` fallback."""
        if self.unsupported is not None:
            return self._encode_whole(texts), 0
        with self._lock:
            out, fallbacks = self._encode_cached(texts)
            self.fallback_documents += fallbacks
        return out, fallbacks

    def _encode_cached(self, texts: list[str]) -> tuple[list[np.ndarray], int]:
        if len(self._cache) > WORD_CACHE_ENTRIES:
            self._cache.clear()
        cache = self._cache
        known = cache.__contains__
        split_words = self._split_words
        markers = self._markers
        dtype = self.dtype
        out: list[np.ndarray | None] = []
        pending: list[tuple[int, list[str]]] = []  # texts with words not cached yet
        fallback: list[int] = []
        missing: dict[str, None] = {}  # insertion-ordered set
        # Per text only C-level calls (findall, map, bytes.join, filterfalse): Python-level work per word
        # would cost as much as the tokenizer itself.
        for index, text in enumerate(texts):
            if not text or any(marker in text for marker in markers):
                fallback.append(index)
                out.append(None)
                continue
            if self._add_prefix_space and not text.startswith(" "):
                text = " " + text
            text_words = split_words(text)
            try:
                out.append(np.frombuffer(b"".join(map(cache.get, text_words)), dtype=dtype))
            except TypeError:  # a None among the parts: some word is not cached
                missing.update(dict.fromkeys(filterfalse(known, text_words)))
                pending.append((index, text_words))
                out.append(None)
        if missing:
            unsafe_words = set(missing).difference(self._encode_words(list(missing)))
            for index, text_words in pending:
                if unsafe_words and not unsafe_words.isdisjoint(text_words):
                    fallback.append(index)
                else:
                    out[index] = np.frombuffer(b"".join(map(cache.__getitem__, text_words)), dtype=dtype)
        if fallback:
            fallback.sort()
            for index, ids in zip(fallback, self._encode_whole([texts[i] for i in fallback]), strict=True):
                out[index] = ids
        return out, len(fallback)  # type: ignore[return-value]

    def _encode_whole(self, texts: list[str]) -> list[np.ndarray]:
        # encode_batch_fast skips the character offsets, which shards do not need.
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [np.asarray(encoding.ids, dtype=self.dtype) for encoding in encodings]

    def _encode_words(self, words: list[str]) -> dict[str, bytes]:
        """Packed ids of each word whose characters both regex engines class alike; those words are cached."""
        characters = set("".join(words)) - self._checked_characters
        if characters:
            self._unsafe_characters |= self._class_disagreements("".join(sorted(characters)))
            self._checked_characters |= characters
        if self._unsafe_characters:
            words = [word for word in words if self._unsafe_characters.isdisjoint(word)]
        chunks = [words[start : start + WORDS_PER_CHUNK] for start in range(0, len(words), WORDS_PER_CHUNK)]
        # encode_batch (not _fast): the word index of every token is what splits a chunk back into words.
        encodings = self._word_tokenizer.encode_batch([WORD_SEPARATOR.join(chunk) for chunk in chunks], add_special_tokens=False)
        new: dict[str, bytes] = {}
        itemsize = self.dtype.itemsize
        for chunk, encoding in zip(chunks, encodings, strict=True):
            word_ids = np.asarray(encoding.word_ids, dtype=np.int64)
            if len(word_ids) and (word_ids.min() < 0 or word_ids.max() >= len(chunk)):
                raise RuntimeError(f"word-level encoding gave word indexes outside 0..{len(chunk) - 1}")
            ends = np.cumsum(np.bincount(word_ids, minlength=len(chunk))) * itemsize
            packed = np.asarray(encoding.ids, dtype=self.dtype).tobytes()
            start = 0
            for word, end in zip(chunk, ends.tolist(), strict=True):
                new[word] = packed[start:end]
                start = end
        self._cache.update(new)
        return new

    def _class_disagreements(self, characters: str) -> set[str]:
        r"""The characters whose \p{L} / \p{N} / \s membership differs between `regex` and tokenizers' engine."""
        unsafe: set[str] = set()
        for python, native in zip(self._python_classes, self._tokenizers_classes, strict=True):
            ours = {i for match in python.finditer(characters) for i in range(*match.span())}
            theirs = {i for _, (start, end) in native.pre_tokenize_str(characters) for i in range(start, end)}
            unsafe.update(characters[i] for i in ours ^ theirs)
        return unsafe


_ENCODER: dict[str, WordCachedEncoder] = {}


def cached_encoder(tokenizer_json: str) -> WordCachedEncoder:
    """This process's encoder for the tokenizer (only the latest one is kept, with its word cache)."""
    key = tokenizer_sha256(tokenizer_json)
    if key not in _ENCODER:
        _ENCODER.clear()
        _ENCODER[key] = WordCachedEncoder(tokenizer_json)
    return _ENCODER[key]


# Bins of the per-document token count histogram each task returns (summed by the asset).
LENGTH_BINS = (0, 64, 256, 1024, 4096, 16384, 1 << 62)
LENGTH_LABELS = ("<64", "64-255", "256-1023", "1024-4095", "4096-16383", ">=16384")


@dataclass(frozen=True)
class TokenizeTask:
    input_url: str  # deduped partition folder
    input_key: str  # part file
    output_url: str  # tokenized partition folder
    part: int
    tokenizer_json: str
    eos_token: str
    max_shard_tokens: int = 1 << 28
    s3: S3Settings = field(default_factory=S3Settings)
    sample_documents: int = 0  # documents of this part decoded back from the written shards and compared with their text
    binary_url: str = ""  # folder of the .bin / .idx / .urls files (the side dataset TOKENS_DATASET); "" = output_url


def verify_published(store, key: str, local_path: str, entry: dict[str, Any]) -> str | None:
    """Check a just-published file against the digest recorded from its local copy; returns a problem or None.

    A local store: the stored file is hashed (it was moved there; a read of what was written). S3: the stored
    object's size (botocore sends a checksum with every upload and the service verifies it)."""
    stored = store.local_path(key)
    if stored is not None:
        if os.path.getsize(stored) != entry["bytes"] or sha256_file(stored) != entry["sha256"]:
            return f"{store.uri(key)}: the published file does not match the SHA-256 of what was written"
        return None
    size = store.size(key)
    return None if size == entry["bytes"] else f"{store.uri(key)}: {size} bytes published, {entry['bytes']} written"


def tokenize_part(task: TokenizeTask) -> dict[str, Any]:
    """Encode one deduplicated part into one or more shards `shard-PPPPP-SS` (bounded by max_shard_tokens).

    The task checks its own output and returns the results (no second read by the caller): every published
    file's digest (`verify_published`), the largest token id, and a sample of documents decoded from the
    written shards against their text; document lengths come back as a histogram (`LENGTH_BINS`)."""
    scratch = local_temp_dir()
    try:
        part = _PartTokenizer(task, scratch)
        part.encode(StoreSpec(task.input_url, task.s3).open().fetch(task.input_key, scratch))
        return part.result()
    finally:
        _remove_tree(scratch)


class _PartTokenizer:
    """The state of one part's encoding: the shard being written, what the finished shards published, and
    the counts the result reports."""

    def __init__(self, task: TokenizeTask, scratch: str) -> None:
        self.task = task
        self.encoder = cached_encoder(task.tokenizer_json)
        eos_id = self.encoder.tokenizer.token_to_id(task.eos_token)
        if eos_id is None:
            raise ValueError(f"the tokenizer has no token {task.eos_token!r} (tokenizer.eos_token)")
        self.eos_id: int = eos_id
        self.output_store = StoreSpec(task.output_url, task.s3).open()
        self.binary_store = StoreSpec(task.binary_url, task.s3).open() if task.binary_url else self.output_store
        self.out_dir = os.path.join(scratch, "out")
        os.makedirs(self.out_dir)
        self.shards: list[dict[str, Any]] = []
        self.files: list[dict[str, Any]] = []  # the .docs.parquet files (the dataset's own)
        self.binary_files: list[dict[str, Any]] = []  # .bin, .idx, .urls (in binary_url)
        self.histogram = np.zeros(len(LENGTH_BINS) - 1, np.int64)
        self.documents = self.tokens = self.text_bytes = self.fallback_documents = self.checked = 0
        self.max_token_id = -1
        self.problems: list[str] = []
        self.mismatched: list[str] = []
        # The shard being written: its writer, its documents' ids, languages and URLs, and the documents to
        # decode back once written ((index in the shard, doc_id, text)).
        self.writer: ShardWriter | None = None
        self.doc_ids: list[str] = []
        self.languages: list[str | None] = []
        self.urls: list[str | None] = []
        self.samples: list[tuple[int, str, str]] = []
        self.first_row = 0  # row in the deduplicated part of the current shard's first document

    def encode(self, path: str) -> None:
        """Encode the part's Parquet file batch by batch, cutting shards at max_shard_tokens."""
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        columns = ["doc_id", "text"] + [name for name in ("language", "url") if name in names]
        samples = self.task.sample_documents
        sample_every = max(1, parquet.metadata.num_rows // samples) if samples > 0 else 0
        for batch in parquet.iter_batches(batch_size=ENCODE_BATCH, columns=columns):
            texts = batch.column("text").to_pylist()
            ids = batch.column("doc_id").to_pylist()
            batch_languages = batch.column("language").to_pylist() if "language" in names else [None] * len(ids)
            batch_urls = batch.column("url").to_pylist() if "url" in names else [None] * len(ids)
            encoded, fallbacks = self.encoder.encode_counting(texts)
            self.fallback_documents += fallbacks
            sizes = np.fromiter(map(len, encoded), np.int64, len(encoded)) + 1  # EOS
            self.histogram += np.histogram(sizes, bins=LENGTH_BINS)[0]
            tops = [int(ids_.max()) for ids_ in encoded if len(ids_)]
            self.max_token_id = max([self.max_token_id, self.eos_id, *tops])
            for row in zip(ids, batch_languages, batch_urls, texts, encoded, sizes.tolist(), strict=True):
                self._add(*row, sample=bool(sample_every) and self.documents % sample_every == 0)
            self.text_bytes += int(pc.sum(pc.binary_length(batch.column("text"))).as_py() or 0)
        if self.writer is not None:
            self._finish()

    def _add(self, doc_id: str, language: str | None, url: str | None, text: str, doc_tokens: Any, size: int, sample: bool) -> None:
        writer = self.writer
        if writer is not None and writer.tokens + size > self.task.max_shard_tokens and writer.documents:
            self._finish()
            self.first_row += writer.documents
            writer = None
        if writer is None:
            writer = self.writer = ShardWriter(self.out_dir, f"shard-{self.task.part:05d}-{len(self.shards):02d}", self.encoder.vocab_size)
        if sample:
            self.samples.append((writer.documents, doc_id, text))
        writer.add(doc_tokens, self.eos_id)
        self.doc_ids.append(doc_id)
        self.languages.append(language)
        self.urls.append(url)
        self.documents += 1
        self.tokens += size

    def _finish(self) -> None:
        """Close the current shard, decode its samples back, write its side files and publish them all."""
        current = self.writer
        assert current is not None
        current.close()
        self._check_samples(current)
        ids_path = os.path.join(self.out_dir, f"{current.name}.docs.parquet")
        docs = pa.table(
            {
                "doc_id": pa.array(self.doc_ids, pa.string()),
                "doc_hash": doc_hashes(self.doc_ids),
                "language": pa.array(self.languages, pa.string()).dictionary_encode(),
            },
            schema=DOCS_SCHEMA,
        )
        pq.write_table(docs, ids_path, compression="zstd", row_group_size=DOCS_ROW_GROUP)
        urls_path = os.path.join(self.out_dir, f"{current.name}.urls")
        write_urls(urls_path, self.urls)
        for local, store, listed in (
            (current.bin_path, self.binary_store, self.binary_files), (current.idx_path, self.binary_store, self.binary_files),
            (ids_path, self.output_store, self.files), (urls_path, self.binary_store, self.binary_files),
        ):
            listed.append(self._publish(store, local))
        self.shards.append(
            {"name": current.name, "documents": current.documents, "tokens": current.tokens, "part": self.task.part, "first_row": self.first_row}
        )
        self.writer, self.doc_ids, self.languages, self.urls = None, [], [], []

    def _check_samples(self, current: ShardWriter) -> None:
        """Round trip: decode the sampled documents from the written files and compare them with their text."""
        if not self.samples:
            return
        written = np.memmap(current.bin_path, dtype=current.dtype, mode="r")
        offsets = np.fromfile(current.idx_path, dtype="<u8")
        for index, doc_id, text in self.samples:
            ids = written[offsets[index] : offsets[index + 1]]
            if int(ids[-1]) != self.eos_id or self.encoder.tokenizer.decode(ids[:-1].tolist(), skip_special_tokens=False) != text:
                self.mismatched.append(doc_id)
        self.checked += len(self.samples)
        del written
        self.samples.clear()

    def _publish(self, store: Store, local: str) -> dict[str, Any]:
        key = os.path.basename(local)
        entry = {"key": key, "rows": None, "bytes": os.path.getsize(local), "sha256": sha256_file(local)}
        store.put_file(local, key)
        problem = verify_published(store, key, local, entry)
        if problem:
            self.problems.append(problem)
        return entry

    def result(self) -> dict[str, Any]:
        vocab_size = self.encoder.vocab_size
        return {
            "shards": self.shards,
            "files": self.files,
            "binary_files": self.binary_files,
            "documents": self.documents,
            "tokens": self.tokens,
            "text_bytes": self.text_bytes,
            "length_histogram": self.histogram.tolist(),
            "max_token_id": self.max_token_id,
            "round_trip_checked": self.checked,
            "round_trip_mismatched": self.mismatched,
            "publish_problems": self.problems,
            "vocab_size": vocab_size,
            "eos_id": self.eos_id,
            "dtype": dtype_name(vocab_size),
            # None: the word cache fast path encoded the part; else why the tokenizer does not allow it
            "fast_path_unsupported": self.encoder.unsupported,
            "fallback_documents": self.fallback_documents,
        }


def shard_manifest(
    results: list[dict[str, Any]], tokenizer_hash: str, vocab_size: int, eos_id: int, binary_prefix: str | None = None
) -> dict[str, Any]:
    """The partition's manifest; `binary_prefix`: the root-relative folder the tasks wrote the .bin / .idx /
    .urls files to (published as `side_files` there), None when they sit beside the .docs.parquet files."""
    binary = [entry for r in results for entry in r.get("binary_files", [])]
    placed = {"binary_prefix": binary_prefix, "side_files": [{**entry, "prefix": binary_prefix} for entry in binary]} if binary_prefix else {}
    return {
        **placed,
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "dtype": dtype_name(vocab_size),
        "vocab_size": vocab_size,
        "eos_id": eos_id,
        "tokenizer_sha256": tokenizer_hash,
        "documents": sum(r["documents"] for r in results),
        "tokens": sum(r["tokens"] for r in results),
        "files": [entry for r in results for entry in r["files"]] + ([] if binary_prefix else binary),
        "shards": [shard for r in results for shard in r["shards"]],
    }
