"""PII redaction: e-mail addresses, IPv4/IPv6 addresses and phone numbers become placeholders.

Placeholders: `<EMAIL>`, `<IP_ADDRESS>`, `<PHONE>`; none of them matches a pattern again, so redacting is
idempotent and `find_pii` on a redacted text finds nothing (what the blocking asset check verifies).

What counts (precision over recall: redacting a version number or a date would damage text):
- e-mail: `local@domain.tld` with a dotted domain and a 2+ letter top-level label, a dotted quad of numbers
  or an `[a.b.c.d]` literal; a local part may start with `_`, follow a `.` or be quoted (`"j s"@example.com`):
  every address datatrove's PII tests redact (tests/data/datatrove/pii_cases.json);
- IPv4: four dot-separated numbers 0-255, not part of a longer dotted number (`1.2.3.4.5` is not one, a
  lone dot before it is: `.3.3.3.0`) and not right after a numbering word (`Section 11.2.3.4`, `version 1.2.3.4`);
- IPv6: full or `::`-compressed groups of hex digits with at least two colons, including an embedded IPv4
  tail; a bare `::` or a `12:30:45` time is not one;
- IPv6 (continued): eight full groups, or a `::` form starting with `::` or holding 4+ hex digits;
- which IP addresses (`ip`): `public` (default) redacts only globally reachable ones and keeps
  the special-purpose ranges of IANA's IPv4 / IPv6 special-purpose address registries that are not globally
  reachable: loopback (127.0.0.0/8, ::1), private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local
  (169.254/16, fe80::/10), documentation (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32), shared
  (100.64/10), benchmarking, reserved, unspecified and broadcast; an IPv4-mapped IPv6 address (::ffff:a.b.c.d)
  is judged by its IPv4 address. Such addresses in documentation and configs are not personal data.
  `all` redacts every address, `none` none;
- phone: an optional `+country` code, an optional `(area)` and groups separated by space, dot or dash,
  9 to 15 digits in all (E.164's maximum); without a `+`/`(` prefix at least two groups of three or more
  digits and none of one digit. Dates (`2026-01-15`), ISBNs, times and plain long numbers without
  separators are left alone.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pyarrow as pa

from sluice.clean.steps import Document, Drop, Step
from sluice.config import PIISettings

PLACEHOLDERS = {"email": "<EMAIL>", "ip_address": "<IP_ADDRESS>", "phone": "<PHONE>"}

# The local part: a word character (`_` too) and up to 63 of `A-Za-z0-9._%+-`, not inside a longer word; it
# may follow a lone `.` (`.email@example.com` keeps its dot), not one inside a run of local-part characters,
# where the match starts earlier (so `b.b.b.` is scanned once, not from every `b`). Or a quoted local part
# (`"john smith"@...`, RFC 5322, at most 64 characters) at the start of a word (`class="a"@media.screen` is
# no address). The domain: dotted labels with a top-level label of 2-24 letters, a dotted quad of numbers
# (`email@123.123.123.123`; datatrove's tests redact `email@111.222.333.44444` too) or an address literal
# (`email@[123.123.123.123]`); at a non-public IPv4 address it is a port at a host (`inet:10002@127.0.0.1`),
# not an e-mail (_email_ok). At most 126 labels before the top-level domain (a DNS name is at most 253
# characters): an unbounded `(…\.)+` keeps one backtracking frame per label, so a megabyte of "b.b.b." cost
# ~10x more, outside the CPU caches.
_LOCAL = r'(?:(?<![\w+-])(?<![\w.%+-]\.)[A-Za-z0-9_][A-Za-z0-9._%+-]{0,63}|(?<![^\s<(\[,;:])"(?:[^"\\\n]|\\[^\n]){1,64}")'
_DOMAIN = (
    r"(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,126}[A-Za-z]{2,24}"
    r"|\d{1,5}(?:\.\d{1,5}){3}"
    r"|\[\d{1,3}(?:\.\d{1,3}){3}\])"
)
EMAIL = re.compile(rf"{_LOCAL}@{_DOMAIN}(?![\w-])")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# Not inside a word or a longer dotted number (`1.2.3.4.5`), but after a lone dot (`.3.3.3.0`, `x.8.8.8.8`).
IPV4 = re.compile(rf"(?<!\w)(?<!\d\.){_OCTET}(?:\.{_OCTET}){{3}}(?![\w]|\.\d)")
_H = r"[0-9A-Fa-f]{1,4}"
_IPV6_BODY = (
    rf"(?:{_H}:){{7}}{_H}"
    rf"|(?:{_H}:){{1,7}}:(?!:)"
    rf"|(?:{_H}:){{1,6}}:{_H}"
    rf"|(?:{_H}:){{1,5}}(?::{_H}){{1,2}}"
    rf"|(?:{_H}:){{1,4}}(?::{_H}){{1,3}}"
    rf"|(?:{_H}:){{1,3}}(?::{_H}){{1,4}}"
    rf"|(?:{_H}:){{1,2}}(?::{_H}){{1,5}}"
    rf"|{_H}:(?::{_H}){{1,6}}"
    rf"|:(?::{_H}){{1,7}}"
    rf"|(?:{_H}:){{6}}{_OCTET}(?:\.{_OCTET}){{3}}"
    rf"|::(?:ffff(?::0{{1,4}})?:)?{_OCTET}(?:\.{_OCTET}){{3}}"
)
IPV6 = re.compile(rf"(?<![\w:.])(?:{_IPV6_BODY})(?![\w:]|\.\d)")
PHONE = re.compile(
    r"(?<![\w+.\-/:])(?<!\d[ .,])"
    r"(?:\+\d{1,3}[ .\-]?)?"
    r"(?:\(\d{1,5}\)[ .\-]?)?"
    r"\d{1,5}(?:[ .\-]\d{1,8}){1,5}"
    r"(?![\w\-/:]|\.\d)"
)


def _is_phone(candidate: str) -> bool:
    digits = sum(ch.isdigit() for ch in candidate)
    if not 9 <= digits <= 15:
        return False
    if IPV4.fullmatch(candidate):
        return False  # an address (kept under `ip: public`), not a number to call
    if candidate.startswith(("+", "(")):
        return True  # an international or area-code prefix: any grouping (+33 1 23 45 67 89)
    # Without a prefix: at least two groups of 3+ digits and no group of one digit, which leaves dates
    # (2026-01-15), ISBNs (978-3-16-148410-0), dotted versions and digit-grouped numbers alone.
    groups = re.findall(r"\d+", candidate)
    return sum(len(group) >= 3 for group in groups) >= 2 and all(len(group) >= 2 for group in groups)


def _email_ok(candidate: str) -> bool:
    """Whether an e-mail match is one: one at a numeric domain that is a non-public IPv4 address
    (`inet:10002@127.0.0.1`, a milter's socket) is a port at a host, left to the IP rules."""
    domain = candidate.rpartition("@")[2].strip("[]")
    if not domain[-1].isdigit():
        return True
    try:
        return is_public_ip(domain)
    except ValueError:
        return True  # not an address at all (email@111.222.333.44444): an e-mail's shape, redacted


def _ipv6_ok(candidate: str) -> bool:
    # The loose grammar also matches a time of day (12:30:45), a verse (3:16) or C++'s `a::b`: require the
    # full eight groups, or a `::` form that starts with `::` (::1) or has 4+ hex digits (fe80::1).
    if candidate.count(":") == 7 and "::" not in candidate:
        return True
    if "::" in candidate:
        return candidate.startswith("::") or sum(c not in ":." for c in candidate) >= 4
    return False


# Not globally reachable per IANA's special-purpose address registries (the "Globally Reachable: False"
# entries), with the registries' exceptions that are reachable. Kept under `ip: public`.
_NOT_GLOBAL_V4 = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "240.0.0.0/4", "255.255.255.255/32",
)
_GLOBAL_EXCEPTIONS_V4 = ("192.0.0.9/32", "192.0.0.10/32")
_NOT_GLOBAL_V6 = (
    "::/128", "::1/128", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "fc00::/7", "fe80::/10",
)
_GLOBAL_EXCEPTIONS_V6 = ("2001:1::1/128", "2001:1::2/128", "2001:3::/32", "2001:4:112::/48", "2001:20::/28", "2001:30::/28")
_MAPPED_V4 = (0xFFFF << 32, (0xFFFF << 32) | 0xFFFFFFFF)  # ::ffff:0:0/96


def _intervals(networks: tuple[str, ...], exceptions: tuple[str, ...]) -> tuple[list[int], list[int]]:
    """Sorted disjoint [start, end] integer ranges covering `networks` minus `exceptions`."""
    import ipaddress

    def span(cidr: str) -> tuple[int, int]:
        net = ipaddress.ip_network(cidr)
        return int(net.network_address), int(net.broadcast_address)

    ranges = sorted(span(n) for n in networks)
    for low, high in sorted(span(e) for e in exceptions):
        cut = []
        for start, end in ranges:
            if end < low or start > high:
                cut.append((start, end))
                continue
            if start < low:
                cut.append((start, low - 1))
            if end > high:
                cut.append((high + 1, end))
        ranges = cut
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return [start for start, _ in merged], [end for _, end in merged]


_V4_RANGES = _intervals(_NOT_GLOBAL_V4, _GLOBAL_EXCEPTIONS_V4)
_V6_RANGES = _intervals(_NOT_GLOBAL_V6, _GLOBAL_EXCEPTIONS_V6)


def _in_ranges(value: int, ranges: tuple[list[int], list[int]]) -> bool:
    from bisect import bisect_right

    starts, ends = ranges
    at = bisect_right(starts, value) - 1
    return at >= 0 and value <= ends[at]


def is_public_ip(candidate: str) -> bool:
    """Whether an address found in text is globally reachable (what `ip: public` redacts)."""
    import ipaddress

    address = ipaddress.ip_address(candidate)
    value = int(address)
    if address.version == 4:
        return not _in_ranges(value, _V4_RANGES)
    if _MAPPED_V4[0] <= value <= _MAPPED_V4[1]:
        return not _in_ranges(value & 0xFFFFFFFF, _V4_RANGES)
    return not _in_ranges(value, _V6_RANGES)


def _ip_wanted(candidate: str, which: str) -> bool:
    return which == "all" or is_public_ip(candidate)


_NUMBERING = re.compile(r"(?:section|chapter|chap\.|sect\.|§|version|ver\.|v\.|release|table|figure|fig\.|step)\W{0,3}$", re.IGNORECASE)


def _ipv4_ok(text: str, start: int) -> bool:
    # "Section 11.2.3.4", "version 1.2.3.4": numbering, not an address.
    return _NUMBERING.search(text, max(0, start - 12), start) is None


def find_pii(text: str, settings: PIISettings | None = None) -> Counter[str]:
    """Counts of PII matches by kind: what `redact` would replace (an IPv4 address inside an IPv6 one
    counts once)."""
    return redact(text, settings)[1]


def redact(text: str, settings: PIISettings | None = None) -> tuple[str, Counter[str]]:
    """`text` with PII replaced by placeholders, and the replacements by kind."""
    settings = settings or PIISettings()
    counts: Counter[str] = Counter()
    if settings.email and "@" in text:

        def email(match: re.Match[str]) -> str:
            if not _email_ok(match.group()):
                return match.group()
            counts["email"] += 1
            return PLACEHOLDERS["email"]

        text = EMAIL.sub(email, text)
    which = settings.ip
    if which != "none":
        if ":" in text:

            def ipv6(match: re.Match[str]) -> str:
                if not _ipv6_ok(match.group()) or not _ip_wanted(match.group(), which):
                    return match.group()
                counts["ip_address"] += 1
                return PLACEHOLDERS["ip_address"]

            text = IPV6.sub(ipv6, text)
        if "." in text:

            def ipv4(match: re.Match[str]) -> str:
                if not _ipv4_ok(match.string, match.start()) or not _ip_wanted(match.group(), which):
                    return match.group()
                counts["ip_address"] += 1
                return PLACEHOLDERS["ip_address"]

            text = IPV4.sub(ipv4, text)
    if settings.phone:

        def phone(match: re.Match[str]) -> str:
            if not _is_phone(match.group()):
                return match.group()
            counts["phone"] += 1
            return PLACEHOLDERS["phone"]

        text = PHONE.sub(phone, text)
    return text, +counts


class PIIRedactor(Step):
    """Never drops; replaces PII in the text and records the counts on the document."""

    name = "pii"
    outcome = measured = False  # (no filter: it edits kept texts)
    on_routed = True  # documents routed to a side dataset are redacted too
    columns = (pa.field("pii_redactions", pa.int32(), nullable=False),)  # placeholders put into this text

    def __init__(self, settings: PIISettings | None = None) -> None:
        self.settings = settings or PIISettings()

    def apply(self, doc: Document) -> Drop | None:
        doc.text, counts = redact(doc.text or "", self.settings)
        doc.values["pii"] = counts  # by kind, for count_kept
        doc.values["pii_redactions"] = sum(counts.values())
        return None

    def count_kept(self, doc: Document, stats: Any) -> None:
        stats.pii.update(doc.values.get("pii", ()))
