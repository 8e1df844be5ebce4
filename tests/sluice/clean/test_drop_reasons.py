"""The drop reasons a cleaning chain declares (`Step.reasons`, `sluice.clean.chain.drop_reasons`): what the
cleaned metadata records as a count for every partition (0 where none was dropped for it).

- Each step declares every reason its code can return: the string literals of its `Drop(...)`, `Rule(...)`
  and `self.rule(...)` calls, read from the source (an oracle independent of the declaration).
- `drop_reasons` names exactly the reasons of the steps `build_steps` puts in the chain for those settings
  (per language too), with the n-gram sizes and perplexity buckets the settings choose.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap

import pytest

from sluice.blocklist import BlocklistFilter
from sluice.clean.chain import build_steps, drop_reasons
from sluice.clean.steps import ByLanguage, Step
from sluice.clean.steps.codeshare import CodeShare
from sluice.clean.steps.extract import DecodeText, ExtractHtml, FixMojibake
from sluice.clean.steps.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from sluice.clean.steps.length_language import LanguageFilter, LengthFilter
from sluice.clean.steps.perplexity import PerplexityScorer
from sluice.clean.steps.pii import PIIRedactor
from sluice.clean.steps.quality import QualityScorer
from sluice.clean.steps.toxicity import ToxicityFilter
from sluice.clean.steps.urlfilter import URLFilter
from sluice.config import CleaningSettings

STEPS = [
    DecodeText, ExtractHtml, FixMojibake, LengthFilter, LanguageFilter, URLFilter, CodeShare, ToxicityFilter, QualityScorer,
    PerplexityScorer, PIIRedactor, BlocklistFilter, GopherQualityFilter, GopherRepetitionFilter, C4QualityFilter, FineWebQualityFilter,
]
# Reasons built from settings (f-strings in the code): declared by `drop_reasons` from the settings.
FAMILIES = ("top_", "duplicated_", "perplexity_", "blocklisted_")


def reason_arguments(step: type[Step]) -> tuple[set[str], list[re.Pattern[str]]]:
    """The reasons in the class's source: the literals passed as Drop's first argument or Rule's fifth (or
    assigned to, or looped over as, the name passed there), and the f-strings passed there as patterns."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(step)))
    literals: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        bound = _bound_names(function)
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            # Drop(reason, ...), Rule(statistic, value, threshold, keep_if, reason, ...), and a rule table's
            # self.rule(name, ..., reason=...) (RuleFilter.rule: the reason is the rule's name unless given).
            called = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""
            position = {"Drop": 0, "Rule": 4, "rule": 0}.get(called)
            if position is None or len(node.args) <= position:
                continue
            argument = node.args[position]
            given = [keyword.value for keyword in node.keywords if keyword.arg == "reason"]
            if called == "rule" and given:
                argument = given[0]
            if isinstance(argument, ast.JoinedStr):
                patterns.append(_pattern(argument))
            elif isinstance(argument, ast.Name):
                literals |= bound.get(argument.id, set())
            else:
                literals |= _values(argument)
    return literals, patterns


def _values(node: ast.AST) -> set[str]:
    """The strings an expression evaluates to: a literal, or either branch of a conditional."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _values(node.body) | _values(node.orelse)
    return set()


def _bound_names(function: ast.FunctionDef) -> dict[str, set[str]]:
    """Name -> the strings assigned to it, or taken by it (first element) in a loop over literal tuples."""
    bound: dict[str, set[str]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, set()).update(_values(node.value))
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple | ast.List):
            target = node.target.elts[0] if isinstance(node.target, ast.Tuple) else node.target
            items = [item.elts[0] if isinstance(item, ast.Tuple) else item for item in node.iter.elts]
            if isinstance(target, ast.Name):
                bound.setdefault(target.id, set()).update(value for item in items for value in _values(item))
    return bound


def _pattern(node: ast.JoinedStr) -> re.Pattern[str]:
    parts = [re.escape(part.value) if isinstance(part, ast.Constant) else "[a-z0-9]+" for part in node.values]
    return re.compile("".join(parts))


@pytest.mark.parametrize("step", STEPS, ids=lambda step: step.__name__)
def test_each_step_declares_every_reason_its_code_returns(step):
    literals, patterns = reason_arguments(step)
    assert literals - set(step.reasons) == set()
    # Nothing declared that the code cannot return (a name an f-string builds, e.g. dup_{unit}_frac, counts).
    assert {reason for reason in set(step.reasons) - literals if not any(p.fullmatch(reason) for p in patterns)} == set()


def test_the_filters_declare_their_rule_tables():
    assert reason_arguments(GopherQualityFilter)[0] >= {"gopher_short_doc", "gopher_enough_stop_words"}
    assert reason_arguments(C4QualityFilter)[0] >= {"lorem_ipsum", "curly_bracket"}
    assert "too_short" in LengthFilter.reasons and "lorem_ipsum" in C4QualityFilter.reasons


def _chain_reasons(steps: list[Step]) -> set[str]:
    found: set[str] = set()
    for step in steps:
        variants = [step.default, *step.by_language.values()] if isinstance(step, ByLanguage) else [step]
        for variant in variants:
            if variant is not None:
                found.update(type(variant).reasons)
    return found


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"c4": {"enabled": False}, "toxicity": {"enabled": False}, "code_share": {"enabled": False}},
        {"gopher_repetition": {"top_n_grams": {2: 0.3}, "dup_n_grams": {7: 0.1}}, "toxicity": {"enabled": False}, "languages": {"de": {"toxicity": {"enabled": True}}}},
    ],
    ids=["default", "toggled", "per-language"],
)
def test_drop_reasons_are_the_chains_steps_reasons(overrides):
    settings = CleaningSettings(**overrides)
    declared = set(drop_reasons([settings]))
    built = build_steps(settings)
    families = {reason for reason in declared if reason.startswith(FAMILIES)}
    assert declared - families == _chain_reasons(built)
    repetition = settings.gopher_repetition
    expected = {f"top_{n}_gram" for n in repetition.top_n_grams} | {f"duplicated_{n}_n_grams" for n in repetition.dup_n_grams}
    assert families == expected


def test_drop_reasons_unite_the_sources():
    web, reference = CleaningSettings(toxicity={"enabled": False}), CleaningSettings(toxicity={"enabled": True})
    assert "toxic_content" not in drop_reasons([web]) and "toxic_content" in drop_reasons([web, reference])


def test_drop_reasons_of_the_model_steps():
    """The model steps need models to be built, so their reasons are read from the settings alone."""
    scored = CleaningSettings(perplexity={"enabled": True, "drop_buckets": ["tail"]}, quality_threshold=0.5)
    assert {"high_perplexity", "perplexity_tail", "low_quality_score"} <= set(drop_reasons([scored]))
    assert not {"high_perplexity", "perplexity_tail", "low_quality_score"} & set(drop_reasons([CleaningSettings()]))
