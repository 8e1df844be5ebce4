"""Filter statistics of a trace agree with the filters' decisions; the blocklist parses, versions and matches.

For real pages (the sample crawl, extracted as cleaning does) and thresholds drawn around the observed
values, a step's measures all keep the document exactly when the filter itself keeps it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from sluice.blocklist import Blocklist, BlocklistError, BlocklistFilter
from sluice.clean.steps import Document
from sluice.clean.steps.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from sluice.config import (
    C4Settings,
    CleaningSettings,
    FineWebQualitySettings,
    GopherQualitySettings,
    GopherRepetitionSettings,
    WarcOptions,
)
from sluice.ingest.readers import RawRecord, read_warc
from sluice.trace.measures import (
    Measures,
    _c4,
    _fineweb,
    _gopher_quality,
    _gopher_repetition,
    measure_document,
    replay_text,
)

SAMPLE = Path(__file__).resolve().parents[3] / "sample_data" / "web"


@pytest.fixture(scope="module")
def pages() -> list[Document]:
    docs = []
    for path in sorted(SAMPLE.glob("*/*.warc.gz"))[:4]:
        with open(path, "rb") as handle:
            for record in read_warc(handle, WarcOptions(), {}):
                if isinstance(record, RawRecord):
                    raw = {"content": record.content, "content_type": record.content_type, "charset": record.charset, "url": record.url}
                    doc = replay_text(raw, CleaningSettings())
                    if doc.text:
                        doc.language = "en" if "/en-US/" in (record.url or "") else ("de" if "/de-DE/" in (record.url or "") else "ru")
                        docs.append(doc)
    assert len(docs) > 20
    return docs


def fresh(doc: Document) -> Document:
    copied = copy.copy(doc)
    copied._cache = {}
    return copied


def perturbed(model, rng: np.random.Generator, scale: float = 0.6):
    """Settings with every numeric threshold moved by up to +-scale (relative), so both decisions occur."""
    values = {}
    for name, value in model.model_dump().items():
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float) and value > 0:
            moved = value * float(rng.uniform(1 - scale, 1 + scale))
            values[name] = int(round(moved)) or 1 if isinstance(value, int) else moved
        elif isinstance(value, dict):
            values[name] = {k: v * float(rng.uniform(1 - scale, 1 + scale)) for k, v in value.items()}
    return type(model).model_validate({**model.model_dump(), **values})


STEPS = {
    "gopher_quality": (GopherQualitySettings, GopherQualityFilter, _gopher_quality),
    "gopher_repetition": (GopherRepetitionSettings, GopherRepetitionFilter, _gopher_repetition),
    "c4": (C4Settings, C4QualityFilter, _c4),
    "fineweb_quality": (FineWebQualitySettings, FineWebQualityFilter, _fineweb),
    # preset datatrove's rule definitions, through the same tables
    "fineweb_quality/datatrove": (lambda: FineWebQualitySettings(variant="datatrove"), FineWebQualityFilter, _fineweb),
    "gopher_quality/datatrove": (
        lambda: GopherQualitySettings(stop_word_count="distinct", alpha_words="tokens"), GopherQualityFilter, _gopher_quality,
    ),
}


@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_step_keeps_exactly_when_all_its_measures_keep(pages, step):
    settings_type, filter_type, measure = STEPS[step]
    rng = np.random.default_rng(7)
    outcomes = {True: 0, False: 0}
    for round_number in range(6):
        settings_model = settings_type() if round_number == 0 else perturbed(settings_type(), rng)
        cleaning = CleaningSettings.model_validate({step.split("/")[0]: settings_model.model_dump()})
        for doc in pages:
            kept = filter_type(settings_model, True).apply(fresh(doc)) is None
            measures = Measures(0.1)
            measure(measures, fresh(doc), cleaning, True)
            verdict = all(m.kept for m in measures.items)
            assert verdict == kept, (step, round_number, doc.url, [m.describe() for m in measures.items if not m.kept])
            outcomes[kept] += 1
    assert outcomes[True] > 5 and outcomes[False] > 5  # both decisions were exercised


def test_measure_document_flags_values_near_thresholds(pages):
    doc = pages[0]
    raw = {"content": doc.content, "content_type": doc.content_type, "charset": doc.charset, "url": doc.url}
    cleaned = {"language": "en", "language_score": 0.66, "quality_score": None, "code_share": 0.1, "toxicity_score": 0.0, "toxic_terms": 0}
    result = measure_document(raw, cleaned, CleaningSettings(), margin=0.05)
    near = [m for m in result["measures"] if m.near]
    assert any(m.step == "language" and m.kept for m in near)  # 0.66 vs 0.65
    far = measure_document(raw, {**cleaned, "language_score": 0.99}, CleaningSettings(), margin=0.05)["measures"]
    assert not any(m.step == "language" and m.near for m in far)
    assert result["replayed_text"] and len(result["replayed_text"]) <= result["extracted_chars"]


BLOCKLIST = """
# training blocklist
doc:web/2026-01/a.warc.gz#3
url:https://spam.example/*
url:https://exact.example/page.html
domain:Bad.Example.
regex:(?i)buy\\s+now
doc:web/2026-01/a.warc.gz#3
"""


def test_blocklist_parses_versions_and_matches():
    listed = Blocklist.parse(BLOCKLIST)
    assert listed.counts() == {"doc": 1, "url": 2, "domain": 1, "regex": 1}
    reordered = Blocklist.parse("\n".join(reversed(BLOCKLIST.strip().splitlines())) + "\n# another comment")
    assert reordered.sha256 == listed.sha256  # order, comments and repeats do not change the version
    assert Blocklist.parse(BLOCKLIST + "domain:other.example").sha256 != listed.sha256
    assert listed.match("web/2026-01/a.warc.gz#3", None, None).rule == "doc"
    assert listed.match("x", "https://spam.example/deep/page", None).rule == "url"
    assert listed.match("x", "https://exact.example/page.html", None).rule == "url"
    assert listed.match("x", "https://exact.example/page.html?x", None) is None
    assert listed.match("x", "https://www.bad.example/", None).entry == "bad.example"
    assert listed.match("x", "https://notbad.example/", None) is None
    assert listed.match("x", "https://ok.example/", "Please BUY   now!").rule == "regex"
    assert listed.match("x", "https://ok.example/", "nothing here") is None


def test_a_pathological_pattern_times_out_and_blocks():
    listed = Blocklist.parse("regex:(a|aa)+b", regex_timeout_s=0.05)  # exponential backtracking in the regex module
    found = listed.match("x", None, "a" * 40)
    assert found is not None and found.timed_out


@pytest.mark.parametrize("line", ["nonsense", "doc:", "kind:value", "domain:a/b", "regex:(unclosed"])
def test_a_bad_line_is_named(line):
    with pytest.raises(BlocklistError, match="<blocklist>:2"):
        Blocklist.parse("# ok\n" + line)


def test_the_blocklist_as_a_cleaning_step(tmp_path):
    path = tmp_path / "block.txt"
    path.write_text(BLOCKLIST)
    step = BlocklistFilter.from_file(str(path))
    drop = step.apply(Document.from_text("a fine text, buy now", url="https://ok.example/"))
    assert drop is not None and drop.reason == "blocklisted_regex"
    assert step.apply(Document.from_text("fine", url="https://ok.example/")) is None
    from sluice.clean import build_steps

    names = [s.name for s in build_steps(CleaningSettings(blocklist=str(path)))]
    assert names.index("blocklist") == names.index("extract") + 1
    assert "blocklist" not in [s.name for s in build_steps(CleaningSettings())]
