"""Word splitting for the quality filters, without assuming English.

The filters only need a token list (to count words, measure them and build n-grams), so a whitespace split
and a few precompiled regular expressions are enough; no per-language NLP model is loaded.

Tokens follow the outline of spaCy's rule-based tokenizer (what datatrove uses, in English, by default):
- split at whitespace; a chunk of letters/digits only is one token (the fast path);
- otherwise opening brackets and quotes at its start and closing punctuation, quotes and English
  contractions (`n't`, `'s`) at its end are tokens of their own (`...` is one token); a hyphen between two
  letters and `/ : = < >` before a letter split it (URLs stay whole); the rest (`deb.debian.org`,
  `--detail`, `RAID-1`, `2.6.32`) is one token.
- in `multilingual` mode (sluice's default), every character of a script written without spaces between
  words (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar, Tibetan) is one token: a Chinese sentence of
  20 characters is 20 "words". `english` mode leaves such runs whole, as datatrove does by default (a line
  of Chinese is one long "word"); the quality benchmark uses it to compare decisions on the same rules.

Stop words: Gopher's rule needs a few of the most frequent function words. `STOP_WORDS` holds the Gopher
list for English and comparable lists for other languages; a language without a list (and every spaceless
script, and Korean, whose particles attach to words) skips that rule rather than failing every document
of that language.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import chain

# Scripts written without spaces between words (one character = one token).
NO_SPACE = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u0f00-\u0fff"  # Tibetan
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff\u31f0-\u31ff"  # Hiragana, Katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uff66-\uff9f"  # half-width Katakana
    "\U00020000-\U0003134f"  # CJK extensions B..H
)
# Combining marks that Python's `\w` does not count as word characters but that belong inside words.
MARKS = "\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0900-\u0dff"

# A word: letters/digits of a spaced script, combining marks inside it, apostrophes and dots inside it
# (`don't`, `l'homme`, `example.com`, `2.6.32`: one token each, as spaCy's tokenizer keeps them).
# Written as an unrolled loop so the common case (no marks) runs as one character-class scan. Each turn of
# the loop starts with one mark that is not a word character (the lookahead keeps \\W to MARKS): word
# characters inside MARKS (Devanagari letters) belong to the class scans only, so a string splits into
# turns in exactly one way and a failing match cannot retry exponentially many splits.
_RUN = rf"[^\W{NO_SPACE}]+(?:(?=[{MARKS}])\W[^\W{NO_SPACE}]*)*"
MULTILINGUAL_TOKEN = re.compile(rf"[{NO_SPACE}]|{_RUN}(?:[.'’]{_RUN})*|\.\.\.|[^\w\s{MARKS}]")
NO_SPACE_CHAR = re.compile(f"[{NO_SPACE}]")
# A letter of any script (a word character that is neither a digit nor `_`): "has a letter" for the Gopher
# alpha rule, the code-share features and the toxicity lists' terms.
HAS_LETTER = re.compile(r"[^\W\d_]").search

# Tokens that count as symbols, not words (Gopher's word counts leave them out). The ASCII and common
# typographic punctuation, as in datatrove's PUNCTUATION set.
PUNCTUATION = set(
    "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»"
) | {"..."}

STOP_WORDS: dict[str, frozenset[str]] = {
    # Gopher's list (Rae et al. 2021), as datatrove uses it.
    "en": frozenset({"the", "be", "to", "of", "and", "that", "have", "with"}),
    "de": frozenset({"der", "die", "und", "das", "in", "zu", "den", "mit", "von", "ist", "nicht", "sich"}),
    "fr": frozenset({"le", "la", "les", "de", "et", "des", "un", "une", "du", "est", "en", "que"}),
    "es": frozenset({"el", "la", "de", "que", "y", "en", "los", "las", "un", "una", "por", "con"}),
    "it": frozenset({"il", "la", "di", "che", "e", "un", "una", "per", "non", "con", "del", "le"}),
    "pt": frozenset({"o", "a", "de", "que", "e", "do", "da", "em", "um", "uma", "para", "com"}),
    "nl": frozenset({"de", "het", "een", "en", "van", "is", "dat", "op", "te", "in", "met", "voor"}),
    "ca": frozenset({"el", "la", "de", "que", "i", "en", "els", "les", "un", "una", "per", "amb"}),
    "ro": frozenset({"și", "de", "la", "în", "a", "pe", "cu", "nu", "este", "un", "o", "care"}),
    "sv": frozenset({"och", "att", "det", "som", "en", "på", "är", "av", "för", "med", "den", "till"}),
    "da": frozenset({"og", "at", "det", "en", "den", "til", "er", "som", "på", "de", "med", "for"}),
    "nb": frozenset({"og", "i", "det", "som", "en", "på", "er", "til", "av", "for", "med", "at"}),
    "no": frozenset({"og", "i", "det", "som", "en", "på", "er", "til", "av", "for", "med", "at"}),
    "pl": frozenset({"i", "w", "nie", "na", "się", "z", "do", "to", "że", "jest", "o", "jak"}),
    "cs": frozenset({"a", "v", "se", "na", "je", "že", "to", "s", "z", "do", "pro", "jako"}),
    "hr": frozenset({"i", "u", "je", "na", "se", "da", "za", "od", "s", "su", "kao", "ili"}),
    "ru": frozenset({"и", "в", "не", "на", "что", "с", "по", "как", "это", "для", "из", "к"}),
    "tr": frozenset({"ve", "bir", "bu", "da", "de", "için", "ile", "olarak", "çok", "daha", "gibi", "ne"}),
    "id": frozenset({"yang", "dan", "di", "ini", "itu", "dengan", "untuk", "dari", "dalam", "tidak", "ke", "akan"}),
    "vi": frozenset({"và", "của", "là", "có", "được", "các", "cho", "trong", "một", "không", "với", "này"}),
    "el": frozenset({"και", "το", "η", "της", "του", "να", "σε", "με", "για", "τα", "την", "που"}),
    "ar": frozenset({"في", "من", "على", "أن", "إلى", "التي", "الذي", "عن", "ما", "هذا", "مع", "أو"}),
    "fa": frozenset({"و", "در", "به", "از", "که", "این", "را", "با", "است", "برای", "آن", "یک"}),
}


# Tokenisation follows spaCy's rule-based English tokenizer in outline (what datatrove uses): split at
# whitespace; then split off opening brackets/quotes at the start of a chunk and closing punctuation, quotes
# and English contractions (`n't`, `'s`) at its end; split a hyphen between two letters and `/ : = < >`
# before a letter (URLs stay whole). The rest of a chunk (`deb.debian.org`, `--detail`, `RAID-1`,
# `2.6.32`) is one token.
_PREFIX = "([{\"'“‘«¡¿<*$#§="
_SUFFIX = ")]}\"'”’»,;:!?%>*。，、！？；：」』）"
_PREFIX_CHARS = frozenset(_PREFIX)
_SUFFIX_CHARS = frozenset(_SUFFIX + ".…")  # `...` is three of these; _SUFFIX_TOKEN groups them
_CONTRACTIONS = ("n't", "n’t", "'s", "’s", "'ll", "'re", "'ve", "'d", "'m")
_SUFFIX_TOKEN = re.compile(r"n['’]t|['’](?:s|ll|re|ve|d|m)|\.\.\.|.", re.DOTALL)
_INFIX = re.compile(r"(?<=[^\W\d_])(-)(?=[^\W\d_])|(?<=[^\W_])([:<>=/])(?=[^\W\d_])")
_INFIX_CHARS = "-:<>=/"


def split_affixes(chunk: str) -> tuple[str, str, str]:
    """(prefix, core, suffix) of a chunk, in one pass from each end (linear in its length).

    prefix: the longest run of opening characters at the start; suffix: the longest tail made of an
    optional English contraction followed by closing characters (`.` and `…` included) that leaves the
    prefix alone; core: what lies between. This is what the pattern
    `([PREFIX]*)(.*?)((?:n't|'s|...)?[SUFFIX.…]*)` yields under `fullmatch` (tests compare the two), without
    the backtracking that made such a pattern exponential in a run of dots followed by other punctuation.
    """
    end = len(chunk)
    start = 0
    while start < end and chunk[start] in _PREFIX_CHARS:
        start += 1
    tail = end
    while tail > start and chunk[tail - 1] in _SUFFIX_CHARS:
        tail -= 1
    if "'" in chunk or "’" in chunk:  # every contraction has an apostrophe
        for contraction in _CONTRACTIONS:
            if tail - len(contraction) >= start and chunk.endswith(contraction, 0, tail):
                tail -= len(contraction)
                break
    return chunk[:start], chunk[start:tail], chunk[tail:]


def _split_chunk(chunk: str, out: list[str], spaceless: bool) -> None:
    prefix, core, suffix = split_affixes(chunk)
    out.extend(prefix)
    if core:
        if spaceless and NO_SPACE_CHAR.search(core):
            out.extend(MULTILINGUAL_TOKEN.findall(core))
        elif core.isalnum():  # no infix mark in it
            out.append(core)
        # Substring searches, not set.isdisjoint(core): iterating a string makes one object per character
        # outside Latin-1, the largest cost of one megabyte-long token of such characters.
        elif any(mark in core for mark in _INFIX_CHARS) and "://" not in core:
            out.extend(part for part in _INFIX.split(core) if part)
        else:
            out.append(core)
    if suffix:
        out.extend(_SUFFIX_TOKEN.findall(suffix))


_SIMPLE_SUFFIX = frozenset(",.;:!?)")


def tokenize(text: str, multilingual: bool = True) -> list[str]:
    """The tokens of `text` (see the module docstring)."""
    return _tokens(text, multilingual and NO_SPACE_CHAR.search(text) is not None)


def tokens_of_chunks(chunks: list[str], spaceless: bool) -> list[str]:
    """tokenize's result for a text of these whitespace-separated chunks (`text.split()`) whose spaceless
    decision (`multilingual` and a spaceless-script character in it) the caller already knows."""
    return list(chain.from_iterable(map(_KNOWN[spaceless].__getitem__, chunks)))


_WHITESPACE = re.compile(r"\s")  # what str.split() splits at (both use Python's Unicode whitespace test)


def token_windows(text: str, multilingual: bool = True, window: int = 1 << 16) -> Iterator[list[str]]:
    """`tokenize(text, multilingual)` in pieces: the tokens of consecutive windows of about `window`
    characters, each cut at whitespace. Tokens never span whitespace, so the pieces concatenate to tokenize's
    list; a caller that consumes them one at a time keeps a small working set (a multi-megabyte text
    otherwise becomes one list of hundreds of thousands of strings, and the cost per character grows as
    it outgrows the CPU caches)."""
    spaceless = multilingual and NO_SPACE_CHAR.search(text) is not None  # decided once, as tokenize does
    start, end = 0, len(text)
    while start < end:
        cut = _WHITESPACE.search(text, start + window) if start + window < end else None
        stop = cut.start() if cut is not None else end
        yield _tokens(text[start:stop], spaceless)
        start = stop


def _chunk_tokens(chunk: str, spaceless: bool) -> tuple[str, ...]:
    """The tokens of one whitespace-free chunk (in a text whose spaceless-script decision is `spaceless`)."""
    if not spaceless:
        if chunk.isalnum() or len(chunk) == 1:  # most chunks: a plain word (or one symbol)
            return (chunk,)
        if chunk[-1] in _SIMPLE_SUFFIX and chunk[:-1].isalnum():  # a word and one comma, period, ...
            return (chunk[:-1], chunk[-1])
    out: list[str] = []
    _split_chunk(chunk, out, spaceless)
    return tuple(out)


# Tokens of the chunks seen lately, per spaceless decision (what spaCy's tokenizer does too: its cache maps a
# chunk to its tokens). Text repeats its words, and the filters tokenize a text again after C4 edits it, so
# most chunks are looked up at C speed, not split. Bounded: cleared when it holds _KNOWN_MAX chunks; a chunk
# longer than _KNOWN_CHARS or of more than _KNOWN_TOKENS tokens is not kept (a hostile megabyte-long chunk
# must not stay in memory). About 10 MB on ordinary text, 50 MB at most.
_KNOWN_MAX = 1 << 16
_KNOWN_CHARS = 32
_KNOWN_TOKENS = 4


class _ChunkCache(dict):
    """chunk -> its tokens for one spaceless decision; a chunk not in it is split (and kept) on lookup."""

    def __init__(self, spaceless: bool) -> None:
        super().__init__()
        self.spaceless = spaceless

    def __missing__(self, chunk: str) -> tuple[str, ...]:
        tokens = _chunk_tokens(chunk, self.spaceless)
        if len(chunk) <= _KNOWN_CHARS and len(tokens) <= _KNOWN_TOKENS:
            if len(self) >= _KNOWN_MAX:
                self.clear()
            self[chunk] = tokens
        return tokens


_KNOWN = {False: _ChunkCache(False), True: _ChunkCache(True)}


def clear_chunk_cache() -> None:
    """Forget the cached chunks (benchmarks that clean the same documents twice in one process start each
    timed pass cold)."""
    for known in _KNOWN.values():
        known.clear()


def _tokens(text: str, spaceless: bool) -> list[str]:
    """The tokens of each whitespace-separated chunk, in order: dict lookups and a flatten at C speed; only
    a chunk not seen lately is split in Python (_ChunkCache.__missing__)."""
    return tokens_of_chunks(text.split(), spaceless)


def spaceless_share(text: str, n_words: int) -> float:
    """Share of a document's `n_words` tokens that are characters of a spaceless script."""
    if n_words <= 0:
        return 0.0
    return len(NO_SPACE_CHAR.findall(text)) / n_words


# datatrove's PUNCTUATION string (datatrove/utils/text.py) plus the ASCII/C1 controls it appends.
DATATROVE_PUNCTUATION = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    chr(x) for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b)
)
