"""The word-cache fast path of `sluice.tokens.tokenize.WordCachedEncoder` gives exactly `tokenizer.encode(text).ids`.

On real multilingual pages (../shared/corpus, skipped where absent) with odd whitespace, emoji and digits
worked in; on hypothesis-generated unicode strings (every general category but surrogates, and an alphabet
of the characters the pre-tokenizer regex treats specially); on texts holding added/special tokens or a NUL
(which take the fallback); with add_prefix_space on and off; and with tokenizer configurations the fast path
does not support, which fall back to `encode_batch_fast` and say why. Every cleaned document of the bundled
sample is checked in tests/data_assets/test_graph.py (it needs the materialized graph).

Examples per property: $SLUICE_HYPOTHESIS_EXAMPLES (default 25; `make test-all` runs 300).
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluice.tokens.tokenize
from benchmarks.peers import SHARED
from sluice.tokens.tokenize import WordCachedEncoder, fast_path_blocker, load_tokenizer, train_bpe

EXAMPLES = int(os.environ.get("SLUICE_HYPOTHESIS_EXAMPLES", "25"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=20_000, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
EOS = "<|endoftext|>"

TRAINING = [
    "The quick brown fox jumps over the lazy dog. It's 2026; they'll say we've done 12345 things.\n",
    "Die Katze schläft auf dem Sofa. Überall ist es ruhig.\t\tZweite Spalte",
    "配置 APT 之后，系统会自动升级。 日本語のテキストも少し。",
    "Код на русском: apt-get install -y nginx\n\tотступ и пробелы  двойные",
    "مرحبا بالعالم، هذا نص عربي مع أرقام ١٢٣ و 456",
    "emoji 🙂🚀 and combining marks: e\u0301 and a zero-width joiner 👩\u200d💻 here",
    "한국어 문장도 있습니다. Ελληνικά κείμενα. עברית.",
] * 20


def reference_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    return [tokenizer.encode(text, add_special_tokens=False).ids for text in texts]


def assert_same_ids(encoder: WordCachedEncoder, tokenizer, texts: list[str]) -> None:
    got = encoder.encode(texts)
    assert all(ids.dtype == encoder.dtype for ids in got)
    for text, ids, expected in zip(texts, got, reference_ids(tokenizer, texts), strict=True):
        assert ids.tolist() == expected, f"ids differ for {text!r}"


def with_prefix_space(tokenizer_json: str) -> str:
    config = json.loads(tokenizer_json)
    config["pre_tokenizer"]["add_prefix_space"] = True
    return json.dumps(config)


@pytest.fixture(scope="module")
def trained_json() -> str:
    return train_bpe(iter(TRAINING), 600, EOS).to_str()


# Shared across hypothesis examples, so later examples also run on a warm cache.
ENCODERS: dict[str, WordCachedEncoder] = {}


def encoder_for(tokenizer_json: str) -> WordCachedEncoder:
    if tokenizer_json not in ENCODERS:
        ENCODERS[tokenizer_json] = WordCachedEncoder(tokenizer_json)
    return ENCODERS[tokenizer_json]


def test_trained_tokenizer_takes_the_fast_path_with_identical_ids(trained_json):
    encoder = WordCachedEncoder(trained_json)
    assert encoder.unsupported is None
    tokenizer = load_tokenizer(trained_json)
    assert_same_ids(encoder, tokenizer, TRAINING)
    assert encoder.fallback_documents == 0
    assert encoder.cached_words > 0
    # A second pass is served from the cache and is still exact.
    assert_same_ids(encoder, tokenizer, TRAINING[::-1])


@pytest.mark.parametrize("prefix_space", [False, True])
def test_odd_texts_match(trained_json, prefix_space):
    tokenizer_json = with_prefix_space(trained_json) if prefix_space else trained_json
    encoder = WordCachedEncoder(tokenizer_json)
    texts = [
        "",
        " ",
        "a",
        " leading space",
        "\tleading tab",
        "trailing spaces   ",
        "runs   of\t\t\twhite \n\n\n space\r\n\r\nand\u00a0nbsp\u3000ideographic\u2028line sep",
        "it's they're we've I'm you'll he'd 'S 'T don''t '",
        "digits 0123456789 ١٢٣٤ ²³ ½ Ⅻ 12,345.67",
        "punctuation!!! ... ??? --- ((brackets)) «guillemets» “quotes”",
        "   \n",
        "\n",
        "x" * 5000,
        "🙂" * 50 + " 🏳️\u200d🌈 flags 🇩🇪🇫🇷",
    ]
    assert_same_ids(encoder, load_tokenizer(tokenizer_json), texts)
    assert encoder.fallback_documents == 1  # only the empty text


def test_texts_holding_special_or_added_tokens_fall_back_exactly(trained_json):
    tokenizer = load_tokenizer(trained_json)
    tokenizer.add_tokens(["<extra>", "snake"])  # non-special added tokens are split out first too
    tokenizer_json = tokenizer.to_str()
    encoder = WordCachedEncoder(tokenizer_json)
    assert encoder.unsupported is None
    holding = [f"before{EOS}after", f"{EOS}", "an <extra> token", "rattlesnakes", f"two {EOS}{EOS} in a row"]
    plain = ["nothing special here", "Код на русском"]
    assert_same_ids(encoder, tokenizer, holding + plain)
    assert encoder.fallback_documents == len(holding)
    eos_id = tokenizer.token_to_id(EOS)
    assert eos_id in encoder.encode([f"a{EOS}b"])[0].tolist()


def test_nul_characters_fall_back_exactly(trained_json):
    encoder = WordCachedEncoder(trained_json)
    texts = ["nul\0inside", "\0", "ends with nul\0"]
    assert_same_ids(encoder, load_tokenizer(trained_json), texts)
    assert encoder.fallback_documents == len(texts)


@pytest.mark.may_skip  # depends on the two engines' Unicode tables, not on the machine
def test_characters_classed_differently_by_the_two_regex_engines_fall_back(trained_json):
    encoder = WordCachedEncoder(trained_json)
    # Letters of Unicode versions newer than tokenizers' Oniguruma tables (the `regex` module knows them as
    # \p{L}); find some rather than naming them, since both tables move with releases.
    candidates = "".join(chr(c) for c in range(0x0530, 0x0600)) + "".join(chr(c) for c in range(0xA7C0, 0xA800))
    unsafe = encoder._class_disagreements(candidates)
    texts = [f"word{c}word and more" for c in sorted(unsafe)[:5]] + ["plain text"]
    assert_same_ids(encoder, load_tokenizer(trained_json), texts)
    assert encoder.fallback_documents == len(texts) - 1
    if not unsafe:
        pytest.skip("both engines class these characters alike in this build; the fallback was not exercised")


UNSUPPORTED = {
    "normalizer": lambda c: c.update(normalizer={"type": "NFKC"}),
    "pre-tokenizer": lambda c: c.update(pre_tokenizer={"type": "Whitespace"}),
    "use_regex": lambda c: c["pre_tokenizer"].update(use_regex=False),
    "dropout": lambda c: c["model"].update(dropout=0.5),
    "truncation": lambda c: c.update(truncation={"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0}),
    "post-processor": lambda c: c.update(post_processor={"type": "BertProcessing", "sep": [EOS, 0], "cls": [EOS, 0]}),
    "NUL in an added token": lambda c: c["added_tokens"].append({**c["added_tokens"][0], "id": len(c["model"]["vocab"]), "content": "x\0y"}),
}


SUPPORTED_POST_PROCESSORS = {
    "ByteLevel": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "TemplateProcessing": {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": EOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {EOS: {"id": EOS, "ids": [0], "tokens": [EOS]}},
    },
}


@pytest.mark.parametrize("post_processor", sorted(SUPPORTED_POST_PROCESSORS))
def test_post_processors_that_add_nothing_without_special_tokens_keep_the_fast_path(trained_json, post_processor):
    config = json.loads(trained_json)
    config["post_processor"] = SUPPORTED_POST_PROCESSORS[post_processor]
    tokenizer = load_tokenizer(json.dumps(config))
    encoder = WordCachedEncoder(tokenizer.to_str())
    assert encoder.unsupported is None
    assert_same_ids(encoder, tokenizer, TRAINING[:7])
    if post_processor == "TemplateProcessing":  # with special tokens it would prepend EOS: not what shards hold
        assert tokenizer.encode("abc").ids[0] == tokenizer.token_to_id(EOS) != tokenizer.encode("abc", add_special_tokens=False).ids[0]


@pytest.mark.parametrize("change", sorted(UNSUPPORTED))
def test_unsupported_configs_fall_back_to_encode_batch_fast(trained_json, change):
    config = json.loads(trained_json)
    UNSUPPORTED[change](config)
    tokenizer_json = load_tokenizer(json.dumps(config)).to_str()  # what tokenize_part sees: every field named
    assert fast_path_blocker(json.loads(tokenizer_json)) is not None
    encoder = WordCachedEncoder(tokenizer_json)
    assert encoder.unsupported is not None
    texts = ["ﬁne ﬂour, ２０２６ and   spaces", "Die Katze schläft auf dem Sofa."]
    if change != "dropout":  # dropout is random per call: nothing to compare with
        assert_same_ids(encoder, load_tokenizer(tokenizer_json), texts)
    assert encoder.cached_words == 0


def test_normalizer_would_change_ids_so_its_fallback_matters(trained_json):
    """The fallback is not a formality: with NFKC the naive word path would give other ids."""
    config = json.loads(trained_json)
    config["normalizer"] = {"type": "NFKC"}
    normalized = load_tokenizer(json.dumps(config))
    text = "ﬁne ２０２６"
    assert normalized.encode(text).ids != load_tokenizer(trained_json).encode(text).ids
    assert WordCachedEncoder(normalized.to_str()).encode([text])[0].tolist() == normalized.encode(text).ids


def test_word_cache_is_bounded_and_stays_exact(trained_json, monkeypatch):
    monkeypatch.setattr(sluice.tokens.tokenize, "WORD_CACHE_ENTRIES", 50)
    encoder = WordCachedEncoder(trained_json)
    tokenizer = load_tokenizer(trained_json)
    rng = random.Random(7)
    words = " ".join(TRAINING).split()
    for _ in range(6):
        texts = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(10)]
        assert_same_ids(encoder, tokenizer, texts)
        # Emptied before a batch once over the bound: at most the bound plus one batch's new words.
        assert encoder.cached_words <= 50 + len({w for t in texts for w in encoder._split_words(t)})


def test_word_encoding_chunks_split_back_into_words(trained_json, monkeypatch):
    """Several chunks of cache misses per batch (a small WORDS_PER_CHUNK) give the same ids."""
    monkeypatch.setattr(sluice.tokens.tokenize, "WORDS_PER_CHUNK", 3)
    encoder = WordCachedEncoder(trained_json)
    assert_same_ids(encoder, load_tokenizer(trained_json), TRAINING[:7])


# ------------------------------------------------------------------------------------------ hypothesis

ANY_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)
# What the pre-tokenizer regex cares about: contractions, spaces before words/digits/punctuation, runs of
# whitespace of every kind, letters and digits of several scripts, marks, emoji and joiners.
SPECIAL = [
    "'", "s", "t", "re", "ve", "m", "ll", "d", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\x0b", "\x1c",
    "a", "Z", "é", "ß", "я", "Ж", "中", "文", "の", "ك", "١", "٣", "0", "42", "²", "Ⅻ", "½", "\u0301", "\u200d",
    "🙂", "👩", "💻", "🇩", ".", ",", "!", "?", "-", "_", "(", ")", "«", "»", "$", "€", "<", "|", ">",
]
TOKEN_SOUP = st.lists(st.sampled_from(SPECIAL), max_size=40).map("".join)
TEXTS = st.lists(st.one_of(ANY_TEXT, TOKEN_SOUP), min_size=1, max_size=8)


@PROPERTY
@given(texts=TEXTS, prefix_space=st.booleans())
def test_generated_unicode_texts_match(trained_json, texts, prefix_space):
    tokenizer_json = with_prefix_space(trained_json) if prefix_space else trained_json
    assert_same_ids(encoder_for(tokenizer_json), load_tokenizer(tokenizer_json), texts)


# ------------------------------------------------------------------------- real multilingual pages


def corpus_texts(per_file: int) -> list[str]:
    """Main text of the first `per_file` HTML pages of every WARC file of ../shared/corpus."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    from warcio.archiveiterator import ArchiveIterator

    texts = []
    for path in sorted((SHARED / "corpus").glob("*/*/*.warc.gz")):
        taken = 0
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type != "response" or taken >= per_file:
                    continue
                body = record.content_stream().read()
                text = extract_plain_text(bytes_to_str(body, detect_encoding(body)), main_content=True)
                if len(text) >= 200:
                    texts.append(text)
                    taken += 1
    return texts


def roughen(text: str, rng: random.Random) -> str:
    """The same page with odd whitespace runs, tabs/newlines, emoji and digits worked in."""
    pieces = text.split(" ")
    extras = ["\t", "\n\n", "  ", "\u00a0", "\u3000", " \t \n", "🙂", "🚀👩\u200d💻", "2026", "١٢٣", " 3.14 ", "’s", "'ll"]
    return "".join(piece + (rng.choice(extras) if rng.random() < 0.15 else " ") for piece in pieces)


@pytest.mark.skipif(not (SHARED / "corpus").is_dir(), reason="../shared/corpus is not here")
def test_multilingual_corpus_pages_match():
    rng = random.Random(0)
    pages = corpus_texts(per_file=10)
    assert len(pages) >= 250
    texts = pages + [roughen(page, rng) for page in pages]
    # A tokenizer trained on these pages has merges in every script; encode in batches like tokenize_part.
    tokenizer_json = train_bpe(iter(pages), 4000, EOS).to_str()
    tokenizer = load_tokenizer(tokenizer_json)
    encoder = WordCachedEncoder(tokenizer_json)
    expected = reference_ids(tokenizer, texts)
    got = []
    for start in range(0, len(texts), 128):
        got.extend(ids.tolist() for ids in encoder.encode(texts[start : start + 128]))
    mismatched = [index for index, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
    assert mismatched == []
    assert encoder.fallback_documents < len(texts) // 100  # the fast path did the work
    assert np.mean([len(ids) for ids in expected]) > 50


def test_tokenize_part_reports_the_encoder_and_its_fallback_documents(tmp_path, trained_json):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sluice.tokens.tokenize import TokenizeTask, tokenize_part

    texts = ["plain text", f"holds {EOS} inside", "more plain text", ""]
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts}), tmp_path / "in" / "part-00000.parquet")
    task = TokenizeTask(str(tmp_path / "in"), "part-00000.parquet", str(tmp_path / "out"), 0, trained_json, EOS)
    result = tokenize_part(task)
    assert result["fast_path_unsupported"] is None
    assert result["fallback_documents"] == 2
    config = json.loads(trained_json)
    config["normalizer"] = {"type": "NFC"}
    other = tokenize_part(TokenizeTask(str(tmp_path / "in"), "part-00000.parquet", str(tmp_path / "out2"), 0, json.dumps(config), EOS))
    assert other["fast_path_unsupported"] == "normalizer NFC"
    assert other["fallback_documents"] == 0
