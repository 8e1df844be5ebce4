"""PII recall and precision of sluice's redaction on a labelled set it was not written against.

    python benchmarks/pii_presidio.py PATH/synth_dataset_v2.json [--ip all]

The set: Microsoft presidio-research's `data/synth_dataset_v2.json` (MIT licence; 1,500 synthetic sentences
with labelled spans, among them EMAIL_ADDRESS, IP_ADDRESS and PHONE_NUMBER). Not bundled and never
downloaded: pass the file (e.g. from a clone of github.com/microsoft/presidio-research).

Each kind is redacted on its own (the other kinds off), and the redacted spans are recovered by aligning the
text around each placeholder with the original. Recall: labelled spans of the kind that lie inside a
redacted span. Precision: redacted spans that overlap a labelled span of the kind; the redacted spans that
overlap another labelled kind instead (a credit-card number taken for a phone number) are counted apart.
The set's IP addresses are random, so `--ip all` (every address) is the setting that matches its labels;
the default `public` keeps the non-global ones.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from sluice.clean.steps.pii import PLACEHOLDERS, redact
from sluice.config import PIISettings

LABELS = {"email": "EMAIL_ADDRESS", "ip_address": "IP_ADDRESS", "phone": "PHONE_NUMBER"}


def redacted_spans(original: str, redacted: str, placeholder: str) -> list[tuple[int, int]]:
    """Spans of `original` that `redact` replaced by `placeholder`: the literal text between placeholders is
    found in order, what lies between is a replaced span."""
    pieces = redacted.split(placeholder)
    spans, at = [], len(pieces[0])
    for piece in pieces[1:]:
        end = original.find(piece, at + 1) if piece else len(original)
        if piece and end < 0:
            raise ValueError(f"cannot align {placeholder} in {original[:80]!r}")
        spans.append((at, end))
        at = end + len(piece)
    return spans


def measure(records: list[dict], kind: str, ip: str) -> dict[str, float]:
    settings = PIISettings(email=kind == "email", ip=ip if kind == "ip_address" else "none", phone=kind == "phone")
    counts: Counter[str] = Counter()
    for record in records:
        text = record["full_text"]
        gold = [(s["start_position"], s["end_position"]) for s in record["spans"] if s["entity_type"] == LABELS[kind]]
        other = [(s["start_position"], s["end_position"]) for s in record["spans"] if s["entity_type"] != LABELS[kind]]
        found = redacted_spans(text, redact(text, settings)[0], PLACEHOLDERS[kind])
        counts["gold"] += len(gold)
        counts["found"] += len(found)
        counts["recalled"] += sum(any(a <= g0 and g1 <= b for a, b in found) for g0, g1 in gold)
        counts["correct"] += sum(any(a < g1 and g0 < b for g0, g1 in gold) for a, b in found)
        counts["other_kind"] += sum(not any(a < g1 and g0 < b for g0, g1 in gold) and any(a < o1 and o0 < b for o0, o1 in other) for a, b in found)
    return {
        "labelled": counts["gold"], "redacted": counts["found"],
        "recall": counts["recalled"] / counts["gold"] if counts["gold"] else float("nan"),
        "precision": counts["correct"] / counts["found"] if counts["found"] else float("nan"),
        "false_positives_on_other_kinds": counts["other_kind"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--ip", default="all", choices=["public", "all"])
    args = parser.parse_args()
    records = json.loads(Path(args.dataset).read_text(encoding="utf-8"))
    assert not any(re.search("<(EMAIL|IP_ADDRESS|PHONE)>", r["full_text"]) for r in records)  # placeholders are unambiguous
    for kind in LABELS:
        print(kind, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in measure(records, kind, args.ip).items()}))


if __name__ == "__main__":
    main()
