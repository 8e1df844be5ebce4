"""The cheaper filter code gives what the plain code gave: hypothesis against straightforward references
(datatrove's n-gram rules written on token tuples, the earlier regexes, loop-based counts, tokenizing without
the chunk cache)."""

from __future__ import annotations

import os
import re
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice import words
from sluice.clean.steps import Document
from sluice.clean.steps.filters import (
    _LINE_BREAKS,
    _PARAGRAPH_BREAK,
    _SENTENCE_END,
    _SENTENCE_END_MULTI,
    GopherRepetitionFilter,
    _duplicates,
)
from sluice.config import GopherRepetitionSettings

EXAMPLES = int(os.environ.get("SLUICE_HYPOTHESIS_EXAMPLES", "25"))
PROPERTY = settings(max_examples=EXAMPLES * 8, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The patterns as they were: the lookbehind first, so no fast skip to the next candidate.
OLD_SENTENCE_END = re.compile(r"(?<![.!?])[.!?]+[\"'”’)\]]*\s+(?=\S)")
OLD_SENTENCE_END_MULTI = re.compile(
    r"(?<![.!?])[.!?]+[\"'”’)\]»]*\s+(?=\S)|(?<![。！？؟۔।॥።])[。！？؟۔।॥።]+[」』”’)）]*(?=\S)"
)
OLD_PARAGRAPH_BREAK = re.compile(r"\n{2,}")
OLD_LINE_BREAKS = re.compile(r"\n+")


def old_duplicates(items: list[str]) -> tuple[int, int]:
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars


def reference_repetition(doc: Document, s: GopherRepetitionSettings) -> str | None:
    """datatrove's GopherRepetitionFilter n-gram rules on sluice's tokens (tuples, no hashing, no bound), with
    sluice's one departure: a spaceless script's top n-gram is counted without joining spaces."""
    text = doc.text or ""
    length = len(text) or 1
    paragraphs = OLD_PARAGRAPH_BREAK.split(text.strip())
    dup, chars = old_duplicates(paragraphs)
    if s.dup_para_frac and dup / len(paragraphs) > s.dup_para_frac:
        return "dup_para_frac"
    if s.dup_para_char_frac and chars / length > s.dup_para_char_frac:
        return "dup_para_char_frac"
    lines = OLD_LINE_BREAKS.split(text)
    dup, chars = old_duplicates(lines)
    if s.dup_line_frac and dup / len(lines) > s.dup_line_frac:
        return "dup_line_frac"
    if s.dup_line_char_frac and chars / length > s.dup_line_char_frac:
        return "dup_line_char_frac"
    tokens = doc.tokens(True)
    if not tokens:
        return None
    scale = 2 if doc.mostly_spaceless() else 1
    for n, threshold in sorted(s.top_n_grams.items()):
        span = n * scale
        if len(tokens) < span:
            continue
        grams = Counter(tuple(tokens[i : i + span]) for i in range(len(tokens) - span + 1))
        gram, count = grams.most_common(1)[0]
        # joined by spaces as datatrove joins words; a spaceless script's characters by nothing (sluice's rule)
        if len(("" if scale == 2 else " ").join(gram)) * count / length > threshold:
            return f"top_{n}_gram"
    for n, threshold in sorted(s.dup_n_grams.items()):
        span = n * scale
        if len(tokens) < span:
            continue
        seen: set[tuple[str, ...]] = set()
        repeated, at = 0, 0
        while at < len(tokens) - span + 1:
            gram = tuple(tokens[at : at + span])
            if gram in seen:
                repeated += sum(map(len, gram))
                at += span
            else:
                seen.add(gram)
                at += 1
        if repeated / length > threshold:
            return f"duplicated_{n}_n_grams"
    return None


# Texts with many repeats: a few short words, punctuation and line breaks.
_PIECES = st.sampled_from(["a", "bb", "ccc", "a.", "dd,", "中", "文", "\n", "\n\n", " "])
# A phrase repeated a few times among other pieces.
repetitive = st.builds(
    lambda head, phrase, times, tail: " ".join(head + phrase * times + tail),
    st.lists(_PIECES, max_size=20),
    st.lists(_PIECES, min_size=1, max_size=12),
    st.integers(1, 6),
    st.lists(_PIECES, max_size=40),
)
thresholds = st.floats(0.0, 0.6)


@PROPERTY
@given(
    repetitive,
    st.dictionaries(st.integers(2, 4), thresholds, max_size=3),
    st.dictionaries(st.integers(3, 10), st.floats(0.0, 0.25), max_size=6),
    st.booleans(),
)
def test_gopher_repetition_decides_as_the_reference(text, top, dup, only_dup_n_grams):
    s = GopherRepetitionSettings(top_n_grams=top, dup_n_grams=dup)
    if only_dup_n_grams:  # the other rules off, so the repeated n-gram rules decide
        s = GopherRepetitionSettings(
            top_n_grams={}, dup_n_grams=dup, dup_line_frac=None, dup_para_frac=None, dup_line_char_frac=None, dup_para_char_frac=None
        )
    drop = GopherRepetitionFilter(s).apply(Document.from_text(text))
    assert (None if drop is None else drop.reason) == reference_repetition(Document.from_text(text), s)


@PROPERTY
@given(st.lists(st.sampled_from(["", "a", "ab", "b", "ab"]), max_size=20))
def test_duplicates_counts_as_the_loop(items):
    assert _duplicates(items) == old_duplicates(items)


@PROPERTY
@given(st.text("\na \r", max_size=40))
def test_line_and_paragraph_breaks_split_as_before(text):
    assert _PARAGRAPH_BREAK.split(text.strip()) == OLD_PARAGRAPH_BREAK.split(text.strip())
    assert _LINE_BREAKS.split(text) == OLD_LINE_BREAKS.split(text)


@PROPERTY
@given(st.text(".!?。！？؟\"'”’)]» \t\nab」』）", max_size=60))
def test_sentence_end_patterns_match_as_the_lookbehind_first_ones(line):
    assert _SENTENCE_END.findall(line) == OLD_SENTENCE_END.findall(line)
    assert _SENTENCE_END_MULTI.findall(line) == OLD_SENTENCE_END_MULTI.findall(line)


@PROPERTY
@given(st.lists(st.text("ab.,'(-中 \n", max_size=12), max_size=8), st.booleans())
def test_tokenize_with_a_small_chunk_cache_equals_splitting_every_chunk(texts, multilingual):
    """Clearing the cache when full and dropping long chunks never changes a text's tokens."""
    saved = words._KNOWN_MAX, words._KNOWN_CHARS, words._KNOWN_TOKENS
    words._KNOWN_MAX, words._KNOWN_CHARS, words._KNOWN_TOKENS = 4, 2, 1
    try:
        for text in texts:
            spaceless = multilingual and words.NO_SPACE_CHAR.search(text) is not None
            expected = [token for chunk in text.split() for token in words._chunk_tokens(chunk, spaceless)]
            assert words.tokenize(text, multilingual) == expected
            assert all(len(chunk) <= 2 and len(tokens) <= 1 for chunk, tokens in words._KNOWN[spaceless].items())
    finally:
        words._KNOWN_MAX, words._KNOWN_CHARS, words._KNOWN_TOKENS = saved
        words.clear_chunk_cache()


@PROPERTY
@given(st.text("0123456789١٢ aZéΣ中", max_size=40))
def test_zero_digits_equals_translate(text):
    from sluice.clean.steps import perplexity

    assert perplexity._zero_digits(text) == text.translate(perplexity._DIGITS)


@PROPERTY
@given(st.lists(st.sampled_from(["One two three four.", "Kept line here too!", "中文的句子。", "no end", "[1] x y z.", "p [2] q r.", " a  b\tc. ", "a {b} c d."]), max_size=12))
def test_tokens_after_c4_are_those_of_the_kept_text(lines):
    """C4 replaces the text by its kept lines (keep_part_of_text); the cached word splitting follows."""
    from sluice.clean.steps.filters import C4QualityFilter
    from sluice.config import C4Settings

    doc = Document.from_text("\n".join(lines))
    doc.tokens(True)
    doc.mostly_spaceless()
    if C4QualityFilter(C4Settings(min_num_sentences=1)).apply(doc) is None:
        assert doc.tokens(True) == words.tokenize(doc.text or "", True)
        assert doc.tokens(False) == words.tokenize(doc.text or "", False)
        assert doc.has_spaceless() == (words.NO_SPACE_CHAR.search(doc.text or "") is not None)


def old_is_code_line(line: str) -> bool:
    """sluice.clean.steps.codeshare.is_code_line as it was (translate for the symbol count, the first word split early)."""
    from sluice.clean.steps.codeshare import (
        _BLOCK,
        _BULLETS,
        _CODE_PUNCT,
        _EDGE_CLOSE,
        _EDGE_OPEN,
        _ENDINGS,
        _OPENERS,
        _PROMPTS,
        _SENTENCE_END,
        _SYMBOLS,
        KEYWORDS,
        _first_word,
        _has_flag,
        _is_assignment,
    )
    from sluice.words import HAS_LETTER

    stripped = line.strip()
    if not stripped:
        return False
    if stripped.startswith(_PROMPTS) or stripped.startswith(_OPENERS) or ":~$ " in stripped or ":~# " in stripped:
        return True
    if stripped.endswith(_BLOCK) or stripped.startswith(_EDGE_CLOSE):
        return True
    if stripped[0] == "<" and stripped[-1] == ">" and len(stripped) > 2 and (stripped[1].isalpha() or stripped[1] == "/"):
        return True
    word = _first_word(stripped)
    if stripped.startswith("# ") and len(stripped) > 2:
        command = _first_word(stripped[2:])
        if command.isascii() and command.islower() and command in KEYWORDS:
            return True
    indented = line[:1] == "\t" or line[:2] == "  "
    bullet = stripped.startswith(_BULLETS)
    if not bullet and (indented or stripped.count(";") >= 2) and stripped.endswith((*_ENDINGS, *_EDGE_OPEN)):
        return True
    if bullet or (stripped.endswith(_SENTENCE_END) and stripped.count(" ") >= 5):
        return False
    if stripped.endswith(_ENDINGS) or stripped.endswith(_EDGE_OPEN):
        return True
    if _is_assignment(stripped, word):
        return True
    keyword = word in KEYWORDS
    if keyword:
        if indented:
            return True
        if any(mark in stripped[len(word) :] for mark in _CODE_PUNCT):
            return True
    weak = keyword + (len(stripped) - len(stripped.translate(str.maketrans("", "", _SYMBOLS))) >= 0.12 * len(stripped))
    if weak == 2:
        return True
    weak += _has_flag(stripped)
    if weak == 0:
        return False
    return weak + (HAS_LETTER(stripped) is None) >= 2


_CODE_PIECES = st.sampled_from(
    ["  ", "\t", "$ ", "# ", ">>> ", "//", "<div>", "</p>", "{", "}", ";", "(", ")", "[", "=", "==", "x", "def", "echo",
     "apt", "-r", "--all", "foo_bar", "word", "Wort", "слово", "中文", ".", "!", ":", "•", "- ", ":~$ ", "*/", "@", "1"]
)


@PROPERTY
@given(st.lists(st.one_of(_CODE_PIECES, st.text(" abc;{}.", max_size=4)), max_size=14).map("".join))
def test_code_line_test_is_unchanged(line):
    from sluice.clean.steps.codeshare import is_code_line

    assert is_code_line(line) == old_is_code_line(line)


_CODE_LINE = st.lists(st.one_of(_CODE_PIECES, st.text(" abc;{}.=-~:#<>)$%/*\\\t\u00a0\u2003", max_size=4)), max_size=14).map("".join)


@PROPERTY
@given(_CODE_LINE)
def test_code_line_prefilter_passes_every_code_line(line):
    """The prefilter may pass prose, never code: a line it rejects is one is_code_line rejects."""
    from sluice.clean.steps.codeshare import _may_be_code, is_code_line

    stripped = line.strip()
    if stripped and not _may_be_code(stripped):
        assert not is_code_line(line)


@PROPERTY
@given(st.lists(st.one_of(_CODE_LINE, st.sampled_from(["", " ", "\t", "x" * 201, "def " + "y" * 200])), max_size=12))
def test_code_line_counts_with_the_line_cache_equal_a_loop_over_the_lines(lines):
    """Cached kinds (first and later sightings, lines too long to keep) give the plain loop's counts, whatever
    line break joins the lines."""
    from sluice.clean.steps.codeshare import clear_line_cache, code_line_counts

    clear_line_cache()
    for text in ("\n".join(lines), "\r\n".join(lines), "\u2028".join(reversed(lines))):
        nonblank = [line for line in text.splitlines() if line and not line.isspace()]
        expected = (sum(map(old_is_code_line, nonblank)), len(nonblank))
        assert code_line_counts(text) == expected
        assert code_line_counts(text) == expected  # from the cache


def old_term_count(matcher, tokens: list[str]) -> Counter[str]:
    """sluice.clean.steps.toxicity.TermMatcher.count as it was: every token's counts, multi-token terms by a scan of every
    position (first token in any case, compared lower-cased)."""
    from sluice.clean.steps.toxicity import _display

    counts = Counter(tokens)
    found: Counter[str] = Counter()
    for variant in matcher.spelling_set.intersection(counts):
        found[matcher.spellings[variant]] += counts[variant]
    present = {matcher.part_spellings[v] for v in matcher.part_set.intersection(counts)}
    candidates = [t for first in present.intersection(matcher.multi) for t in matcher.multi[first] if present.issuperset(t)]
    for at, token in enumerate(tokens):
        for term in candidates:
            if token.lower() == term[0] and tuple(t.lower() for t in tokens[at : at + len(term)]) == term:
                found[_display(term)] += 1
    return found


_TERMS = ["bad", "bad word", "word bad word", "ΟΔΟΣ σε", "a a", "İstanbul kötü", "x-rated stuff", "三级片"]
_TERM_TOKENS = st.sampled_from(
    ["bad", "Bad", "BAD", "bAd", "word", "Word", "WORD", "wOrd", "οδος", "ΟΔΟΣ", "Οδος", "σε", "ΣΕ", "a", "A", "İstanbul",
     "i̇stanbul", "kötü", "KÖTÜ", "x", "-", "rated", "x-rated", "stuff", "三", "级", "片", ".", ",", "…", "other", "ς"]
)


@PROPERTY
@given(st.lists(_TERM_TOKENS, max_size=40))
def test_term_counts_from_watched_tokens_equal_the_full_scan(tokens):
    """Listed-term counts from the watched tokens and the joined lower-cased text equal the old scan over every
    token with every token's counts; the word count (tokens less punctuation) is the same too."""
    from sluice.clean.steps.toxicity import TermMatcher
    from sluice.words import PUNCTUATION

    matcher = TermMatcher(_TERMS)
    counts = matcher.watched_counts(tokens)
    assert matcher.count(tokens, counts) == old_term_count(matcher, tokens)
    full = Counter(tokens)
    assert sum(counts[p] for p in counts.keys() & PUNCTUATION) == sum(full[p] for p in full.keys() & PUNCTUATION)


def old_c4(text: str, s, multilingual: bool = True) -> tuple[str | None, str]:
    """C4QualityFilter.apply as it was (word-length test first): (drop reason, kept text)."""
    from sluice.clean.steps.filters import _CITATION, _POLICY, ASCII_TERMINAL, OTHER_TERMINAL
    from sluice.words import PUNCTUATION, tokenize

    terminal = ASCII_TERMINAL + OTHER_TERMINAL if multilingual else ASCII_TERMINAL
    sentence_end = _SENTENCE_END_MULTI if multilingual else _SENTENCE_END
    sentences, kept = 0, []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        words_ = line.split()
        if s.max_word_length != -1 and any(len(word) > s.max_word_length for word in words_):
            continue
        if s.remove_citations and "[" in line:
            line = _CITATION.sub("", line)
        if s.filter_no_terminal_punct and (not line.endswith(terminal) or line.endswith("...")):
            continue
        n_words = len(words_)
        if multilingual and n_words < s.min_words_per_line:
            n_words = sum(1 for w in tokenize(line) if w not in PUNCTUATION)
        if n_words < s.min_words_per_line:
            continue
        lower = line.lower()
        if s.filter_lorem_ipsum and "lorem ipsum" in lower:
            return "lorem_ipsum", text
        if s.filter_javascript and "javascript" in lower:
            continue
        if s.filter_curly_bracket and "{" in line:
            return "curly_bracket", text
        if s.filter_policy and _POLICY.search(lower):
            continue
        sentences += 1 + len(sentence_end.findall(line))
        kept.append(line)
    if sentences < s.min_num_sentences:
        return "too_few_sentences", text
    return None, "\n".join(kept).strip()


_C4_PIECES = st.sampled_from(
    ["word", "Longword", "two words", "x.", "end.", "[1]", "[edit]", "...", "!", "{", "lorem ipsum", "javascript", "privacy policy",
     " ", "  ", "\n", "\n", "\n", "中文。", "a.b", "\t"]
)


@PROPERTY
@given(st.lists(_C4_PIECES, max_size=30).map("".join), st.integers(2, 8), st.integers(-1, 3), st.booleans())
def test_c4_keeps_and_drops_as_before(text, max_word_length, min_sentences, multilingual):
    from sluice.clean.steps.filters import C4QualityFilter
    from sluice.config import C4Settings

    s = C4Settings(max_word_length=max_word_length, min_num_sentences=min_sentences)
    doc = Document.from_text(text)
    drop = C4QualityFilter(s, multilingual).apply(doc)
    reason, kept = old_c4(text, s, multilingual)
    assert (None if drop is None else drop.reason) == reason
    assert (doc.text or "") == kept


def test_language_prediction_from_the_documents_chunks_is_the_same():
    """LanguageFilter hands over the text's cached split(); texts over the prediction's 10,000 characters
    are split from their cut as before."""
    from sluice.clean.models.langid import PREDICT_CHARS, LanguageIdentifier

    identifier = LanguageIdentifier()
    short = "Le chat dort sur le canapé pendant que la pluie tombe.\nIl fait froid."
    long = "Der Hund läuft im Park. " * (PREDICT_CHARS // 20) + "The end of a very long page."
    for text in (short, long, "", "   \n "):
        assert identifier.predict(text, text.split()) == identifier.predict(text)
