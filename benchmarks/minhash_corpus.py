"""Real documents from ../shared/corpus: its WARC pages as they are (`load_pages`: the cleaning, curation,
perplexity and real-page benchmarks), their main text, and controlled edits of them (the dedup benchmarks)."""

from __future__ import annotations

import random
from pathlib import Path

from benchmarks.peers import SHARED

CORPUS = SHARED / "corpus"
DEFAULT_FILES = (
    "web/2026-01/handbook-en-US.warc.gz",
    "web/2026-01/handbook-de-DE.warc.gz",
    "web/2026-01/handbook-zh-CN.warc.gz",
    "web/2026-01/handbook-ru-RU.warc.gz",
)


def load_pages(snapshot: str, per_file: int) -> list[dict]:
    """The first `per_file` response records of each WARC file of the corpus snapshot (e.g. `web/2026-01`),
    in file order: id (`file:n`), URL, raw content and the charset its Content-Type names."""
    from warcio.archiveiterator import ArchiveIterator

    pages = []
    for path in sorted((CORPUS / snapshot).glob("*.warc.gz")):
        taken = 0
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type != "response" or taken >= per_file:
                    continue
                header = record.http_headers.get_header("Content-Type") if record.http_headers else ""
                charset = header.split("charset=")[-1].strip() if "charset=" in (header or "") else None
                pages.append(
                    {
                        "id": f"{path.name}:{taken}",
                        "url": record.rec_headers.get_header("WARC-Target-URI"),
                        "content": record.content_stream().read(),
                        "charset": charset,
                    }
                )
                taken += 1
    return pages


def corpus_texts(files: tuple[str, ...] | None = None, min_chars: int = 200) -> list[str]:
    """Main text (resiliparse, as sluice's cleaning does) of every response record of `files` (all WARC
    files of the corpus when None), in file order; texts shorter than `min_chars` are skipped."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree
    from warcio.archiveiterator import ArchiveIterator

    paths = [CORPUS / name for name in files] if files else sorted(Path(CORPUS).glob("*/*/*.warc.gz"))
    texts = []
    for path in paths:
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                if record.rec_type != "response":
                    continue
                tree = HTMLTree.parse_from_bytes(record.content_stream().read())
                text = extract_plain_text(tree, main_content=True)
                if len(text) >= min_chars:
                    texts.append(text)
    return texts


def edit_words(text: str, rate: float, rng: random.Random) -> str:
    """A controlled edit: each word is, with probability `rate`, replaced, deleted, or followed by an
    inserted word (one third each). Characters of scripts without spaces count as words when the text
    has few spaces (Chinese, Japanese), so the edit rate means the same there."""
    words = text.split()
    by_char = len(words) < len(text) / 20
    units = list(text) if by_char else words
    out: list[str] = []
    for unit in units:
        if rng.random() >= rate:
            out.append(unit)
            continue
        operation = rng.randrange(3)
        if operation == 0:
            out.append(f"x{rng.randrange(10**6)}")
        elif operation == 2:
            out.extend([unit, f"y{rng.randrange(10**6)}"])
    return ("" if by_char else " ").join(out)
