"""A ReDoS audit for regular expressions: regexploit plus three structural rules it does not cover.

`problems(pattern, flags)` returns what makes a pattern's matching time superlinear in its input, as
sentences; an empty list means none of the rules applies. The rules work on Python's own parse tree
(`re._parser`), with character sets as boolean masks over every code point:

1. regexploit (PyPI): nested or chained unbounded repeats of overlapping characters (`(a+)+$`,
   `a*a*a*$`): polynomial of degree >= 3 or exponential.
2. Ambiguous repetition: an unbounded repeat whose body can match one string in two ways, so a failing
   match retries every split: alternatives of the body that can start with the same character
   (`(?:\\.\\.\\.|\\.)*` — exponential on a run of dots, what stalled the word splitter), a body that can
   match nothing (`(a*)*`), or a body that can end in a repeat of characters it can also start with
   (`(?:x+y*)*`: one `xx` or two `x`).
3. Overlapping neighbours: an unbounded repeat followed (past optional items only) by another unbounded
   repeat of some of the same characters (`\\s*"?\\s*`): quadratic per match attempt.
4. Search restarts: a pattern (or alternative) that begins with an unbounded repeat of a set S, can fail
   after it, and is not guarded by a lookbehind excluding S: a search retries at every position inside a
   long run of S and rescans the rest of it (`[.!?]+\\s` on a megabyte of dots: quadratic). Patterns
   anchored at the start (`^`, `\\A`) are exempt.

`regex`-module syntax (`\\p{L}`) is translated to the nearest `re` classes first.
"""

from __future__ import annotations

import functools
import re
import re._constants as C  # noqa: N812 - the parser's opcode names
import re._parser as sre_parse
import sys

import numpy as np

UNIVERSE = sys.maxunicode + 1
ALL = np.ones(UNIVERSE, dtype=bool)
NONE = np.zeros(UNIVERSE, dtype=bool)
REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT)


@functools.cache
def _category(name: str) -> np.ndarray:
    chars = [chr(i) for i in range(UNIVERSE)]
    if name == "digit":
        mask = np.fromiter((c.isdecimal() for c in chars), bool, UNIVERSE)
    elif name == "space":
        mask = np.fromiter((c.isspace() for c in chars), bool, UNIVERSE)
    elif name == "word":
        mask = np.fromiter((c.isalnum() or c == "_" for c in chars), bool, UNIVERSE)
    else:
        raise ValueError(name)
    mask.flags.writeable = False
    return mask


_CATEGORIES = {
    C.CATEGORY_DIGIT: ("digit", False), C.CATEGORY_NOT_DIGIT: ("digit", True),
    C.CATEGORY_SPACE: ("space", False), C.CATEGORY_NOT_SPACE: ("space", True),
    C.CATEGORY_WORD: ("word", False), C.CATEGORY_NOT_WORD: ("word", True),
    C.CATEGORY_LINEBREAK: (None, False), C.CATEGORY_NOT_LINEBREAK: (None, True),
}


def _literal(code: int, ignore_case: bool) -> np.ndarray:
    mask = NONE.copy()
    mask[code] = True
    if ignore_case and code < UNIVERSE:
        char = chr(code)
        for variant in {char.lower(), char.upper(), char.casefold()}:
            if len(variant) == 1:
                mask[ord(variant)] = True
    return mask


def _in_set(items: list, ignore_case: bool) -> np.ndarray:
    mask = NONE.copy()
    negate = False
    for op, arg in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            mask |= _literal(arg, ignore_case)
        elif op is C.RANGE:
            low, high = arg
            mask[low : high + 1] = True
            if ignore_case and high - low < 5000:
                for code in range(low, high + 1):
                    mask |= _literal(code, True)
        elif op is C.CATEGORY:
            name, inverted = _CATEGORIES[arg]
            part = np.zeros(UNIVERSE, bool) if name is None else _category(name)
            if name is None:  # line break
                part = part.copy()
                part[10] = True
            mask |= ~part if inverted else part
        else:
            raise ValueError(f"unsupported set item {op}")
    return ~mask if negate else mask


class _Analyzer:
    """First / consumed character sets and nullability of parse-tree items."""

    def __init__(self, flags: int) -> None:
        self.ignore_case = bool(flags & re.IGNORECASE)
        self.dotall = bool(flags & re.DOTALL)

    def single(self, op, arg) -> np.ndarray | None:
        """The set of a one-character item, or None when the item is not one."""
        if op is C.LITERAL:
            return _literal(arg, self.ignore_case)
        if op is C.NOT_LITERAL:
            return ~_literal(arg, self.ignore_case)
        if op is C.ANY:
            if self.dotall:
                return ALL
            mask = ALL.copy()
            mask[10] = False
            return mask
        if op is C.IN:
            return _in_set(arg, self.ignore_case)
        return None

    def first(self, seq) -> tuple[np.ndarray, bool]:
        """(characters a match of `seq` can start with, whether `seq` can match the empty string)."""
        mask = NONE.copy()
        restrict = ALL
        for op, arg in seq:
            if op is C.ASSERT and arg[0] > 0:  # a lookahead narrows what the next item can start with
                restrict = restrict & self.first(arg[1])[0]
                continue
            item_mask, nullable = self.item_first(op, arg)
            mask |= item_mask & restrict
            if not nullable:
                return mask, False
            restrict = ALL
        return mask, True

    def item_first(self, op, arg) -> tuple[np.ndarray, bool]:
        single = self.single(op, arg)
        if single is not None:
            return single, False
        if op in REPEATS:
            low, _, body = arg
            mask, nullable = self.first(body)
            return mask, nullable or low == 0
        if op is C.SUBPATTERN:
            return self.first(arg[3])
        if op is C.ATOMIC_GROUP:
            return self.first(arg)
        if op is C.BRANCH:
            mask, nullable = NONE.copy(), False
            for alternative in arg[1]:
                alt_mask, alt_nullable = self.first(alternative)
                mask |= alt_mask
                nullable |= alt_nullable
            return mask, nullable
        if op is C.GROUPREF_EXISTS:
            _, yes, no = arg
            a, an = self.first(yes)
            b, bn = self.first(no) if no is not None else (NONE, True)
            return a | b, an or bn
        if op in (C.ASSERT, C.ASSERT_NOT, C.AT):
            return NONE, True
        if op is C.GROUPREF:
            return ALL, True
        raise ValueError(f"unsupported item {op}")

    def consumed(self, seq) -> np.ndarray:
        """Every character a match of `seq` can consume (lookarounds left out)."""
        mask = NONE.copy()
        restrict = ALL
        for op, arg in seq:
            if op is C.ASSERT and arg[0] > 0:
                restrict = self.first(arg[1])[0]
                continue
            single = self.single(op, arg)
            if single is not None:
                mask |= single & restrict
            elif op in REPEATS:
                mask |= self.consumed(arg[2])
            elif op is C.SUBPATTERN:
                mask |= self.consumed(arg[3])
            elif op is C.ATOMIC_GROUP:
                mask |= self.consumed(arg)
            elif op is C.BRANCH:
                for alternative in arg[1]:
                    mask |= self.consumed(alternative)
            elif op is C.GROUPREF_EXISTS:
                mask |= self.consumed(arg[1])
                if arg[2] is not None:
                    mask |= self.consumed(arg[2])
            elif op is C.GROUPREF:
                mask |= ALL
            restrict = ALL
        return mask

    def tail(self, seq) -> np.ndarray:
        """Characters a match of `seq` can give to, or take from, what follows it: those of repeats (max > 1)
        and optional items at its end, up to its last mandatory item."""
        mask = NONE.copy()
        for op, arg in reversed(list(seq)):
            if op in (C.ASSERT, C.ASSERT_NOT, C.AT):
                continue
            first, nullable = self.item_first(op, arg)
            if op in REPEATS and arg[1] > 1:
                mask |= self.consumed(arg[2])
            elif op is C.BRANCH:
                for alternative in arg[1]:
                    mask |= self.tail(alternative)
            if nullable:
                mask |= first
            else:
                break
        return mask


def _flatten(seq) -> list:
    """The parse tree with groups that set no flags dissolved into their sequence (captures do not change
    how a pattern backtracks; neighbours across a group boundary become visible)."""
    out: list = []
    for op, arg in seq:
        if op is C.SUBPATTERN and not arg[1] and not arg[2]:
            out += _flatten(arg[3])
        elif op is C.SUBPATTERN:
            out.append((op, (arg[0], arg[1], arg[2], _flatten(arg[3]))))
        elif op in REPEATS:
            out.append((op, (arg[0], arg[1], _flatten(arg[2]))))
        elif op is C.BRANCH:
            out.append((op, (arg[0], [_flatten(alternative) for alternative in arg[1]])))
        elif op in (C.ASSERT, C.ASSERT_NOT):
            out.append((op, (arg[0], _flatten(arg[1]))))
        elif op is C.ATOMIC_GROUP:
            out.append((op, _flatten(arg)))
        elif op is C.GROUPREF_EXISTS:
            out.append((op, (arg[0], _flatten(arg[1]), _flatten(arg[2]) if arg[2] is not None else None)))
        else:
            out.append((op, arg))
    return out


def _describe(mask: np.ndarray) -> str:
    codes = np.flatnonzero(mask)[:6]
    return "".join(chr(c) if chr(c).isprintable() else f"\\x{c:02x}" for c in codes) + ("…" if mask.sum() > 6 else "")


def _walk(seq, analyzer: _Analyzer, found: list[str]) -> None:
    items = list(seq)
    for index, (op, arg) in enumerate(items):
        if op in REPEATS:
            low, high, body = arg
            if high == C.MAXREPEAT and op is not C.POSSESSIVE_REPEAT:
                _check_repeat(body, analyzer, found)
                _check_neighbours(items, index, analyzer, found)
            _walk(body, analyzer, found)
        elif op is C.SUBPATTERN:
            _walk(arg[3], analyzer, found)
        elif op is C.ATOMIC_GROUP:
            _walk(arg, analyzer, found)
        elif op is C.BRANCH:
            for alternative in arg[1]:
                _walk(alternative, analyzer, found)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            _walk(arg[1], analyzer, found)
        elif op is C.GROUPREF_EXISTS:
            _walk(arg[1], analyzer, found)
            if arg[2] is not None:
                _walk(arg[2], analyzer, found)


def _is_single(body, analyzer: _Analyzer) -> bool:
    items = list(body)
    return len(items) == 1 and analyzer.single(*items[0]) is not None


def _check_repeat(body, analyzer: _Analyzer, found: list[str]) -> None:
    """Rule 2: the body of an unbounded repeat must match any string in at most one way."""
    if _is_single(body, analyzer):
        return
    first, nullable = analyzer.first(body)
    if nullable:
        found.append("an unbounded repeat of something that can match the empty string")
        return
    for op, arg in body:
        if op is C.BRANCH:
            seen = NONE.copy()
            for alternative in arg[1]:
                alt_first, _ = analyzer.first(alternative)
                if (seen & alt_first).any():
                    found.append(f"an unbounded repeat of alternatives that can start alike ({_describe(seen & alt_first)!r})")
                    return
                seen |= alt_first
        if not analyzer.item_first(op, arg)[1]:
            break
    tail = analyzer.tail(body)
    if (tail & first).any():
        found.append(f"an unbounded repeat whose body can end in optional or repeated characters that start it ({_describe(tail & first)!r})")


def _leading_repeats(op, arg, analyzer: _Analyzer):
    """The unbounded repeats a match of this item can begin with (through optional items and alternatives)."""
    if op in REPEATS:
        if arg[1] == C.MAXREPEAT:
            yield arg
        return
    if op is C.BRANCH:
        for alternative in arg[1]:
            for inner_op, inner_arg in alternative:
                yield from _leading_repeats(inner_op, inner_arg, analyzer)
                if not analyzer.item_first(inner_op, inner_arg)[1]:
                    break


def _check_neighbours(items: list, index: int, analyzer: _Analyzer, found: list[str]) -> None:
    """Rule 3: no unbounded repeat of the same characters after this one, past optional items only."""
    consumed = analyzer.consumed(items[index][1][2])
    for op, arg in items[index + 1 :]:
        if op in (C.ASSERT, C.ASSERT_NOT, C.AT):
            continue
        for _, _, body in _leading_repeats(op, arg, analyzer):
            overlap = consumed & analyzer.first(body)[0]
            if overlap.any():
                found.append(f"two unbounded repeats of the same characters in a row ({_describe(overlap)!r})")
                return
        if not analyzer.item_first(op, arg)[1]:
            return


def _check_search_restarts(seq, analyzer: _Analyzer, found: list[str]) -> None:
    """Rule 4, on each top-level alternative."""
    items = list(seq)
    if len(items) == 1 and items[0][0] is C.BRANCH:
        for alternative in items[0][1][1]:
            _check_search_restarts(alternative, analyzer, found)
        return
    if len(items) == 1 and items[0][0] is C.SUBPATTERN:
        _check_search_restarts(items[0][1][3], analyzer, found)
        return
    guard = NONE.copy()
    for position, (op, arg) in enumerate(items):
        if op is C.AT and arg in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
            return
        if op is C.ASSERT_NOT and arg[0] < 0:  # a negative lookbehind: (?<!S)
            inner = list(arg[1])
            if len(inner) == 1 and analyzer.single(*inner[0]) is not None:
                guard |= analyzer.single(*inner[0])
            continue
        if op in (C.ASSERT, C.ASSERT_NOT, C.AT):
            continue
        if op in REPEATS and arg[1] == C.MAXREPEAT:
            run = analyzer.consumed(arg[2])
            rest_nullable = analyzer.first(items[position + 1 :])[1] and not any(
                o in (C.ASSERT, C.ASSERT_NOT) for o, _ in items[position + 1 :]
            )
            if not rest_nullable and (run & ~guard).any():
                found.append(
                    f"a search restarts inside a run of {_describe(run & ~guard)!r} and rescans it (no lookbehind guard)"
                )
        return


def translate_regex_module(pattern: str) -> str:
    """`regex`-module property classes as their nearest `re` equivalents, for the analysis only: letters
    `\\p{L}` as `[^\\W\\d_]` (inside a class, `\\w`), numbers `\\p{N}` as `\\d`."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        if pattern.startswith((r"\p{L}", r"\p{N}"), i):
            letter = pattern[i + 3] == "L"
            out.append((r"\w" if in_class else r"[^\W\d_]") if letter else r"\d")
            i += 5
            continue
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if char == "[" and not in_class:
            in_class = True
        elif char == "]" and in_class:
            in_class = False
        out.append(char)
        i += 1
    return "".join(out)


def problems(pattern: str | bytes, flags: int = 0) -> list[str]:
    """Why `pattern` can take superlinear time (empty when none of the rules applies)."""
    from regexploit.ast.sre import SreOpParser
    from regexploit.redos import find

    text = pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern
    found: list[str] = []
    try:
        redos = [r for r in find(SreOpParser().parse_sre(text, flags)) if r.starriness > 2]
    except Exception as error:  # regexploit 1.0 predates atomic groups and possessive repeats
        found.append(f"regexploit cannot analyse it ({type(error).__name__}: {error})")
    else:
        found += [f"regexploit: starriness {r.starriness}, e.g. {r.example()}" for r in redos]
    tree = sre_parse.parse(text, flags)
    analyzer = _Analyzer(flags | tree.state.flags)
    tree = _flatten(tree)
    _walk(tree, analyzer, found)
    _check_search_restarts(tree, analyzer, found)
    return found
