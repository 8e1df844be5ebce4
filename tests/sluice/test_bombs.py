"""Decompression bombs of every kind: a small compressed input that would inflate far past the limit.

For each kind the bomb is quarantined as `record_too_large` (or the stream stops at `expansion_limit`), the
records around it come out unchanged, and the memory the reader allocates stays a small multiple of the
limit (tracemalloc for Python buffers; Arrow's own pool high-water mark, in a fresh process, for Parquet)
although the bomb's output is 64 times the limit or more.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import subprocess
import sys
import textwrap
import tracemalloc
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from sluice.config import JsonlOptions, ParquetOptions, WarcOptions
from sluice.ingest.readers import Quarantined, RawRecord, read_records
from tests.conftest import PROJECT_ROOT

LIMIT = 1 << 20
BOMB = 64 << 20  # decompressed size of each bomb: 64 x the limit


def read(data: bytes, name: str, fmt: str, options) -> tuple[list[RawRecord], list[Quarantined], int]:
    """(records, quarantined, peak bytes allocated by Python while reading)."""
    tracemalloc.start()
    try:
        items = list(read_records(io.BytesIO(data), name, fmt, options, {}))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return [i for i in items if isinstance(i, RawRecord)], [i for i in items if isinstance(i, Quarantined)], peak


# ----------------------------------------------------------------------------------------------- WARC


def response(url: str, body: bytes, headers: dict[str, str]) -> bytes:
    """One gzip member holding a WARC response record (as crawlers write .warc.gz)."""
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
    http += b"".join(f"{key}: {value}\r\n".encode() for key, value in headers.items()) + b"\r\n" + body
    record = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        f"WARC-Target-URI: {url}\r\nWARC-Date: 2026-01-01T00:00:00Z\r\nWARC-Record-ID: <urn:uuid:{abs(hash(url))}>\r\n"
        f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(http)}\r\n\r\n"
    ).encode() + http + b"\r\n\r\n"
    return gzip.compress(record, compresslevel=9, mtime=0)


ZEROS = b"<p>" + b"\0" * BOMB + b"</p>"


def _brotli(data: bytes) -> bytes:
    brotli = pytest.importorskip("brotli")
    return brotli.compress(data, quality=1)


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n"


ENCODINGS = {
    "gzip": (lambda data: gzip.compress(data, compresslevel=1, mtime=0), {"Content-Encoding": "gzip"}),
    "deflate (zlib)": (lambda data: zlib.compress(data, 1), {"Content-Encoding": "deflate"}),
    "deflate (raw)": (lambda data: (lambda c: c.compress(data) + c.flush())(zlib.compressobj(1, wbits=-15)), {"Content-Encoding": "deflate"}),
    "br": (_brotli, {"Content-Encoding": "br"}),
    "zstd": (lambda data: zstandard.ZstdCompressor(level=1).compress(data), {"Content-Encoding": "zstd"}),
    "gzip, chunked": (
        lambda data: _chunked(gzip.compress(data, compresslevel=1, mtime=0)),
        {"Content-Encoding": "gzip", "Transfer-Encoding": "chunked"},
    ),
}


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_warc_http_content_encoding_bomb_is_quarantined(encoding):
    compress, headers = ENCODINGS[encoding]
    body = compress(ZEROS)
    before = response("https://example.com/a", b"<p>first page</p>", {})
    after = response("https://example.com/c", gzip.compress(b"<p>third page</p>", mtime=0), {"Content-Encoding": "gzip"})
    bomb = response("https://example.com/bomb", body, headers)
    assert len(bomb) < LIMIT // 4  # a small file ...

    records, quarantined, peak = read(before + bomb + after, "x.warc.gz", "warc", WarcOptions(max_record_bytes=LIMIT))

    assert [(r.url, r.content) for r in records] == [
        ("https://example.com/a", b"<p>first page</p>"),
        ("https://example.com/c", b"<p>third page</p>"),  # a normal gzip body is still decoded
    ]
    assert [(q.location.split(" @")[0], q.reason) for q in quarantined] == [("record 1", "record_too_large")]
    assert peak < BOMB // 4, peak  # ... whose payload would be 64 MiB


def test_nested_gzip_warc_of_a_few_hundred_bytes():
    """The issue's reproduction: a WARC gzip member around a gzip-encoded body of zeros (518 bytes there)."""
    inner = gzip.compress(b"\0" * (60 << 20), compresslevel=9, mtime=0)
    member = response("https://example.com/tiny", inner, {"Content-Encoding": "gzip"})
    assert len(member) < 2000
    records, quarantined, peak = read(member, "tiny.warc.gz", "warc", WarcOptions(max_record_bytes=LIMIT))
    assert records == [] and [q.reason for q in quarantined] == ["record_too_large"]
    assert peak < BOMB // 4


def test_mislabelled_and_broken_content_encodings():
    plain = response("https://example.com/plain", b"<p>not compressed at all</p>", {"Content-Encoding": "gzip"})
    cut = gzip.compress(b"<p>" + b"x" * 5000 + b"</p>", mtime=0)[:-40]
    broken = response("https://example.com/broken", cut, {"Content-Encoding": "gzip"})
    records, quarantined, _ = read(plain + broken, "x.warc.gz", "warc", WarcOptions(max_record_bytes=LIMIT))
    # A label without encoded data is read as the data (servers mislabel); a body that breaks off inside its
    # encoding is quarantined, not cut silently.
    assert [(r.url, r.content) for r in records] == [("https://example.com/plain", b"<p>not compressed at all</p>")]
    assert [q.reason for q in quarantined] == ["corrupt_content_encoding"]


def test_warc_member_bomb():
    """The WARC record itself (its gzip member) inflating past the limit."""
    record_body = b"<p>" + b"z" * BOMB + b"</p>"
    bomb = response("https://example.com/big", record_body, {})
    ok = response("https://example.com/ok", b"<p>ok</p>", {})
    records, quarantined, peak = read(ok + bomb + ok, "x.warc.gz", "warc", WarcOptions(max_record_bytes=LIMIT))
    assert [r.url for r in records] == ["https://example.com/ok"] * 2
    assert [q.reason for q in quarantined] == ["record_too_large"]
    assert peak < BOMB // 4


@pytest.mark.parametrize("declared", [True, False], ids=["size_declared", "streamed"])
def test_warc_zst_frame_bomb(declared):
    """A `.warc.zst` record frame inflating past the limit, with or without its size in the frame header,
    and a gzip member cut in its trailer that inflates past the limit (quarantined, not recovered)."""
    record_body = b"<p>" + b"z" * BOMB + b"</p>"
    members = [gzip.decompress(response(url, body, {})) for url, body in [("https://example.com/ok", b"<p>ok</p>"), ("https://example.com/big", record_body)]]
    if declared:
        bomb = zstandard.ZstdCompressor(level=1).compress(members[1])
    else:
        streaming = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
        bomb = streaming.compress(members[1]) + streaming.flush()
    ok = zstandard.ZstdCompressor().compress(members[0])
    records, quarantined, peak = read(ok + bomb + ok, "x.warc.zst", "warc", WarcOptions(max_record_bytes=LIMIT))
    assert [r.url for r in records] == ["https://example.com/ok"] * 2
    assert [q.reason for q in quarantined] == ["record_too_large"]
    assert peak < BOMB // 4

    cut = response("https://example.com/ok", b"<p>ok</p>", {}) + response("https://example.com/big", record_body, {})[:-3]
    records, quarantined, peak = read(cut, "x.warc.gz", "warc", WarcOptions(max_record_bytes=LIMIT))
    assert [r.url for r in records] == ["https://example.com/ok"] and [q.reason for q in quarantined] == ["record_too_large"]
    assert peak < BOMB // 4


# ----------------------------------------------------------------------------------------------- JSONL

COMPRESSORS = {
    "x.jsonl.gz": lambda data: gzip.compress(data, compresslevel=9, mtime=0),
    "x.jsonl.zst": lambda data: zstandard.ZstdCompressor(level=1).compress(data),
    "x.jsonl.bz2": lambda data: bz2.compress(data, 1),
    "x.jsonl": lambda data: data,
}


def jsonl_with_bomb(bomb_size: int) -> bytes:
    lines = [json.dumps({"id": "0", "text": "before"}).encode()]
    lines.append(b'{"id": "bomb", "text": "' + b"a" * bomb_size + b'"}')
    lines.append(json.dumps({"id": "2", "text": "after"}).encode())
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_jsonl_line_bomb_is_quarantined(name):
    data = COMPRESSORS[name](jsonl_with_bomb(BOMB))
    if name != "x.jsonl":
        assert len(data) < LIMIT // 4, len(data)
    records, quarantined, peak = read(data, name, "jsonl", JsonlOptions(max_line_bytes=LIMIT))
    assert [(r.source_id, r.content) for r in records] == [("0", b"before"), ("2", b"after")]
    assert [(q.location, q.reason) for q in quarantined] == [("line 2", "record_too_large")]
    assert len(quarantined[0].payload) <= LIMIT
    if name != "x.jsonl":  # (the plain file is itself 64 MiB in memory here)
        assert peak < BOMB // 4, peak


@pytest.mark.parametrize("name", ["x.jsonl.gz", "x.jsonl.zst", "x.jsonl.bz2"])
def test_jsonl_stream_that_expands_too_far_stops(monkeypatch, name):
    import sluice.ingest.readers

    monkeypatch.setattr(sluice.ingest.readers, "EXPANSION_FLOOR_BYTES", 4 * LIMIT)
    data = COMPRESSORS[name](jsonl_with_bomb(BOMB))
    records, quarantined, peak = read(data, name, "jsonl", JsonlOptions(max_line_bytes=LIMIT, max_expansion_ratio=100))
    assert [r.source_id for r in records] == ["0"]
    assert [q.reason for q in quarantined] == ["record_too_large", "expansion_limit"]
    assert peak < BOMB // 4


# --------------------------------------------------------------------------------------------- Parquet


def parquet_bytes(texts: list[str], compression: str = "zstd", row_group_size: int = 2) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts}), sink, compression=compression, row_group_size=row_group_size)
    return sink.getvalue()


@pytest.mark.parametrize("compression", ["zstd", "gzip", "snappy", "brotli"])
def test_parquet_page_bomb_row_group_is_quarantined_unread(compression):
    texts = ["first", "second", "z" * BOMB, "fourth", "fifth", "sixth"]
    data = parquet_bytes(texts, compression)
    if compression != "snappy":  # snappy cannot compress better than ~20:1
        assert len(data) < LIMIT // 4
    records, quarantined, _ = read(data, "x.parquet", "parquet", ParquetOptions(max_record_bytes=LIMIT))
    assert [r.source_id for r in records] == ["0", "1", "4", "5"]  # the bomb's row group (rows 2, 3) is not read
    assert [(q.location, q.reason) for q in quarantined] == [("row group 1", "record_too_large")]
    assert "decompresses to" in quarantined[0].detail


def test_parquet_cell_over_the_limit_is_caught_when_page_headers_cannot_be_read(monkeypatch):
    """The cell check behind the page check: with the page headers unreadable (largest_page -> None), an
    over-long cell is still quarantined, alone, after Arrow read its page."""
    import sluice.io.parquet_pages

    monkeypatch.setattr(sluice.io.parquet_pages, "largest_page", lambda stream, chunk: None)
    texts = ["short"] * 3 + ["y" * 5000] + ["short"] * 3
    records, quarantined, _ = read(parquet_bytes(texts, row_group_size=100), "x.parquet", "parquet", ParquetOptions(max_record_bytes=4096))
    assert [r.source_id for r in records] == ["0", "1", "2", "4", "5", "6"]
    assert [(q.location, q.reason) for q in quarantined] == [("row 3", "record_too_large")]


ARROW_PEAK = """
import io, sys
import pyarrow as pa
from sluice.config import ParquetOptions
from sluice.ingest.readers import read_records
data = open(sys.argv[1], "rb").read()
items = list(read_records(io.BytesIO(data), "x.parquet", "parquet", ParquetOptions(max_record_bytes=int(sys.argv[2])), {}))
print(pa.default_memory_pool().max_memory(), len(items))
"""


def test_parquet_bomb_never_reaches_arrow_memory(tmp_path):
    path = tmp_path / "bomb.parquet"
    path.write_bytes(parquet_bytes(["a", "z" * BOMB, "c"], "zstd", row_group_size=1))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ARROW_PEAK), str(path), str(LIMIT)],
        cwd=PROJECT_ROOT, check=True, capture_output=True, text=True,
    )
    peak, items = map(int, done.stdout.split())
    assert items == 3
    assert peak < 4 * LIMIT, peak  # the 64 MiB page was never decompressed
