"""URL blocklist: drop documents whose URL is on a blocked domain or contains a blocked word.

The list is a text file named in the config (`cleaning.url_blocklist`), one entry per line:

    # comment
    example-casino.com        a domain: blocks it and every subdomain (www.example-casino.com)
    word:casino               a word: blocks URLs whose host or path has it as a token
                              (split at non-alphanumeric characters), so `casino` does not block
                              `occasional.org`

Lookups are set membership on the host's suffixes and the URL's tokens (no per-entry loop), so a list of
millions of domains costs the same per document as a list of ten. Documents without a URL pass.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from sluice.clean.steps import Document, Drop, Step

_TOKEN = re.compile(r"[a-z0-9]+")


class URLFilter(Step):
    name = "url"
    reasons = ("url_invalid", "url_blocked_domain", "url_blocked_word")

    def __init__(self, domains: set[str], words: set[str]) -> None:
        self.domains = {d.lower().strip(".") for d in domains}
        self.words = {w.lower() for w in words}

    @classmethod
    def from_file(cls, path: str | Path) -> URLFilter:
        domains: set[str] = set()
        words: set[str] = set()
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise FileNotFoundError(f"cleaning.url_blocklist: {path} does not exist") from None
        for number, raw in enumerate(lines, 1):
            entry = raw.split("#", 1)[0].strip().lower()
            if not entry:
                continue
            if entry.startswith("word:"):
                word = entry[5:].strip()
                if not _TOKEN.fullmatch(word):
                    raise ValueError(f"{path}:{number}: a blocked word must be letters/digits, got {word!r}")
                words.add(word)
            else:
                if "/" in entry or " " in entry:
                    raise ValueError(f"{path}:{number}: expected a domain such as example.com, got {entry!r}")
                domains.add(entry)
        return cls(domains, words)

    def apply(self, doc: Document) -> Drop | None:
        if not doc.url:
            return None
        try:
            parts = urlsplit(doc.url.strip())
            host = (parts.hostname or "").lower()
        except ValueError:
            return Drop("url_invalid", doc.url[:200])
        labels = host.split(".")
        for i in range(len(labels) - 1):
            suffix = ".".join(labels[i:])
            if suffix in self.domains:
                return Drop("url_blocked_domain", suffix)
        if self.words:
            for token in _TOKEN.findall(f"{host} {parts.path} {parts.query}".lower()):
                if token in self.words:
                    return Drop("url_blocked_word", token)
        return None
