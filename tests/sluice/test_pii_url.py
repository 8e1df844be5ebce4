"""PII redaction (valid addresses and near misses) and the URL blocklist."""

from __future__ import annotations

import pytest

from sluice.config import PIISettings
from sluice.pii import PIIRedactor, find_pii, redact
from sluice.steps import Document
from sluice.urlfilter import URLFilter


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Write to jane.doe+lists@example.co.uk today.", "email"),
        ("Contact: admin@mail.debian.org", "email"),
        ("The server at 192.168.1.20 answers.", "ip_address"),
        ("Use 10.0.0.1, then 255.255.255.0.", "ip_address"),
        ("IPv6 2001:db8:85a3::8a2e:370:7334 is up.", "ip_address"),
        ("Full form 2001:0db8:0000:0000:0000:ff00:0042:8329 too.", "ip_address"),
        ("Loopback ::1 and fe80::1ff:fe23:4567:890a.", "ip_address"),
        ("Call +1 415 555 2671 now.", "phone"),
        ("Call (415) 555-2671.", "phone"),
        ("Ring 030 12345678 or +49 30 1234567.", "phone"),
        ("Phone: 555-123-4567.", "phone"),
    ],
)
def test_valid_pii_is_found_and_replaced(text, kind):
    redacted, counts = redact(text)
    assert counts[kind] >= 1
    assert f"<{'IP_ADDRESS' if kind == 'ip_address' else kind.upper()}>" in redacted
    assert find_pii(redacted) == {}


@pytest.mark.parametrize(
    "text",
    [
        "Released on 2026-01-15 at 12:30:45.",  # date and time
        "Version 1.2.3 and kernel 6.1.0-18-amd64.",  # version numbers
        "Five octets 1.2.3.4.5 and 256.1.1.1 are not addresses.",
        "Not an e-mail: user@localhost or @handle or a@b.",
        "Population 1 000 000 000 and 12345678901234567890 as an id.",
        "Bible verse John 3:16 and ratio 16:9.",
        "The ISBN 978-3-16-148410-0 is on the cover.",
        "C++ std::vector and a::b are code.",
        "See Section\xa011.2.3.4 and version 1.2.3.4 of the guide.",  # numbering, not addresses
    ],
)
def test_near_misses_are_left_alone(text):
    redacted, counts = redact(text)
    assert counts == {}
    assert redacted == text


def test_redaction_counts_by_kind_and_kinds_can_be_disabled():
    text = "Mail a@example.com or b@example.org from 10.1.2.3, phone +33 1 23 45 67 89."
    redacted, counts = redact(text)
    assert counts == {"email": 2, "ip_address": 1, "phone": 1}
    assert redacted == "Mail <EMAIL> or <EMAIL> from <IP_ADDRESS>, phone <PHONE>."
    kept_phone, counts = redact(text, PIISettings(phone=False))
    assert counts == {"email": 2, "ip_address": 1} and "+33 1 23 45 67 89" in kept_phone
    assert redact(redacted)[1] == {}  # idempotent


def test_redactor_step_records_counts_on_the_document():
    doc = Document.from_text("Reach me at me@example.com.")
    assert PIIRedactor().apply(doc) is None
    assert doc.text == "Reach me at <EMAIL>." and doc.pii == {"email": 1}


def test_url_blocklist(tmp_path):
    listing = tmp_path / "urls.txt"
    listing.write_text("# comment\nexample-casino.com\nword:casino\nword:xxx   # trailing comment\n")
    step = URLFilter.from_file(listing)

    def outcome(url):
        drop = step.apply(Document.from_text("text", url=url))
        return None if drop is None else (drop.reason, drop.detail)

    assert outcome("https://example-casino.com/page") == ("url_blocked_domain", "example-casino.com")
    assert outcome("http://www.EXAMPLE-casino.com/") == ("url_blocked_domain", "example-casino.com")
    assert outcome("https://news.example.org/best-casino-bonus") == ("url_blocked_word", "casino")
    assert outcome("https://occasional.org/xxxl-shirts") is None  # words are whole tokens only
    domains_only = URLFilter({"example-casino.com"}, set())
    assert domains_only.apply(Document.from_text("t", url="https://notexample-casino.com/")) is None
    assert domains_only.apply(Document.from_text("t", url="https://a.b.example-casino.com/")) is not None
    assert outcome(None) is None


def test_url_blocklist_errors_name_the_line(tmp_path):
    listing = tmp_path / "urls.txt"
    listing.write_text("good.com\nhttp://bad.com/path\n")
    with pytest.raises(ValueError, match=r"urls.txt:2: expected a domain"):
        URLFilter.from_file(listing)
    with pytest.raises(FileNotFoundError, match="url_blocklist"):
        URLFilter.from_file(tmp_path / "missing.txt")


def test_shipped_example_list_loads():
    from pathlib import Path

    step = URLFilter.from_file(Path(__file__).resolve().parents[2] / "blocklists" / "urls.txt")
    assert "example-casino.com" in step.domains and "casino" in step.words
