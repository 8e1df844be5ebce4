"""MinHash signatures: datasketch-equal values on real documents, normalization, word splitting, bands."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from datasketch import MinHash
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from warcio.archiveiterator import ArchiveIterator

from sluice.config import DedupSettings
from sluice.dedup.minhash import (
    MAX_HASH32,
    MinHasher,
    batch_shingle_hashes,
    candidate_probability,
    shingle_hash32,
    shingles,
    words,
)

SAMPLE = Path(__file__).resolve().parents[3] / "sample_data"


def sample_texts() -> list[str]:
    """Main text of every page of the bundled sample (en, de, ru, zh, fr, ja) plus the reference chapters."""
    texts = []
    for path in sorted(SAMPLE.glob("web/*/*.warc.gz")):
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                if record.rec_type == "response":
                    tree = HTMLTree.parse_from_bytes(record.content_stream().read())
                    texts.append(extract_plain_text(tree, main_content=True))
    with gzip.open(SAMPLE / "reference/2026-01/debian-reference.jsonl.gz", "rt") as handle:
        texts.extend(json.loads(line)["text"] for line in handle)
    return texts


@pytest.fixture(scope="module")
def texts() -> list[str]:
    found = sample_texts()
    assert len(found) > 80
    return found


def test_signatures_equal_datasketch_on_sample_documents(texts):
    hasher = MinHasher()
    signatures = hasher.signatures(texts)
    assert signatures.shape == (len(texts), 112) and signatures.dtype == np.uint32
    for index, text in enumerate(texts):
        reference = MinHash(num_perm=112, seed=1, hashfunc=shingle_hash32)
        reference.update_batch(shingles(text, 5))
        assert np.array_equal(reference.hashvalues, signatures[index]), f"document {index}"


def test_sha1_mode_equals_datasketch_defaults(texts):
    hasher = MinHasher(hash_function="sha1", bands=16, rows=8, seed=7, ngram_size=3)
    chosen = texts[::9]
    signatures = hasher.signatures(chosen)
    for index, text in enumerate(chosen):
        reference = MinHash(num_perm=128, seed=7)  # datasketch's default hash (sha1_hash32), default scheme
        for shingle in shingles(text, 3):
            reference.update(shingle)  # the documented per-shingle way
        assert np.array_equal(reference.hashvalues, signatures[index])


def test_vectorized_shingle_hashes_equal_scalar_definition(texts):
    chosen = texts[::5]
    hashes, counts = batch_shingle_hashes(chosen, 5)
    assert counts.sum() == len(hashes)
    offset = 0
    for text, count in zip(chosen, counts, strict=True):
        expected = [shingle_hash32(s) for s in shingles(text, 5)]
        assert hashes[offset : offset + count].tolist() == expected
        offset += count


def test_normalization_as_datatrove():
    # lowercase, numbers (with decimal part) -> 0, punctuation and whitespace separate, diacritics removed
    assert words("Hello,  World!\tPrice: 3.14 EUR (2025) café naïve don't") == [
        "hello", "world", "price", "0", "eur", "0", "cafe", "naive", "don", "t",
    ]
    # digits of other scripts are numbers too
    assert words("١٢٣ apples") == ["0", "apples"]


def test_scripts_without_spaces_split_into_characters():
    assert words("我爱北京天安门") == ["我", "爱", "北", "京", "天", "安", "门"]
    # Japanese: kana and kanji one by one; the voicing mark of ド is a diacritic (dropped, like datatrove)
    assert words("ドメイン名 DNS") == ["ト", "メ", "イ", "ン", "名", "dns"]
    # Hangul is written with spaces: words stay words
    assert len(words("데비안 리눅스")) == 2
    # character 5-grams: one edit in a long Chinese text changes only the shingles that touch it
    text = "数据去重是训练语言模型之前的重要步骤因为网页经常重复出现" * 2
    edited = text[:10] + "新" + text[11:]
    a, b = set(shingles(text, 5)), set(shingles(edited, 5))
    assert len(a & b) / len(a | b) > 0.7


def test_short_and_empty_documents():
    hasher = MinHasher()
    signatures = hasher.signatures(["", "...", "only three words", "only three words"])
    assert (signatures[0] == MAX_HASH32).all() and (signatures[1] == MAX_HASH32).all()
    assert shingles("only three words", 5) == [b"only three words"]
    assert (signatures[2] != MAX_HASH32).any() and np.array_equal(signatures[2], signatures[3])


def test_band_hashes_find_near_duplicates(texts):
    hasher = MinHasher.from_settings(DedupSettings())
    original = texts[0]
    tokens = original.split()
    edited = " ".join(tokens[:-3] + ["changed", "ending", "here"])  # a near duplicate
    bands = hasher.band_hashes(hasher.signatures([original, edited, texts[1]]))
    assert bands.shape == (3, 14) and bands.dtype == np.uint64
    assert (bands[0] == bands[1]).any()
    assert not (bands[0] == bands[2]).any()
    assert candidate_probability(0.8) > 0.9 and candidate_probability(0.5) < 0.06


def test_signatures_do_not_depend_on_batching(texts):
    hasher = MinHasher()
    together = hasher.signatures(texts[:30])
    one_by_one = np.vstack([hasher.signatures([t]) for t in texts[:30]])
    assert np.array_equal(together, one_by_one)
