"""datatrove's own filter test cases (tests/data/datatrove/filter_cases.json, ported from datatrove 0.10.1's
tests/pipeline/filters/test_filters.py, Apache-2.0; plus issue 42's cases, whose outcome was recorded by
running datatrove 0.10.1: tests/data/datatrove/record.py), run against both presets. `preset: datatrove`
must reach datatrove's outcome on every case; `preset: sluice` too, except the documented departures below
(docs/reference/drop-reasons.md#departures-from-datatrove)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.clean.steps import Document
from sluice.clean.steps.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from sluice.config import CleaningSettings

CASES = json.loads((Path(__file__).parents[3] / "data" / "datatrove" / "filter_cases.json").read_text())
FILTERS = {"gopher_quality": GopherQualityFilter, "gopher_repetition": GopherRepetitionFilter, "c4": C4QualityFilter,
           "fineweb_quality": FineWebQualityFilter}

# preset sluice's outcome where it departs from datatrove 0.10 on purpose, and the departure's name (a row of
# the departures table in docs/reference/drop-reasons.md).
DEPARTURES: dict[str, tuple[str | None, str]] = {
    "issue42.blank_lines_not_counted-0": ("line_punct_ratio", "fineweb: blank lines count"),
    "issue42.punct_ratio_at_threshold-0": ("line_punct_ratio", "fineweb: a ratio at its threshold drops"),
    "issue42.short_ratio_at_threshold-0": ("short_line_ratio", "fineweb: a ratio at its threshold drops"),
    "issue42.dup_ratio_at_threshold-0": ("char_dup_ratio", "fineweb: a ratio at its threshold drops"),
    "issue42.quote_after_stop-0": (None, "fineweb: a line ending in a quote is punctuated"),
    "issue42.only_stop_word_repeated-0": (None, "gopher: stop-word occurrences"),
}


def outcome(case: dict, preset: str) -> tuple[str | None, Document]:
    settings = CleaningSettings(preset=preset, **{case["filter"]: case["settings"]})
    step = FILTERS[case["filter"]](getattr(settings, case["filter"]), settings.word_splitting == "multilingual")
    doc = Document.from_text(case["text"], language=case.get("language", "en"))
    drop = step.apply(doc)
    return (None if drop is None else drop.reason), doc


def check(case: dict, preset: str, expected: str | None) -> None:
    reason, doc = outcome(case, preset)
    if expected == "*":
        assert reason is not None, case["id"]
    else:
        assert reason == expected, case["id"]
    if "kept_text_excludes" in case:
        assert case["kept_text_excludes"] not in doc.text


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_datatrove_preset_reaches_datatroves_outcome(case):
    check(case, "datatrove", case["datatrove"])


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_sluice_preset_reaches_it_or_departs_as_documented(case):
    expected, _ = DEPARTURES.get(case["id"], (case["datatrove"], ""))
    check(case, "sluice", expected)


def test_every_departure_is_a_case_where_the_presets_differ_and_is_documented():
    page = (Path(__file__).parents[4] / "docs" / "reference" / "drop-reasons.md").read_text()
    by_id = {case["id"]: case for case in CASES}
    for case_id, (expected, name) in DEPARTURES.items():
        assert expected != by_id[case_id]["datatrove"], case_id
        assert f"| {name} |" in page, name
