"""Evaluation-set decontamination: find training documents sharing a word n-gram with an evaluation text.

Words are what `words()` returns: the NFKC-normalised, casefolded text split into runs of letters/digits,
with every CJK ideograph, kana or hangul syllable a word of its own (those scripts do not separate words
with spaces). A document is contaminated when any n consecutive words of it (n = 13 by default, as in the
GPT-3 paper) occur in an evaluation text. Evaluation texts shorter than n words cannot match and are counted.

Matching is vectorised: evaluation words get dense ids, a document's words are mapped to those ids (a word
absent from every evaluation text cannot be part of a match), and each window of n ids is reduced to a
64-bit polynomial hash looked up in the sorted evaluation hashes with numpy. A document is split and mapped
window by window (`word_windows`, about 64 K characters each) and hashed in chunks of ids, so the working set
stays small whatever the document's length: a multi-megabyte page would otherwise become one list of a
million short strings, and the cost per character would grow as that list outgrows the CPU caches.

Flags are computed once per deduplicated partition (the `decontamination` asset) for every distinct
evaluation spec of the configured mixes (`EvalSpec`: eval set files, text field, n), and reused by every mix
with that spec. A partition's flags are valid while its deduplicated manifest and the eval sets' content
(`eval_sets_digest`) are the ones recorded in its manifest (`flags_identity`).

    decontamination/source=<s>/snapshot=<n>/flags.parquet   spec, doc_id, matched_ngrams (flagged documents only)
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.config import MixSettings, S3Settings
from sluice.io.storage import StoreSpec

ASSET = "decontamination"
FLAGS_FILE = "flags.parquet"
FLAGS_SCHEMA = pa.schema([("spec", pa.string()), ("doc_id", pa.string()), ("matched_ngrams", pa.int64())])

_ONE_CHAR_WORDS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"  # kana, CJK, hangul
_WORD = re.compile(rf"[{_ONE_CHAR_WORDS}]|[^\W_]+")
# A character no word contains (neither a letter/digit nor one of the one-character words): a safe cut.
_NOT_IN_A_WORD = re.compile(rf"[^\w{_ONE_CHAR_WORDS}]|_")
_WINDOW_CHARS = 1 << 16
_HASH_CHUNK = 1 << 15  # n-gram windows hashed and looked up at a time
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant; arithmetic wraps modulo 2**64


def words(text: str) -> list[str]:
    """The words of `text` (see the module docstring), as one list."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def word_windows(text: str, window: int = _WINDOW_CHARS) -> Iterator[list[str]]:
    """`words(text)` in consecutive pieces of about `window` characters of the normalised text each. A piece
    ends just after a character no word contains, so no word is cut and the pieces concatenate to
    `words(text)`; a text with no such character after `window` is one piece."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    start, end = 0, len(folded)
    while start < end:
        cut = _NOT_IN_A_WORD.search(folded, start + window) if start + window < end else None
        stop = cut.end() if cut is not None else end
        yield _WORD.findall(folded, start, stop)
        start = stop


def word_ids(text: str, vocabularies: Sequence[Mapping[str, int]]) -> list[np.ndarray]:
    """The ids of the text's words in each vocabulary (-1: not in it), mapped window by window
    (`word_windows`), so the words themselves never all exist at once."""
    pieces: list[list[np.ndarray]] = [[] for _ in vocabularies]
    for piece in word_windows(text, _WINDOW_CHARS):
        for ids, vocabulary in zip(pieces, vocabularies, strict=True):
            get = vocabulary.get
            ids.append(np.fromiter((get(word, -1) for word in piece), np.int64, len(piece)))
    return [np.concatenate(ids) if ids else np.zeros(0, np.int64) for ids in pieces]


def _window_hashes(ids: np.ndarray, n: int) -> np.ndarray:
    """Hash of every window of n consecutive ids whose ids are all known (>= 0)."""
    if len(ids) < n:
        return np.zeros(0, np.uint64)
    count = len(ids) - n + 1
    unknown = np.concatenate([[0], np.cumsum(ids < 0)])
    complete = (unknown[n:] - unknown[:-n]) == 0
    if not complete.any():
        return np.zeros(0, np.uint64)
    values = (ids.astype(np.uint64) + np.uint64(1)) * np.uint64(0xBF58476D1CE4E5B9)
    hashes = np.zeros(count, np.uint64)
    with np.errstate(over="ignore"):
        for offset in range(n):
            hashes = hashes * _MULTIPLIER + values[offset : offset + count]
    return hashes[complete]


@dataclass
class EvalNgrams:
    """The word n-grams of a set of evaluation texts, ready to match documents against."""

    n: int
    vocabulary: dict[str, int] = field(default_factory=dict)
    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    texts: int = 0
    short_texts: int = 0  # fewer than n words: cannot match

    @classmethod
    def from_texts(cls, texts: Iterable[str], n: int) -> EvalNgrams:
        result = cls(n)
        pieces = []
        for text in texts:
            result.texts += 1
            tokens = words(text)
            if len(tokens) < n:
                result.short_texts += 1
                continue
            ids = np.fromiter((result.vocabulary.setdefault(w, len(result.vocabulary)) for w in tokens), np.int64, len(tokens))
            pieces.append(_window_hashes(ids, n))
        result.hashes = np.unique(np.concatenate(pieces)) if pieces else np.zeros(0, np.uint64)
        return result

    def matches(self, text: str) -> int:
        """How many of the text's n-gram windows occur in an evaluation text (0 = clean)."""
        return self.matches_ids(word_ids(text, [self.vocabulary])[0]) if len(self.hashes) else 0

    def matches_ids(self, ids: np.ndarray) -> int:
        """`matches` for a text's word ids in this vocabulary (`word_ids`), hashed in chunks of windows."""
        if not len(self.hashes) or len(ids) < self.n:
            return 0
        found = 0
        for start in range(0, len(ids) - self.n + 1, _HASH_CHUNK):
            windows = _window_hashes(ids[start : start + _HASH_CHUNK + self.n - 1], self.n)
            if len(windows):
                at = np.minimum(np.searchsorted(self.hashes, windows), len(self.hashes) - 1)
                found += int(np.count_nonzero(self.hashes[at] == windows))
        return found


def read_eval_texts(location: str, text_field: str, s3: S3Settings | None = None) -> Iterator[str]:
    """Texts of one JSONL evaluation file (local path or s3://bucket/key); errors name the file and line."""
    folder, _, name = location.rstrip("/").rpartition("/")
    store = StoreSpec(folder or ".", s3 or S3Settings()).open()
    if not store.exists(name):
        raise FileNotFoundError(f"evaluation set {location} does not exist (mixes.*.eval_sets)")
    for number, line in enumerate(store.read_bytes(name).decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{location} line {number}: not valid JSON ({error})") from None
        text = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise ValueError(f"{location} line {number}: no string field {text_field!r}")
        yield text


@dataclass(frozen=True)
class EvalSpec:
    """What a mix decontaminates against: its eval set files, their text field and the n-gram size."""

    eval_sets: tuple[str, ...]
    text_field: str
    ngram: int

    @classmethod
    def of(cls, mix: MixSettings) -> EvalSpec | None:
        return cls(tuple(mix.eval_sets), mix.eval_text_field, mix.decontamination_ngram) if mix.eval_sets else None

    @property
    def id(self) -> str:
        """A short stable name of the spec (its config, not its files' content)."""
        body = json.dumps([list(self.eval_sets), self.text_field, self.ngram])
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        return {"spec": self.id, "eval_sets": list(self.eval_sets), "text_field": self.text_field, "ngram": self.ngram}


def eval_specs(mixes: Mapping[str, MixSettings]) -> list[EvalSpec]:
    """The distinct evaluation specs of the configured mixes, in a stable order."""
    return sorted({spec for spec in map(EvalSpec.of, mixes.values()) if spec is not None}, key=lambda spec: spec.id)


def eval_sets_digest(specs: list[EvalSpec], s3: S3Settings | None = None) -> str:
    """SHA-256 over the specs and the bytes of every eval set file they name: the flags' identity."""
    digest = hashlib.sha256(b"sluice-decontamination-v1")
    for spec in specs:
        digest.update(spec.id.encode())
        for location in spec.eval_sets:
            folder, _, name = location.rstrip("/").rpartition("/")
            store = StoreSpec(folder or ".", s3 or S3Settings()).open()
            if not store.exists(name):
                raise FileNotFoundError(f"evaluation set {location} does not exist (mixes.*.eval_sets)")
            digest.update(hashlib.sha256(store.read_bytes(name)).digest())
    return digest.hexdigest()


def flags_identity(eval_digest: str, deduped_manifest: bytes) -> dict[str, str]:
    """What a partition's flags were computed from; they are reused only while both are unchanged."""
    return {"eval_sets_sha256": eval_digest, "deduped_manifest_sha256": hashlib.sha256(deduped_manifest).hexdigest()}


@dataclass(frozen=True)
class ContaminationTask:
    input_url: str  # a deduped partition folder
    input_key: str  # one of its part files
    ngrams: tuple[tuple[str, EvalNgrams], ...]  # (spec id, n-grams of its eval sets)
    s3: S3Settings = field(default_factory=S3Settings)


def find_contaminated(task: ContaminationTask) -> list[dict[str, Any]]:
    """The documents of one part file sharing an n-gram with an evaluation spec: spec, doc_id, match count
    (flagged documents only: the result is small)."""
    import pyarrow.parquet as pq

    from sluice.io.layout import _remove_tree
    from sluice.io.storage import local_temp_dir

    store = StoreSpec(task.input_url, task.s3).open()
    scratch = local_temp_dir()
    vocabularies = [ngrams.vocabulary for _, ngrams in task.ngrams]
    flagged = []
    try:
        path = store.fetch(task.input_key, scratch)
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, columns=["doc_id", "text"]):
            for doc_id, text in zip(batch.column("doc_id").to_pylist(), batch.column("text").to_pylist(), strict=True):
                ids = word_ids(text, vocabularies)
                for (spec, ngrams), doc_ids in zip(task.ngrams, ids, strict=True):
                    hits = ngrams.matches_ids(doc_ids)
                    if hits:
                        flagged.append({"spec": spec, "doc_id": doc_id, "matched_ngrams": hits})
    finally:
        _remove_tree(scratch)
    return flagged


def flags_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Flag rows as the `flags.parquet` table, sorted by (spec, doc_id) so the bytes do not depend on task order."""
    return pa.Table.from_pylist(rows, schema=FLAGS_SCHEMA).sort_by([("spec", "ascending"), ("doc_id", "ascending")])
