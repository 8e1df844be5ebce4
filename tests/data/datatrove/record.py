"""Checks filter_cases.json against datatrove itself and records datatrove's outcome of the cases marked
"RECORD" (the issue-42 cases written for sluice). Not run by pytest: it needs datatrove 0.10.1 (and spaCy)
in a virtual environment of its own, e.g.
    python3 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install datatrove==0.10.1 regex spacy
    /tmp/dtvenv/bin/python tests/data/datatrove/record.py
A case's outcome: null (kept), a reason, or "*" (dropped, reason not asserted)."""

import json
from pathlib import Path

from datatrove.data import Document
from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter
from datatrove.pipeline.filters.c4_filters import C4QualityFilter
from datatrove.pipeline.filters.fineweb_quality_filter import FineWebQualityFilter

FILTERS = {"gopher_quality": GopherQualityFilter, "gopher_repetition": GopherRepetitionFilter, "c4": C4QualityFilter,
           "fineweb_quality": FineWebQualityFilter}
path = Path(__file__).with_name("filter_cases.json")
cases = json.loads(path.read_text())
for case in cases:
    doc = Document(text=case["text"], id=case["id"])
    result = FILTERS[case["filter"]](**case["settings"]).filter(doc)
    outcome = None if result is True else result[1]
    if case["datatrove"] == "RECORD":
        case["datatrove"] = outcome
    elif case["datatrove"] != "*":
        assert outcome == case["datatrove"], (case["id"], outcome)
    if "kept_text_excludes" in case:
        assert case["kept_text_excludes"] not in doc.text, case["id"]
path.write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")
print(len(cases), "cases agree with datatrove")
