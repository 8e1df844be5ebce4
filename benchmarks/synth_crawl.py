"""A seeded synthetic web crawl built from the real pages of ../shared/corpus/web, at any scale.

    python -m benchmarks.synth_crawl --scale 1 --out .bench_data/crawl-1x      # ~2,000 pages
    python -m benchmarks.synth_crawl --scale 16 --out .bench_data/crawl-16x    # ~32,000 pages

Output (under `--out`, which should be a git-ignored folder):
  web/<snapshot>/crawl-NNNNN.warc.gz   gzipped WARC/1.0 `response` records like the corpus's (HTTP status line
                                       and headers + HTML body), `--pages-per-file` records per file
  truth.parquet                        one row per record: what it is (below)
  crawl.json                           the parameters and counts

Every page starts from one real page of the corpus (3,429 pages, 27 languages, two snapshots) and is one of:
- `unique`: a new page. Each word inside the page's HTML text nodes (never inside tags, attributes, comments,
  scripts, styles or character references) is replaced, with probability `--unique-rate` (0.35), by a word
  drawn from the same page's text (same language, same word-frequency profile; characters of CJK scripts
  count as words). Two unique pages made from the same real page share almost no word 5-gram (Jaccard
  ~0.01), so the real corpus's own duplicates (re-crawls, untranslated chapters) do not survive into the
  synthetic crawl as unplanted duplicates.
- `exact`: a re-crawl of an earlier unique page, the same body byte for byte, same URL, new record id and
  date (in the same or a later snapshot);
- `near`: a near duplicate of an earlier unique page: the same edit with a small rate drawn from
  U(`--near-rate-min`, `--near-rate-max`) (0.2-2 % of the words), at the same URL in a later snapshot (an
  updated page) or at a mirror URL. Its Jaccard to the original (word 5-grams of the resiliparse main text,
  sluice's shingling) is recorded.

truth.parquet columns: record_id (WARC-Record-ID), snapshot, file, url, kind (unique | exact | near),
group (record_id of the unique page it copies; its own for a unique page), base (corpus file#index),
edit_rate, jaccard (near: to its group's unique page; exact: 1.0; unique: null).

Scale s has round(2000 s) pages in round(4 sqrt(s)) monthly snapshots (1x: 4 x 500, 4x: 8 x 1,000, 16x:
16 x 2,000): a growing crawl has more snapshots and bigger ones. The output is a pure function of the
arguments (seeded; record ids, dates and gzip headers included).
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import io
import json
import math
import random
import re
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.peers import SHARED  # noqa: E402

CORPUS_WEB = SHARED / "corpus" / "web"
SOURCE = "web"
VERSION = 1  # of the generation procedure: a cached crawl of another version is rebuilt (benchmarks/end_to_end.py)
PAGES_PER_SCALE = 2000
SNAPSHOTS_PER_SQRT_SCALE = 4

# Markup that is never edited: comments, script and style elements (with their content), and every tag.
_MARKUP = re.compile(r"<!--.*?-->|<(script|style)\b.*?</\1\s*>|<[^>]*>", re.DOTALL | re.IGNORECASE)
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# A unit of text: a character reference (kept as is), one CJK character, or a run of letters.
_UNIT = re.compile(rf"&#?\w+;|[{_CJK}]|[^\W\d_{_CJK}]+")
_CJK_CHAR = re.compile(f"[{_CJK}]")


@dataclass(frozen=True)
class BasePage:
    name: str  # corpus file#index
    url: str
    status: str  # HTTP status line, e.g. "200 OK"
    http_headers: list[tuple[str, str]]  # as fetched, less the ones that describe the body's bytes
    body: bytes


@dataclass(frozen=True)
class Page:
    record_id: str
    snapshot: str
    url: str
    kind: str
    group: str
    base: int  # index into the base pages
    unique_rate: float  # the unique page's edit (a copy repeats it) ...
    unique_seed: int
    near_rate: float = 0.0  # ... and a near duplicate's second edit on top of it
    near_seed: int = 0

    @property
    def edit_rate(self) -> float:
        return self.near_rate if self.kind == "near" else self.unique_rate if self.kind == "unique" else 0.0


def load_base_pages(folder: Path = CORPUS_WEB) -> list[BasePage]:
    """Every HTML response record of the WARC files under `folder`, in file order."""
    from warcio.archiveiterator import ArchiveIterator

    pages = []
    for path in sorted(folder.glob("*/*.warc.gz")):
        with open(path, "rb") as stream:
            for index, record in enumerate(ArchiveIterator(stream)):
                if record.rec_type != "response" or record.http_headers is None:
                    continue
                headers = [(k, v) for k, v in record.http_headers.headers if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")]
                pages.append(
                    BasePage(
                        f"{path.parent.name}/{path.name}#{index}",
                        record.rec_headers.get_header("WARC-Target-URI"),
                        record.http_headers.statusline,
                        headers,
                        record.content_stream().read(),
                    )
                )
    return pages


def _text_spans(html: str) -> list[tuple[int, int]]:
    """(start, end) of every run of text between markup."""
    spans, position = [], 0
    for match in _MARKUP.finditer(html):
        if match.start() > position:
            spans.append((position, match.start()))
        position = match.end()
    if position < len(html):
        spans.append((position, len(html)))
    return spans


def substitute_words(html: str, rate: float, rng: random.Random, at_least: int = 0) -> str:
    """`html` with each word of its text nodes replaced, with probability `rate`, by a word of the same kind
    (CJK character or letter run) drawn from the page's own text nodes; at least `at_least` words are
    replaced by a different word (where the page has that many and a different word to draw)."""
    units = [match for start, end in _text_spans(html) for match in _UNIT.finditer(html, start, end) if not match.group(0).startswith("&")]
    vocabulary: dict[bool, list[str]] = {True: [], False: []}
    for match in units:
        vocabulary[_CJK_CHAR.fullmatch(match.group(0)) is not None].append(match.group(0))
    chosen = [index for index in range(len(units)) if rng.random() < rate]
    if len(chosen) < at_least:
        chosen = sorted(set(chosen) | set(rng.sample(range(len(units)), min(at_least, len(units)))))
    out, position = [], 0
    for index in chosen:
        match = units[index]
        word = match.group(0)
        pool = vocabulary[_CJK_CHAR.fullmatch(word) is not None]
        replacement = rng.choice(pool)
        for _ in range(8 if at_least else 0):  # a forced edit should change the word
            if replacement != word:
                break
            replacement = rng.choice(pool)
        out.append(html[position : match.start()])
        out.append(replacement)
        position = match.end()
    out.append(html[position:])
    return "".join(out)


def page_body(page: Page, bases: list[BasePage]) -> bytes:
    """The HTML body of a page (a pure function of the page's seeds)."""
    html = bases[page.base].body.decode("utf-8", errors="surrogateescape")
    html = substitute_words(html, page.unique_rate, random.Random(page.unique_seed))
    if page.kind == "near":
        html = substitute_words(html, page.near_rate, random.Random(page.near_seed), at_least=1)
    return html.encode("utf-8", errors="surrogateescape")


def plan_crawl(
    bases: list[BasePage],
    scale: float,
    seed: int = 0,
    snapshots: int | None = None,
    exact_share: float = 0.08,
    near_share: float = 0.08,
    unique_rate: float = 0.35,
    near_rate: tuple[float, float] = (0.002, 0.02),
    first_month: tuple[int, int] = (2025, 1),
) -> list[Page]:
    """The pages of the crawl, in crawl order (snapshot by snapshot; inside one, shuffled)."""
    rng = random.Random(seed)
    total = max(1, round(PAGES_PER_SCALE * scale))
    count = snapshots or max(1, round(SNAPSHOTS_PER_SQRT_SCALE * math.sqrt(scale)))
    names = [_month(first_month, index) for index in range(count)]
    order = list(range(len(bases)))
    rng.shuffle(order)
    pages: list[Page] = []
    uniques: list[Page] = []  # unique pages so far, for duplicates to copy
    boundaries = [round(total * (index + 1) / count) for index in range(count)]
    variants: dict[int, int] = {}
    for number in range(total):
        snapshot = names[bisect.bisect_right(boundaries, number)]
        record_id = f"<urn:uuid:{uuid.UUID(int=rng.getrandbits(128), version=4)}>"
        draw = rng.random()
        if uniques and draw < exact_share + near_share:
            original = uniques[rng.randrange(len(uniques))]
            if draw < exact_share:
                page = Page(record_id, snapshot, original.url, "exact", original.group, original.base, original.unique_rate, original.unique_seed)
            else:
                mirror = original.snapshot == snapshot or rng.random() < 0.5  # updated page (same URL, later) or mirror
                url = _mirror_url(original.url, number) if mirror else original.url
                rate = rng.uniform(*near_rate)
                page = Page(
                    record_id, snapshot, url, "near", original.group, original.base, original.unique_rate, original.unique_seed, rate, rng.getrandbits(64)
                )
        else:
            base = order[len(uniques) % len(order)]
            variant = variants[base] = variants.get(base, -1) + 1
            url = bases[base].url.replace("://", f"://v{variant}.", 1) if variant else bases[base].url
            page = Page(record_id, snapshot, url, "unique", record_id, base, unique_rate, rng.getrandbits(64))
            uniques.append(page)
        pages.append(page)
    # Inside a snapshot the crawler's order is not the plan's: shuffle each snapshot's pages.
    by_snapshot: dict[str, list[Page]] = {}
    for page in pages:
        by_snapshot.setdefault(page.snapshot, []).append(page)
    ordered = []
    for name in names:
        chunk = by_snapshot.get(name, [])
        rng.shuffle(chunk)
        ordered.extend(chunk)
    return ordered


def _month(first: tuple[int, int], offset: int) -> str:
    months = first[0] * 12 + first[1] - 1 + offset
    return f"{months // 12:04d}-{months % 12 + 1:02d}"


def _mirror_url(url: str, number: int) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://mirror{number}.example.net/{rest}"


def main_text(body: bytes) -> str:
    from sluice.clean.steps.extract import extract_resiliparse

    return extract_resiliparse(body.decode("utf-8", errors="replace"))


def jaccard(a: str, b: str, ngram_size: int = 5) -> float:
    """Exact Jaccard similarity of two texts' word n-gram sets (sluice's normalization and shingling)."""
    from sluice.dedup.minhash import shingles

    first, second = set(shingles(a, ngram_size)), set(shingles(b, ngram_size))
    if not first and not second:
        return 1.0
    return len(first & second) / len(first | second)


def _warc_record(page: Page, body: bytes, base: BasePage, date: datetime) -> bytes:
    """One gzip member holding one WARC response record (deterministic: mtime 0)."""
    import hashlib
    from base64 import b32encode

    headers = [*base.http_headers, ("Content-Length", str(len(body)))]
    http = f"HTTP/1.1 {base.status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    block = http.encode("utf-8") + body

    def digest(data: bytes) -> str:
        return "sha1:" + b32encode(hashlib.sha1(data).digest()).decode()

    warc = (
        "WARC/1.0\r\n"
        "WARC-Type: response\r\n"
        f"WARC-Date: {date.strftime('%Y-%m-%dT%H:%M:%SZ')}\r\n"
        f"WARC-Record-ID: {page.record_id}\r\n"
        f"WARC-Target-URI: {page.url}\r\n"
        f"WARC-Payload-Digest: {digest(body)}\r\n"
        f"WARC-Block-Digest: {digest(block)}\r\n"
        "Content-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(block)}\r\n\r\n"
    ).encode() + block + b"\r\n\r\n"
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as member:
        member.write(warc)
    return out.getvalue()


def write_crawl(out: Path, pages: list[Page], bases: list[BasePage], pages_per_file: int = 100) -> list[dict]:
    """Write the WARC files and return the truth rows."""
    rows = []
    unique_of = {page.group: page for page in pages if page.kind == "unique"}
    originals: dict[str, str] = {}  # group -> main text of its unique page (for near duplicates' Jaccard)

    def original_text(group: str) -> str:
        if group not in originals:
            originals[group] = main_text(page_body(unique_of[group], bases))
        return originals[group]

    by_snapshot: dict[str, list[Page]] = {}
    for page in pages:
        by_snapshot.setdefault(page.snapshot, []).append(page)
    for snapshot, chunk in by_snapshot.items():
        folder = out / SOURCE / snapshot
        folder.mkdir(parents=True, exist_ok=True)
        start = datetime(int(snapshot[:4]), int(snapshot[5:7]), 1, tzinfo=UTC)
        for file_index in range(0, len(chunk), pages_per_file):
            name = f"crawl-{file_index // pages_per_file:05d}.warc.gz"
            with open(folder / name, "wb") as stream:
                for offset, page in enumerate(chunk[file_index : file_index + pages_per_file]):
                    body = page_body(page, bases)
                    date = start + timedelta(seconds=37 * (file_index + offset))
                    stream.write(_warc_record(page, body, bases[page.base], date))
                    similarity = None
                    if page.kind == "exact":
                        similarity = 1.0
                    elif page.kind == "near":
                        similarity = round(jaccard(original_text(page.group), main_text(body)), 4)
                    rows.append(
                        {
                            "record_id": page.record_id, "snapshot": snapshot, "file": f"{SOURCE}/{snapshot}/{name}", "url": page.url,
                            "kind": page.kind, "group": page.group, "base": bases[page.base].name, "edit_rate": page.edit_rate,
                            "jaccard": similarity,
                        }
                    )
    return rows


def synthesize(
    out: Path,
    scale: float,
    seed: int = 0,
    snapshots: int | None = None,
    pages_per_file: int = 100,
    exact_share: float = 0.08,
    near_share: float = 0.08,
    unique_rate: float = 0.35,
    near_rate: tuple[float, float] = (0.002, 0.02),
    corpus: Path = CORPUS_WEB,
) -> dict:
    """Write a synthetic crawl under `out` (see the module docstring); returns its summary (crawl.json)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    bases = load_base_pages(corpus)
    if not bases:
        raise FileNotFoundError(f"no WARC response records under {corpus}")
    pages = plan_crawl(bases, scale, seed, snapshots, exact_share, near_share, unique_rate, near_rate)
    out.mkdir(parents=True, exist_ok=True)
    rows = write_crawl(out, pages, bases, pages_per_file)
    schema = pa.schema(
        [("record_id", pa.string()), ("snapshot", pa.string()), ("file", pa.string()), ("url", pa.string()), ("kind", pa.string()),
         ("group", pa.string()), ("base", pa.string()), ("edit_rate", pa.float64()), ("jaccard", pa.float64())]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out / "truth.parquet")
    kinds: dict[str, int] = {}
    for row in rows:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    near = [row["jaccard"] for row in rows if row["kind"] == "near"]
    summary = {
        "version": VERSION,
        "source": SOURCE,
        "scale": scale,
        "seed": seed,
        "pages": len(rows),
        "snapshots": sorted({row["snapshot"] for row in rows}),
        "files": len({row["file"] for row in rows}),
        "kinds": kinds,
        "near_jaccard_min": min(near, default=None),
        "near_at_least_0.8": sum(1 for value in near if value >= 0.8),
        "parameters": {
            "pages_per_file": pages_per_file, "exact_share": exact_share, "near_share": near_share, "unique_rate": unique_rate,
            "near_rate": list(near_rate), "corpus": str(corpus),
        },
    }
    (out / "crawl.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="1 = about 2,000 pages")
    parser.add_argument("--out", type=Path, required=True, help="output folder (git-ignored, e.g. .bench_data/crawl-1x)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--snapshots", type=int, default=None, help="default: round(4 sqrt(scale))")
    parser.add_argument("--pages-per-file", type=int, default=100)
    parser.add_argument("--exact-share", type=float, default=0.08)
    parser.add_argument("--near-share", type=float, default=0.08)
    parser.add_argument("--unique-rate", type=float, default=0.35)
    parser.add_argument("--near-rate-min", type=float, default=0.002)
    parser.add_argument("--near-rate-max", type=float, default=0.02)
    args = parser.parse_args(argv)
    summary = synthesize(
        args.out, args.scale, args.seed, args.snapshots, args.pages_per_file, args.exact_share, args.near_share,
        args.unique_rate, (args.near_rate_min, args.near_rate_max),
    )
    print(json.dumps({k: v for k, v in summary.items() if k != "parameters"}, indent=None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
