"""Adversarial text families, and every function that sees a document's text.

Pages written by anyone contain what no test author thinks of: a 79-character dotted leader in a table of
contents, a megabyte of `=`, a minified script with no space in it, Devanagari with a combining mark on every
letter. `FAMILIES` builds such inputs at any size (characters); `text_functions()` lists every per-document
text function of the cleaning chain, the PII patterns, the normalizers and the dedup / decontamination
tokenizers, each as `f(text)`. benchmarks/hostile_text.py times every pair at doubling sizes (linear =
doubling ratio about 2); tests/sluice/test_hostile_text.py feeds the families, and hypothesis' mixtures of
them, to every function and compares results with reference implementations. (Test and benchmark material:
it lives beside the benchmarks, not in the library; tests import it from here.)
"""

from __future__ import annotations

from collections.abc import Callable

# Punctuation classes whose long runs stress tokenizers and sentence / PII patterns: ASCII punctuation,
# typographic and CJK marks, the characters the word splitter treats as prefixes, suffixes and infixes.
PUNCTUATION_RUNS = ".…!?,;:-–—_'\"’“”()[]{}<>=/\\|@#$%^&*+~`。、！？「」（）"


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _run_then(unit: str, killer: str) -> Callable[[int], str]:
    """A run of `unit` ended by `killer`: the shape that makes a backtracking pattern retry the run."""
    return lambda size: _repeat(unit, max(0, size - len(killer))) + killer


def _families() -> dict[str, Callable[[int], str]]:
    families: dict[str, Callable[[int], str]] = {}
    for char in PUNCTUATION_RUNS:
        families[f"run {char!r} + '+'"] = _run_then(char, "+++++")
        families[f"word {char!r} run + 'a'"] = _run_then("a" + char * 7, "a")
    families.update(
        {
            "dotted leaders": lambda size: _repeat("Installation ....…....+++++ 17\n", size),
            "one dotted leader": _run_then(".", "…....+++++"),
            "spaced dots": _run_then(". ", "x"),
            "nested parentheses": lambda size: "(" * (size // 2) + ")" * (size - size // 2),
            "nested brackets unclosed": _run_then("[", "x"),
            "nested tags": lambda size: _repeat("<b>", size // 2) + _repeat("</b>", size - size // 2),
            "one-token letters": lambda size: "a" * size,
            "one-token digits": lambda size: "7" * size,
            "one-token dotted words": _run_then("ab.", "-"),
            "one-token hyphens": _run_then("ab-", "1"),
            "one-token apostrophes": _run_then("n't", "x"),
            "one-token url": lambda size: "https://example.com/" + _repeat("a/b.c?d=e&", size - 20),
            "newlines": lambda size: "\n" * size,
            "short lines": lambda size: _repeat("a.\n", size),
            "paragraph breaks": lambda size: _repeat("word word.\n\n\n", size),
            "spaces then word": _run_then(" ", "x"),
            "tabs and nbsp": _run_then("\t\u00a0\u3000", "x"),
            "mixed scripts no spaces": lambda size: _repeat("abc漢字ひらカタไทยكتابқазакक्षि", size),
            "devanagari marks": lambda size: _repeat("क्\u0937\u093f\u0902", size),
            "combining marks": lambda size: _repeat("e\u0301\u0308", size),
            "cjk sentences": lambda size: _repeat("漢字です。", size),
            "cjk marks unclosed": _run_then("。", ""),
            "arabic with marks": lambda size: _repeat("كَتَبَ ", size),
            "email-like": _run_then("a@b.", "!"),
            "email dotted local": _run_then("a.", "@x"),
            "email labels": lambda size: "a@" + _repeat("b.", size - 3) + "!",
            "phone-like digits": _run_then("1 ", "x"),
            "phone-like dashes": _run_then("12-", "x"),
            "ipv4-like": _run_then("1.", "1"),
            "ipv6-like": _run_then("ff:", "x"),
            "colons": _run_then(":", "x"),
            "numbers with commas": _run_then("1,", "1"),
            "sentences": lambda size: _repeat("This is a sentence. ", size),
            "lorem-like lines": lambda size: _repeat("the cat sat on the mat and the dog sat too.\n", size),
            "repeated word": lambda size: _repeat("spam ", size),
            "meta charset spaces": lambda size: "<meta charset=" + " " * (size - 15) + "x",
        }
    )
    return families


FAMILIES: dict[str, Callable[[int], str]] = _families()


def text_functions() -> dict[str, Callable[[str], object]]:
    """name -> f(text) for every function that sees a document's text (filters on a fresh Document each call,
    so no token cache is shared between calls)."""
    from sluice.clean import LanguageFilter, normalize_for_hash, text_hash
    from sluice.clean.steps import Document
    from sluice.clean.steps.codeshare import CodeShare
    from sluice.clean.steps.extract import DecodeText, detect_charset
    from sluice.clean.steps.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from sluice.clean.steps.perplexity import text_line
    from sluice.clean.steps.pii import find_pii, redact
    from sluice.clean.steps.toxicity import ToxicityFilter
    from sluice.clean.steps.urlfilter import URLFilter
    from sluice.config import (
        C4Settings,
        CodeShareSettings,
        FineWebQualitySettings,
        GopherQualitySettings,
        GopherRepetitionSettings,
        ToxicitySettings,
    )
    from sluice.dedup.decontaminate import EvalNgrams
    from sluice.dedup.minhash import MinHasher
    from sluice.words import spaceless_share, tokenize

    def doc(text: str) -> Document:
        return Document.from_text(text, url="https://example.com/" + text[:2000])

    def step(instance) -> Callable[[str], object]:
        return lambda text: instance.apply(doc(text))

    language = LanguageFilter((), 0.65, None)
    url_filter = URLFilter({"example-casino.com"}, {"casino"})
    hasher = MinHasher()  # the default configuration (5-word shingles, 14 x 8)
    decode = DecodeText()
    # Evaluation texts sharing the families' words, so documents map to known ids and reach the n-gram hashing.
    eval_ngrams = EvalNgrams.from_texts([build(4096) for build in FAMILIES.values()], 13)

    def byte_level_words(text: str) -> object:
        import regex

        from sluice.tokens.tokenize import BYTE_LEVEL_PATTERN

        return regex.findall(BYTE_LEVEL_PATTERN, text)

    functions: dict[str, Callable[[str], object]] = {
        "tokenize multilingual": lambda text: tokenize(text, True),
        "tokenize english": lambda text: tokenize(text, False),
        "spaceless share": lambda text: spaceless_share(text, 1000),
        "gopher quality": step(GopherQualityFilter(GopherQualitySettings(), True)),
        "gopher quality english": step(GopherQualityFilter(GopherQualitySettings(), False)),
        "gopher repetition": step(GopherRepetitionFilter(GopherRepetitionSettings(), True)),
        "c4 multilingual": step(C4QualityFilter(C4Settings(), True)),
        "c4 english": step(C4QualityFilter(C4Settings(), False)),
        "fineweb quality": step(FineWebQualityFilter(FineWebQualitySettings(), True)),
        "toxicity": step(ToxicityFilter(ToxicitySettings(extra_languages=("en",)), True)),
        "code share": step(CodeShare(CodeShareSettings())),
        "perplexity line": text_line,
        "language id": step(language),
        "pii find": find_pii,
        "pii redact": redact,
        "url filter": lambda text: url_filter.apply(doc(text)),
        "decode + charset": lambda text: decode.apply(
            Document("d", "s", "s", None, None, "text/html", text.encode("utf-8", "surrogatepass"), None)
        ),
        "meta charset": lambda text: detect_charset(text.encode("utf-8", "surrogatepass"), None, True),
        "hash normalizer": normalize_for_hash,
        "text hash": text_hash,
        "decontamination match": eval_ngrams.matches,
        "byte-level pre-tokenizer": byte_level_words,
        "minhash signature": lambda text: hasher.signatures([text]),
    }
    return functions
