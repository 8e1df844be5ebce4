"""Readers on damaged input built from the bundled sample bytes: damage is quarantined with a reason and
a location, and every undamaged record is still read (same URLs, same ordinals as an undamaged read)."""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from warcio.archiveiterator import ArchiveIterator

from sluice.config import JsonlOptions, ParquetOptions, WarcOptions
from sluice.ingest.raw import IngestTask, ingest_file
from sluice.ingest.readers import Quarantined, RawRecord, read_jsonl, read_parquet, read_records, read_warc

SAMPLE = Path(__file__).resolve().parents[3] / "sample_data"
WARC_FILES = sorted((SAMPLE / "web" / "2026-01").glob("*.warc.gz"))
JSONL_GZ = SAMPLE / "reference" / "2026-01" / "debian-reference.jsonl.gz"
JSONL_OPTIONS = {"text_field": "text", "id_field": "id", "url_field": "url", "date_field": "date"}


# ------------------------------------------------------------------------------------------- helpers


def warc_members(path: Path) -> list[bytes]:
    """The gzip members (one WARC record each) of a sample file, split with warcio, not with sluice."""
    data = path.read_bytes()
    iterator = ArchiveIterator(io.BytesIO(data))
    spans = []
    for record in iterator:
        iterator.read_to_end(record)
        spans.append((iterator.get_record_offset(), iterator.get_record_length()))
    assert spans[-1][0] + spans[-1][1] == len(data)
    return [data[offset : offset + length] for offset, length in spans]


def warcio_responses(data: bytes) -> list[tuple[str, bytes]]:
    """What warcio reads from an undamaged WARC: (target URI, HTTP payload) of every response record."""
    return [
        (r.rec_headers.get_header("WARC-Target-URI"), r.content_stream().read())
        for r in ArchiveIterator(io.BytesIO(data))
        if r.rec_type == "response"
    ]


def warcio_urls(data: bytes) -> list[str]:
    return [url for url, _ in warcio_responses(data)]


def offsets(members: list[bytes]) -> list[int]:
    result, position = [], 0
    for member in members:
        result.append(position)
        position += len(member)
    return result


def read_warc_bytes(data: bytes, **options) -> tuple[list[RawRecord], list[Quarantined], dict[str, int]]:
    counters: dict[str, int] = {}
    items = list(read_warc(io.BytesIO(data), WarcOptions(**options), counters))
    return [i for i in items if isinstance(i, RawRecord)], [i for i in items if isinstance(i, Quarantined)], counters


def read_jsonl_bytes(data: bytes, name: str, **options) -> tuple[list[RawRecord], list[Quarantined]]:
    items = list(read_jsonl(io.BytesIO(data), name, JsonlOptions(**{**JSONL_OPTIONS, **options}), {}))
    return [i for i in items if isinstance(i, RawRecord)], [i for i in items if isinstance(i, Quarantined)]


def flip(member: bytes, at: float, count: int = 4) -> bytes:
    """Invert `count` bytes at a relative position inside a gzip member (in its deflate data)."""
    damaged = bytearray(member)
    start = int(len(member) * at)
    assert start > 20 and start + count < len(member) - 8  # past the gzip header, before the trailer
    for i in range(start, start + count):
        damaged[i] ^= 0xFF
    return bytes(damaged)


def compress(data: bytes, name: str) -> bytes:
    if name.endswith(".gz"):
        return gzip.compress(data, mtime=0)
    if name.endswith(".zst"):
        return zstandard.ZstdCompressor().compress(data)
    return data


@pytest.fixture(scope="module")
def sample_lines() -> list[bytes]:
    lines = gzip.decompress(JSONL_GZ.read_bytes()).splitlines(keepends=True)
    assert len(lines) >= 8
    return lines


# ---------------------------------------------------------------------------------------------- WARC


@pytest.mark.parametrize("path", WARC_FILES, ids=lambda p: p.name)
def test_undamaged_warc_reads_every_response_record(path):
    records, quarantined, counters = read_warc_bytes(path.read_bytes())
    expected = warcio_responses(path.read_bytes())
    assert len(expected) >= 10
    assert quarantined == [] and counters == {}
    assert [(r.url, r.content) for r in records] == expected
    assert [r.ordinal for r in records] == list(range(len(expected)))
    assert all(r.content_type == "text/html" and r.charset == "utf-8" for r in records)
    assert all(r.source_id and r.source_id.startswith("<urn:uuid:") for r in records)
    assert all(r.fetch_date is not None and r.fetch_date.utcoffset().total_seconds() == 0 for r in records)


@pytest.mark.parametrize("path", WARC_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("at", [0.3, 0.6, 0.9])
def test_corrupt_deflate_data_quarantines_only_that_record(path, at):
    members = warc_members(path)
    urls = warcio_urls(path.read_bytes())
    damaged = b"".join(members[:2]) + flip(members[2], at) + b"".join(members[3:])

    records, quarantined, _ = read_warc_bytes(damaged)

    assert [(q.location, q.reason) for q in quarantined] == [(f"record 2 @ byte {offsets(members)[2]}", "corrupt_gzip")]
    assert [r.url for r in records] == urls[:2] + urls[3:]
    assert [r.ordinal for r in records] == [0, 1, *range(3, len(members))]  # ordinals (and doc ids) stay put
    assert [r.content for r in records] == [r.content for i, r in enumerate(read_warc_bytes(path.read_bytes())[0]) if i != 2]


@pytest.mark.parametrize("cut", ["in_header", "mid_member", "last_deflate_byte"])
def test_truncated_warc_keeps_the_records_before_and_quarantines_the_tail(cut):
    path = WARC_FILES[0]
    members = warc_members(path)
    start = offsets(members)[5]
    # 9 bytes short: the 8-byte trailer and the deflate stream's last byte are gone (a trailer-only cut is
    # recovered: tests/sluice/ingest/test_readers_archives.py)
    end = {"in_header": start + 5, "mid_member": start + len(members[5]) // 2, "last_deflate_byte": start + len(members[5]) - 9}[cut]
    data = path.read_bytes()[:end]

    records, quarantined, _ = read_warc_bytes(data)

    assert [r.url for r in records] == warcio_urls(path.read_bytes())[:5]
    assert [(q.location, q.reason) for q in quarantined] == [(f"record 5 @ byte {start}", "truncated_gzip")]


def test_truncated_at_a_member_boundary_is_just_a_shorter_file():
    path = WARC_FILES[0]
    members = warc_members(path)
    records, quarantined, _ = read_warc_bytes(b"".join(members[:4]))
    assert quarantined == [] and [r.url for r in records] == warcio_urls(path.read_bytes())[:4]


def test_gzip_member_holding_non_warc_text_is_a_bad_warc_record():
    path = WARC_FILES[1]
    members = warc_members(path)
    garbage = gzip.compress(b"this is not a WARC record\r\njust some text\r\n\r\nhello\r\n", mtime=0)
    data = b"".join(members[:2]) + garbage + b"".join(members[3:])

    records, quarantined, counters = read_warc_bytes(data)

    assert [(q.location, q.reason) for q in quarantined] == [(f"record 2 @ byte {offsets(members)[2]}", "bad_warc_record")]
    assert quarantined[0].payload.startswith(b"this is not a WARC record")
    urls = warcio_urls(path.read_bytes())
    assert [r.url for r in records] == urls[:2] + urls[3:]
    assert counters == {}  # not silently skipped as some other record type


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda record: record.replace(b"WARC/1.0", b"WARX/1.0", 1), id="garbled_version_line"),
        pytest.param(lambda record: re.sub(rb"Content-Length: \d+", b"Content-Length: many", record, count=1), id="bad_content_length"),
        pytest.param(lambda record: record[: len(record) // 2], id="block_shorter_than_content_length"),
        pytest.param(lambda record: b"WARC/1.0\r\nWARC-Type: response\r\n", id="headers_without_end"),
    ],
)
def test_broken_warc_record_in_a_valid_gzip_member(damage):
    path = WARC_FILES[2]
    members = warc_members(path)
    broken = gzip.compress(damage(gzip.decompress(members[3])), mtime=0)
    data = b"".join(members[:3]) + broken + b"".join(members[4:])

    records, quarantined, counters = read_warc_bytes(data)

    assert [(q.location, q.reason) for q in quarantined] == [(f"record 3 @ byte {offsets(members)[3]}", "bad_warc_record")]
    urls = warcio_urls(path.read_bytes())
    assert [r.url for r in records] == urls[:3] + urls[4:]
    assert counters == {}


def test_junk_between_members_is_quarantined_and_no_record_lost():
    path = WARC_FILES[3]
    members = warc_members(path)
    data = b"".join(members[:2]) + b"JUNK" * 10 + b"".join(members[2:])
    records, quarantined, _ = read_warc_bytes(data)
    assert [(q.location, q.reason) for q in quarantined] == [(f"record 2 @ byte {offsets(members)[2]}", "not_gzip")]
    assert [r.url for r in records] == warcio_urls(path.read_bytes())


def test_uncompressed_warc_reads_every_record():
    path = WARC_FILES[0]
    plain = b"".join(gzip.decompress(m) for m in warc_members(path))
    records, quarantined, _ = read_warc_bytes(plain)
    assert quarantined == []
    assert [r.url for r in records] == warcio_urls(path.read_bytes())
    assert [r.content for r in records] == [r.content for r in read_warc_bytes(path.read_bytes())[0]]


def test_uncompressed_warc_with_a_broken_record_keeps_the_records_before():
    path = WARC_FILES[0]
    plain = [gzip.decompress(m) for m in warc_members(path)]
    plain[3] = plain[3].replace(b"WARC/1.0", b"WARX/1.0", 1)
    records, quarantined, _ = read_warc_bytes(b"".join(plain))
    assert [r.url for r in records] == warcio_urls(path.read_bytes())[:3]
    # Without gzip members the next record cannot be found: the rest of the file is quarantined.
    assert [(q.location, q.reason) for q in quarantined] == [(f"record 3 @ byte {sum(map(len, plain[:3]))}", "bad_warc_record")]


def test_file_that_is_neither_gzip_nor_warc_is_quarantined_as_a_whole():
    records, quarantined, counters = read_warc_bytes(b"<html>an error page saved as a .warc.gz</html>\n" * 20)
    assert records == [] and counters == {}
    assert [(q.location, q.reason) for q in quarantined] == [("file", "bad_warc_record")]


def test_whole_file_gzip_with_many_records_in_one_member_reads_them_all():
    path = WARC_FILES[3]
    single = gzip.compress(b"".join(gzip.decompress(m) for m in warc_members(path)), mtime=0)
    records, quarantined, _ = read_warc_bytes(single)
    assert quarantined == []
    assert [r.url for r in records] == warcio_urls(path.read_bytes())
    assert [r.ordinal for r in records] == list(range(len(records)))


@pytest.mark.parametrize("compressed", [True, False], ids=["gzip", "plain"])
def test_records_over_max_record_bytes_are_quarantined_and_the_rest_read(compressed):
    path = WARC_FILES[0]
    members = warc_members(path)
    limit = 20_000
    sizes = [len(gzip.decompress(m)) for m in members]
    too_large = [i for i, size in enumerate(sizes) if size > limit]
    assert 0 < len(too_large) < len(members)
    data = path.read_bytes() if compressed else b"".join(gzip.decompress(m) for m in members)

    records, quarantined, _ = read_warc_bytes(data, max_record_bytes=limit)

    assert [q.reason for q in quarantined] == ["record_too_large"] * len(too_large)
    assert [int(q.location.split()[1]) for q in quarantined] == too_large
    urls = warcio_urls(path.read_bytes())
    assert [r.url for r in records] == [u for i, u in enumerate(urls) if i not in too_large]


def test_non_response_and_other_content_types_are_counted_not_quarantined():
    path = WARC_FILES[0]
    members = warc_members(path)
    request = gzip.compress(gzip.decompress(members[0]).replace(b"WARC-Type: response", b"WARC-Type: request", 1), mtime=0)
    # Same length, so that the Content-Length still holds.
    image = re.sub(rb"Content-Type: text/html[^\r]*", lambda m: b"Content-Type: image/png".ljust(len(m[0])), gzip.decompress(members[1]), count=1)
    image = gzip.compress(image, mtime=0)
    records, quarantined, counters = read_warc_bytes(request + image + b"".join(members[2:]))
    assert quarantined == []
    assert counters == {"skipped_non_response": 1, "skipped_content_type": 1}
    assert [r.url for r in records] == warcio_urls(path.read_bytes())[2:]


# --------------------------------------------------------------------------------------------- JSONL


def damaged_jsonl(sample_lines: list[bytes]) -> tuple[bytes, list[bytes], list[tuple[str, str]]]:
    """Good sample lines with one damaged line between each pair; returns (data, good lines, expected)."""
    good = sample_lines[:7]
    damaged = [
        b'{"id": "cut-off", "text": "the line ends in the middle of a str\n',  # line 2
        b'{"id": "latin-1", "text": "caf\xe9 au lait, not UTF-8"}\n',  # line 4
        b'["a", "JSON", "array", "is", "not", "a", "document"]\n',  # line 6
        b'{"id": "no-text", "url": "https://example.org/"}\n',  # line 8
        b'{"id": "surrogate", "text": "a lone \\ud800 surrogate escape"}\n',  # line 10
        b"   \n",  # line 12: blank, skipped without a quarantine row
    ]
    lines = []
    for index, line in enumerate(good):
        lines.append(line)
        if index < len(damaged):
            lines.append(damaged[index])
    expected = [
        ("line 2", "malformed_json"),
        ("line 4", "invalid_utf8"),
        ("line 6", "malformed_json"),
        ("line 8", "missing_text"),
        ("line 10", "invalid_utf8"),
    ]
    return b"".join(lines), good, expected


@pytest.mark.parametrize("name", ["docs.jsonl", "docs.jsonl.gz", "docs.jsonl.zst"])
def test_jsonl_damaged_lines_are_quarantined_and_every_good_line_kept(sample_lines, name):
    data, good, expected = damaged_jsonl(sample_lines)

    records, quarantined = read_jsonl_bytes(compress(data, name), name)

    assert [(q.location, q.reason) for q in quarantined] == expected
    originals = [json.loads(line) for line in good]
    assert [r.source_id for r in records] == [o["id"] for o in originals]
    assert [r.url for r in records] == [o["url"] for o in originals]
    assert [r.content for r in records] == [o["text"].encode("utf-8") for o in originals]
    assert [r.ordinal for r in records] == [0, 2, 4, 6, 8, 10, 12]  # line number - 1
    assert all(r.fetch_date is not None and r.charset == "utf-8" for r in records)
    assert quarantined[0].payload == data.splitlines()[1].strip()
    assert quarantined[1].payload == b'{"id": "latin-1", "text": "caf\xe9 au lait, not UTF-8"}'


@pytest.mark.parametrize("name", ["docs.jsonl.gz", "docs.jsonl.zst"])
@pytest.mark.parametrize("keep", [0.5, 0.75, 0.97])
def test_truncated_compressed_jsonl_keeps_the_lines_before(sample_lines, name, keep):
    data = b"".join(sample_lines)
    compressed = compress(data, name)
    cut = compressed[: int(len(compressed) * keep)]
    # What a decompressor recovers from the cut file: every complete line in it must be read.
    if name.endswith(".gz"):
        recoverable = zlib.decompressobj(wbits=31).decompress(cut)
        reason = "truncated_gzip"
    else:
        recoverable = zstandard.ZstdDecompressor().decompressobj().decompress(cut)
        reason = "truncated_zstd"
    complete = recoverable.count(b"\n")
    assert recoverable and data.startswith(recoverable)

    records, quarantined = read_jsonl_bytes(cut, name)

    assert [r.source_id for r in records] == [json.loads(line)["id"] for line in sample_lines[:complete]]
    assert [(q.location, q.reason) for q in quarantined] == [(f"after line {complete}", reason)]


def test_corrupt_gzip_jsonl_keeps_the_lines_before_the_damage(sample_lines):
    data = b"".join(sample_lines)
    compressed = bytearray(gzip.compress(data, mtime=0))
    middle = len(compressed) // 2
    compressed[middle : middle + 16] = b"\xff" * 16
    before = zlib.decompressobj(wbits=31).decompress(bytes(compressed[:middle])).count(b"\n")
    assert 0 < before < len(sample_lines)

    records, quarantined = read_jsonl_bytes(bytes(compressed), "docs.jsonl.gz")

    ids = [json.loads(line)["id"] for line in sample_lines]
    assert [r.source_id for r in records[:before]] == ids[:before]
    # Deflate may decode garbage up to the CRC check: such lines are quarantined, never read as documents.
    assert {r.content for r in records} <= {json.loads(line)["text"].encode() for line in sample_lines}
    assert {q.reason for q in quarantined[:-1]} <= {"invalid_utf8", "malformed_json"}
    assert quarantined[-1].reason == "corrupt_compression" and quarantined[-1].location.startswith("after line ")


def test_over_long_line_is_quarantined_and_the_following_lines_kept():
    def line(ident: str, size: int) -> bytes:
        """A JSON object line of exactly `size` bytes before its newline."""
        empty = len(json.dumps({"id": ident, "text": ""}))
        return json.dumps({"id": ident, "text": "x" * (size - empty)}).encode() + b"\n"

    data = line("a", 100) + line("huge", 50_000) + line("b", 100) + line("fits", 1024) + line("one-over", 1025) + line("c", 100)

    records, quarantined = read_jsonl_bytes(data, "docs.jsonl", max_line_bytes=1024)

    assert [r.source_id for r in records] == ["a", "b", "fits", "c"]
    assert [(q.location, q.reason) for q in quarantined] == [("line 2", "record_too_large"), ("line 5", "record_too_large")]
    assert quarantined[0].payload.startswith(b'{"id": "huge"') and len(quarantined[0].payload) == 1025


@pytest.mark.parametrize("name", ["docs.jsonl.gz", "docs.jsonl.zst"])
def test_compressed_jsonl_that_does_not_decompress_at_all_is_a_quarantined_file(tmp_path, name):
    records, quarantined = read_jsonl_bytes(b"plain text, not compressed\n" * 40, name)
    assert records == [] and [(q.location, q.reason) for q in quarantined] == [("file", "corrupt_compression")]
    result = ingest(tmp_path, name, b"plain text, not compressed\n" * 40, "jsonl", JSONL_OPTIONS)
    assert result["file_quarantined"] is True and result["quarantine_reasons"] == {"corrupt_compression": 1}


def test_jsonl_gz_truncated_inside_its_first_line_is_a_quarantined_file(sample_lines):
    compressed = gzip.compress(b"".join(sample_lines[1:]), mtime=0)  # the first line here is 51 kB
    records, quarantined = read_jsonl_bytes(compressed[:2000], "docs.jsonl.gz")
    assert records == [] and [(q.location, q.reason) for q in quarantined] == [("file", "truncated_gzip")]


def test_jsonl_byte_order_mark_does_not_cost_the_first_line():
    data = b'\xef\xbb\xbf{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}\n'
    records, quarantined = read_jsonl_bytes(data, "docs.jsonl")
    assert quarantined == [] and [r.source_id for r in records] == ["a", "b"]


def test_jsonl_without_trailing_newline_reads_its_last_line():
    data = b'{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}'
    records, quarantined = read_jsonl_bytes(data, "docs.jsonl")
    assert quarantined == [] and [r.content for r in records] == [b"one", b"two"]


# ------------------------------------------------------------------------------------------- Parquet


def sample_table(sample_lines: list[bytes]) -> pa.Table:
    rows = [json.loads(line) for line in sample_lines]
    return pa.table({key: [row[key] for row in rows] for key in ("id", "url", "date", "text")})


def read_parquet_bytes(data: bytes, **options) -> tuple[list[RawRecord], list[Quarantined]]:
    items = list(read_parquet(io.BytesIO(data), ParquetOptions(**options), {}))
    return [i for i in items if isinstance(i, RawRecord)], [i for i in items if isinstance(i, Quarantined)]


def parquet_bytes(table: pa.Table, **kwargs) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **kwargs)
    return buffer.getvalue()


def test_good_parquet_reads_every_row(sample_lines):
    table = sample_table(sample_lines)
    records, quarantined = read_parquet_bytes(parquet_bytes(table, row_group_size=3), batch_rows=2)
    assert quarantined == []
    assert [r.source_id for r in records] == table["id"].to_pylist()
    assert [r.content for r in records] == [t.encode() for t in table["text"].to_pylist()]
    assert [r.ordinal for r in records] == list(range(table.num_rows))
    assert all(r.fetch_date is not None and r.content_type == "text/plain" for r in records)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no_footer_magic"])
def test_unreadable_parquet_is_quarantined_as_a_file(sample_lines, damage):
    good = parquet_bytes(sample_table(sample_lines))
    data = {"garbage": b"PAR1" + b"\x00not parquet\x00" * 50, "truncated": good[: len(good) // 2], "no_footer_magic": good[:-4] + b"XXXX"}[damage]
    records, quarantined = read_parquet_bytes(data)
    assert records == []
    assert [(q.location, q.reason) for q in quarantined] == [("file", "unreadable_parquet")]


def test_corrupt_row_group_is_quarantined_and_the_other_row_groups_read():
    table = pa.table({"id": [f"doc-{i}" for i in range(6)], "text": [f"text of document {i} " * 30 for i in range(6)]})
    data = bytearray(parquet_bytes(table, row_group_size=2, compression="zstd"))
    column = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(1)
    start = column.dictionary_page_offset or column.data_page_offset
    for i in range(start + 20, start + column.total_compressed_size - 4):
        data[i] ^= 0x5A

    records, quarantined = read_parquet_bytes(bytes(data))

    assert [(r.ordinal, r.source_id) for r in records] == [(0, "doc-0"), (1, "doc-1"), (4, "doc-4"), (5, "doc-5")]
    assert [(q.location, q.reason) for q in quarantined] == [("row group 1", "unreadable_parquet")]


def test_parquet_string_that_is_not_utf8_quarantines_only_its_row():
    raw = pa.array([b"good text", b"caf\xe9 in latin-1", b"more good text"], pa.binary())
    text = pa.StringArray.from_buffers(len(raw), raw.buffers()[1], raw.buffers()[2])  # Parquet does not validate
    table = pa.table({"id": ["a", "b", "c"], "text": text})
    records, quarantined = read_parquet_bytes(parquet_bytes(table))
    assert [(r.ordinal, r.content) for r in records] == [(0, b"good text"), (2, b"more good text")]
    assert [(q.location, q.reason) for q in quarantined] == [("row 1", "invalid_utf8")]


def test_parquet_missing_text_column_or_value():
    table = pa.table({"id": ["a", "b"], "body": ["x", "y"]})
    records, quarantined = read_parquet_bytes(parquet_bytes(table))
    assert records == [] and [(q.location, q.reason) for q in quarantined] == [("file", "missing_text")]
    table = pa.table({"id": ["a", "b", "c"], "text": ["x", None, "z"]})
    records, quarantined = read_parquet_bytes(parquet_bytes(table))
    assert [r.source_id for r in records] == ["a", "c"]
    assert [(q.location, q.reason) for q in quarantined] == [("row 1", "missing_text")]


# -------------------------------------------------------------------------------------- ingest_file


def ingest(tmp_path: Path, name: str, data: bytes, fmt: str, options: dict | None = None) -> dict:
    source = tmp_path / "source" / "2026-01"
    source.mkdir(parents=True, exist_ok=True)
    (source / name).write_bytes(data)
    task = IngestTask(
        source_url=str(source),
        file_key=name,
        file_label=f"2026-01/{name}",
        fmt=fmt,
        options=options or {},
        output_url=str(tmp_path / "out"),
        part=3,
        source="web" if fmt == "warc" else "reference",
        snapshot="2026-01",
    )
    return ingest_file(task)


@pytest.mark.parametrize(
    ("name", "fmt", "options"),
    [("empty.warc.gz", "warc", {}), ("empty.jsonl.gz", "jsonl", JSONL_OPTIONS), ("empty.parquet", "parquet", {})],
)
def test_ingest_empty_file_is_a_quarantined_file(tmp_path, name, fmt, options):
    result = ingest(tmp_path, name, b"", fmt, options)
    assert result["records"] == 0 and result["file_quarantined"] is True
    assert result["quarantine_reasons"] == {"empty_file": 1}
    [row] = pq.read_table(tmp_path / "out" / "quarantine-00003.parquet").to_pylist()
    assert result["quarantine_part"]["rows"] == 1
    assert (row["file"], row["location"], row["reason"]) == (f"2026-01/{name}", "file", "empty_file")
    assert pq.read_table(tmp_path / "out" / "part-00003.parquet").num_rows == 0


def test_ingest_damaged_warc_writes_good_records_and_quarantine_rows(tmp_path):
    path = WARC_FILES[0]
    members = warc_members(path)
    data = b"".join(members[:2]) + flip(members[2], 0.5) + b"".join(members[3:])

    result = ingest(tmp_path, "damaged.warc.gz", data, "warc")

    urls = warcio_urls(path.read_bytes())
    assert result["records"] == len(urls) - 1 and result["file_quarantined"] is False
    assert result["quarantine_reasons"] == {"corrupt_gzip": 1}
    [row] = pq.read_table(tmp_path / "out" / "quarantine-00003.parquet").to_pylist()
    assert (row["file"], row["location"]) == ("2026-01/damaged.warc.gz", f"record 2 @ byte {offsets(members)[2]}")
    part = pq.read_table(tmp_path / "out" / "part-00003.parquet")
    assert part["url"].to_pylist() == urls[:2] + urls[3:]
    assert part["doc_id"].to_pylist()[:3] == ["web/2026-01/damaged.warc.gz#0", "web/2026-01/damaged.warc.gz#1", "web/2026-01/damaged.warc.gz#3"]
    assert result["part"]["rows"] == len(urls) - 1


def test_ingest_file_that_is_not_a_warc_counts_as_a_quarantined_file(tmp_path):
    result = ingest(tmp_path, "error-page.warc.gz", b"<html>503 Service Unavailable</html>\n", "warc")
    assert result["records"] == 0 and result["file_quarantined"] is True
    assert result["quarantine_reasons"] == {"bad_warc_record": 1}


def test_read_records_dispatches_on_format(sample_lines):
    items = list(read_records(io.BytesIO(b"".join(sample_lines[:2])), "x.jsonl", "jsonl", JsonlOptions(**JSONL_OPTIONS), {}))
    assert [type(i) for i in items] == [RawRecord, RawRecord]
    with pytest.raises(ValueError, match="unknown format"):
        list(read_records(io.BytesIO(b""), "x.csv", "csv", None, {}))
