"""Bytes -> text: charset detection, HTML main-text extraction, and the per-document budget.

Charset, in the order browsers use: a byte-order mark, the HTTP `Content-Type` charset, a `<meta charset>`
/ `http-equiv` declaration in the first 4 KiB, else detection from the bytes (valid UTF-8 is taken as
UTF-8; otherwise resiliparse's detector decides).

Extractors: `resiliparse` (default, fast), with trafilatura as a second opinion on the rare page where
resiliparse's main-content heuristic took the article for boilerplate (`extraction.second_opinion`), or
`trafilatura` alone (slower). Selectable per source (`cleaning.per_source.<name>.extraction`).

Budget: a page over `max_html_bytes` is dropped unparsed (`too_large`). A page that could be slow runs
in a helper process (`isolate`, see ExtractionSettings): the parent waits at most `timeout_s` for it,
then kills the helper, drops the page (`extract_timeout`) and starts a fresh helper for the next one.
resiliparse's main-content extraction is quadratic in nesting depth (20,000 nested `<div>`s take ~25 s)
and C code cannot be interrupted from Python, so a process boundary is the only hard limit; with
`isolate: auto` only pages whose estimated nesting depth or size is unusual pay for the round trip. A crash of the helper drops the
page (`extract_crashed`). Wire format between parent and helper: request = 4-byte big-endian length +
UTF-8 HTML; reply = 1 status byte (0 text, 1 error message) + 4-byte big-endian length + UTF-8 payload.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import select
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sluice.clean.steps import Document, Drop, Step
from sluice.config import ExtractionSettings

_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*(?:["']\s*)?([A-Za-z0-9_.:-]{1,40})""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _known(charset: str | None) -> str | None:
    if not charset:
        return None
    try:
        return codecs.lookup(charset.strip().lower()).name
    except LookupError:
        return None


def detect_charset(content: bytes, declared: str | None, html: bool) -> tuple[str, str]:
    """(codec name, where it came from: bom | http | meta | utf8 | detected)."""
    for bom, name in _BOMS:
        if content.startswith(bom):
            return name, "bom"
    if _known(declared):
        return _known(declared), "http"  # type: ignore[return-value]
    if html:
        match = _META_CHARSET.search(content, 0, 4096)
        if match and _known(match.group(1).decode("ascii")):
            return _known(match.group(1).decode("ascii")), "meta"  # type: ignore[return-value]
    try:
        content.decode("utf-8")
        return "utf-8", "utf8"
    except UnicodeDecodeError:
        pass
    from resiliparse.parse.encoding import detect_encoding

    return _known(detect_encoding(content)) or "cp1252", "detected"


class DecodeText(Step):
    """Bytes -> str in the detected charset; bytes invalid in a declared charset drop the document."""

    name = "decode"
    extracts = True  # (a failure leaves no text: nothing after it is measured)
    reasons = ("unknown_charset", "invalid_utf8", "invalid_encoding")

    def __init__(self) -> None:
        self.charset_sources: dict[str, int] = {}

    def apply(self, doc: Document) -> Drop | None:
        if doc.charset and not _known(doc.charset) and not doc.content.startswith(tuple(b for b, _ in _BOMS)):
            return Drop("unknown_charset", f"charset {doc.charset!r} is unknown")
        charset, origin = detect_charset(doc.content, doc.charset, doc.content_type == "text/html")
        self.charset_sources[origin] = self.charset_sources.get(origin, 0) + 1
        try:
            doc.text = doc.content.decode(charset)
        except UnicodeDecodeError as error:
            reason = "invalid_utf8" if charset in ("utf-8", "utf-8-sig") else "invalid_encoding"
            return Drop(reason, f"{charset} ({origin}): {error}")
        return None


_RESILIPARSE_OPTIONS = {"alt_texts": False, "links": False, "comments": False}
LINK_DENSE = "data-sluice-link-dense"  # the attribute mark_link_dense sets, skipped by its selector
# The blocks judged by their links: lists, tables, sectioning boxes, and the divs that hold links, lists or
# headings directly (teaser tiles, "more on this" boxes); any div would cost a text per div of the page.
_LINK_BLOCKS = "section, aside, nav, ul, ol, dl, table, div:has(> a, > ul, > ol, > h2, > h3, > h4, > h5, > h6)"


def mark_link_dense(tree: Any, density: float, max_words: int) -> int:
    """Mark (attribute LINK_DENSE) the outermost blocks of `_LINK_BLOCKS` with at most `max_words` words of
    which at least `density` are inside links: related-article lists and teaser boxes. Returns how many.
    resiliparse's node lists are read whole (`values()`, ~5 µs a node): item by item each costs about as much
    as the query (resiliparse 2.0), which made this pass 100x slower."""
    body = tree.body
    if body is None:
        return 0
    # Each block's text is read whole, so nested blocks read the same text again: quadratic in nesting depth.
    # Real pages read at most 4.3x their text (the Readability set and the development set); a page that
    # reads more than 16x stops being judged there (deterministic: the budget depends on the page alone).
    budget = 16 * len(body.text or "") + 65536
    marked, last = 0, None
    for block in body.query_selector_all(_LINK_BLOCKS).values():
        if last is not None and last.contains(block):
            continue  # inside a block already marked
        text = block.text or ""
        budget -= len(text)
        if budget < 0:
            break
        words = len(text.split())
        if not words or words > max_words:
            continue
        linked = sum(len((a.text or "").split()) for a in block.query_selector_all("a").values())
        if linked and linked >= density * words:
            block.set_attribute(LINK_DENSE, "")
            marked, last = marked + 1, block
    return marked


_SENTENCE_END = (".", "!", "?", "\u2026", '"', "'", ")", "\u201d", "\u201c", "\u00bb", "\u00ab", "\u3002", "\uff01", "\uff1f", "\u300d", "\u300f", "\uff09")


_SPACE_LINE = re.compile(r"^[^\S\n]+$", re.MULTILINE)


def tidy_main_text(text: str, trailing_labels: int = 0, empty_space_lines: bool = False) -> str:
    """The main text less its trailing labels (trim_trailing_labels) and, with `empty_space_lines`, with its
    lines of only spaces emptied (the repetition rules would count each as a repeated line)."""
    return trim_trailing_labels(_SPACE_LINE.sub("", text) if empty_space_lines else text, trailing_labels)


def trim_trailing_labels(text: str, trailing_labels: int) -> str:
    """The main text with up to `trailing_labels` label lines taken off its end: at most 4 words and 60
    characters, not ending a sentence or ending in a colon (the heading of a related-links box whose links
    were left out, "Next article", "Share:"); never the whole text."""
    if not trailing_labels:
        return text
    lines, removed = text.rstrip().split("\n"), 0
    while lines and removed < trailing_labels:
        last = lines[-1].strip()
        if last and (len(last) > 60 or len(last.split()) > 4 or last.endswith(_SENTENCE_END)):
            break
        removed += bool(last)
        lines.pop()
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) if removed and lines else text  # (a text of labels only stays whole)


def _main_text(tree: Any, post_meta: bool, skip: tuple[str, ...], short_chars: int, link_density: float | None = None,
               link_max_words: int = 300) -> str:
    """resiliparse's main text without the `skip` elements and, with `link_density`, the link-dense blocks
    (mark_link_dense); the unskipped main text instead where skipping left less than `short_chars` and under
    half of it (the page was laid out inside a skipped element). Only short results pay for the second
    extraction."""
    from resiliparse.extract.html2text import extract_plain_text

    if link_density is not None and mark_link_dense(tree, link_density, link_max_words):
        skip = (*skip, f"[{LINK_DENSE}]")
    text = extract_plain_text(tree, main_content=True, post_meta=post_meta, skip_elements=list(skip) or None, **_RESILIPARSE_OPTIONS)
    if not skip or len(text) >= short_chars:
        return text
    unskipped = extract_plain_text(tree, main_content=True, post_meta=post_meta, **_RESILIPARSE_OPTIONS)
    return unskipped if len(text) * 2 < len(unskipped) else text


def extract_resiliparse(html: str, post_meta: bool = False, skip: tuple[str, ...] = (), short_chars: int = 500,
                        link_density: float | None = None, link_max_words: int = 300, trailing_labels: int = 0,
                        empty_space_lines: bool = False) -> str:
    """resiliparse's main text (see _main_text), tidied (tidy_main_text); `skip` empty and the rest at their
    defaults: exactly resiliparse's call with sluice's options."""
    from resiliparse.parse.html import HTMLTree

    text = _main_text(HTMLTree.parse(html), post_meta, skip, short_chars, link_density, link_max_words)
    return tidy_main_text(text, trailing_labels, empty_space_lines)


def extract_trafilatura(html: str) -> str:
    """trafilatura's main text (favor_precision, duplicate segments removed within the page). Its
    `deduplicate` counts segments in a process-wide cache, so without emptying it first a page's text would
    depend on the pages the same worker extracted before it (a paragraph seen on earlier pages is dropped)."""
    import trafilatura
    from trafilatura.deduplication import LRU_TEST

    LRU_TEST.clear()
    return trafilatura.extract(html, favor_precision=True, include_comments=False, deduplicate=True) or ""


def extract_with_second_opinion(html: str, below_chars: int, page_chars: int, post_meta: bool = False, skip: tuple[str, ...] = (),
                                 link_density: float | None = None, link_max_words: int = 300, trailing_labels: int = 0,
                                 empty_space_lines: bool = False) -> str:
    """resiliparse's main text, or trafilatura's where resiliparse's looks lost (shorter than `below_chars`
    while the page's whole text has at least `page_chars`) and trafilatura finds more. The whole-page text
    is only computed for short results, so ordinary pages cost one extraction."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html)
    text = tidy_main_text(_main_text(tree, post_meta, skip, below_chars, link_density, link_max_words), trailing_labels, empty_space_lines)
    if len(text) >= below_chars or len(extract_plain_text(tree, main_content=False, **_RESILIPARSE_OPTIONS)) < page_chars:
        return text
    second = extract_trafilatura(html)
    return second if len(second) > len(text) else text


def extractor_for(settings: ExtractionSettings) -> Callable[[str], str]:
    """The extraction function the settings describe (what ExtractHtml runs in-process or in its helper)."""
    if settings.extractor == "trafilatura":
        return extract_trafilatura
    options = {"link_density": settings.link_density, "link_max_words": settings.link_density_max_words,
             "trailing_labels": settings.trailing_labels, "empty_space_lines": settings.empty_space_lines}
    if settings.second_opinion is None:
        return partial(
            extract_resiliparse, post_meta=settings.post_meta, skip=tuple(settings.skip_elements), short_chars=settings.second_opinion_below_chars,
            **options,
        )
    return partial(
        extract_with_second_opinion, below_chars=settings.second_opinion_below_chars, page_chars=settings.second_opinion_page_chars,
        post_meta=settings.post_meta, skip=tuple(settings.skip_elements), **options,
    )


class ExtractorProcess:
    """A helper process running one extractor, killed and restarted when a page exceeds its budget."""

    def __init__(self, settings: ExtractionSettings) -> None:
        self.settings = settings
        self.timeout_s = settings.timeout_s
        self.process: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self.process is None or self.process.poll() is not None:
            # The helper imports this very copy of sluice, whatever the caller's working directory.
            root = str(Path(__file__).resolve().parents[3])  # the folder holding this copy of the sluice package
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
            self.process = subprocess.Popen(
                [sys.executable, "-m", "sluice.clean.steps.extract", "serve", self.settings.model_dump_json()],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path},
            )
        return self.process

    def extract(self, html: str) -> tuple[str, str]:
        """("ok", text) | ("error", message) | ("timeout", "") | ("crashed", message)."""
        process = self._start()
        data = html.encode("utf-8", "surrogatepass")
        deadline = time.monotonic() + self.timeout_s
        try:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(struct.pack(">I", len(data)) + data)
            process.stdin.flush()
            header = self._read(process.stdout.fileno(), 5, deadline)
            status, length = header[0], struct.unpack(">I", header[1:])[0]
            payload = self._read(process.stdout.fileno(), length, deadline).decode("utf-8", "surrogatepass")
        except TimeoutError:
            self.close()
            return "timeout", ""
        except (BrokenPipeError, EOFError) as error:
            code = process.poll()
            self.close()
            return "crashed", f"extractor process ended ({code}): {type(error).__name__}"
        return ("ok", payload) if status == 0 else ("error", payload)

    @staticmethod
    def _read(fd: int, size: int, deadline: float) -> bytes:
        chunks = []
        while size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            self.process = None


_VOID_TAGS = (b"br", b"img", b"meta", b"link", b"input", b"hr", b"wbr", b"source", b"area", b"col", b"embed", b"param", b"track", b"base")


def nesting_estimate(content: bytes, limit: int | None = None) -> int:
    """An upper estimate of a page's tag nesting depth, from the bytes alone (numpy, no parse): the running
    count of opening minus closing tags, void elements (`<br>`, `<img>` ...) left out. Unclosed `<p>`/`<li>`
    make it overestimate, which only sends such a page to the helper process. With `limit`, a cheaper
    count (void elements included) is returned when it is already within the limit."""
    import numpy as np

    data = np.frombuffer(content + b"\0" * 8, dtype=np.uint8)
    at = np.flatnonzero(data[:-8] == 0x3C)  # '<'
    if len(at) == 0:
        return 0
    if limit is not None:
        rough = _rough_nesting(data, at)
        if rough <= limit:
            return rough
    return _refined_nesting(data, at)


def _rough_nesting(data: Any, at: Any) -> int:
    """Opening minus closing tags, void elements included: never below the refined estimate."""
    import numpy as np

    first = data[at + 1] | 0x20
    opens = (first >= 0x61) & (first <= 0x7A)
    return int(np.cumsum(opens.astype(np.int64) - (data[at + 1] == 0x2F)).max())


def _refined_nesting(data: Any, at: Any) -> int:
    import numpy as np

    following = data[at[:, None] + np.arange(1, 8)] | 0x20  # lower-cased next 7 bytes
    first = following[:, 0]
    opens = (first >= 0x61) & (first <= 0x7A)
    closes = data[at + 1] == 0x2F
    for tag in _VOID_TAGS:
        n = len(tag)
        name = np.frombuffer(tag, dtype=np.uint8)
        end = following[:, n] if n < 7 else np.zeros(len(at), dtype=np.uint8)
        is_tag = (following[:, :n] == name).all(axis=1) & ~(((end >= 0x61) & (end <= 0x7A)) | ((end >= 0x30) & (end <= 0x39)))
        opens &= ~is_tag
    return int(np.cumsum(opens.astype(np.int64) - closes).max())


class ExtractHtml(Step):
    """HTML -> main text (boilerplate such as navigation removed) within the per-page budget."""

    name = "extract"
    extracts = True
    reasons = ("too_large", "extract_timeout", "extract_crashed", "extraction_failed", "empty_text")

    def __init__(self, settings: ExtractionSettings | None = None) -> None:
        self.settings = settings or ExtractionSettings()
        self.function = extractor_for(self.settings)
        isolate = self.settings.isolate
        self.worker = ExtractorProcess(self.settings) if isolate != "never" else None
        self.always_isolate = isolate == "always" or (isolate == "auto" and self.settings.extractor != "resiliparse")
        self.isolated = 0  # pages sent to the helper process

    def apply(self, doc: Document) -> Drop | None:
        if doc.content_type != "text/html":
            return None
        if len(doc.content) > self.settings.max_html_bytes:
            return Drop("too_large", f"{len(doc.content)} bytes > {self.settings.max_html_bytes}")
        html = doc.text or ""
        if self.worker is not None and (
            self.always_isolate
            or len(doc.content) > self.settings.inline_max_bytes
            or nesting_estimate(doc.content, self.settings.inline_max_depth) > self.settings.inline_max_depth
        ):
            self.isolated += 1
            status, payload = self.worker.extract(html)
            if status == "timeout":
                return Drop("extract_timeout", f"no result within {self.settings.timeout_s} s")
            if status == "crashed":
                return Drop("extract_crashed", payload)
            if status == "error":
                return Drop("extraction_failed", payload)
            doc.text = payload
        else:
            started = time.monotonic()
            try:
                doc.text = self.function(html)
            except Exception as error:  # never let one page stop a partition
                return Drop("extraction_failed", f"{type(error).__name__}: {error}")
            elapsed = time.monotonic() - started
            if elapsed > self.settings.timeout_s:
                return Drop("extract_timeout", f"took {elapsed:.1f} s > {self.settings.timeout_s} s")
        if not doc.text.strip():
            return Drop("empty_text", "no text after extraction")
        return None

    def count(self, doc: Document, drop: Drop | None, stats: Any) -> None:
        if drop is None:
            stats.extracted_chars.add(len(doc.text or ""))

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


class FixMojibake(Step):
    """Unicode repair with ftfy (`cleaning.fix_mojibake`): `Ã©tÃ©` -> `été`, HTML entities left by the
    extractor, curly-quote mojibake. Never drops; counts the documents it changed."""

    name = "unicode_repair"

    def __init__(self) -> None:
        try:
            import ftfy
        except ImportError:
            raise ImportError("cleaning.fix_mojibake needs ftfy: pip install 'sluice[unicode]'") from None
        self.fix_text = ftfy.fix_text
        self.repaired = 0

    def apply(self, doc: Document) -> Drop | None:
        text = doc.text or ""
        fixed = self.fix_text(text)
        if fixed != text:
            self.repaired += 1
            doc.text = fixed
        return None


def _serve(settings_json: str) -> None:
    function = extractor_for(ExtractionSettings.model_validate_json(settings_json))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = stdin.read(4)
        if len(header) < 4:
            return
        (length,) = struct.unpack(">I", header)
        html = stdin.read(length).decode("utf-8", "surrogatepass")
        try:
            status, text = 0, function(html)
        except Exception as error:
            status, text = 1, f"{type(error).__name__}: {error}"
        data = text.encode("utf-8", "surrogatepass")
        stdout.write(bytes([status]) + struct.pack(">I", len(data)) + data)
        stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        _serve(sys.argv[2])
    else:
        print("usage: python -m sluice.clean.steps.extract serve EXTRACTION_SETTINGS_JSON", file=sys.stderr)
        sys.exit(2)
