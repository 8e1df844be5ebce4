"""MinHash signatures and LSH band hashes for near-duplicate detection, vectorized with numpy.

Pipeline for one document (defaults as datatrove's `MinhashDedupSignature`):

1. **Normalize**, datatrove's `simplify_text` steps with its default `TextNormConfig`: lowercase;
   diacritics removed (canonical decomposition NFD, then combining marks, category Mn, dropped); every
   run of digits (any script), with an optional decimal part (`3.14`, `1,5`), becomes `0`
   (`_NUMBERS`, same pattern); datatrove's punctuation characters (`PUNCTUATION`, copied from
   datatrove) and ASCII/C1 control characters separate words, like whitespace. The order differs
   from datatrove's (which maps numbers and punctuation before removing diacritics) only for text
   where a combining mark sits inside a number or a character decomposes into punctuation
   (U+037E GREEK QUESTION MARK -> `;`).
2. **Split into words** (`words`): runs of word characters between separators, except that every
   character of a script written without spaces between words (Han ideographs, Hiragana, Katakana,
   Bopomofo, Thai, Lao, Khmer, Myanmar, Tibetan, Yi; `_NO_SPACE_SCRIPTS`) is a word on its own. Chinese
   and Japanese text is thus shingled by character n-grams, the usual choice for these scripts (an
   unsegmented sentence as one "word", what whitespace splitting gives, would make one edit change
   every shingle; datatrove needs a language-specific word tokenizer such as jieba for this). Hangul
   uses spaces and stays word-split.
3. **Shingles**: every run of `ngram_size` consecutive words (a document with fewer words has one
   shingle of all its words; one without words has none and never becomes a candidate). A shingle's
   identity is its words joined by one space, as UTF-8 bytes (`shingles`).
4. **Shingle hash** (32 bits), `hash_function`:
   - `poly` (default, `shingle_hash32`): word hash `w = fmix64(sum(cp[j] * P^(L-1-j)) + L * K)` over
     the word's L code points, shingle hash = upper 32 bits of `fmix64(sum(w[i] * K^(n-1-i)))`, all
     modulo 2^64 (fmix64 = MurmurHash3's finalizer). Computed for a whole batch of documents with
     array operations: code points through a class lookup table, word boundaries by comparing
     neighbours, every word's polynomial from one prefix sum of `cp[i] * P^-i`; no Python per word.
   - `sha1`: datasketch's default `sha1_hash32` of the shingle bytes (one SHA-1 call per shingle: slow).
5. **Signature**: `num_perm = bands * rows` values, each `min over shingles of (a_k * fmix32(h) + b_k)
   mod 2^32` with `a_k, b_k` drawn exactly as datasketch 2.x's default `affine32` scheme does from
   `numpy.random.RandomState(seed)`. The values therefore EQUAL `datasketch.MinHash(num_perm, seed,
   hashfunc=<the shingle hash>)` updated with the shingle bytes (tests/sluice/dedup/test_minhash.py checks
   this on real documents). An empty document's signature is all `2^32 - 1` (datasketch's empty value).
6. **LSH band hashes**: the signature is cut into `bands` bands of `rows` values; each band's values
   are folded into one uint64 (`fold_rows`: polynomial, then fmix64). Two documents are near-duplicate candidates when any band
   hash is equal. With 14 x 8 the probability of becoming candidates is 1 - (1 - J^8)^14: 0.5 at
   Jaccard J ~ 0.685, 0.65 at J = 0.72, 0.92 at J = 0.8, 0.9996 at J = 0.9 (benchmarks/dedup_quality.py prints them).

Everything is deterministic: fixed constants, no per-process seeds.
"""

from __future__ import annotations

import hashlib
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sluice.config import DedupSettings
from sluice.words import DATATROVE_PUNCTUATION as PUNCTUATION

# Python's `\d` matches every Unicode decimal digit (category Nd), like datatrove's `\p{Nd}`.
_NUMBERS = re.compile(r"\d+(?:[.,،٫⎖⎗⎘]\d+)?")
_NO_SPACE_SCRIPTS = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u0f00-\u0fff"  # Tibetan
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u2e80-\u2fdf"  # CJK radicals, Kangxi radicals
    "\u3005-\u3007"  # ideographic iteration mark, closing mark, number zero
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3100-\u312f\u31a0-\u31bf"  # Bopomofo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf\u4e00-\u9fff"  # CJK unified ideographs (+ extension A)
    "\ua000-\ua4cf"  # Yi
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # halfwidth Katakana
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
MAX_HASH32 = np.uint32(0xFFFFFFFF)
_WORD_P = np.uint64(0x100000001B3)  # odd base of the per-word code point polynomial (FNV-64 prime)
_WORD_P_INVERSE = np.uint64(pow(0x100000001B3, -1, 1 << 64))  # its inverse modulo 2^64
_SHINGLE_K = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the word-hash polynomial (golden ratio)
_BAND_K = np.uint64(0xC2B2AE3D27D4EB4F)  # odd multiplier folding a band's rows (xxhash prime 2)
# Code points per vectorized tokenizer batch (its temporary arrays take ~50 bytes per code point: ~13 MB;
# smaller batches are no slower), and shingles per signature block ((block x num_perm) uint32 values:
# ~0.9 MB at 112 permutations, sized for the CPU cache).
_BATCH_CHARS = 1 << 18
_BLOCK_SHINGLES = 2048

# Character classes of the tokenizer, one byte per Unicode code point.
WORD_CHAR, SEPARATOR, DROPPED, STANDALONE = 0, 1, 2, 3


@lru_cache(maxsize=1)
def _unicode_masks() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(combining mark Mn, decimal digit Nd, whitespace) for every code point, in one pass (~0.3 s)."""
    every_char = "".join(map(chr, range(sys.maxunicode + 1)))
    categories = np.array(list(map(unicodedata.category, every_char)))
    whitespace = np.zeros(sys.maxunicode + 1, dtype=bool)
    whitespace[[match.start() for match in re.finditer(r"\s", every_char)]] = True
    return categories == "Mn", categories == "Nd", whitespace


@lru_cache(maxsize=1)
def _char_classes() -> np.ndarray:
    combining, _, whitespace = _unicode_masks()
    table = np.zeros(sys.maxunicode + 1, dtype=np.uint8)
    for low, high in re.findall(r"(.)-(.)", _NO_SPACE_SCRIPTS):
        table[ord(low) : ord(high) + 1] = STANDALONE
    table[whitespace] = SEPARATOR
    table[[ord(char) for char in PUNCTUATION]] = SEPARATOR
    # Combining marks last: the kana voicing marks U+3099/U+309A lie inside the Katakana range.
    table[combining] = DROPPED
    table.flags.writeable = False
    return table


def _prenormalize(text: str) -> str:
    """The string steps: lowercase, canonical decomposition (NFD: accented letters become letter + mark)."""
    text = text.lower()
    return text if text.isascii() else unicodedata.normalize("NFD", text)


@lru_cache(maxsize=1)
def _numeric_table() -> np.ndarray:
    """1 for decimal digits (category Nd, what `\\d` matches), 2 for the decimal separators of `_NUMBERS`."""
    table = np.zeros(sys.maxunicode + 1, dtype=np.uint8)
    table[_unicode_masks()[1]] = 1
    table[[ord(c) for c in ".,،٫⎖⎗⎘"]] = 2
    table.flags.writeable = False
    return table


def words(text: str) -> list[str]:
    """Normalized words of `text`, one character at a time (reference for the vectorized tokenizer)."""
    table = _char_classes()
    text = "".join(char for char in _prenormalize(text) if table[ord(char)] != DROPPED)
    text = _NUMBERS.sub("0", text)
    out: list[str] = []
    current: list[str] = []
    for char in text:
        kind = table[ord(char)]
        if kind == WORD_CHAR:
            current.append(char)
            continue
        if kind == DROPPED:
            continue
        if current:
            out.append("".join(current))
            current = []
        if kind == STANDALONE:
            out.append(char)
    if current:
        out.append("".join(current))
    return out


def normalize_for_minhash(text: str) -> str:
    """The normalized text: its words joined by one space."""
    return " ".join(words(text))


def shingles(text: str, ngram_size: int) -> list[bytes]:
    """The document's shingles as bytes (words joined by one space), in order, repeats included."""
    tokens = words(text)
    if not tokens:
        return []
    if len(tokens) < ngram_size:
        return [" ".join(tokens).encode("utf-8")]
    return [" ".join(tokens[i : i + ngram_size]).encode("utf-8") for i in range(len(tokens) - ngram_size + 1)]


def _fmix64(values: np.ndarray) -> np.ndarray:
    values = values ^ (values >> np.uint64(33))
    values = values * np.uint64(0xFF51AFD7ED558CCD)
    values = values ^ (values >> np.uint64(33))
    values = values * np.uint64(0xC4CEB9FE1A85EC53)
    return values ^ (values >> np.uint64(33))


def _fmix32(values: np.ndarray) -> np.ndarray:
    # datasketch's affine32 pre-mix (MurmurHash3 32-bit finalizer).
    values = values ^ (values >> np.uint32(16))
    values = values * np.uint32(0x85EBCA6B)
    values = values ^ (values >> np.uint32(13))
    values = values * np.uint32(0xC2B2AE35)
    return values ^ (values >> np.uint32(16))


_powers_cache: list[np.ndarray] = []


def _powers(count: int) -> tuple[np.ndarray, np.ndarray]:
    """P^i and P^-i modulo 2^64 for i < count (integer cumulative products wrap modulo 2^64)."""
    if not _powers_cache or len(_powers_cache[0]) < count:
        size = max(count, 1 << 16)
        forward = np.full(size, _WORD_P, dtype=np.uint64)
        forward[0] = 1
        backward = np.full(size, _WORD_P_INVERSE, dtype=np.uint64)
        backward[0] = 1
        _powers_cache[:] = [np.cumprod(forward, dtype=np.uint64), np.cumprod(backward, dtype=np.uint64)]
    return _powers_cache[0], _powers_cache[1]


def _word_hashes(codepoints: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """fmix64(sum(cp[j] * P^(end-1-j)) + length * K) mod 2^64 for each word [start, end) of `codepoints`.

    Prefix sums of cp[i] * P^-i give every word's polynomial in O(1), for all words at once."""
    forward, backward = _powers(len(codepoints) + 1)
    weighted = codepoints.astype(np.uint64)
    weighted *= backward[: len(codepoints)]
    prefix = np.empty(len(codepoints) + 1, dtype=np.uint64)
    prefix[0] = 0
    np.cumsum(weighted, out=prefix[1:])
    poly = (prefix[ends] - prefix[starts]) * forward[ends - 1]
    poly += (ends - starts).astype(np.uint64) * _SHINGLE_K
    return _fmix64(poly)


def _fold_windows(word_hashes: np.ndarray, window_start: np.ndarray, window_width: np.ndarray, ngram_size: int) -> np.ndarray:
    """uint32 shingle hash: upper half of fmix64(sum(word_hash[i] * K^(width-1-i)) mod 2^64)."""
    padded = np.concatenate([word_hashes, np.zeros(ngram_size, dtype=np.uint64)])
    acc = padded[window_start]
    for offset in range(1, ngram_size):
        longer = window_width > offset
        acc = np.where(longer, acc * _SHINGLE_K + padded[window_start + offset], acc)
    return (_fmix64(acc) >> np.uint64(32)).astype(np.uint32)


_MASK64 = (1 << 64) - 1


def _fmix64_int(value: int) -> int:
    value ^= value >> 33
    value = (value * 0xFF51AFD7ED558CCD) & _MASK64
    value ^= value >> 33
    value = (value * 0xC4CEB9FE1A85EC53) & _MASK64
    return value ^ (value >> 33)


@lru_cache(maxsize=1 << 16)
def _word_hash_int(word: str) -> int:
    poly = 0
    for char in word:
        poly = (poly * int(_WORD_P) + ord(char)) & _MASK64
    return _fmix64_int((poly + len(word) * int(_SHINGLE_K)) & _MASK64)


def shingle_hash32(shingle: bytes) -> int:
    """The default (`poly`) hash of one shingle, given as its words joined by b" ", in plain Python.

    A datasketch `hashfunc`: `batch_shingle_hashes` computes the same values for every shingle of a
    batch at once with arrays; this scalar definition lets tests compare sluice's signatures with
    `datasketch.MinHash(hashfunc=shingle_hash32)`."""
    acc = 0
    for index, word in enumerate(shingle.decode("utf-8").split(" ")):
        acc = _word_hash_int(word) if index == 0 else (acc * int(_SHINGLE_K) + _word_hash_int(word)) & _MASK64
    return _fmix64_int(acc) >> 32


def sha1_hash32(shingle: bytes) -> int:
    """datasketch's default hash function (`datasketch.hashfunc.sha1_hash32`)."""
    return int.from_bytes(hashlib.sha1(shingle).digest()[:4], "little")


def _remap(positions: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Where `positions` land once the code points where `kept` is False are removed."""
    kept_before = np.zeros(len(kept) + 1, dtype=np.int64)  # one past the end too: an empty last document
    np.cumsum(kept, out=kept_before[1:])
    return kept_before[positions]


def _collapse_numbers(codepoints: np.ndarray, kinds: np.ndarray, doc_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_NUMBERS.sub("0", text)` on code points: each match (a digit run, optionally one decimal
    separator and the next digit run) becomes one `0`. Matches are found left to right, so in a chain
    `1.2.3` the first link is absorbed and the second is not (`0.0`): a run is the second half of a
    match exactly when its position in its chain of linked runs is odd."""
    numeric = _numeric_table()[codepoints]
    digit = numeric == 1
    if not digit.any():
        return codepoints, kinds, doc_starts
    run_first = np.flatnonzero(digit & ~np.concatenate([[False], digit[:-1]]))
    before = np.maximum(run_first - 1, 0)
    before2 = np.maximum(run_first - 2, 0)
    linked = (run_first >= 2) & (numeric[before] == 2) & digit[before2]
    runs = np.arange(len(run_first))
    chain_position = runs - np.maximum.accumulate(np.where(linked, 0, runs))
    second_half = chain_position % 2 == 1
    keep = ~digit
    keep[run_first[~second_half]] = True  # a match's first digit becomes its "0"
    keep[run_first[second_half] - 1] = False  # the decimal separator inside a match
    codepoints = codepoints.copy()
    kinds = kinds.copy()
    codepoints[run_first[~second_half]] = ord("0")
    kinds[run_first[~second_half]] = WORD_CHAR
    return codepoints[keep], kinds[keep], _remap(doc_starts, keep)


def batch_shingle_hashes(texts: Sequence[str], ngram_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Shingle hashes of many documents at once: (uint32 hashes in document order, shingles per document).

    The prenormalized texts become one array of code points; a lookup table classifies each (word
    character, separator, dropped combining mark, standalone character of a script without spaces);
    word boundaries, word hashes and shingle windows are whole-array operations (no Python per word).
    """
    table = _char_classes()
    prepared = [_prenormalize(text) for text in texts]
    count = len(prepared)
    # Documents joined by a separator, so no word spans two documents.
    codepoints = np.frombuffer("\n".join(prepared).encode("utf-32-le"), dtype=np.uint32)
    doc_starts = np.zeros(count, dtype=np.int64)
    if count > 1:
        np.cumsum(np.fromiter((len(t) + 1 for t in prepared[:-1]), dtype=np.int64, count=count - 1), out=doc_starts[1:])
    kinds = table[codepoints]
    kept = kinds != DROPPED
    if not kept.all():
        codepoints, kinds, doc_starts = codepoints[kept], kinds[kept], _remap(doc_starts, kept)
    codepoints, kinds, doc_starts = _collapse_numbers(codepoints, kinds, doc_starts)
    is_word_char = kinds == WORD_CHAR
    in_word = is_word_char | (kinds == STANDALONE)
    # Two neighbours belong to one word when both are word characters.
    joins_next = is_word_char[:-1] & is_word_char[1:]
    starts = np.flatnonzero(in_word & ~np.concatenate([[False], joins_next]))
    ends = np.flatnonzero(in_word & ~np.concatenate([joins_next, [False]])) + 1
    hashes = _word_hashes(codepoints, starts, ends)
    words_per_doc = np.diff(np.searchsorted(starts, doc_starts), append=len(starts))

    # Windows of ngram_size consecutive words inside one document; fewer words make one window.
    shingles_per_doc = np.where(words_per_doc >= ngram_size, words_per_doc - ngram_size + 1, np.minimum(words_per_doc, 1))
    first_word = np.concatenate([[0], np.cumsum(words_per_doc)[:-1]]).astype(np.int64)
    first_window = np.concatenate([[0], np.cumsum(shingles_per_doc)[:-1]]).astype(np.int64)
    total = int(shingles_per_doc.sum())
    window_doc = np.repeat(np.arange(count, dtype=np.int64), shingles_per_doc)
    window_start = first_word[window_doc] + np.arange(total, dtype=np.int64) - first_window[window_doc]
    window_width = np.minimum(words_per_doc[window_doc], ngram_size)
    return _fold_windows(hashes, window_start, window_width, ngram_size), shingles_per_doc


@lru_cache(maxsize=16)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of datasketch 2.x's `affine32` scheme: a odd, both uint32, from RandomState(seed)."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    a.flags.writeable = False
    b.flags.writeable = False
    return a, b


@dataclass(frozen=True)
class MinHasher:
    """Signatures and band hashes for a fixed configuration (see sluice.config.DedupSettings)."""

    ngram_size: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1
    hash_function: str = "poly"  # poly | sha1 (see the module docstring)

    @classmethod
    def from_settings(cls, settings: DedupSettings) -> MinHasher:
        return cls(settings.ngram_size, settings.bands, settings.rows_per_band, settings.seed, settings.hash_function)

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    def shingle_hashes(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(uint32 shingle hashes of all documents in order, shingles per document)."""
        if self.hash_function == "sha1":
            per_doc = [np.array([sha1_hash32(s) for s in shingles(t, self.ngram_size)], dtype=np.uint32) for t in texts]
            counts = np.array([len(h) for h in per_doc], dtype=np.int64)
            return (np.concatenate(per_doc) if per_doc else np.empty(0, np.uint32)), counts
        return batch_shingle_hashes(texts, self.ngram_size)

    def signatures(self, texts: Sequence[str], shingle_sink: Callable[[int, np.ndarray, np.ndarray], None] | None = None) -> np.ndarray:
        """(len(texts), num_perm) uint32 signatures, equal to datasketch's (see the module docstring).

        `shingle_sink(first_document, hashes, counts)`, if given, receives each batch's shingle hashes (so a
        caller that also needs the shingle sets does not shingle twice)."""
        out = np.full((len(texts), self.num_perm), MAX_HASH32, dtype=np.uint32)
        batch_start, batch_chars = 0, 0
        for index, text in enumerate(texts):
            batch_chars += len(text)
            if batch_chars >= _BATCH_CHARS or index == len(texts) - 1:
                hashes, counts = self.shingle_hashes(texts[batch_start : index + 1])
                if shingle_sink is not None:
                    shingle_sink(batch_start, hashes, counts)
                self._reduce(hashes, counts, out[batch_start : index + 1])
                batch_start, batch_chars = index + 1, 0
        return out

    def _reduce(self, hashes: np.ndarray, counts: np.ndarray, out: np.ndarray) -> None:
        """out[d] = min over document d's shingles of a * fmix32(h) + b (mod 2^32), block by block."""
        a, b = permutations(self.num_perm, self.seed)
        mixed = _fmix32(hashes)
        doc_of_shingle = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        buffer = np.empty((_BLOCK_SHINGLES, self.num_perm), dtype=np.uint32)  # stays in cache, reused
        for start in range(0, len(mixed), _BLOCK_SHINGLES):
            block = mixed[start : start + _BLOCK_SHINGLES]
            docs = doc_of_shingle[start : start + _BLOCK_SHINGLES]
            values = buffer[: len(block)]
            np.multiply(block[:, None], a[None, :], out=values)
            values += b[None, :]
            # Segments of one document inside this block; a document may continue from the last block.
            segment_starts = np.flatnonzero(np.concatenate([[True], docs[1:] != docs[:-1]]))
            segment_docs = docs[segment_starts]
            out[segment_docs] = np.minimum(out[segment_docs], np.minimum.reduceat(values, segment_starts, axis=0))

    def band_hashes(self, signatures: np.ndarray) -> np.ndarray:
        """(documents, bands) uint64: each band's `rows` values folded into one 64-bit hash."""
        return fold_rows(signatures, self.bands, self.rows)


def fold_rows(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    grouped = signatures.reshape(len(signatures), bands, rows).astype(np.uint64)
    with np.errstate(over="ignore"):
        acc = np.full((len(signatures), bands), np.uint64(rows), dtype=np.uint64)
        for row in range(rows):
            acc *= _BAND_K
            acc += grouped[:, :, row]
        return _fmix64(acc)


def candidate_probability(jaccard: float, bands: int = 14, rows: int = 8) -> float:
    """Probability that two documents with this Jaccard similarity share at least one band."""
    return 1.0 - (1.0 - jaccard**rows) ** bands
