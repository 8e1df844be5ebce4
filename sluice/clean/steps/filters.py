"""Heuristic quality filters: Gopher quality, Gopher repetition, C4 and FineWeb.

The rules and their default thresholds are those of datatrove (the toolkit FineWeb was built with); the
implementation is sluice's own: precompiled regular expressions, one tokenisation per document shared by
the filters (`Document.tokens`), and n-gram repetition counted on integer ids with numpy instead of
joined strings.

Non-English text (`multilingual` word splitting, the default; see sluice.words):
- Gopher quality: a character of a spaceless script (Chinese, Japanese, Thai, ...) counts as one word, so
  the word-count bounds apply; the mean-word-length rule is skipped for documents mostly in such scripts
  (a "word" there is one character); the stop-word rule uses the detected language's list and is skipped
  for languages without one.
- Gopher repetition: lines and paragraphs are script-neutral; n-grams are built over the tokens, so over
  characters for spaceless scripts. To keep the rule comparable, an n-gram of a document mostly in a
  spaceless script spans `2 n` characters (about n words).
- C4: terminal punctuation includes the full-width and other scripts' sentence ends (`。！？` `؟` `।` ...)
  and sentences are counted at those marks too; words per line are counted with the multilingual tokens.
- FineWeb quality: the same extra terminal marks; a "short line" of a spaceless-script document is a third
  of `short_line_length` characters (one character carries about one word).
With `english` word splitting every language is treated as datatrove treats it by default.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import compress, filterfalse, repeat
from typing import Any, ClassVar

import numpy as np

from sluice.clean.steps import Document, Drop, Step
from sluice.clean.steps.codeshare import is_code_line
from sluice.config import C4Settings, FineWebQualitySettings, GopherQualitySettings, GopherRepetitionSettings
from sluice.words import DATATROVE_PUNCTUATION as MINHASH_PUNCTUATION
from sluice.words import PUNCTUATION, STOP_WORDS

ASCII_TERMINAL = (".", "?", "!", '"', "'")
OTHER_TERMINAL = ("。", "！", "？", "．", "」", "』", "”", "’", "»", "؟", "۔", "।", "॥", "።", "჻")
# The characters of Unicode 15.0's Sentence_Terminal property (the Unicode Character Database's PropList.txt)
# and the Khmer signs U+17D6, U+17D9, U+17DA: what datatrove 0.10's FineWeb rule takes as the end of a
# punctuated line (159 characters; no quotes). As code-point ranges, first-last.
_UNICODE_TERMINAL_RANGES = (
    "0021 002E 003F 0589 061D-061F 06D4 0700-0702 07F9 0837 0839 083D-083E 0964-0965 104A-104B 1362 1367-1368 "
    "166E 1735-1736 17D4-17D6 17D9-17DA 1803 1809 1944-1945 1AA8-1AAB 1B5A-1B5B 1B5E-1B5F 1B7D-1B7E 1C3B-1C3C "
    "1C7E-1C7F 203C-203D 2047-2049 2E2E 2E3C 2E53-2E54 3002 A4FF A60E-A60F A6F3 A6F7 A876-A877 A8CE-A8CF A92F "
    "A9C8-A9C9 AA5D-AA5F AAF0-AAF1 ABEB FE52 FE56-FE57 FF01 FF0E FF1F FF61 10A56-10A57 10F55-10F59 10F86-10F89 "
    "11047-11048 110BE-110C1 11141-11143 111C5-111C6 111CD 111DE-111DF 11238-11239 1123B-1123C 112A9 "
    "1144B-1144C 115C2-115C3 115C9-115D7 11641-11642 1173C-1173E 11944 11946 11A42-11A43 11A9B-11A9C "
    "11C41-11C42 11EF7-11EF8 11F43-11F44 16A6E-16A6F 16AF5 16B37-16B38 16B44 16E98 1BC9F 1DA88"
)


def _code_point_ranges(ranges: str) -> tuple[str, ...]:
    """The characters of space-separated hexadecimal code points and `first-last` ranges."""
    chars: list[str] = []
    for item in ranges.split():
        first, _, last = item.partition("-")
        chars += map(chr, range(int(first, 16), int(last or first, 16) + 1))
    return tuple(chars)


UNICODE_TERMINAL = _code_point_ranges(_UNICODE_TERMINAL_RANGES)
# A token made only of these is a symbol, not a word, for Gopher's word count and mean word length (`--`,
# `):`, `....` as well as `,`): datatrove's punctuation characters and the sentence terminators above, as
# datatrove 0.10 defines it (datatrove 0.2, FineWeb's, without the terminators).
SYMBOL_CHARS = frozenset(MINHASH_PUNCTUATION) | frozenset(UNICODE_TERMINAL)


def _symbols(counts: dict[str, int]) -> list[str]:
    """The distinct tokens made only of SYMBOL_CHARS (tokens of letters or digits, most, skip the test)."""
    return [token for token in filterfalse(str.isalnum, counts) if SYMBOL_CHARS.issuperset(token)]


# Sentence ends, counted by findall. Each starts only at the first mark of a run (the lookbehinds): a match
# attempted inside a run of 100,000 dots would rescan the rest of the run from every position (quadratic).
# Each pattern opens with a plain character class (the run's first mark; the lookbehind after it looks at the
# mark before): the regex engine then skips to the next mark at C speed instead of trying a match at every
# position (the same matches as `(?<![.!?])[.!?]+...`, several times faster on ordinary text).
_ENDS, _CJK_ENDS = ".!?", "。！？؟۔।॥።"
_SENTENCE_END = re.compile(rf"[{_ENDS}](?<![{_ENDS}][{_ENDS}])[{_ENDS}]*[\"'”’)\]]*\s+(?=\S)")
_SENTENCE_END_MULTI = re.compile(
    rf"[{_ENDS}{_CJK_ENDS}]"
    rf"(?:(?<=[{_ENDS}])(?<![{_ENDS}][{_ENDS}])[{_ENDS}]*[\"'”’)\]»]*\s+(?=\S)"
    rf"|(?<=[{_CJK_ENDS}])(?<![{_CJK_ENDS}][{_CJK_ENDS}])[{_CJK_ENDS}]*[」』”’)）]*(?=\S))"
)


def _count(test: Callable[[str, Any], bool], lines: Iterable[str], argument: Any) -> int:
    """How many `lines` pass `test(line, argument)` (e.g. str.endswith and a tuple of endings), counted at C
    speed (map, not a generator expression)."""
    return sum(map(test, lines, repeat(argument)))


def _duplicates(items: list[str]) -> tuple[int, int]:
    """(number of items equal to an earlier one, their characters): all items less the first of each
    distinct one, counted with a set instead of a Python loop."""
    distinct = set(items)
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))


# The comparison under which a rule keeps a document: `value <keep_if> threshold`.
KEEPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq, "in": lambda value, allowed: value in allowed,
}

# A rule's limit: (its statistic, the threshold, keep_if); the threshold None switches the rule off.
Limit = tuple[str, Any, str]


@dataclass(slots=True)
class Rule:
    """One rule of a filter evaluated on a document: its statistic's value, the threshold the document must
    meet (`value <keep_if> threshold`; None: the rule is off) and the drop it causes otherwise (the detail
    is formatted only then). `traced`: the tracer lists it (False for guards that are no statistic)."""

    statistic: str
    value: Any
    threshold: Any
    keep_if: str
    reason: str
    detail: str  # a format string over `args`
    args: tuple = ()
    traced: bool = True

    def keeps(self) -> bool:
        """`value <keep_if> threshold`; a rule without threshold (off) or without value (not applicable to
        this document, e.g. FineWeb's excluded zero punctuation share) keeps it."""
        return self.threshold is None or self.value is None or KEEPS[self.keep_if](self.value, self.threshold)


class RuleFilter(Step):
    """A filter written once as an ordered table of rules (`rules`, a generator: each statistic is computed
    only when the rules before it kept the document). `apply` stops at the first rule that fails, as fast as
    a hand-written chain of ifs; the tracer (sluice.trace.measures) evaluates every rule of the same table.

    `limits` (rule name -> statistic, threshold, keep_if; built from the settings) is the one home of each
    rule's threshold: `rule` builds the table's rules from it and `sluice whatif` re-thresholds the stored
    statistics with the limits of another config's filter. `THRESHOLDS`: the settings fields that are only
    thresholds; the others define the statistics (`definition`), so a change to them needs a re-run.

    With `doc.attributes` set (cleaning writes cleaned_attributes), every rule is evaluated (`every`: rules
    switched off in these settings too, no shortcut) and each statistic recorded as `<step>.<statistic>`;
    the decision is still the first rule that fails."""

    THRESHOLDS: ClassVar[tuple[str, ...]] = ()
    outcome = False  # (its statistics are recorded instead)
    limits: dict[str, Limit]
    s: Any

    def rules(self, doc: Document, every: bool = False) -> Iterator[Rule]:
        raise NotImplementedError

    def rule(self, name: str, value: Any, detail: str, args: tuple = (), reason: str | None = None, traced: bool = True) -> Rule:
        """The rule `name` of the table (its limit from `limits`) with this document's value."""
        statistic, threshold, keep_if = self.limits[name]
        return Rule(statistic, value, threshold, keep_if, reason or name, detail, args, traced)

    def apply(self, doc: Document) -> Drop | None:
        if doc.attributes is None:
            return first_drop(self.rules(doc))
        rules = list(self.rules(doc, every=True))
        self.record(doc, rules)
        return first_drop(rules)

    def measure(self, doc: Document) -> None:
        self.record(doc, self.rules(doc, every=True))

    def record(self, doc: Document, rules: Iterable[Rule]) -> None:
        """Each rule's statistic into `doc.attributes` as `<step>.<statistic>`."""
        attributes = doc.attributes
        for rule in rules:
            attributes[f"{self.name}.{rule.statistic}"] = rule.value

    def attribute_names(self) -> set[str]:
        return {f"{self.name}.{statistic}" for statistic, _, _ in self.limits.values()}

    def definition(self) -> Any:
        """What defines the statistics (every setting but the thresholds): equal definitions, equal values."""
        return self.s.model_dump(exclude=set(self.THRESHOLDS)), getattr(self, "multilingual", None)


def first_drop(rules: Iterable[Rule]) -> Drop | None:
    """The drop of the first rule that fails (the later rules are not computed), or None."""
    for rule in rules:
        if not rule.keeps():
            return Drop(rule.reason, rule.detail.format(*rule.args))
    return None


class GopherQualityFilter(RuleFilter):
    name = "gopher_quality"
    reasons = (
        "gopher_short_doc", "gopher_long_doc", "gopher_below_avg_threshold", "gopher_above_avg_threshold", "gopher_too_many_hashes",
        "gopher_too_many_ellipsis", "gopher_too_many_bullets", "gopher_too_many_end_ellipsis", "gopher_below_alpha_threshold",
        "gopher_enough_stop_words",
    )

    THRESHOLDS = (
        "min_doc_words", "max_doc_words", "min_avg_word_length", "max_avg_word_length", "max_symbol_word_ratio",
        "max_bullet_lines_ratio", "max_ellipsis_lines_ratio", "max_non_alpha_words_ratio", "min_stop_words",
    )

    def __init__(self, settings: GopherQualitySettings | None = None, multilingual: bool = True) -> None:
        self.s = s = settings or GopherQualitySettings()
        self.multilingual = multilingual
        self.stop_words = frozenset(s.stop_words) if s.stop_words is not None else None
        symbols = s.max_symbol_word_ratio or None
        self.limits = {
            "gopher_short_doc": ("words", s.min_doc_words or None, ">="),
            "gopher_long_doc": ("words", s.max_doc_words or None, "<="),
            "no_words": ("words", 1, ">="),
            "gopher_below_avg_threshold": ("mean_word_length", s.min_avg_word_length or None, ">="),
            "gopher_above_avg_threshold": ("mean_word_length", s.max_avg_word_length or None, "<="),
            "gopher_too_many_hashes": ("hashes_per_word", symbols, "<="),
            "gopher_too_many_ellipsis": ("ellipses_per_word", symbols, "<="),
            "gopher_too_many_bullets": ("bullet_lines", s.max_bullet_lines_ratio or None, "<="),
            "gopher_too_many_end_ellipsis": ("ellipsis_lines", s.max_ellipsis_lines_ratio or None, "<="),
            "gopher_below_alpha_threshold": ("words_with_a_letter", s.max_non_alpha_words_ratio or None, ">="),
            "gopher_enough_stop_words": ("stop_words", s.min_stop_words or None, ">="),
        }

    def rules(self, doc: Document, every: bool = False) -> Iterator[Rule]:
        s, rule = self.s, self.rule
        text = doc.text or ""
        words = doc.tokens(self.multilingual)
        counts = doc.token_counts(self.multilingual)
        n_words = len(words)
        symbols = _symbols(counts)
        n = n_words - sum(counts[p] for p in symbols)
        yield rule("gopher_short_doc", n, "{} words < {}", (n, s.min_doc_words))
        yield rule("gopher_long_doc", n, "{} words > {}", (n, s.max_doc_words))
        if n == 0:
            yield rule("no_words", n, "no words", reason="gopher_short_doc", traced=False)
            return
        if not (self.multilingual and doc.mostly_spaceless()):
            mean = (len("".join(words)) - sum(len(p) * counts[p] for p in symbols)) / n
            yield rule("gopher_below_avg_threshold", mean, "mean word length {:.2f}", (mean,))
            yield rule("gopher_above_avg_threshold", mean, "mean word length {:.2f}", (mean,))
        if s.max_symbol_word_ratio or every:
            hashes = text.count("#") / n_words
            yield rule("gopher_too_many_hashes", hashes, "{:.3f} '#' per word", (hashes,))
            ellipses = (text.count("...") + text.count("…")) / n_words
            yield rule("gopher_too_many_ellipsis", ellipses, "{:.3f} ellipses per word", (ellipses,))
        lines = text.splitlines() or [""]
        if s.max_bullet_lines_ratio or every:
            bullets = _count(str.startswith, map(str.lstrip, lines), ("•", "-")) / len(lines)
            yield rule("gopher_too_many_bullets", bullets, "{:.2f} of lines start with a bullet", (bullets,))
        if s.max_ellipsis_lines_ratio or every:
            ends = _count(str.endswith, map(str.rstrip, lines), ("...", "…")) / len(lines)
            yield rule("gopher_too_many_end_ellipsis", ends, "{:.2f} of lines end with an ellipsis", (ends,))
        if s.max_non_alpha_words_ratio or every:
            alpha = _alpha_share(text, counts, n_words, s.alpha_words)
            yield rule("gopher_below_alpha_threshold", alpha, "{:.2f} of {} words contain a letter", (alpha, s.alpha_words))
        if s.min_stop_words or every:
            yield from self._stop_words(doc, counts)

    def _stop_words(self, doc: Document, counts: dict[str, int]) -> Iterator[Rule]:
        """The stop-word rule: a configured list applies to every script; else the document's language's list
        (Gopher's English one with `english` word splitting), skipped for spaceless scripts and languages
        without a list."""
        if self.stop_words is not None:
            stop_words, spaceless = self.stop_words, False
        else:
            stop_words = STOP_WORDS["en"] if not self.multilingual else STOP_WORDS.get(doc.language)
            spaceless = self.multilingual and doc.mostly_spaceless()
        if stop_words is not None and not spaceless:
            listed = counts.keys() & stop_words
            found = len(listed) if self.s.stop_word_count == "distinct" else sum(counts[w] for w in listed)
            yield self.rule("gopher_enough_stop_words", found, "{} stop words < {}", (found, self.s.min_stop_words))


def _alpha_share(text: str, counts: dict[str, int], n_tokens: int, words: str) -> float:
    """Share of words with a letter: over whitespace-separated words (the Gopher paper) or over the tokens
    (datatrove; `counts` holds them). A letter is what str.isalpha says, as datatrove tests it (not `²`, `½`
    or `①`, which sluice.words.HAS_LETTER takes); words made only of letters (most) skip the test."""
    if words == "whitespace":
        split = text.split()
        if not split:
            return 0.0
        return 1.0 - sum(1 for word in filterfalse(str.isalpha, split) if not any(map(str.isalpha, word))) / len(split)
    no_letter = sum(counts[token] for token in filterfalse(str.isalpha, counts) if not any(map(str.isalpha, token)))
    return (n_tokens - no_letter) / n_tokens


# Written with a literal first character (`\n\n+`, not `\n{2,}`): the regex engine then skips to each
# newline at C speed instead of trying a match at every position (ten times faster on ordinary text).
_PARAGRAPH_BREAK = re.compile(r"\n\n+")
_LINE_BREAKS = re.compile(r"\n\n*")
_MIX = np.uint64(0x9E3779B97F4A7C15)


def _ngram_keys(ids: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit key per n-gram of token ids (polynomial hash; collisions are negligible at 2^-64)."""
    count = len(ids) - n + 1
    keys = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            keys = keys * _MIX + ids[k : k + count]
    return keys


class GopherRepetitionFilter(RuleFilter):
    name = "gopher_repetition"
    reasons = ("dup_para_frac", "dup_para_char_frac", "dup_line_frac", "dup_line_char_frac")  # and top_<n>_gram, duplicated_<n>_n_grams per configured n

    THRESHOLDS = ("dup_line_frac", "dup_para_frac", "dup_line_char_frac", "dup_para_char_frac")

    def __init__(self, settings: GopherRepetitionSettings | None = None, multilingual: bool = True) -> None:
        self.s = s = settings or GopherRepetitionSettings()
        self.multilingual = multilingual
        self.limits = {
            "dup_para_frac": ("dup_para_frac", s.dup_para_frac or None, "<="),
            "dup_para_char_frac": ("dup_para_char_frac", s.dup_para_char_frac or None, "<="),
            "dup_line_frac": ("dup_line_frac", s.dup_line_frac or None, "<="),
            "dup_line_char_frac": ("dup_line_char_frac", s.dup_line_char_frac or None, "<="),
            **{f"top_{n}_gram": (f"top_{n}_gram_char_frac", threshold, "<=") for n, threshold in sorted(s.top_n_grams.items())},
            **{f"duplicated_{n}_n_grams": (f"duplicated_{n}_gram_char_frac", threshold, "<=") for n, threshold in sorted(s.dup_n_grams.items())},
        }

    def definition(self) -> Any:
        """The n-gram sizes define statistics too (their thresholds do not)."""
        return self.multilingual, sorted(self.s.top_n_grams), sorted(self.s.dup_n_grams)

    def rules(self, doc: Document, every: bool = False) -> Iterator[Rule]:
        """The repetition rules in order. Without `every`, a duplicated n-gram rule whose decision is known to
        be "keep" from a cheaper bound is skipped (the filter's speed); the tracer asks for every value."""
        text = doc.text or ""
        length = len(text) or 1
        for unit, parts in (("para", _PARAGRAPH_BREAK.split(text.strip())), ("line", _LINE_BREAKS.split(text))):
            dup, dup_chars = _duplicates(parts)
            noun = "paragraphs" if unit == "para" else "lines"
            yield self.rule(f"dup_{unit}_frac", dup / len(parts), "{} of {} " + noun + " repeat", (dup, len(parts)))
            yield self.rule(f"dup_{unit}_char_frac", dup_chars / length, "{:.3f} of characters in repeated " + noun, (dup_chars / length,))
        words = doc.tokens(self.multilingual)
        if words:
            yield from self._ngram_rules(doc, words, length, every)

    def _ngram_rules(self, doc: Document, words: list[str], length: int, exact: bool) -> Iterator[Rule]:
        s = self.s
        scale = 2 if self.multilingual and doc.mostly_spaceless() else 1
        # Python's string hash as the token id (C-speed; 64-bit, so two different tokens share one with
        # negligible probability; decisions never depend on the hash values' order).
        ids = np.fromiter(map(hash, words), dtype=np.int64, count=len(words)).view(np.uint64)
        grams = _NgramKeys(ids)
        for n in sorted(s.top_n_grams):
            span = n * scale
            if len(words) < span:
                continue
            top, at = _top_ngram(grams.of(span))
            # Words joined by spaces (datatrove); characters of a spaceless script are joined by nothing.
            share = (_span_chars(words, at, span) + (span - 1 if scale == 1 else 0)) * top / length
            yield self.rule(f"top_{n}_gram", share, "{:.3f} of characters in the top n-gram", (share,))
        # Characters inside the repeated n-grams of the smallest n: at least the repeated characters of any
        # n, so every size whose threshold it does not pass is skipped (the decision cannot change).
        bound = None
        last: tuple[int, np.ndarray] | None = None  # (span, repeated positions) of the last size scanned
        for n, threshold in sorted(s.dup_n_grams.items()):
            span = n * scale
            if len(words) < span or (not exact and bound is not None and bound / length <= threshold):
                continue
            keys = grams.of(span)
            repeated = _repeated_positions(keys) if last is None else _repeated_longer(keys, *last, span)
            last = span, repeated
            if bound is None and not exact:
                bound = _covered_chars(repeated, words, span)
                if bound / length <= threshold:
                    continue
            share = _scan_repeats(keys, repeated, words, span) / length
            yield self.rule(f"duplicated_{n}_n_grams", share, "{:.3f} of characters in repeated n-grams", (share,))

    @staticmethod
    def _repeated_ngram_chars(keys: np.ndarray, words: list[str], n: int) -> int:
        """Characters of the n-grams (`keys`) of `words` that repeat an earlier one (see _scan_repeats)."""
        return _scan_repeats(keys, _repeated_positions(keys), words, n)


class _NgramKeys:
    """The n-gram keys of one document's token ids for growing n, each size's from the last one's (one
    multiply-add per position: the same keys as _ngram_keys, whose loop is Horner's rule)."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        self.n, self.keys = 1, ids.copy()

    def of(self, n: int) -> np.ndarray:
        if n < self.n:
            return _ngram_keys(self.ids, n)
        with np.errstate(over="ignore"):
            while self.n < n:
                self.n += 1
                count = len(self.ids) - self.n + 1
                self.keys = self.keys[:count] * _MIX + self.ids[self.n - 1 : self.n - 1 + count]
        return self.keys


def _repeated_longer(keys: np.ndarray, shorter: int, repeated: np.ndarray, span: int) -> np.ndarray:
    """The repeated positions of the `span`-grams (`keys`) from those of the `shorter`-grams: a span-gram
    repeated at p has its shorter-grams at p .. p + span - shorter repeated too (and so has its other
    occurrence), so only such positions are sorted, not every position."""
    gap = span - shorter
    candidates = repeated[:-gap][repeated[gap:] == repeated[:-gap] + gap] if len(repeated) > gap else repeated[:0]
    return candidates[_repeated_positions(keys[candidates])]


def _span_chars(words: list[str], at: int, n: int) -> int:
    """Characters of the tokens at..at+n (without the spaces between them)."""
    return sum(map(len, words[at : at + n]))


def _top_ngram(keys: np.ndarray) -> tuple[int, int]:
    """(occurrences of the most frequent n-gram, position of the first n-gram seen among the most frequent
    ones: Counter.most_common's tie order)."""
    unique, counts = np.unique(keys, return_counts=True)
    top = int(counts.max())
    if top == 1:
        return 1, 0
    most = unique[counts == top]
    hits = keys == most[0] if len(most) == 1 else np.isin(keys, most)
    return top, int(np.argmax(hits))


def _repeated_positions(keys: np.ndarray) -> np.ndarray:
    """Ascending positions of the n-grams that occur more than once."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    same = ordered[1:] == ordered[:-1]
    repeated = np.zeros(len(keys), dtype=bool)
    repeated[order[1:][same]] = True
    repeated[order[:-1][same]] = True
    return np.flatnonzero(repeated)


def _covered_chars(repeated: np.ndarray, words: list[str], n: int) -> int:
    """Characters of the tokens inside some repeated n-gram (one starting at a `repeated` position).

    An upper bound of the repeated n-gram characters for this n and every larger one: a repeated (n+1)-gram
    at p is made of the repeated n-grams at p and p + 1, so its tokens are covered too. Documents below
    every threshold by this bound (most) skip the left-to-right scans."""
    if len(repeated) == 0:
        return 0
    edges = np.zeros(len(words) + 1, dtype=np.int64)
    edges[repeated] += 1
    edges[repeated + n] -= 1
    covered = np.cumsum(edges[:-1]) > 0
    return sum(map(len, compress(words, covered.tolist())))


def _scan_repeats(keys: np.ndarray, repeated: np.ndarray, words: list[str], n: int) -> int:
    """Characters of the n-grams that repeat an earlier one, scanning left to right and jumping past each
    repeat (so overlapping repeats are not counted twice). Only n-grams occurring more than once can repeat,
    so the scan visits just those positions (`repeated`, ascending)."""
    seen: set[int] = set()
    total = 0
    position = 0
    for at, key in zip(repeated.tolist(), keys[repeated].tolist(), strict=True):
        if at < position:
            continue
        if key in seen:
            total += _span_chars(words, at, n)
            position = at + n
        else:
            seen.add(key)
            position = at + 1
    return total


_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_POLICY = re.compile("terms of use|privacy policy|cookie policy|uses cookies|use of cookies|use cookies")


@dataclass(slots=True)
class C4Lines:
    """What C4's line rules leave of a text: the kept lines, their `split()` words, the sentences in them (1 +
    the sentence ends inside each line), the non-empty lines read, and the line that stops the document
    (`stop`: the rule's reason and the line) when lorem ipsum or a curly bracket is found in a kept line."""

    kept: list[str]
    chunks: list[str]
    sentences: int
    lines_in: int
    stop: tuple[str, str] | None

    def keep(self, doc: Document) -> None:
        """Replace the document's text by the kept lines (their words are the new text's chunks)."""
        doc.keep_part_of_text("\n".join(self.kept).strip(), self.chunks)


class C4QualityFilter(RuleFilter):
    """Keeps the lines C4 keeps (the document's text is replaced by them) or drops the document. The line
    rules select lines (`lines`); the document rules are a table (`rules`) over what they left."""

    name = "c4"
    reasons = ("lorem_ipsum", "curly_bracket", "too_few_sentences")

    THRESHOLDS = ("min_num_sentences",)  # the line rules define the text the statistics are taken of

    def __init__(self, settings: C4Settings | None = None, multilingual: bool = True) -> None:
        self.s = s = settings or C4Settings()
        self.multilingual = multilingual
        self.limits = {
            "lorem_ipsum": ("lorem_ipsum", 0 if s.filter_lorem_ipsum else None, "=="),
            "curly_bracket": ("curly_bracket", 0 if s.filter_curly_bracket else None, "=="),
            "too_few_sentences": ("sentences", None if s.min_num_sentences == -1 else s.min_num_sentences, ">="),
        }
        self.terminal = ASCII_TERMINAL + OTHER_TERMINAL if multilingual else ASCII_TERMINAL
        self.sentence_end = _SENTENCE_END_MULTI if multilingual else _SENTENCE_END

    def lines(self, text: str) -> C4Lines:
        """Applies the line rules, stopping at the first line that drops the whole document."""
        from sluice.words import tokenize

        s = self.s
        sentences = lines_in = 0
        kept: list[str] = []
        chunks: list[str] = []  # the kept text's `split()`, line by line
        # The three line tests before the first that can drop the document only skip lines, so their order
        # is free: the cheap terminal-punctuation test (most lines that fail, fail it) goes first.
        for line in text.splitlines():
            stripped = line.strip()
            if not stripped:
                continue
            lines_in += 1
            line = _CITATION.sub("", stripped) if s.remove_citations and "[" in stripped else stripped
            if s.filter_no_terminal_punct and (not line.endswith(self.terminal) or line.endswith("...")):
                continue
            words = stripped.split()  # (before the citations are removed, as datatrove counts them)
            if s.max_word_length != -1 and max(map(len, words)) > s.max_word_length:
                continue
            n_words = len(words)
            if self.multilingual and n_words < s.min_words_per_line:
                n_words = sum(1 for w in tokenize(line) if w not in PUNCTUATION)
            if n_words < s.min_words_per_line:
                continue
            lower = line.lower()
            if s.filter_lorem_ipsum and "lorem ipsum" in lower:
                return C4Lines(kept, chunks, sentences, lines_in, ("lorem_ipsum", line[:80]))
            if s.filter_javascript and "javascript" in lower:
                continue
            if s.filter_curly_bracket and "{" in line:
                if s.curly_bracket_code_lines == "remove_line" and is_code_line(stripped):
                    continue
                return C4Lines(kept, chunks, sentences, lines_in, ("curly_bracket", line[:80]))
            if s.filter_policy and _POLICY.search(lower):
                continue
            sentences += 1 + len(self.sentence_end.findall(line))
            kept.append(line)
            chunks += words if line is stripped else line.split()
        return C4Lines(kept, chunks, sentences, lines_in, None)

    def rules(self, doc: Document, every: bool = False, lines: C4Lines | None = None) -> Iterator[Rule]:
        """The document rules over `lines` (computed from the text when not given); the sentence count is
        only a statistic of a document no line stopped."""
        c4 = lines if lines is not None else self.lines(doc.text or "")
        reason, line = c4.stop or ("", "")
        for rule in ("lorem_ipsum", "curly_bracket"):
            yield self.rule(rule, int(reason == rule), "{}", (line,))
        if c4.stop is None:
            yield self.rule("too_few_sentences", c4.sentences, "{} sentences < {}", (c4.sentences, self.s.min_num_sentences))

    def apply(self, doc: Document) -> Drop | None:
        c4 = self.lines(doc.text or "")
        rules = list(self.rules(doc, lines=c4))
        if doc.attributes is not None:
            self.record(doc, rules)
        drop = first_drop(rules)
        if drop is None:
            c4.keep(doc)
        return drop

    def as_if_kept(self, doc: Document) -> None:
        """The lines C4 keeps as the text of a document it dropped for too few sentences; a line that stops the
        document leaves the text, as in `measure`."""
        c4 = self.lines(doc.text or "")
        if c4.stop is None:
            c4.keep(doc)

    def measure(self, doc: Document) -> None:
        """The statistics of a dropped document, and the lines C4 keeps as its text (what FineWeb and the final
        length would see), as the tracer replays it; a line that stops the document leaves the text."""
        c4 = self.lines(doc.text or "")
        self.record(doc, self.rules(doc, lines=c4))
        if c4.stop is None:
            c4.keep(doc)


class FineWebQualityFilter(RuleFilter):
    """FineWeb's line rules, in one of two versions (`variant`): `fineweb`, the rule the FineWeb dataset was
    built with (datatrove before 0.4): every line, blank ones included, counts in the line ratios, a ratio
    equal to its threshold drops, and a line ending in a quote counts as punctuated; `datatrove`, datatrove
    0.10's: blank lines are left out, a ratio equal to its threshold keeps, and the terminal marks are
    Unicode's sentence terminators. Both drop a text without a non-blank line as `empty`."""

    name = "fineweb_quality"
    reasons = ("empty", "line_punct_ratio", "short_line_ratio", "char_dup_ratio", "list_ratio")

    THRESHOLDS = ("line_punct_thr", "short_line_thr", "char_duplicates_ratio", "new_line_ratio")

    def __init__(self, settings: FineWebQualitySettings | None = None, multilingual: bool = True) -> None:
        self.s = s = settings or FineWebQualitySettings()
        self.multilingual = multilingual
        self.datatrove = s.variant == "datatrove"
        if self.datatrove:
            self.stop_chars = UNICODE_TERMINAL
        else:
            self.stop_chars = (".", "'", '"', "!", "?") + (OTHER_TERMINAL if multilingual else ())
        at_threshold_keeps = "=" if self.datatrove else ""
        self.limits = {
            "empty": ("non_blank_lines", 1, ">="),
            "line_punct_ratio": ("line_punct_ratio", s.line_punct_thr, ">" + at_threshold_keeps),
            "short_line_ratio": ("short_line_ratio", s.short_line_thr, "<" + at_threshold_keeps),
            "char_dup_ratio": ("char_dup_ratio", s.char_duplicates_ratio, "<" + at_threshold_keeps),
            "list_ratio": ("newlines_per_word", s.new_line_ratio, "<="),
        }

    def rules(self, doc: Document, every: bool = False) -> Iterator[Rule]:
        s, rule = self.s, self.rule
        text = doc.text or ""
        lines = text.split("\n")
        non_blank = list(filter(str.strip, lines))
        yield rule("empty", len(non_blank), "no line with text", traced=False)
        if not non_blank:
            return
        counted = non_blank if self.datatrove else lines
        punct = _count(str.endswith, counted, self.stop_chars) / len(counted)
        excluded = punct == 0 and s.line_punct_exclude_zero  # (no value: the rule does not apply)
        yield rule("line_punct_ratio", None if excluded else punct, "{:.2f} of lines end in punctuation", (punct,))
        short = s.short_line_length
        if self.multilingual and doc.mostly_spaceless():
            short = max(1, short // 3)
        short_share = sum(map(short.__ge__, map(len, counted))) / len(counted)  # lines of at most `short` characters
        yield rule("short_line_ratio", short_share, "{:.2f} of lines are <= {} characters", (short_share, short))
        chars = len(text) - text.count("\n")
        dup_share = _duplicates(non_blank)[1] / chars
        yield rule("char_dup_ratio", dup_share, "{:.3f} of characters in repeated lines", (dup_share,))
        n_words = len(doc.tokens(self.multilingual))
        newlines = text.count("\n") / n_words if n_words else float("inf")
        yield rule("list_ratio", newlines, "{:.2f} newlines per word", (newlines,))
