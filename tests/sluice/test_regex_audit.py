"""Every regular expression in sluice/, data_assets/ and resources/ passes the ReDoS audit (tests/support/regex_audit.py).

The patterns are found two ways, so a new one cannot slip past: every module is imported and its module-level
compiled patterns collected (also when only a bound method such as `.search` is kept), and every call
`re.<function>(...)` / `regex.<function>(...)` in the source is located with `ast`. A call whose pattern is
neither a literal nor a module-level constant must be listed in DYNAMIC with the patterns it can receive;
one that is not fails the test, as does any pattern the audit flags unless ALLOWED explains why its shape is
linear after all.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.support.regex_audit import problems, translate_regex_module

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sluice", "data_assets", "resources")
RE_FUNCTIONS = {"compile", "match", "search", "sub", "subn", "findall", "finditer", "fullmatch", "split"}


def _tokenize_patterns() -> list[tuple[str, int]]:
    from sluice.tokens.tokenize import BYTE_LEVEL_PATTERN, CHARACTER_CLASSES

    return [(translate_regex_module(BYTE_LEVEL_PATTERN), 0)] + [(translate_regex_module(c + "+"), 0) for c in CHARACTER_CLASSES]


def _user_blocklist_patterns() -> list[tuple[str, int]]:
    """None the audit can vouch for: a training blocklist's `regex:` lines are the user's. They compile
    here, and every search with them runs under the `regex` module's timeout (Blocklist.regex_timeout_s;
    a search that runs out counts as a match), so no pattern can stall a run (tests/sluice/trace/test_trace_measures.py)."""
    return []


# Call sites whose pattern is computed at run time: (file, enclosing function) -> the patterns it can get.
DYNAMIC = {
    ("sluice/tokens/tokenize.py", "__init__"): _tokenize_patterns,
    ("sluice/blocklist.py", "__post_init__"): _user_blocklist_patterns,
    ("sluice/blocklist.py", "__setstate__"): _user_blocklist_patterns,
    ("sluice/blocklist.py", "parse"): _user_blocklist_patterns,
}

# Flagged shapes that are linear all the same, with the reason (reviewed; keep this list short).
ALLOWED = {
    # GPT-2's pre-tokenizer pattern (what `tokenizers` itself runs): rule 4 sees `\s+(?!\S)` able to fail
    # after a whitespace run, but giving back one character always satisfies the lookahead (the next
    # character is then whitespace), so a run is consumed by the first attempt and never rescanned.
    translate_regex_module(__import__("sluice.tokens.tokenize", fromlist=["x"]).BYTE_LEVEL_PATTERN),
}


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).with_suffix("")
            names.append(".".join(relative.parts).removesuffix(".__init__"))
    return names


def collected_patterns() -> dict[str, tuple[str | bytes, int]]:
    """module.name -> (pattern, flags) of every module-level compiled pattern (or bound method of one), of
    the `re` or the `regex` module, in the packages."""
    import regex

    found: dict[str, tuple[str | bytes, int]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            pattern = value if isinstance(value, re.Pattern | regex.Pattern) else getattr(value, "__self__", None)
            if isinstance(pattern, re.Pattern):
                found[f"{name}.{attribute}"] = (pattern.pattern, pattern.flags & ~re.UNICODE)
            elif isinstance(pattern, regex.Pattern):
                found[f"{name}.{attribute}"] = (translate_regex_module(pattern.pattern), 0)
    return found


def _flags(node: ast.expr | None) -> int:
    if node is None:
        return 0
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "re":
        return int(getattr(re, node.attr))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _flags(node.left) | _flags(node.right)
    raise ValueError(f"flags {ast.unparse(node)} are not constant")


def call_sites() -> list[dict]:
    """Every re./regex. call in the packages: file, line, enclosing function, module-level target, literal."""
    sites = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            parents: dict[ast.AST, ast.AST] = {}
            for parent in ast.walk(tree):
                for child in ast.iter_child_nodes(parent):
                    parents[child] = parent
            for node in ast.walk(tree):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in ("re", "regex")
                    and node.func.attr in RE_FUNCTIONS
                ):
                    continue
                function, target, up = None, None, node
                while up in parents:
                    up = parents[up]
                    if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef) and function is None:
                        function = up.name
                    if isinstance(up, ast.Assign) and parents.get(up) is tree and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name):
                        target = up.targets[0].id
                literal = None
                argument = node.args[0] if node.args else None
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str | bytes):
                    flag_node = node.args[1] if node.func.attr == "compile" and len(node.args) > 1 else None
                    flag_node = next((k.value for k in node.keywords if k.arg == "flags"), flag_node)
                    literal = (argument.value, _flags(flag_node))
                sites.append(
                    {
                        "file": str(path.relative_to(ROOT)),
                        "line": node.lineno,
                        "module": ".".join(path.relative_to(ROOT).with_suffix("").parts),
                        "function": function,
                        "target": target if function is None else None,
                        "literal": literal,
                        "engine": node.func.value.id,
                    }
                )
    return sites


def audited_patterns() -> dict[str, tuple[str | bytes, int]]:
    """label -> (pattern, flags) for every pattern the packages use."""
    patterns: dict[str, tuple[str | bytes, int]] = {}
    collected = collected_patterns()
    patterns.update(collected)
    unaccounted = []
    for site in call_sites():
        where = f"{site['file']}:{site['line']}"
        if site["literal"] is not None:
            pattern, flags = site["literal"]
            patterns[where] = (translate_regex_module(pattern), flags) if site["engine"] == "regex" else (pattern, flags)
        elif site["target"] is not None and f"{site['module']}.{site['target']}" in collected:
            continue
        elif (site["file"], site["function"]) in DYNAMIC:
            for index, item in enumerate(DYNAMIC[(site["file"], site["function"])]()):
                patterns[f"{where}#{index}"] = item
        else:
            unaccounted.append(f"{where} (in {site['function'] or 'module level'})")
    assert not unaccounted, (
        "regular expressions the audit cannot see (make them module-level constants or literals, or list them "
        f"in DYNAMIC): {unaccounted}"
    )
    return patterns


def test_the_scan_sees_the_patterns_it_must():
    patterns = audited_patterns()
    # Spot checks that both ways of finding patterns work: module constants, bound methods, literals, the
    # regex module's pattern of the tokenization fast path.
    assert "sluice.words.MULTILINGUAL_TOKEN" in patterns
    assert "sluice.words.HAS_LETTER" in patterns  # kept as `.search` only
    assert any(label.startswith("sluice/clean/steps/pii.py:") for label in patterns)  # re.findall(r"\d+", ...)
    assert any(label.startswith("sluice/tokens/tokenize.py:") for label in patterns)
    assert len(patterns) >= 30


def test_every_pattern_passes_the_redos_audit():
    flagged = {}
    for label, (pattern, flags) in sorted(audited_patterns().items()):
        found = problems(pattern, flags)
        if found and pattern not in ALLOWED:
            flagged[label] = found
    assert flagged == {}


OLD_CHUNK = (
    r"""([\(\[\{"'“‘«¡¿<\*\$\#§=]*)(.*?)((?:n't|n’t|'s|’s|'ll|'re|'ve|'d|'m)?(?:\.\.\.|…|[\)\]\}"'”’»,;:!\?%>\*。，、！？；：」』）.])*)"""
)


@pytest.mark.parametrize(
    "pattern, flags",
    [
        (OLD_CHUNK, re.DOTALL),  # the word splitter's pattern that stalled a partition (exponential in dots)
        (r"[.!?]+[\"'”’)\]]*\s+(?=\S)", 0),  # the C4 sentence end before its lookbehind (quadratic in dots)
        (rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.IGNORECASE),  # \s*"?\s*
        (r"[^\W\d]+(?:[\u0900-\u0dff]+[^\W\d]*)*!", 0),  # the multilingual word run before its rewrite
        (r"(a+)+$", 0),
        (r"(?:a|ab)*c", 0),
        (r"(x*)*y", 0),
        (r"\s*\S*\s*x", 0),
    ],
)
def test_the_audit_flags_known_vulnerable_shapes(pattern, flags):
    assert problems(pattern, flags)


@pytest.mark.parametrize(
    "pattern", [r"\d+(?:[.,]\d+)?", r"(?<![.!?])[.!?]+\s+(?=\S)", r"[a-z0-9]+", r"^[a-z0-9][a-z0-9_-]{0,62}$", r"(?:ab)+c?"]
)
def test_the_audit_passes_linear_shapes(pattern):
    assert problems(pattern) == []
