"""Code share: the share of a document's non-empty lines that look like code, shell or markup.

A line looks like code when one of these holds (checked with string methods and one single-character-class
count, so linear in the line's length):
- it ends a block (`{` `}` `*/`) or, unless it is a list item or a sentence of 6+ words ending in
  punctuation, it ends like a statement (`;` `\\` `=>` `->`) or opens a bracket at its end; an indented
  line, or one with two `;`, ending so counts even as a sentence;
- it starts with a shell or REPL prompt: `$ ` `% ` `>>> ` `PS> ` `C:\\>`, `user@host:~$ ` / `:~# `, or a
  root prompt `# ` before a lowercase command word;
- it starts with a comment or directive: `//` `/*` `#!` `#include` `<!--` `<?`, or a markup tag (`<div ...>`);
- it starts with a closing bracket `)` `]` `}`;
- it is indented (a tab or 2+ spaces) and starts with a keyword of a programming or shell language
  (`def`, `return`, `if`, `for`, `echo`, `sudo`, ...; see KEYWORDS), or it starts with such a keyword
  followed by code punctuation (`(`, `=`, `$`, `:`, `{`, `[`), e.g. `apt install foo` does not, but
  `for i in $(seq 3); do` does;
- it assigns: `key = value`, `key == value`, `KEY=value` with an identifier as the key (configs, shell);
- two of the weaker signs: operator/bracket density (characters of `{}[]()<>=;$|&*\\/_#@%^~` make up 12 % or
  more of the line), a `-x` / `--option` token, a first word that is a keyword, no letter at all.

`code_share` = code-like lines / non-empty lines. Lines seen lately are looked up, not tested again (pages of
a site repeat their short lines), and a line with nothing any sign needs (`_may_be_code`) skips the tests.
The step records the share on every document; with `route_above` a document above it goes to the side
dataset `cleaned_code` (a Route: it is language-identified and PII-redacted but not put through the prose
filters, which would drop it), with `max_share` a document above it is dropped (`code_heavy`). Documents with fewer than `min_lines` non-empty lines are
measured only. The step runs before language ID: code defeats language identifiers and prose filters alike.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pyarrow as pa

from sluice.clean.steps import Document, Drop, Route, Step
from sluice.config import CodeShareSettings
from sluice.words import HAS_LETTER

CODE_DATASET = "cleaned_code"

_BLOCK = ("{", "}", "*/")
_ENDINGS = (";", "\\", "=>", "->")
_BULLETS = ("•", "◦", "▪", "- ", "* ", "– ")
_SENTENCE_END = (".", "!", "?", ":", ";", "。", "！", "？", "：", "；", "؟", "।")
_PROMPTS = ("$ ", "% ", ">>> ", "PS> ", "PS C:\\", "C:\\>", "mysql> ", "sqlite> ", "postgres=# ")
_OPENERS = ("//", "/*", "#!", "#include", "#define", "<!--", "<?", "-->")
_EDGE_OPEN = ("(", "[", "{")
_EDGE_CLOSE = (")", "]", "}")
KEYWORDS = frozenset(
    ["def", "class", "return", "import", "from", "if", "elif", "else", "fi", "then", "do", "done", "for", "while", "case", "esac", "switch", "break", "continue", "function", "var", "let", "const", "public", "private", "protected", "static", "void", "int", "char", "float", "double", "bool", "struct", "enum", "package", "using", "namespace", "fn", "func", "println", "printf", "echo", "sudo", "apt", "apt-get", "dpkg", "cd", "ls", "cat", "grep", "sed", "awk", "export", "chmod", "chown", "mkdir", "rm", "cp", "mv", "make", "git", "pip", "python", "python3", "systemctl", "service", "mount", "tar", "curl", "wget", "ssh", "sh", "bash", "end", "begin", "select", "insert", "update", "delete", "create", "alter", "set", "local", "try", "except", "finally", "catch", "throw", "raise", "lambda", "yield", "async", "await", "new", "del", "assert", "print", "require", "include", "module"]
)
_CODE_PUNCT = ("(", "=", "$", ":", "{", "[", "|", ";")
_SYMBOLS = "{}[]()<>=;$|&*\\/_#@%^~"
# Counted with a character class (str.translate looks every character up in a dict on non-ASCII lines).
_SYMBOL = re.compile(f"[{re.escape(_SYMBOLS)}]")


def _first_word(line: str) -> str:
    head = line.split(None, 1)
    return head[0] if head else ""


_PREFIXES = _PROMPTS + _OPENERS
_STATEMENT_ENDS = _ENDINGS + _EDGE_OPEN


def is_code_line(line: str) -> bool:
    """Whether one line (not empty) looks like code (see the module docstring). The signs are tested in the
    docstring's order; the first word is split off only for the lines that reach the tests needing it."""
    stripped = line.strip()
    if not stripped:
        return False
    if stripped.startswith(_PREFIXES) or (":~" in stripped and (":~$ " in stripped or ":~# " in stripped)):
        return True
    if stripped.endswith(_BLOCK) or stripped.startswith(_EDGE_CLOSE):
        return True
    if stripped[0] == "<" and stripped[-1] == ">" and len(stripped) > 2 and (stripped[1].isalpha() or stripped[1] == "/"):
        return True
    if stripped.startswith("# ") and len(stripped) > 2:
        command = _first_word(stripped[2:])
        if command.isascii() and command.islower() and command in KEYWORDS:
            return True
    indented = line[:1] == "\t" or line[:2] == "  "
    bullet = stripped.startswith(_BULLETS)
    if not bullet and (indented or stripped.count(";") >= 2) and stripped.endswith(_STATEMENT_ENDS):
        return True
    if bullet or (stripped.endswith(_SENTENCE_END) and stripped.count(" ") >= 5):
        return False  # a list item or a sentence: only the signs above make it code
    if stripped.endswith(_STATEMENT_ENDS):
        return True
    word = _first_word(stripped)
    if _is_assignment(stripped, word):
        return True
    keyword = word in KEYWORDS
    if keyword:
        if indented:
            return True
        rest = stripped[len(word) :]
        if any(mark in rest for mark in _CODE_PUNCT):
            return True
    # Two of the weak signs, cheapest first, stopping as soon as the answer is known.
    weak = keyword + (len(_SYMBOL.findall(stripped)) >= 0.12 * len(stripped))
    if weak == 2:
        return True
    weak += _has_flag(stripped)
    if weak == 0:
        return False
    return weak + (HAS_LETTER(stripped) is None) >= 2


_ASSIGN = frozenset({"=", "==", ":=", "+=", "-=", "?=", "|="})


def _identifier(key: str) -> bool:
    plain = key.replace("_", "").replace(".", "").replace("-", "")
    return bool(plain) and plain.isascii() and plain.isalnum() and not key[0].isdigit()


def _is_assignment(stripped: str, word: str) -> bool:
    """`key = value`, `key == value` or `KEY=value`, with an identifier as the key (config files, shell)."""
    if "=" in word:
        return _identifier(word.split("=", 1)[0])
    parts = stripped.split(None, 2)
    return len(parts) >= 2 and parts[1] in _ASSIGN and _identifier(parts[0])


def _has_flag(line: str) -> bool:
    """A ` -x` / ` --name` option token (dashes, then a letter) after the first word."""
    at = line.find(" -")
    while at != -1:
        nxt = line[at + 2 : at + 3]
        if nxt == "-":
            nxt = line[at + 3 : at + 4]
        if nxt.isascii() and nxt.isalpha():
            return True
        at = line.find(" -", at + 2)
    return False


# What every sign needs (see the module docstring): a prompt, opener or bracket at the start of the stripped
# line, a keyword as its first word, a block or statement ending at its end, `=` or `:~` in it, or, for two weak
# signs without a keyword, an option token or no letter. A line with none of them is prose without the tests.
_START_CHARS = frozenset("#<)]}")
_STARTS = ("$ ", "% ", ">>> ", "PS> ", "PS C:\\", "C:\\>", "mysql> ", "sqlite> ", "//", "/*", "-->")
_ENDS = _BLOCK + _STATEMENT_ENDS


def _may_be_code(stripped: str) -> bool:
    return (
        stripped[0] in _START_CHARS
        or stripped.endswith(_ENDS)
        or "=" in stripped
        or ":~" in stripped
        or " -" in stripped
        or stripped.startswith(_STARTS)
        or stripped.split(None, 1)[0] in KEYWORDS
        or HAS_LETTER(stripped) is None
    )


_BLANK, _PROSE, _CODE = 0, 1, 2
_KNOWN_MAX = 1 << 16
_KNOWN_CHARS = 200


class _LineCache(dict):
    """Lines seen lately -> _BLANK / _PROSE / _CODE. Pages of one site repeat their short lines (headings,
    notices, table rows), so most lines are a dict lookup at C speed. Bounded like sluice.words' chunk cache:
    cleared at _KNOWN_MAX lines; a line longer than _KNOWN_CHARS (prose, rarely repeated) is tested, not kept."""

    def __missing__(self, line: str) -> int:
        stripped = line.strip()
        kind = _BLANK if not stripped else _CODE if _may_be_code(stripped) and is_code_line(line) else _PROSE
        if len(line) <= _KNOWN_CHARS:
            if len(self) >= _KNOWN_MAX:
                self.clear()
            self[line] = kind
        return kind


_KNOWN = _LineCache()


def clear_line_cache() -> None:
    """Forget the lines seen (benchmarks that measure the same documents twice in one process)."""
    _KNOWN.clear()


def code_line_counts(text: str) -> tuple[int, int]:
    """(code-like lines, non-empty lines) of a text."""
    kinds = Counter(map(_KNOWN.__getitem__, text.splitlines()))
    return kinds[_CODE], kinds[_PROSE] + kinds[_CODE]


class CodeShare(Step):
    name = "code_share"
    reasons = ("code_heavy",)
    columns = (pa.field("code_share", pa.float32()),)  # share of non-empty lines that look like code

    def __init__(self, settings: CodeShareSettings | None = None) -> None:
        self.s = settings or CodeShareSettings()

    def apply(self, doc: Document) -> Drop | None:
        code, total = code_line_counts(doc.text or "")
        share = code / total if total else 0.0
        doc.values["code_share"] = share
        s = self.s
        if total < s.min_lines:
            return None
        if s.route_above is not None and share > s.route_above:
            return Route("code_routed", f"{code} of {total} lines look like code ({share:.2f} > {s.route_above})", CODE_DATASET)
        if s.max_share is not None and share > s.max_share:
            return Drop("code_heavy", f"{code} of {total} lines look like code ({share:.2f} > {s.max_share})")
        return None

    def count_kept(self, doc: Document, stats: Any) -> None:
        if "code_share" in doc.values:
            stats.code_shares.add(doc.values["code_share"])
