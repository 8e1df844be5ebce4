"""The training blocklist: documents that must never be trained on again, by id, URL, domain or text pattern.

A text file, one entry per line (`#` starts a comment):

    doc:web/2026-01/handbook-en-US.warc.gz#20      a document id (sluice.ingest.raw's doc_id)
    url:https://example.com/a/page.html            a URL; `*` and `?` are wildcards (sluice.loader.skip)
    domain:example.com                             the host and all its subdomains (case-insensitive)
    regex:(?i)\bbuy now\b                          a pattern searched in the document's text

The version is the SHA-256 of the sorted, de-duplicated entries (`Blocklist.sha256`): comments, order and
repeats do not change it. Where it applies (`blocklist_matches` per deduplicated partition, then every
`mixed_dataset`; optionally `cleaned_documents`, `cleaning.blocklist`), each partition records the version
it matched, so lineage says which blocklist built which mix.

Regular expressions use the `regex` module with a time budget per document and pattern
(`regex_timeout_s`): a pattern that backtracks catastrophically on some text cannot stall a run. A document
whose search runs out of time counts as matched (the list exists to keep documents out; the timeout is
reported with the pattern) . Patterns are compiled when the list is loaded, so a bad one fails with its line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from sluice.clean.steps import Document, Drop, Step
from sluice.loader.skip import host_of, on_domains, wildcard_match

KINDS = ("doc", "url", "domain", "regex")
MAX_PATTERN_CHARS = 1000


class BlocklistError(ValueError):
    """A blocklist line that is not an entry; the message names the file and line."""


@dataclass
class Match:
    rule: str  # doc | url | domain | regex
    entry: str
    timed_out: bool = False


@dataclass
class Blocklist:
    doc_ids: frozenset[str] = frozenset()
    urls: tuple[str, ...] = ()  # exact URLs and wildcard patterns
    domains: frozenset[str] = frozenset()
    patterns: tuple[str, ...] = ()
    regex_timeout_s: float = 0.05
    _compiled: list[Any] = field(default_factory=list, repr=False)
    _exact_urls: frozenset[str] = field(default=frozenset(), repr=False)
    _wild_urls: tuple[str, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        self._compiled = [regex.compile(pattern) for pattern in self.patterns]
        self._exact_urls = frozenset(u for u in self.urls if "*" not in u and "?" not in u)
        self._wild_urls = tuple(u for u in self.urls if u not in self._exact_urls)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_compiled": []}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compiled = [regex.compile(pattern) for pattern in self.patterns]

    @classmethod
    def parse(cls, text: str, origin: str = "<blocklist>", regex_timeout_s: float = 0.05) -> Blocklist:
        doc_ids: set[str] = set()
        urls: set[str] = set()
        domains: set[str] = set()
        patterns: set[str] = set()
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            kind, colon, value = line.partition(":")
            kind, value = kind.strip().lower(), value.strip()
            where = f"{origin}:{number}"
            if not colon or kind not in KINDS or not value:
                raise BlocklistError(f"{where}: expected doc:<id>, url:<url>, domain:<host> or regex:<pattern>, got {line[:80]!r}")
            if kind == "doc":
                doc_ids.add(value)
            elif kind == "url":
                urls.add(value)
            elif kind == "domain":
                if "/" in value or " " in value:
                    raise BlocklistError(f"{where}: a domain is a host name such as example.com, got {value!r}")
                domains.add(value.lower().strip("."))
            else:
                if len(value) > MAX_PATTERN_CHARS:
                    raise BlocklistError(f"{where}: a pattern of {len(value)} characters (at most {MAX_PATTERN_CHARS})")
                try:
                    regex.compile(value)
                except regex.error as error:
                    raise BlocklistError(f"{where}: not a regular expression ({error}): {value[:80]!r}") from None
                patterns.add(value)
        return cls(frozenset(doc_ids), tuple(sorted(urls)), frozenset(domains), tuple(sorted(patterns)), regex_timeout_s)

    @classmethod
    def from_file(cls, path: str | Path, regex_timeout_s: float = 0.05) -> Blocklist:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"blocklist {path} does not exist") from None
        return cls.parse(text, str(path), regex_timeout_s)

    # -- identity
    def entries(self) -> list[str]:
        return sorted(
            [f"doc:{d}" for d in self.doc_ids] + [f"url:{u}" for u in self.urls] + [f"domain:{d}" for d in self.domains] + [f"regex:{p}" for p in self.patterns]
        )

    def canonical(self) -> str:
        return "".join(entry + "\n" for entry in self.entries())

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.canonical().encode("utf-8")).hexdigest()

    def counts(self) -> dict[str, int]:
        return {"doc": len(self.doc_ids), "url": len(self.urls), "domain": len(self.domains), "regex": len(self.patterns)}

    def __len__(self) -> int:
        return sum(self.counts().values())

    @property
    def needs_text(self) -> bool:
        return bool(self.patterns)

    # -- matching
    def match(self, doc_id: str | None, url: str | None, text: str | None) -> Match | None:
        """The first rule that blocks this document (doc, url, domain, regex in that order), or None."""
        if doc_id and doc_id in self.doc_ids:
            return Match("doc", doc_id)
        if url:
            if url in self._exact_urls:
                return Match("url", url)
            for pattern in self._wild_urls:
                if wildcard_match(pattern, url):
                    return Match("url", pattern)
            if self.domains:
                host = host_of(url)
                if host and on_domains(host, self.domains):
                    labels = host.split(".")
                    return Match("domain", next(".".join(labels[i:]) for i in range(len(labels)) if ".".join(labels[i:]) in self.domains))
        if text and self._compiled:
            for pattern, compiled in zip(self.patterns, self._compiled, strict=True):
                try:
                    if compiled.search(text, timeout=self.regex_timeout_s) is not None:
                        return Match("regex", pattern)
                except TimeoutError:
                    return Match("regex", pattern, timed_out=True)
        return None


class BlocklistFilter(Step):
    """The blocklist as a cleaning step (`cleaning.blocklist`): drops `blocklisted_<rule>`. Runs after
    extraction, so text patterns see the extracted text."""

    name = "blocklist"
    reasons = ("blocklisted_doc", "blocklisted_url", "blocklisted_domain", "blocklisted_regex")

    def __init__(self, blocklist: Blocklist) -> None:
        self.blocklist = blocklist

    @classmethod
    def from_file(cls, path: str, regex_timeout_s: float = 0.05) -> BlocklistFilter:
        return cls(Blocklist.from_file(path, regex_timeout_s))

    def apply(self, doc: Document) -> Drop | None:
        found = self.blocklist.match(doc.doc_id, doc.url, doc.text)
        if found is None:
            return None
        detail = found.entry + (" (search timed out)" if found.timed_out else "")
        return Drop(f"blocklisted_{found.rule}", f"{detail[:200]} (blocklist {self.blocklist.sha256[:12]})")


# -- per deduplicated partition (the `blocklist_matches` asset) --------------------------------------------------------

ASSET = "blocklist"  # the published versions: blocklist/version=<sha256[:16]>/blocklist.txt and blocklist/_manifest.json
MATCHES = "blocklist_matches"  # per source x snapshot: matches.parquet
MATCHES_FILE = "matches.parquet"


def matches_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("doc_id", pa.string()), ("rule", pa.string()), ("entry", pa.string()), ("timed_out", pa.bool_())])


@dataclass(frozen=True)
class MatchTask:
    input_url: str  # the deduplicated partition folder
    key: str  # one part file
    blocklist: Blocklist
    s3: Any = None


def match_part(task: MatchTask) -> list[dict[str, Any]]:
    """The documents of one deduplicated part the blocklist blocks (doc_id, rule, entry, timed_out)."""
    import pyarrow.parquet as pq

    from sluice.config import S3Settings
    from sluice.io.layout import local_copy
    from sluice.io.storage import StoreSpec

    store = StoreSpec(task.input_url, task.s3 or S3Settings()).open()
    columns = ["doc_id", "url"] + (["text"] if task.blocklist.needs_text else [])
    out = []
    with local_copy(store, task.key) as path:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, columns=columns):
            ids, urls = batch.column("doc_id").to_pylist(), batch.column("url").to_pylist()
            texts = batch.column("text").to_pylist() if task.blocklist.needs_text else [None] * len(ids)
            for doc_id, url, text in zip(ids, urls, texts, strict=True):
                found = task.blocklist.match(doc_id, url, text)
                if found is not None:
                    out.append({"doc_id": doc_id, "rule": found.rule, "entry": found.entry, "timed_out": found.timed_out})
    return out


def matches_identity(blocklist_sha256: str, deduped_manifest: bytes) -> dict[str, str]:
    """What a partition's matches were computed from: the blocklist version and the deduplicated partition."""
    return {"blocklist_sha256": blocklist_sha256, "deduped_manifest_sha256": hashlib.sha256(deduped_manifest).hexdigest()}


def load_configured(settings: Any) -> Blocklist:
    """The configured blocklist (`blocklist.path`; an empty list when none is set)."""
    if settings.path is None:
        return Blocklist(regex_timeout_s=settings.regex_timeout_s)
    return Blocklist.from_file(settings.path, settings.regex_timeout_s)
