"""Hostile text through every text function: the adversarial families of benchmarks/hostile_inputs.py and hypothesis'
mixtures of them (runs of every punctuation class, dotted leaders, nested brackets, megabyte tokens, mixed
scripts with combining marks).

Where a pattern was rewritten to remove backtracking, the new code is compared with the old pattern as the
reference implementation, on inputs short enough for the old one to finish: the word splitter (its affix
pattern, exponential in a run of dots), the multilingual word run, the C4 sentence ends and the meta-charset
pattern. Everything else must return a result without raising for every family, and the PII redaction must
leave nothing `find_pii` (the blocking check) would find. That these functions are linear in their input is
measured by benchmarks/hostile_text.py (input doubling), not asserted here: no test is timed.

Examples per property: $SLUICE_HYPOTHESIS_EXAMPLES (default 25; `make test-all` runs 300).
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from benchmarks.hostile_inputs import FAMILIES, PUNCTUATION_RUNS, text_functions
from sluice import words
from sluice.clean.steps.pii import find_pii, redact
from sluice.words import MARKS, NO_SPACE, split_affixes, tokenize
from tests.sluice.test_regex_audit import OLD_CHUNK

EXAMPLES = int(os.environ.get("SLUICE_HYPOTHESIS_EXAMPLES", "25"))
PROPERTY = settings(max_examples=EXAMPLES * 4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ----------------------------------------------------------------------------- reference implementations

REFERENCE_CHUNK = re.compile(OLD_CHUNK, re.DOTALL)
_OLD_RUN = rf"[^\W{NO_SPACE}]+(?:[{MARKS}]+[^\W{NO_SPACE}]*)*"
REFERENCE_MULTILINGUAL_TOKEN = re.compile(rf"[{NO_SPACE}]|{_OLD_RUN}(?:[.'’]{_OLD_RUN})*|\.\.\.|[^\w\s{MARKS}]")
REFERENCE_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*\s+(?=\S)")
REFERENCE_SENTENCE_END_MULTI = re.compile(r"[.!?]+[\"'”’)\]»]*\s+(?=\S)|[。！？؟۔।॥።]+[」』”’)）]*(?=\S)")
REFERENCE_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.IGNORECASE)
MAX_REFERENCE_DOTS = 12  # the reference affix pattern takes ~1.47^n steps on a run of n dots


def reference_tokenize(text: str, multilingual: bool = True) -> list[str]:
    """sluice.words.tokenize as it was with the backtracking patterns (the same rules, written as regexes)."""

    def split_chunk(chunk: str, out: list[str], spaceless: bool) -> None:
        prefix, core, suffix = REFERENCE_CHUNK.fullmatch(chunk).groups()
        out.extend(prefix)
        if core:
            if spaceless and words.NO_SPACE_CHAR.search(core):
                out.extend(REFERENCE_MULTILINGUAL_TOKEN.findall(core))
            elif not frozenset("-:<>=/").isdisjoint(core) and "://" not in core:
                out.extend(part for part in words._INFIX.split(core) if part)
            else:
                out.append(core)
        if suffix:
            out.extend(words._SUFFIX_TOKEN.findall(suffix))

    out: list[str] = []
    if multilingual and words.NO_SPACE_CHAR.search(text) is not None:
        for chunk in text.split():
            split_chunk(chunk, out, True)
        return out
    for chunk in text.split():
        if chunk.isalnum() or len(chunk) == 1:
            out.append(chunk)
        elif chunk[-1] in ",.;:!?)" and chunk[:-1].isalnum():
            out.extend([chunk[:-1], chunk[-1]])
        else:
            split_chunk(chunk, out, False)
    return out


def longest_dot_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"\.+", text)), default=0)


# ------------------------------------------------------------------------------------------- strategies

AFFIX_ALPHABET = words._PREFIX + words._SUFFIX + ".…" + "ntsdlmrev'’abc-+=/:1"
HOSTILE_ALPHABET = PUNCTUATION_RUNS + "abcXYZ019 \n\t\u00a0漢字ひカไकष्\u093f\u0902\u0301é_" + "sntd"
family_piece = st.builds(lambda name, size: FAMILIES[name](size), st.sampled_from(sorted(FAMILIES)), st.integers(1, 400))
hostile_text = st.lists(st.one_of(family_piece, st.text(HOSTILE_ALPHABET, max_size=80)), max_size=8).map("".join)


# -------------------------------------------------------------------- rewritten patterns = their references


@PROPERTY
@given(st.text(AFFIX_ALPHABET, min_size=1, max_size=16))
def test_split_affixes_equals_the_reference_pattern(chunk):
    assume(longest_dot_run(chunk) <= MAX_REFERENCE_DOTS)
    assert split_affixes(chunk) == REFERENCE_CHUNK.fullmatch(chunk).groups()


@PROPERTY
@given(hostile_text, st.booleans())
def test_tokenize_equals_the_reference_on_hostile_text(text, multilingual):
    assume(longest_dot_run(text) <= MAX_REFERENCE_DOTS)
    assert tokenize(text, multilingual) == reference_tokenize(text, multilingual)


WINDOW_ALPHABET = HOSTILE_ALPHABET + "ΟΔΣσς ΑΣ\u2028\x1c\x85\u3000"  # Greek sigma; every kind of Unicode whitespace


@PROPERTY
@given(st.lists(st.one_of(hostile_text, st.text(WINDOW_ALPHABET, max_size=80)), max_size=6).map("".join), st.booleans(), st.integers(1, 40))
def test_token_windows_concatenate_to_tokenize(text, multilingual, window):
    pieces = list(words.token_windows(text, multilingual, window))
    assert [token for piece in pieces for token in piece] == tokenize(text, multilingual)
    if len(text) > 2 * window and any(c.isspace() for c in text[window:-window]):
        assert len(pieces) > 1  # it does cut


@PROPERTY
@given(st.lists(st.text(WINDOW_ALPHABET.replace(" ", "") + "ΣΣΣ123", min_size=1, max_size=6), max_size=40), st.integers(1, 5))
def test_lm_line_in_batches_equals_one_lowercasing(tokens, batch):
    from sluice.clean.steps import perplexity

    whole = " ".join(tokens).lower().translate(perplexity._DIGITS)
    saved = perplexity._BATCH_TOKENS
    perplexity._BATCH_TOKENS = batch
    try:
        assert perplexity.lm_line(tokens) == whole
    finally:
        perplexity._BATCH_TOKENS = saved


@PROPERTY
@given(st.lists(st.one_of(hostile_text, st.text(WINDOW_ALPHABET, max_size=80)), max_size=6).map("".join), st.integers(1, 40), st.integers(1, 5))
def test_text_line_equals_the_line_of_all_tokens(text, window, batch):
    from sluice.clean.steps import perplexity

    whole = " ".join(tokenize(text, True)).lower().translate(perplexity._DIGITS)
    saved = perplexity._WINDOW_CHARS, perplexity._BATCH_TOKENS
    perplexity._WINDOW_CHARS, perplexity._BATCH_TOKENS = window, batch
    try:
        assert perplexity.text_line(text) == whole
    finally:
        perplexity._WINDOW_CHARS, perplexity._BATCH_TOKENS = saved


# NFKC/casefold changes (℡ → tel, ﬁ → fi, ß → ss, full-width letters, jamo composing to hangul), characters
# in the one-character-word ranges that are not letters (・), underscores and ideographs next to letters.
DECONTAMINATION_ALPHABET = WINDOW_ALPHABET + "℡ﬁßＡｂ\u1100\u1161\u11a8가・_中文a1 "


@PROPERTY
@given(st.lists(st.one_of(hostile_text, st.text(DECONTAMINATION_ALPHABET, max_size=80)), max_size=6).map("".join), st.integers(1, 40))
def test_decontamination_word_windows_concatenate_to_words(text, window):
    from sluice.dedup.decontaminate import word_windows
    from sluice.dedup.decontaminate import words as eval_words

    pieces = list(word_windows(text, window))
    assert [word for piece in pieces for word in piece] == eval_words(text)


def reference_matches(eval_texts: list[str], text: str, n: int) -> int:
    """Windows of n consecutive words of `text` equal to n consecutive words of an evaluation text (tuples in a
    set: no hashing, no ids)."""
    from sluice.dedup.decontaminate import words as eval_words

    grams = set()
    for eval_text in eval_texts:
        tokens = eval_words(eval_text)
        grams.update(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    tokens = eval_words(text)
    return sum(tuple(tokens[i : i + n]) in grams for i in range(len(tokens) - n + 1))


VOCABULARY_TEXT = st.lists(st.sampled_from(["a", "b", "c", "Ab", "中", "文", "_", " ", "。", "ﬁ"]), max_size=60).map(" ".join)


@PROPERTY
@given(st.lists(VOCABULARY_TEXT, min_size=1, max_size=3), VOCABULARY_TEXT, st.integers(1, 4), st.integers(1, 12), st.integers(1, 7))
def test_decontamination_matches_in_windows_and_chunks_equal_the_reference(eval_texts, text, n, window, chunk):
    from sluice.dedup import decontaminate

    saved = decontaminate._WINDOW_CHARS, decontaminate._HASH_CHUNK
    decontaminate._WINDOW_CHARS, decontaminate._HASH_CHUNK = window, chunk
    try:
        ngrams = decontaminate.EvalNgrams.from_texts(eval_texts, n)
        assert ngrams.matches(text) == reference_matches(eval_texts, text, n)
    finally:
        decontaminate._WINDOW_CHARS, decontaminate._HASH_CHUNK = saved


@PROPERTY
@given(st.text(HOSTILE_ALPHABET + "'’.", max_size=60))
def test_multilingual_word_pattern_equals_the_reference(text):
    assert words.MULTILINGUAL_TOKEN.findall(text) == REFERENCE_MULTILINGUAL_TOKEN.findall(text)


@PROPERTY
@given(st.text(".!?。！？\"'”’)]» \nab」』）", max_size=60))
def test_sentence_end_patterns_equal_their_references(line):
    from sluice.clean.steps.filters import _SENTENCE_END, _SENTENCE_END_MULTI

    assert _SENTENCE_END.findall(line) == REFERENCE_SENTENCE_END.findall(line)
    assert _SENTENCE_END_MULTI.findall(line) == REFERENCE_SENTENCE_END_MULTI.findall(line)


@PROPERTY
@given(st.text("<meta charset=\"' utf-8>\t", max_size=60).map(lambda t: t.encode()))
def test_meta_charset_pattern_equals_the_reference(html):
    from sluice.clean.steps.extract import _META_CHARSET

    new, old = _META_CHARSET.search(html), REFERENCE_META_CHARSET.search(html)
    assert (new and (new.span(), new.group(1))) == (old and (old.span(), old.group(1)))


# --------------------------------------------------------------------------- every function, every family


@pytest.fixture(scope="module")
def functions():
    return text_functions()


def test_every_family_through_every_function(functions):
    """Each family at 20,000 characters through every text function: a result, no exception."""
    failures = {}
    for family, build in FAMILIES.items():
        text = build(20_000)
        assert len(text) == 20_000
        for name, function in functions.items():
            try:
                function(text)
            except Exception as error:  # noqa: BLE001 - collected and reported together
                failures[(family, name)] = f"{type(error).__name__}: {error}"
    assert failures == {}


@pytest.mark.parametrize("family", ["one-token letters", "one dotted leader", "run '=' + '+'", "nested parentheses", "devanagari marks"])
def test_megabyte_inputs_through_every_function(functions, family):
    text = FAMILIES[family](1 << 20)
    results = {name: function(text) for name, function in functions.items()}
    if family == "one-token letters":
        assert results["tokenize multilingual"] == [text] and results["tokenize english"] == [text]
    if family == "one dotted leader":  # one chunk, no affix split: the leader ends in '+' (not a suffix)
        assert results["tokenize english"] == [text]


@PROPERTY
@given(hostile_text)
def test_hostile_mixtures_through_every_function(functions, text):
    for function in functions.values():
        function(text)


@PROPERTY
@given(hostile_text)
def test_redaction_leaves_nothing_the_pii_check_finds(text):
    redacted, counts = redact(text)
    assert find_pii(redacted) == {}
    assert redact(redacted) == (redacted, {})
    assert bool(counts) == bool(find_pii(text))
