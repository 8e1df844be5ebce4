"""benchmarks/pii_presidio.py: the redacted spans are recovered from the placeholders, and recall and precision
are counted against labelled spans (hand-labelled records in the dataset's format)."""

from __future__ import annotations

from benchmarks.pii_presidio import measure, redacted_spans


def test_redacted_spans_are_the_replaced_parts_of_the_original():
    original = "Mail a@example.com or b@example.org, then stop."
    assert redacted_spans(original, "Mail <EMAIL> or <EMAIL>, then stop.", "<EMAIL>") == [(5, 18), (22, 35)]
    assert redacted_spans("x@example.com", "<EMAIL>", "<EMAIL>") == [(0, 13)]


def _record(text: str, *spans: tuple[str, str]) -> dict:
    return {"full_text": text, "spans": [
        {"entity_type": kind, "start_position": text.index(value), "end_position": text.index(value) + len(value)} for kind, value in spans
    ]}


def test_recall_and_precision_against_labels():
    records = [
        _record("Write to jo@example.com today.", ("EMAIL_ADDRESS", "jo@example.com")),
        _record("Her SSN is 460-89-9847 and her phone 555-123-4567.", ("US_SSN", "460-89-9847"), ("PHONE_NUMBER", "555-123-4567")),
        _record("Call 467 3395 at night.", ("PHONE_NUMBER", "467 3395")),  # 7 digits: below the phone rule
    ]
    email = measure(records, "email", "all")
    assert (email["labelled"], email["redacted"], email["recall"], email["precision"]) == (1, 1, 1.0, 1.0)
    phone = measure(records, "phone", "all")
    assert (phone["labelled"], phone["redacted"], phone["recall"], phone["precision"]) == (2, 2, 0.5, 0.5)
    assert phone["false_positives_on_other_kinds"] == 1  # the SSN
