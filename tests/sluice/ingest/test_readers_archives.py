"""Archives of other crawlers and formats sluice does not write: ARC v1 (plain, gzip), HTML `resource`
records, digests, gzip members cut in their trailer, IIPC `.warc.zst`, and files of no known suffix.

The real files are warcio's test archives (tests/data/warcio/README.md: origin, Apache-2.0); warcio itself
(`ArchiveIterator`, `arc2warc=True`, `check_digests=True`) is the independent reader compared with.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
import zstandard
from warcio.archiveiterator import ArchiveIterator

from sluice.config import S3Settings, WarcOptions
from sluice.ingest.raw import IngestTask, ingest_file, snapshot_files
from sluice.ingest.readers import Quarantined, RawRecord, read_warc, supported_format

DATA = Path(__file__).resolve().parents[2] / "data" / "warcio"
SAMPLE_WARC = sorted((Path(__file__).resolve().parents[3] / "sample_data" / "web" / "2026-01").glob("*.warc.gz"))[0]


def read(data: bytes, **options) -> tuple[list[RawRecord], list[Quarantined], dict[str, int]]:
    counters: dict[str, int] = {}
    items = list(read_warc(io.BytesIO(data), WarcOptions(**options), counters))
    return [i for i in items if isinstance(i, RawRecord)], [i for i in items if isinstance(i, Quarantined)], counters


def warcio_pages(data: bytes, types: tuple[str, ...] = ("response",)) -> list[tuple[str, bytes]]:
    """(target URI, decoded payload) of each record of these types, as warcio reads them (ARC converted)."""
    return [
        (r.rec_headers.get_header("WARC-Target-URI"), r.content_stream().read())
        for r in ArchiveIterator(io.BytesIO(data), arc2warc=True)
        if r.rec_type in types
    ]


def members(data: bytes) -> list[bytes]:
    iterator = ArchiveIterator(io.BytesIO(data), arc2warc=True)
    spans = []
    for record in iterator:
        iterator.read_to_end(record)
        spans.append((iterator.get_record_offset(), iterator.get_record_length()))
    return [data[offset : offset + length] for offset, length in spans]


# ----------------------------------------------------------------------------------------------- ARC


@pytest.mark.parametrize("name", ["example.arc", "example.arc.gz"])
def test_arc_v1_files_read_as_warcio_reads_them(name):
    data = (DATA / name).read_bytes()
    records, quarantined, counters = read(data)
    expected = warcio_pages(data)
    assert len(expected) == 1 and quarantined == []
    assert [(r.url, r.content) for r in records] == expected
    assert counters == {"skipped_non_response": 1}  # the filedesc:// header record
    [record] = records
    assert record.content.startswith(b"<!doctype html>") and record.content_type == "text/html"
    assert record.fetch_date.isoformat() == "2014-02-16T05:02:21+00:00"  # the ARC line's 20140216050221
    assert record.source_id is None  # ARC has no record id (warcio would invent a random one)


def test_plain_and_gzip_arc_give_the_same_records_and_reads_are_deterministic():
    plain = read((DATA / "example.arc").read_bytes())[0]
    assert plain == read((DATA / "example.arc.gz").read_bytes())[0] == read((DATA / "example.arc").read_bytes())[0]


def test_an_arc_record_shorter_than_its_length_is_quarantined_not_cut():
    # warcio reads the 1,579 bytes there as the page; the line declares 1,591: the record is truncated.
    records, quarantined, counters = read((DATA / "example-space-in-url.arc").read_bytes())
    assert records == [] and counters == {"skipped_non_response": 1}
    assert [(q.location, q.reason) for q in quarantined] == [("record 1 @ byte 151", "bad_warc_record")]
    assert "12 bytes before its Content-Length 1591" in quarantined[0].detail


def test_an_arc_file_renamed_warc_is_read_by_its_content(tmp_path):
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "old-crawl.warc.gz").write_bytes((DATA / "example.arc.gz").read_bytes())
    task = IngestTask(str(tmp_path / "snap"), "old-crawl.warc.gz", "snap/old-crawl.warc.gz", "warc", {}, str(tmp_path / "out"), 0, "web", "snap")
    result = ingest_file(task)
    assert result["records"] == 1 and result["quarantine_reasons"] == {}


@pytest.mark.parametrize(
    ("name", "read_it"),
    [("a.arc", True), ("a.ARC.GZ", True), ("a.warc.zst", True), ("a.warc.gz", True), ("a.warc", True),
     ("a.warc.gz.open", False), ("notes.txt", False), ("a.arc.bz2", False), ("a.warc.bz2", False)],
)
def test_warc_source_suffixes(name, read_it):
    assert supported_format(name, "warc") is read_it


def test_files_of_no_known_suffix_are_listed_by_name(tmp_path):
    for name in ("b.warc.gz", "a.arc.gz", "README", "c.warc.gz.open", "sub/d.arc", "sub/e.jsonl"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    read_files, unrecognized = snapshot_files(str(tmp_path), "warc", S3Settings())
    assert read_files == ["a.arc.gz", "b.warc.gz", "sub/d.arc"]
    assert unrecognized == ["README", "c.warc.gz.open", "sub/e.jsonl"]


# ------------------------------------------------------------------------------------------ resource


def test_an_html_resource_record_is_read_like_a_response():
    data = (DATA / "example-resource.warc.gz").read_bytes()
    records, quarantined, counters = read(data)
    expected = [(url, body) for url, body in warcio_pages(data, ("resource",))]
    assert len(expected) == 1 and quarantined == []
    assert [(r.url, r.content) for r in records] == expected
    assert records[0].content_type == "text/html" and records[0].charset == "utf-8"
    assert counters == {"skipped_non_response": 2}  # the two warcinfo records


def test_wget_log_and_manifest_resources_are_not_documents():
    # wget --warc-file stores its log and manifest as text/plain resource records: never read as pages.
    data = (DATA / "example-wget-bad-target-uri.warc.gz").read_bytes()
    records, quarantined, counters = read(data)
    kinds = [r.rec_type for r in ArchiveIterator(io.BytesIO(data))]
    assert kinds.count("resource") == 2 and quarantined == []
    assert [(r.url, r.content) for r in records] == warcio_pages(data)
    assert counters == {"skipped_non_response": len(kinds) - 1}


# ------------------------------------------------------------------------------------ gzip trailers


def cut_last_member(data: bytes, cut: int) -> bytes:
    return data[: len(data) - cut]


@pytest.mark.parametrize("path", [DATA / "example.arc.gz", SAMPLE_WARC], ids=lambda p: p.name)
@pytest.mark.parametrize("cut", [1, 4, 7, 8])
def test_a_member_cut_only_in_its_trailer_is_read_and_counted(path, cut):
    data = path.read_bytes()
    assert members(data)[-1].startswith(b"\x1f\x8b")
    whole = read(data)[0]
    records, quarantined, counters = read(cut_last_member(data, cut))
    assert quarantined == []
    assert records == whole  # every record, the last one whole
    assert counters.get("recovered_truncated_gzip_trailer") == 1
    # warcio reads the truncated copy's last page whole too
    assert warcio_pages(cut_last_member(data, cut))[-1] == warcio_pages(data)[-1]


@pytest.mark.parametrize("path", [DATA / "example.arc.gz", SAMPLE_WARC], ids=lambda p: p.name)
def test_a_member_missing_deflate_data_or_with_a_wrong_crc_stays_quarantined(path):
    data = path.read_bytes()
    last = len(data) - len(members(data)[-1])
    wrong_crc = bytearray(cut_last_member(data, 5))
    wrong_crc[-3] ^= 0xFF  # the CRC-32's first byte (3 of the trailer's 8 bytes are left)
    for damaged in (cut_last_member(data, 9), bytes(wrong_crc)):
        records, quarantined, counters = read(damaged)
        assert [(q.location.split(" @ ")[1], q.reason) for q in quarantined] == [(f"byte {last}", "truncated_gzip")]
        assert "recovered_truncated_gzip_trailer" not in counters
        assert len(records) == len(read(data)[0]) - 1


# -------------------------------------------------------------------------------------------- digests


def damaged_response(data: bytes) -> bytes:
    """warcio's example-iana.org-chunked.warc with one byte of the response's HTML changed (so its block and
    payload digests no longer hold; the length stays)."""
    changed = data.replace(b"Internet Assigned Numbers Authority", b"Internet Assigned Numbers Authorjty", 1)
    assert changed != data and len(changed) == len(data)
    return changed


def warcio_digest_problems(data: bytes) -> list[tuple[str, list[str]]]:
    found = []
    iterator = ArchiveIterator(io.BytesIO(data), check_digests=True)
    for record in iterator:
        iterator.read_to_end(record)
        if record.digest_checker.problems:
            found.append((record.rec_type, list(record.digest_checker.problems)))
    return found


@pytest.mark.parametrize("name", ["example.warc.gz", "example-iana.org-chunked.warc", "example-resource.warc.gz"])
def test_records_whose_digests_hold_are_read(name):
    data = (DATA / name).read_bytes()
    assert warcio_digest_problems(data) == []
    records, quarantined, _ = read(data)
    assert quarantined == [] and len(records) == 1


def test_a_response_whose_digests_fail_is_quarantined_as_digest_mismatch():
    data = damaged_response((DATA / "example-iana.org-chunked.warc").read_bytes())
    problems = warcio_digest_problems(data)
    assert [kind for kind, _ in problems] == ["response"]  # warcio finds the same damage
    records, quarantined, _ = read(data)
    assert records == []
    [q] = quarantined
    assert q.reason == "digest_mismatch" and "block digest failed" in q.detail and "payload digest failed" in q.detail
    assert b"Numbers Authorjty" in q.payload

    records, quarantined, _ = read(data, verify_digests=False)
    assert quarantined == [] and [(r.url, r.content) for r in records] == warcio_pages(data)
    assert b"Numbers Authorjty" in records[0].content


def test_a_failed_digest_on_a_record_not_read_is_not_reported():
    # example-digest.warc: four request records, one with a wrong payload digest (warcio check says so).
    data = (DATA / "example-digest.warc").read_bytes()
    assert len(warcio_digest_problems(data)) == 1
    assert read(data) == ([], [], {"skipped_non_response": 4})


# ------------------------------------------------------------------------------------------- .warc.zst


def warc_records(path: Path) -> list[bytes]:
    """Each WARC record of a .warc.gz as its uncompressed bytes (one gzip member each)."""
    return [gzip.decompress(m) for m in members(path.read_bytes())]


def warc_zst(records: list[bytes], dictionary: bytes | None = None, compress_dictionary: bool = False) -> bytes:
    """A .warc.zst as the IIPC zstd WARC spec lays it out: one frame per record, the dictionary (if any) in
    a skippable frame (magic 0x184D2A5D) first, itself plain or zstd-compressed."""
    out = b""
    if dictionary is not None:
        stored = zstandard.ZstdCompressor().compress(dictionary) if compress_dictionary else dictionary
        out += b"\x5d\x2a\x4d\x18" + len(stored).to_bytes(4, "little") + stored
        compressor = zstandard.ZstdCompressor(dict_data=zstandard.ZstdCompressionDict(dictionary))
    else:
        compressor = zstandard.ZstdCompressor()
    return out + b"".join(compressor.compress(record) for record in records)


@pytest.fixture(scope="module")
def sample_records() -> list[bytes]:
    return warc_records(SAMPLE_WARC)


@pytest.mark.parametrize("layout", ["no_dictionary", "dictionary", "compressed_dictionary"])
def test_warc_zst_reads_as_the_same_warc_gz(sample_records, layout):
    dictionary = None
    if layout != "no_dictionary":
        dictionary = zstandard.train_dictionary(4096, sample_records * 4).as_bytes()
    data = warc_zst(sample_records, dictionary, layout == "compressed_dictionary")
    records, quarantined, counters = read(data)
    expected = read(SAMPLE_WARC.read_bytes())[0]
    assert quarantined == [] and counters == {}
    assert [(r.url, r.content, r.ordinal) for r in records] == [(r.url, r.content, r.ordinal) for r in expected]
    assert [(r.url, r.content) for r in records] == warcio_pages(SAMPLE_WARC.read_bytes())


def test_a_damaged_zstd_frame_is_quarantined_and_the_next_frames_read(sample_records):
    frames = [zstandard.ZstdCompressor().compress(record) for record in sample_records]
    bad = bytearray(frames[2])
    bad[len(bad) // 2] ^= 0xFF
    data = b"".join(frames[:2]) + bytes(bad) + b"".join(frames[3:])
    records, quarantined, _ = read(data)
    assert [(q.location, q.reason) for q in quarantined] == [(f"record 2 @ byte {len(frames[0]) + len(frames[1])}", "corrupt_zstd")]
    urls = [url for url, _ in warcio_pages(SAMPLE_WARC.read_bytes())]
    assert [r.url for r in records] == urls[:2] + urls[3:]

    records, quarantined, _ = read(b"".join(frames)[:-5])
    assert [q.reason for q in quarantined] == ["truncated_zstd"] and [r.url for r in records] == urls[:-1]


@pytest.mark.parametrize("declared", [True, False])
def test_a_zstd_frame_larger_than_the_limit_stops_at_it(sample_records, declared):
    huge = b"WARC/1.0\r\nWARC-Type: resource\r\nContent-Length: 9000000\r\n\r\n" + b"a" * 9_000_000
    if declared:
        frame = zstandard.ZstdCompressor().compress(huge)
    else:  # a streamed frame: no content size in its header
        streaming = zstandard.ZstdCompressor(write_content_size=False).compressobj()
        frame = streaming.compress(huge) + streaming.flush()
    assert (zstandard.frame_content_size(frame) == len(huge)) is declared
    data = frame + zstandard.ZstdCompressor().compress(sample_records[0])
    records, quarantined, _ = read(data, max_record_bytes=1 << 20)
    assert [q.reason for q in quarantined] == ["record_too_large"]
    assert len(records) == (1 if b"WARC-Type: response" in sample_records[0] else 0)



def test_a_record_spread_over_several_zstd_frames_is_joined(sample_records):
    # The IIPC spec: "Each WARC record must correspond to one or more Zstandard frames".
    compressor = zstandard.ZstdCompressor()
    pieces = []
    for record in sample_records:
        cuts = [0, 7, len(record) // 3, len(record) // 3, len(record)]  # one frame mid-header, one empty
        pieces += [compressor.compress(record[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
    records, quarantined, _ = read(b"".join(pieces))
    assert quarantined == []
    assert [(r.url, r.content) for r in records] == warcio_pages(SAMPLE_WARC.read_bytes())

    records, quarantined, _ = read(b"".join(pieces[:-1]))  # the last record lacks its last frame
    assert [q.reason for q in quarantined] == ["truncated_zstd"] and len(records) == len(sample_records) - 1


def test_a_chunked_payload_digested_without_its_chunking_passes():
    # The WARC spec digests a chunked payload with the chunking removed (wget-lua since 2023, Heritrix's fix);
    # warcio and most writers digest it as stored. warcio's iana.org record, re-labelled the spec's way:
    import hashlib

    data = (DATA / "example-iana.org-chunked.warc").read_bytes()
    for record in ArchiveIterator(io.BytesIO(data)):
        if record.rec_type == "response":
            assert record.http_headers.get_header("Transfer-Encoding") == "chunked"
            stored = record.rec_headers.get_header("WARC-Payload-Digest")
            entity = record.content_stream().read()  # warcio removes the chunking (no Content-Encoding here)
    assert len(entity) > 5000
    spec = "sha1:" + hashlib.sha1(entity).hexdigest()  # this writer's digests are hex, not base32
    assert spec != stored and len(spec) == len(stored)
    relabelled = data.replace(stored.encode(), spec.encode())
    assert [kind for kind, _ in warcio_digest_problems(relabelled)] == ["response"]  # warcio's check says wrong
    records, quarantined, _ = read(relabelled)
    assert quarantined == [] and [(r.url, r.content) for r in records] == warcio_pages(data)

    wrong = data.replace(stored.encode(), ("sha1:" + "a" * 40).encode())
    assert [q.reason for q in read(wrong)[1]] == ["digest_mismatch"]


@pytest.mark.parametrize("encode", ["base32", "hex", "base64"])
def test_digest_values_are_read_in_each_encoding_writers_use(encode):
    import base64
    import hashlib

    from sluice.ingest.readers import _digest_matches

    raw = hashlib.sha1(b"page").digest()
    value = {"base32": base64.b32encode(raw).decode(), "hex": raw.hex(), "base64": base64.b64encode(raw).decode()}[encode]
    assert _digest_matches(f"sha1:{value}", b"page") and not _digest_matches(f"sha1:{value}", b"pagf")
    assert not _digest_matches(f"nosuchhash:{value}", b"page")


@pytest.mark.parametrize("name", ["example.arc", "example.arc.gz"])
def test_an_arc_file_of_another_version_is_quarantined_by_name_of_its_version(name):
    # ARC version 2 lines hold ten fields: read as version 1 they would give wrong URLs and dates.
    records = [gzip.decompress(m) for m in members((DATA / name).read_bytes())] if name.endswith(".gz") else [(DATA / name).read_bytes()]
    assert records[0].split(b"\n")[1] == b"1 0 LiveWeb Capture"
    records[0] = records[0].replace(b"\n1 0 LiveWeb Capture\n", b"\n2 0 LiveWeb Capture\n", 1)
    data = b"".join(gzip.compress(r, mtime=0) for r in records) if name.endswith(".gz") else records[0]
    assert read(data) == ([], [Quarantined("file", "unsupported_arc_version", "ARC version '2': only version 1 is read")], {})


def test_an_arc_file_with_invalid_lengths_is_quarantined_whole():
    # warcio reads bad.arc's records (lengths -1 and abc) as empty pages; sluice names the damage instead.
    data = (DATA / "bad.arc").read_bytes()
    assert len(warcio_pages(data)) == 3 and all(body == b"" for _, body in warcio_pages(data))
    records, quarantined, _ = read(data)
    assert records == [] and [(q.location, q.reason) for q in quarantined] == [("file", "bad_warc_record")]
    assert "no valid Content-Length (got '-1')" in quarantined[0].detail


def test_a_dictionary_over_the_limit_is_named_and_its_frames_quarantined(sample_records):
    dictionary = zstandard.train_dictionary(8192, sample_records * 4).as_bytes()
    records, quarantined, _ = read(warc_zst(sample_records[:3], dictionary), max_record_bytes=4096)
    assert records == []
    assert [q.reason for q in quarantined][0] == "record_too_large" and "dictionary frame" in quarantined[0].detail
    assert [q.reason for q in quarantined][1:] == ["corrupt_zstd"] * 3  # each frame needs the dictionary
