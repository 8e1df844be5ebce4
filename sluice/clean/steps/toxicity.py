"""Toxicity / profanity: listed terms per document, a score, and a drop above a threshold.

Word lists: the 24 per-language lists that ship inside the `glin-profanity` wheel on PyPI (MIT licence;
the lists descend from the "List of Dirty, Naughty, Obscene, and Otherwise Bad Words" that C4 filters with):
ar cs da de en eo es fa fi fr hi hu it ja ko nl no pl pt ru sv th tr zh. sluice reads the JSON files from the
installed package (no import of it, nothing downloaded at run time) and maps them to lid.176 codes.

Matching is a lookup, not a regular expression: each term is split with the cleaning tokenizer
(sluice.words, lower-cased) into a tuple of tokens, so `blow job` is two tokens and `三级片` three characters
(spaceless scripts split per character in `multilingual` word splitting); a document matches where its
lower-cased tokens equal a term's tokens. One C-level pass keeps the tokens that can matter (spellings of
listed terms and of their parts, punctuation) and counts them; one-token terms are read from those counts,
and a multi-token term whose tokens all occur is searched, tokens joined by spaces, in the document's
lower-cased tokens joined the same way. Linear in the document's length, whole words only, so `class` never
matches `ass`. Terms without a letter (`31`, `18+` in the Turkish list) and single characters of spaceless
scripts (`性`, part of hundreds of ordinary Chinese words) are left out, and so are `ignore_terms`: by default the ordinary words the
lists hold that matched on the shared corpus's technical handbook (Turkish `durum` 'status', `destek`
'support', Italian `montare` 'to mount', ...). Within a spaceless script a term is still matched inside
longer words (no word boundaries there).

Score: listed-term occurrences per word (tokens that are not punctuation). A document is dropped
(`toxic_content`) when it has at least `min_terms` occurrences besides `reporting_terms` (the words a news
or court report names what happened with: `rape`, `pedophile`, ...; they count in the score, but cannot
drop a report on their own) and its score is above `max_score`. Documents
in a language without a list (and no `extra_languages`) are not scored (null). Which lists apply: the
document's language's plus `extra_languages` (e.g. `[en]` for English slurs on other-language pages).
Per-language switches: `cleaning.languages.<code>.toxicity` (e.g. `{enabled: false}`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import pyarrow as pa

from sluice.clean.steps import Document, Drop, Step
from sluice.config import ToxicitySettings
from sluice.config.toxicity_lists import LIST_LANGUAGES, load_terms


class TermMatcher:
    """Counts occurrences of listed terms (token tuples) in a token sequence.

    Each term is looked up in three spellings, lower case, Capitalized and UPPER CASE, so a document's tokens
    are not lower-cased for one-token terms: they are a C-level intersection of the spellings with the
    watched tokens' counts, and mixed case (`FuCk`) is not matched. A multi-token term is a candidate when
    every one of its tokens occurs in one of the spellings; only then is the document lower-cased and the
    term counted wherever its tokens follow each other in any case."""

    def __init__(self, terms: Iterable[str], multilingual: bool = True, ignore: Iterable[str] = ()) -> None:
        from sluice.words import HAS_LETTER, NO_SPACE_CHAR, PUNCTUATION, tokenize

        ignored = {term.lower() for term in ignore}
        single: set[str] = set()
        multi: dict[str, set[tuple[str, ...]]] = {}
        for term in terms:
            term = term.lower()
            tokens = tuple(tokenize(term, multilingual))
            if not tokens or term in ignored or HAS_LETTER("".join(tokens)) is None:
                continue
            if len(tokens) == 1:
                if len(tokens[0]) == 1 and NO_SPACE_CHAR.match(tokens[0]):
                    continue  # one character of a spaceless script is part of too many ordinary words
                single.add(tokens[0])
            else:
                multi.setdefault(tokens[0], set()).add(tokens)
        self.spellings = {variant: term for term in single for variant in _spellings(term)}
        self.spelling_set = frozenset(self.spellings)
        self.multi = {first: sorted(tails) for first, tails in multi.items()}
        # Every spelling of every token of a multi-token term -> the token: a term can occur only if all its
        # tokens do, which one intersection tells for most documents.
        self.part_spellings = {
            variant: token for tails in multi.values() for term in tails for token in term for variant in _spellings(token)
        }
        self.part_set = frozenset(self.part_spellings)
        self.size = len(single) + sum(len(tails) for tails in multi.values())
        # The tokens the score reads: spellings of listed terms and their parts, and punctuation (not words).
        self.watched = self.spelling_set | self.part_set | PUNCTUATION

    def watched_counts(self, tokens: list[str]) -> Counter[str]:
        """How often each watched token occurs in `tokens`: a C-level filter, then a count of the few it keeps
        (count and the word count need nothing else of a document's token counts)."""
        return Counter(filter(self.watched.__contains__, tokens))

    def count(self, tokens: list[str], counts: Counter[str]) -> Counter[str]:
        """Occurrences by term (its tokens joined by spaces, without them in spaceless scripts) in `tokens`,
        whose counts are `counts` (all of them, or watched_counts)."""
        found: Counter[str] = Counter()
        for variant in self.spelling_set.intersection(counts):
            found[self.spellings[variant]] += counts[variant]
        present = {self.part_spellings[variant] for variant in self.part_set.intersection(counts)}
        candidates = [
            term for first in present.intersection(self.multi) for term in self.multi[first] if present.issuperset(term)
        ]
        if candidates:
            # Tokens hold no whitespace, so in the lower-cased text of the tokens joined by single spaces a term's
            # tokens joined the same way, between spaces, occur exactly where the term does (overlaps counted).
            # Joined, then lower-cased: the same string as lower-casing each token, since a space ends the
            # context that lower-casing reads (Greek final sigma).
            lowered = f" {' '.join(tokens).lower()} "
            for term in candidates:
                needle = f" {' '.join(term)} "
                at = lowered.find(needle)
                while at != -1:
                    found[_display(term)] += 1
                    at = lowered.find(needle, at + 1)
        return found


def _display(term: tuple[str, ...]) -> str:
    from sluice.words import NO_SPACE_CHAR

    return ("" if NO_SPACE_CHAR.match(term[0]) else " ").join(term)


def _spellings(term: str) -> set[str]:
    return {term, term.capitalize(), term.upper()}


@lru_cache(maxsize=64)
def shared_matcher(languages: tuple[str, ...], multilingual: bool, ignore: tuple[str, ...]) -> TermMatcher | None:
    """The matcher of these languages' lists, built once per process (~3 ms each; it is read-only): every
    filter instance (one per part, per language override, per traced document) shares it."""
    terms = [term for code in languages for term in load_terms(code)]
    return TermMatcher(terms, multilingual, ignore) if terms else None


class ToxicityFilter(Step):
    """Scores listed terms per word (`toxicity_score`, `toxic_terms`) and drops above the threshold."""

    name = "toxicity"
    reasons = ("toxic_content",)
    columns = (
        pa.field("toxicity_score", pa.float32()),  # listed toxic terms per word; null: no list for the language
        pa.field("toxic_terms", pa.int32()),  # occurrences of listed terms
    )

    def __init__(self, settings: ToxicitySettings | None = None, multilingual: bool = True) -> None:
        self.s = settings or ToxicitySettings()
        self.multilingual = multilingual
        self._matchers: dict[str, TermMatcher | None] = {}
        self.reporting = frozenset(term.lower() for term in self.s.reporting_terms)

    def matcher(self, language: str) -> TermMatcher | None:
        if language not in self._matchers:
            languages = tuple(sorted({language, *self.s.extra_languages} & LIST_LANGUAGES))
            self._matchers[language] = shared_matcher(languages, self.multilingual, tuple(self.s.ignore_terms))
        return self._matchers[language]

    def score(self, doc: Document) -> tuple[Counter[str], int, int] | None:
        """(occurrences by listed term, words, occurrences of the terms that can drop: those not in
        `reporting_terms`) of the document, or None when no list applies to its language."""
        from sluice.words import PUNCTUATION

        matcher = self.matcher(doc.language)
        if matcher is None:
            return None
        tokens = doc.tokens(self.multilingual)
        counts = matcher.watched_counts(tokens)
        found = matcher.count(tokens, counts)
        words = len(tokens) - sum(counts[p] for p in counts.keys() & PUNCTUATION)
        return found, words, sum(found.values()) - sum(found[term] for term in found.keys() & self.reporting)

    def apply(self, doc: Document) -> Drop | None:
        scored = self.score(doc)
        if scored is None:
            return None
        found, words, dropping = scored
        terms = doc.values["toxic_terms"] = sum(found.values())
        score = doc.values["toxicity_score"] = terms / words if words else 0.0
        s = self.s
        if s.max_score is not None and dropping >= s.min_terms and score > s.max_score:
            top = ", ".join(f"{term} x{n}" for term, n in sorted(found.items(), key=lambda item: (-item[1], item[0]))[:5])
            return Drop("toxic_content", f"{terms} listed terms, {score:.4f} per word > {s.max_score}: {top}")
        return None

    def count_kept(self, doc: Document, stats: Any) -> None:
        if doc.values.get("toxic_terms"):
            stats.toxic_documents += 1
            stats.toxic_terms += doc.values["toxic_terms"]
