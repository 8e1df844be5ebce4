"""Cut the bundled sample crawl (sample_data/) from ../shared/corpus/ (reproducible; run from the repo root).

web (WARC):        2026-01: Debian Handbook pages in en, de, ru, zh-CN
                   2026-02: the en pages re-crawled (exact duplicates of 2026-01), fr, ja
reference (JSONL): 2026-01: Debian Reference chapters in en, de as text (.jsonl.gz)
                   2026-02: chapters in fr, ja (.jsonl.zst), plus three handbook pages exported as
                   text (duplicates, across sources, of web/2026-01: exact where sluice's extraction gives
                   resiliparse's plain text, else near), and a mirror of the first en
                   chapter with a header line and every 100th word changed (a near duplicate, across
                   snapshots, of reference/2026-01: word 5-gram Jaccard about 0.9)
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import zstandard
from warcio.archiveiterator import ArchiveIterator

CORPUS = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/corpus")
OUT = Path("sample_data")


def cut_warc(src: Path, dst: Path, first: int) -> list[tuple[str, bytes]]:
    """Copy the first `first` response records byte for byte (one gzip member each)."""
    kept, pages = [], []
    with open(src, "rb") as handle:
        iterator = ArchiveIterator(handle)
        for record in iterator:
            if record.rec_type != "response":
                continue
            url = record.rec_headers.get_header("WARC-Target-URI")
            body = record.content_stream().read()
            iterator.read_to_end()
            kept.append((iterator.get_record_offset(), iterator.get_record_length()))
            pages.append((url, body))
            if len(kept) == first:
                break
    data = src.read_bytes()
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(b"".join(data[o : o + n] for o, n in kept))
    return pages


def extract(html: bytes) -> str:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html.decode("utf-8"))
    return extract_plain_text(tree, main_content=True, alt_texts=False, links=False, comments=False)


def reference_records(lang: str, chapters: int, date: str) -> list[dict]:
    src = CORPUS / "reference" / "2026-01" / f"debian-reference-{lang}.warc.gz"
    out = []
    with open(src, "rb") as handle:
        for record in ArchiveIterator(handle):
            if record.rec_type != "response":
                continue
            url = record.rec_headers.get_header("WARC-Target-URI")
            text = extract(record.content_stream().read())
            out.append({"id": url.rsplit("/", 1)[-1], "url": url, "date": date, "text": text, "lang": lang})
            if len(out) == chapters:
                break
    return out


def mirrored(record: dict, date: str) -> dict:
    """A near-duplicate copy: a mirror header line, and every 100th word replaced (deterministic)."""
    words = record["text"].split(" ")
    edited = [("mirror" if index % 100 == 99 else word) for index, word in enumerate(words)]
    text = f"Mirrored copy, retrieved {date[:10]}.\n" + " ".join(edited)
    return {**record, "id": record["id"] + "-mirror", "url": record["url"].replace("https://", "https://mirror."), "date": date, "text": text}


def main() -> None:
    web = CORPUS / "web"
    cut_warc(web / "2026-01/handbook-en-US.warc.gz", OUT / "web/2026-01/handbook-en-US.warc.gz", 24)
    cut_warc(web / "2026-01/handbook-de-DE.warc.gz", OUT / "web/2026-01/handbook-de-DE.warc.gz", 16)
    cut_warc(web / "2026-01/handbook-ru-RU.warc.gz", OUT / "web/2026-01/handbook-ru-RU.warc.gz", 12)
    zh = cut_warc(web / "2026-01/handbook-zh-CN.warc.gz", OUT / "web/2026-01/handbook-zh-CN.warc.gz", 12)
    cut_warc(web / "2026-02/handbook-en-US-recrawl.warc.gz", OUT / "web/2026-02/handbook-en-US-recrawl.warc.gz", 10)
    cut_warc(web / "2026-02/handbook-fr-FR.warc.gz", OUT / "web/2026-02/handbook-fr-FR.warc.gz", 16)
    cut_warc(web / "2026-02/handbook-ja-JP.warc.gz", OUT / "web/2026-02/handbook-ja-JP.warc.gz", 12)

    first = reference_records("en", 6, "2026-01-15T00:00:00Z") + reference_records("de", 4, "2026-01-15T00:00:00Z")
    path = OUT / "reference/2026-01/debian-reference.jsonl.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in first).encode()
    path.write_bytes(gzip.compress(lines, mtime=0))

    second = reference_records("fr", 4, "2026-02-20T00:00:00Z") + reference_records("ja", 4, "2026-02-20T00:00:00Z")
    # Three handbook pages exported as text: exact duplicates, across sources, of web/2026-01.
    for url, body in zh[2:5]:
        second.append({"id": url.rsplit("/", 1)[-1], "url": url, "date": "2026-02-20T00:00:00Z", "text": extract(body), "lang": "zh"})
    second.append(mirrored(first[0], "2026-02-20T00:00:00Z"))
    path = OUT / "reference/2026-02/debian-reference.jsonl.zst"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in second).encode()
    path.write_bytes(zstandard.ZstdCompressor(level=19).compress(lines))
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"sample_data: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
