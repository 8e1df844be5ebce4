"""Streaming readers for crawl files: WARC (`.warc.gz`, `.warc`, `.warc.zst`), ARC v1 (`.arc.gz`, `.arc`: the
Internet Archive's format, CommonCrawl's 2008-2012 crawls), JSONL (plain, gzip, zstd, bzip2) and Parquet.

Each reader turns one file into a stream of `RawRecord`s and `Quarantined` entries, holding at most one
record (or one Parquet batch) in memory. No decompression is unbounded (sluice.io.inflate): a WARC gzip member
and a response's decoded HTTP payload (Content-Encoding gzip/deflate/br/zstd, chunked transfer) stop at
`max_record_bytes`, a JSONL line at `max_line_bytes`, a Parquet text cell at `max_record_bytes` (and a row
group whose page headers declare a larger page is not decompressed at all, sluice.io.parquet_pages); such a
record is quarantined as `record_too_large` and reading resumes at the next one. A compressed JSONL stream
that expands more than `max_expansion_ratio` times its compressed size stops (`expansion_limit`). Damage never stops a file early when the format lets the reader
find the next good record: a gzip-compressed WARC is read member by member (one record per member, as
crawlers write it), so a broken member is quarantined and reading resumes at the next gzip header (a
`.warc.zst` likewise frame by frame, at the next zstd frame); JSONL resumes at the next line. What cannot
be read is quarantined with a reason code and the bytes involved; when nothing of a file could be read,
the location is "file". An uncompressed WARC has no such resync points: reading stops at its first broken
record. A last gzip member cut short only in its 8-byte trailer is read (counted as recovered); a record
whose WARC-Block-Digest or WARC-Payload-Digest fails is quarantined (`digest_mismatch`, `verify_digests`).
WARC `response` records are read, and `resource` records of HTML (wget, browser-based crawlers).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, BinaryIO

from sluice.config import JsonlOptions, ParquetOptions, WarcOptions
from sluice.io.inflate import CorruptEncoding, ExpansionGuard, TooLarge, ZstdReader, dechunk, decode_http_body
from sluice.io.parquet_pages import RowGroupSpan

GZIP_MAGIC = b"\x1f\x8b\x08"
CHUNK = 1 << 20
MAX_QUARANTINED_PAYLOAD = 1 << 20  # bytes of a damaged record kept in the quarantine output
# A compressed JSONL stream may always decompress this much (or max_line_bytes, if larger) before its
# expansion ratio is checked: a megabyte run of one character in an otherwise normal file is no bomb.
EXPANSION_FLOOR_BYTES = 1 << 30


@dataclass
class RawRecord:
    ordinal: int  # position of the record in its file (record / line / row number, from 0)
    url: str | None
    fetch_date: datetime | None
    content_type: str  # text/html or text/plain
    content: bytes
    charset: str | None  # declared by HTTP headers, if any
    source_id: str | None = None  # id given by the input (JSONL/Parquet id field, WARC-Record-ID)


@dataclass
class Quarantined:
    location: str  # "record 12 @ byte 40960", "line 7", "file"
    reason: str  # stable reason code, e.g. malformed_json, truncated_gzip
    detail: str
    payload: bytes = b""


WARC_SUFFIXES = (".warc.gz", ".warc", ".warc.zst", ".arc.gz", ".arc")  # read_warc tells them apart by content


def supported_format(name: str, fmt: str) -> bool:
    """Whether a file of a source of format `fmt` is read, by its name's suffix."""
    lower = name.lower()
    if fmt == "warc":
        return lower.endswith(WARC_SUFFIXES)
    if fmt == "jsonl":
        return lower.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.bz2", ".json.gz", ".ndjson"))
    if fmt == "parquet":
        return lower.endswith(".parquet")
    return False


def _parse_date(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# ---------------------------------------------------------------------------------------------- gzip


def iter_gzip_members(read: Callable[[int], bytes], max_member_bytes: int) -> Iterator[tuple[int, bytes | None, str, str]]:
    """Split a concatenated-gzip stream into decompressed members.

    Yields (offset, data, reason, detail): data is the member's bytes, or None with a reason when the
    member is damaged (`corrupt_gzip`, `truncated_gzip`, `record_too_large`, `not_gzip`). After damage,
    reading resumes at the next gzip header in the stream. A last member whose deflate data is complete
    but whose 8-byte trailer (CRC-32, size) is cut short (a truncated copy) comes whole, with the reason
    `RECOVERED_TRAILER`: the caller reads it and counts it (warcio reads such a member too).
    """
    stream = _GzipStream(read)
    while True:
        buffer = stream.buffer
        if len(buffer) < 3 and not stream.fill() and not buffer:
            return
        if not buffer.startswith(GZIP_MAGIC):
            if len(buffer) < 3 and not stream.eof and stream.fill():
                continue
            start_offset = stream.base
            stream.resync(1)
            yield start_offset, None, "not_gzip", f"{stream.base - start_offset} bytes that are not gzip data"
            continue
        member_offset = stream.base
        position, pieces, failure = stream.member(max_member_bytes)
        if failure is None:
            stream.consume(position)
            yield member_offset, b"".join(pieces), "", ""
            continue
        if failure[0] == RECOVERED_TRAILER:
            stream.consume(position)
            yield member_offset, b"".join(pieces), failure[0], failure[1]
            continue
        payload = b"".join(pieces)[:MAX_QUARANTINED_PAYLOAD]
        stream.resync(1)
        yield member_offset, payload or None, failure[0], failure[1]



RECOVERED_TRAILER = "recovered_truncated_gzip_trailer"


def _gzip_header_length(member: bytes) -> int | None:
    """The length of a gzip member's header (RFC 1952: fixed 10 bytes, then the optional extra field,
    name, comment and header CRC its flags announce), or None when the bytes end inside it."""
    if len(member) < 10:
        return None
    flags, position = member[3], 10
    if flags & 4:  # FEXTRA: a 2-byte length, then that many bytes
        if len(member) < position + 2:
            return None
        position += 2 + int.from_bytes(member[position : position + 2], "little")
    for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & flag:
            end = member.find(b"\0", position)
            if end < 0:
                return None
            position = end + 1
    if flags & 2:  # FHCRC
        position += 2
    return position if position <= len(member) else None


def _only_trailer_missing(member: bytes, pieces: list[bytes], max_member_bytes: int) -> bool:
    """Whether a member cut short at the end of the file lacks only (part of) its trailer: its raw deflate
    stream ends, and the trailer bytes that are there agree with the data (CRC-32, then size). Runs only
    on a truncated member; the inflate is bounded as the first one was."""
    start = _gzip_header_length(member)
    if start is None:
        return False
    inflater = zlib.decompressobj(wbits=-zlib.MAX_WBITS)
    data, produced = member[start:], 0
    try:
        while not inflater.eof:
            out = inflater.decompress(data, CHUNK)
            produced += len(out)
            if produced > max_member_bytes or not (out or inflater.unconsumed_tail):
                break
            data = inflater.unconsumed_tail
    except zlib.error:
        return False
    if not inflater.eof or len(inflater.unused_data) >= 8:
        return False
    crc = 0
    size = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
        size += len(piece)
    trailer = crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little")
    return trailer.startswith(inflater.unused_data)


class _GzipStream:
    """A read-ahead buffer over a byte stream of gzip members or zstd frames: `buffer` starts at stream
    offset `base`."""

    def __init__(self, read: Callable[[int], bytes], magic: bytes = GZIP_MAGIC) -> None:
        self.read = read
        self.magic = magic  # what starts a member: resync looks for it
        self.buffer = bytearray()
        self.base = 0
        self.eof = False

    def fill(self) -> bool:
        """Read one more chunk into the buffer; False at the end of the stream."""
        if self.eof:
            return False
        chunk = self.read(CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.buffer.extend(chunk)
        return True

    def consume(self, count: int) -> None:
        del self.buffer[:count]
        self.base += count

    def resync(self, start: int) -> None:
        """Drop bytes up to the next member header (`magic`) after buffer position `start`."""
        buffer = self.buffer
        while True:
            found = buffer.find(self.magic, start)
            if found >= 0:
                self.consume(found)
                return
            self.consume(max(len(buffer) - len(self.magic) + 1, start))  # a header may straddle two chunks
            start = 0
            if not self.fill():
                self.consume(len(buffer))
                return

    def skippable(self, limit: int) -> bytes | tuple[str, str] | None:
        """Consume the zstd skippable frame at the buffer's start: its content (None when over `limit`: it is
        then skipped chunk by chunk, never held), or (reason, detail) when the file ends inside it."""
        size = int.from_bytes(self.buffer[4:8], "little")
        self.consume(8)
        remaining, kept = size, bytearray()
        while remaining:
            if not self.buffer and not self.fill():
                return "truncated_zstd", "the file ends inside a skippable frame"
            take = min(len(self.buffer), remaining)
            if size <= limit:
                kept += self.buffer[:take]
            self.consume(take)
            remaining -= take
        return bytes(kept) if size <= limit else None

    def zstd_frame(self, decompressor: Any, max_member_bytes: int) -> tuple[int, list[bytes], tuple[str, str] | None]:
        """Decompress the zstd frame at the buffer's start, as `member` does a gzip member. A frame that
        declares its size (within the limit) is fed a chunk at a time: zstd fails a frame that decodes past
        its declared size. Otherwise each step feeds `ZSTD_FEED` bytes, so one step's output stays small."""
        import zstandard

        while len(self.buffer) < 18 and self.fill():
            pass
        try:
            declared = zstandard.frame_content_size(bytes(self.buffer[:18]))
        except zstandard.ZstdError:
            declared = -1
        feed = CHUNK if 0 <= declared <= max_member_bytes else ZSTD_FEED
        frame = decompressor.decompressobj()
        pieces: list[bytes] = []
        produced = position = 0
        while True:
            if position >= len(self.buffer) and not self.fill():
                return position, pieces, ("truncated_zstd", "the file ends inside a zstd frame")
            data = bytes(self.buffer[position : position + feed])
            try:
                out = frame.decompress(data)
            except zstandard.ZstdError as error:
                return position, pieces, ("corrupt_zstd", str(error))
            position += len(data) - (len(frame.unused_data) if frame.eof else 0)
            produced += len(out)
            if produced > max_member_bytes:
                return position, pieces, ("record_too_large", f"a record decompresses to more than {max_member_bytes} bytes")
            pieces.append(out)
            if frame.eof:
                return position, pieces, None

    def member(self, max_member_bytes: int) -> tuple[int, list[bytes], tuple[str, str] | None]:
        """Decompress the member at the buffer's start, at most `max_member_bytes` (+1 to notice more):
        (bytes of the buffer it used, its decompressed pieces, (reason, detail) when damaged)."""
        decompressor = zlib.decompressobj(wbits=31)
        pieces: list[bytes] = []
        produced = position = 0
        while True:
            if position >= len(self.buffer) and not self.fill():
                if _only_trailer_missing(bytes(self.buffer[:position]), pieces, max_member_bytes):
                    return position, pieces, (RECOVERED_TRAILER, "the file ends inside the member's 8-byte trailer; its deflate data is complete")
                return position, pieces, ("truncated_gzip", "the file ends inside a gzip member")
            data = bytes(self.buffer[position:])
            try:
                out = decompressor.decompress(data, max(0, max_member_bytes - produced) + 1)
            except zlib.error as error:
                return position, pieces, ("corrupt_gzip", str(error))
            position += len(data) - len(decompressor.unconsumed_tail) - len(decompressor.unused_data)
            produced += len(out)
            if produced > max_member_bytes:
                return position, pieces, ("record_too_large", f"a record decompresses to more than {max_member_bytes} bytes")
            pieces.append(out)
            if decompressor.eof:
                return position, pieces, None


# ---------------------------------------------------------------------------------------------- zstd

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_DICTIONARY_MAGIC = b"\x5d\x2a\x4d\x18"  # the skippable frame that holds a `.warc.zst` dictionary
ZSTD_FEED = 64  # compressed bytes per step when a frame does not declare its size (<= ~2 MiB out per step)


def is_skippable_frame(data: bytes) -> bool:
    """A zstd skippable frame starts with 0x184D2A50..0x184D2A5F (little-endian)."""
    return len(data) >= 4 and data[1:4] == b"\x2a\x4d\x18" and 0x50 <= data[0] <= 0x5F


def iter_zstd_frames(read: Callable[[int], bytes], max_member_bytes: int) -> Iterator[tuple[int, bytes | None, str, str]]:
    """Split a `.warc.zst` stream (IIPC: one zstd frame per record, optionally a dictionary in a skippable
    frame at the start, itself plain or zstd-compressed) into decompressed frames, as `iter_gzip_members`
    does gzip members: (offset, data, reason, detail), damage (`not_zstd`, `corrupt_zstd`, `truncated_zstd`,
    `record_too_large`) quarantined and reading resumed at the next zstd magic number."""
    import zstandard

    stream = _GzipStream(read, ZSTD_MAGIC)
    decompressor = zstandard.ZstdDecompressor()
    while True:
        buffer = stream.buffer
        if len(buffer) < 8 and not stream.eof and stream.fill():
            continue
        if not buffer:
            return
        offset = stream.base
        if is_skippable_frame(bytes(buffer[:4])) and len(buffer) >= 8:
            holds_dictionary = offset == 0 and buffer.startswith(ZSTD_DICTIONARY_MAGIC)
            found = stream.skippable(max_member_bytes)
            if isinstance(found, tuple):
                stream.resync(0)
                yield offset, None, found[0], found[1]
            elif found is None and holds_dictionary:  # skipped unread: the frames that need it fail, each named
                yield offset, None, "record_too_large", f"the dictionary frame is larger than {max_member_bytes} bytes"
            elif found is not None and holds_dictionary:
                dictionary = _zstd_dictionary(found, max_member_bytes)
                if isinstance(dictionary, tuple):
                    yield offset, None, dictionary[0], dictionary[1]
                    continue
                decompressor = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dictionary))
            continue
        if not buffer.startswith(ZSTD_MAGIC):
            stream.resync(1)
            yield offset, None, "not_zstd", f"{stream.base - offset} bytes that are not zstd data"
            continue
        position, pieces, failure = stream.zstd_frame(decompressor, max_member_bytes)
        if failure is None:
            stream.consume(position)
            yield offset, b"".join(pieces), "", ""
            continue
        payload = b"".join(pieces)[:MAX_QUARANTINED_PAYLOAD]
        stream.resync(1)
        yield offset, payload or None, failure[0], failure[1]


def _record_length(data: bytes) -> int | None:
    """How many bytes the WARC record that `data` starts with takes (headers and Content-Length bytes), or
    None while its headers are not all there. Bytes that do not start as a WARC record with a Content-Length
    give 0 (taken as they are: the WARC parser then says what is wrong)."""
    if not data.startswith(b"WARC/"):
        return 0
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    for line in data[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return end + 4 + int(value.strip()) if value.strip().isdigit() else 0
    return 0


def zstd_records(frames: Iterator[tuple[int, bytes | None, str, str]], max_record_bytes: int) -> Iterator[tuple[int, bytes | None, str, str]]:
    """Frames joined into records: the IIPC spec lets one record span several frames (never one frame hold
    two records), so frames are joined until they hold the record's length, at most `max_record_bytes`, or
    until a frame starts the next record (`WARC/`: a record cut short inside its frame never swallows the
    next one). A damaged frame is quarantined on its own, and what was joined before it too (it is short of
    its length). Empty frames (allowed) add nothing."""
    start, joined, needed = 0, bytearray(), None
    for offset, data, reason, detail in frames:
        if reason:
            if joined:  # what came before is short of its length: the WARC parser quarantines it as such
                yield start, bytes(joined), "", ""
                joined, needed = bytearray(), None
            yield offset, data, reason, detail
            continue
        if not data:
            continue
        if joined and data.startswith(b"WARC/"):  # a record starts a frame: the one before was cut short
            yield start, bytes(joined), "", ""  # (the WARC parser quarantines it as shorter than its length)
            joined, needed = bytearray(), None
        if not joined:
            start = offset
        joined += data
        if needed is None:  # headers longer than CHUNK: left to the WARC parser
            needed = _record_length(bytes(joined[:CHUNK])) if len(joined) <= CHUNK else 0
        if len(joined) > max_record_bytes:
            yield start, bytes(joined[:MAX_QUARANTINED_PAYLOAD]), "record_too_large", f"a record decompresses to more than {max_record_bytes} bytes"
            joined, needed = bytearray(), None
        elif needed is not None and len(joined) >= needed:
            yield start, bytes(joined), "", ""
            joined, needed = bytearray(), None
    if joined:
        yield start, bytes(joined[:MAX_QUARANTINED_PAYLOAD]), "truncated_zstd", "the file ends inside a record spread over several frames"


def _zstd_dictionary(data: bytes, limit: int) -> bytes | tuple[str, str]:
    """The dictionary of a `.warc.zst` file: the skippable frame's content, decompressed when it is a zstd frame."""
    if not data.startswith(ZSTD_MAGIC):
        return data
    try:
        out = ZstdReader(io.BytesIO(data)).read(limit + 1)
    except Exception as error:  # zstd errors, EOFError
        return "corrupt_zstd", f"the dictionary frame does not decompress: {type(error).__name__}: {error}"
    if len(out) > limit:
        return "record_too_large", f"the dictionary decompresses to more than {limit} bytes"
    return out


# ---------------------------------------------------------------------------------------------- WARC


class _BadWarcRecord(Exception):
    """A WARC record that cannot be parsed; `offset` is where it starts in the stream given to warcio."""

    def __init__(self, offset: int, detail: str) -> None:
        super().__init__(detail)
        self.offset = offset


@dataclass
class _Unreadable:
    """Why a WARC record's payload is not returned: a reason code and a detail."""

    reason: str
    detail: str


def _http_payload(record: Any, body: bytes, max_record_bytes: int) -> bytes | _Unreadable:
    """A response record's HTTP payload (`body`: its bytes after the HTTP headers, as stored), de-chunked and
    decoded (Content-Encoding), at most `max_record_bytes` after decoding: a small compressed body cannot
    inflate past the limit."""
    if record.http_headers is None:
        return body
    headers = record.http_headers
    try:
        return decode_http_body(body, headers.get_header("Transfer-Encoding"), headers.get_header("Content-Encoding"), max_record_bytes)
    except TooLarge:
        return _Unreadable(
            "record_too_large", f"the HTTP payload decodes ({headers.get_header('Content-Encoding')}) to more than {max_record_bytes} bytes"
        )
    except CorruptEncoding as error:
        return _Unreadable("corrupt_content_encoding", str(error))


HTML_TYPES = ("text/html", "application/xhtml+xml")  # a `resource` record of these types is read like a response


@dataclass
class _WarcEntry:
    """One record as warcio parsed it: where it starts, the record, its payload (or why it is not read;
    b"" for a record type that is never read), and a digest that failed ("" when none did)."""

    offset: int
    record: Any
    payload: bytes | _Unreadable
    digest_problem: str = ""


def _warc_records(stream: Any, max_record_bytes: int, arc: bool = False, check_digests: bool = False) -> Iterator[_WarcEntry]:
    """The records of an uncompressed WARC stream (or ARC v1 stream when `arc`, converted by warcio to
    WARC-style headers), with the payload of each response and `resource` record.

    Only the chosen format is accepted (warcio would take other text for ARC records), the Content-Length
    must be a number and the record must hold that many bytes; otherwise `_BadWarcRecord` is raised. With
    `check_digests`, warcio verifies WARC-Block-Digest and WARC-Payload-Digest while the record is read.
    """
    from warcio.archiveiterator import ARCIterator, WARCIterator

    iterator_type = ARCIterator if arc else WARCIterator
    iterator = iterator_type(stream, ensure_http_headers=False, arc2warc=arc, check_digests=check_digests)
    try:
        for record in iterator:
            body = b""
            declared = record.rec_headers.get_header("Content-Length")
            if declared is None or not declared.strip().isdigit():
                raise ValueError(f"the record has no valid Content-Length (got {declared!r})")
            if arc:  # warcio invents a random WARC-Record-ID for an ARC record: not the input's id
                record.rec_headers.remove_header("WARC-Record-ID")
            payload: bytes | _Unreadable
            if int(declared) > max_record_bytes:
                payload = _Unreadable("record_too_large", f"a record is longer than {max_record_bytes} bytes")
            elif record.rec_type in ("response", "resource"):
                body = record.raw_stream.read(max_record_bytes + 1)
                payload = _http_payload(record, body, max_record_bytes)
            else:
                payload = b""
            while record.raw_stream.read(CHUNK):
                pass
            if getattr(record.raw_stream, "limit", 0) > 0:
                raise ValueError(f"the record ends {record.raw_stream.limit} bytes before its Content-Length {declared}")
            problems = _digest_problems(record, body) if check_digests else []
            yield _WarcEntry(iterator.get_record_offset(), record, payload, "; ".join(problems))
    except Exception as error:  # warcio raises several types for malformed headers
        raise _BadWarcRecord(iterator.offset, f"{type(error).__name__}: {error}") from error


def _digest_problems(record: Any, body: bytes) -> list[str]:
    """The digests warcio found wrong. warcio (like most writers) digests a chunked payload as stored; the
    WARC spec (1.1, 6.3.2) and recent writers (wget-lua since 2023, Heritrix's FetchHTTP fix) digest it with
    the chunking removed: a chunked payload whose digest matches either way passes."""
    problems = [problem for problem in record.digest_checker.problems if "digest failed" in problem]
    headers = record.http_headers
    chunked = headers is not None and (headers.get_header("Transfer-Encoding") or "").strip().lower() == "chunked"
    payload_failed = any(problem.startswith("payload") for problem in problems)
    if chunked and payload_failed and _digest_matches(record.rec_headers.get_header("WARC-Payload-Digest") or "", dechunk(body)):
        problems = [problem for problem in problems if not problem.startswith("payload")]
    return problems


def _digest_matches(declared: str, data: bytes) -> bool:
    """Whether a WARC digest (`sha1:<base32>`, or hex, or base64, as writers vary) is that of `data`."""
    import base64
    import hashlib

    algorithm, _, value = declared.partition(":")
    try:
        digest = hashlib.new(algorithm.strip().lower().replace("-", ""), data).digest()
    except ValueError:
        return False
    value = value.strip()
    return value.upper() == base64.b32encode(digest).decode() or value.lower() == digest.hex() or value == base64.b64encode(digest).decode()


def _content_type_and_charset(value: str | None) -> tuple[str, str | None]:
    if not value:
        return "", None
    main, *params = [part.strip() for part in value.split(";")]
    charset = None
    for param in params:
        name, _, val = param.partition("=")
        if name.strip().lower() == "charset" and val:
            charset = val.strip().strip('"').lower()
    return main.lower(), charset


def _record_content_type(record: Any) -> tuple[str, str | None] | None:
    """(content type, charset) of a record that holds a document: a response (its HTTP Content-Type) or a
    `resource` record of HTML (its WARC Content-Type: wget, browser-based crawlers). None for the others."""
    if record.rec_type == "response":
        return _content_type_and_charset(record.http_headers.get_header("Content-Type") if record.http_headers else None)
    if record.rec_type == "resource":
        content_type, charset = _content_type_and_charset(record.rec_headers.get_header("Content-Type"))
        return (content_type, charset) if content_type in HTML_TYPES else None
    return None


def _warc_item(ordinal: int, location: str, entry: _WarcEntry, options: WarcOptions, counters: dict[str, int]) -> RawRecord | Quarantined | None:
    record, payload = entry.record, entry.payload
    if isinstance(payload, _Unreadable):
        return Quarantined(location, payload.reason, payload.detail)
    kind = _record_content_type(record)
    if kind is None:
        counters["skipped_non_response"] = counters.get("skipped_non_response", 0) + 1
        return None
    content_type, charset = kind
    if content_type not in options.content_types:
        counters["skipped_content_type"] = counters.get("skipped_content_type", 0) + 1
        return None
    if entry.digest_problem:
        return Quarantined(location, "digest_mismatch", entry.digest_problem, payload[:MAX_QUARANTINED_PAYLOAD])
    return RawRecord(
        ordinal=ordinal,
        url=record.rec_headers.get_header("WARC-Target-URI"),
        fetch_date=_parse_date(record.rec_headers.get_header("WARC-Date")),
        content_type="text/plain" if content_type == "text/plain" else "text/html",
        content=payload,
        charset=charset,
        source_id=record.rec_headers.get_header("WARC-Record-ID"),
    )


def looks_like_arc(data: bytes) -> bool:
    """Whether bytes start like an ARC v1 file or record (not WARC): a `filedesc://` header, or a first line
    of five space-separated fields `URL IP date(14 digits) content-type length` (the URL may hold spaces)."""
    if data.startswith(b"filedesc://"):
        return True
    line = data[: data.find(b"\n", 0, 8192)].rstrip(b"\r")
    parts = line.rsplit(b" ", 4)
    return len(parts) == 5 and b"://" in parts[0] and parts[4].isdigit() and len(parts[2]) == 14 and parts[2].isdigit()


def unsupported_arc_version(data: bytes) -> Quarantined | None:
    """A file-level quarantine entry when `data` starts an ARC file of another version than 1 (its
    `filedesc://` record's second line starts with the version): version 2 lines have ten fields, which
    the version-1 parser would read into wrong URLs and dates without a word."""
    if not data.startswith(b"filedesc://"):
        return None
    lines = data.split(b"\n", 2)
    version = lines[1].split(b" ", 1)[0].strip() if len(lines) > 1 else b""
    if version == b"1":
        return None
    return Quarantined("file", "unsupported_arc_version", f"ARC version {version.decode('ascii', 'replace')!r}: only version 1 is read")


class _Rejoined:
    """A read-only stream with the bytes already read from its start put back in front."""

    def __init__(self, head: bytes, stream: Any) -> None:
        self.head = head
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        if not self.head:
            return self.stream.read(size)
        if size is None or size < 0:
            data, self.head = self.head + self.stream.read(), b""
            return data
        data, self.head = self.head[:size], self.head[size:]
        return data


def _read_plain_warc(stream: Any, arc: bool, options: WarcOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    """An uncompressed WARC (or ARC), streamed record by record. Without gzip members there is no way to find
    the next record after a damaged one, so the rest of the file is quarantined (the whole file when the
    damage is in its first record)."""
    ordinal = 0
    try:
        for entry in _warc_records(stream, options.max_record_bytes, arc, options.verify_digests):
            item = _warc_item(ordinal, f"record {ordinal} @ byte {entry.offset}", entry, options, counters)
            ordinal += 1
            if item is not None:
                yield item
    except _BadWarcRecord as error:
        location = "file" if ordinal == 0 else f"record {ordinal} @ byte {error.offset}"
        yield Quarantined(location, "bad_warc_record", f"{error}; the rest of the uncompressed file cannot be read")


def _read_members(members: Iterator[tuple[int, bytes | None, str, str]], options: WarcOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    """The records of a WARC (or ARC) compressed record by record (gzip members, zstd frames)."""
    ordinal = 0  # one per member; a member that holds several records gives each its own
    for offset, data, reason, detail in members:
        if offset == 0 and data and (unsupported := unsupported_arc_version(data)) is not None:
            yield unsupported
            return
        if reason == RECOVERED_TRAILER and data is not None:
            counters[RECOVERED_TRAILER] = counters.get(RECOVERED_TRAILER, 0) + 1
        elif data is None or reason:
            yield Quarantined(f"record {ordinal} @ byte {offset}", reason, detail, data or b"")
            ordinal += 1
            continue
        if not data.strip():
            ordinal += 1
            continue
        count = 0
        arc = not data.startswith(b"WARC/") and looks_like_arc(data)
        try:
            for entry in _warc_records(io.BytesIO(data), options.max_record_bytes, arc, options.verify_digests):
                item = _warc_item(ordinal + count, f"record {ordinal + count} @ byte {offset}", entry, options, counters)
                count += 1
                if item is not None:
                    yield item
        except _BadWarcRecord as error:
            yield Quarantined(f"record {ordinal + count} @ byte {offset}", "bad_warc_record", str(error), data[:MAX_QUARANTINED_PAYLOAD])
            count += 1
        ordinal += max(count, 1)


def read_warc(stream: BinaryIO, options: WarcOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    """A WARC or ARC v1 file, plain, gzip (member by member) or zstd (IIPC `.warc.zst`: frame by frame), told
    apart by its first bytes, not by its name."""
    head = stream.read(CHUNK)
    pending = [head]

    def read(size: int) -> bytes:
        if pending:
            return pending.pop()
        return stream.read(size)

    if head.startswith(ZSTD_MAGIC) or is_skippable_frame(head):
        yield from _read_members(zstd_records(iter_zstd_frames(read, options.max_record_bytes), options.max_record_bytes), options, counters)
        return
    # Gzip unless the file starts like a plain WARC or ARC: junk before the first gzip member (a partial
    # download, a proxy's error text) is quarantined as `not_gzip` and reading resumes at the member.
    plain = head.startswith(b"WARC/") or looks_like_arc(head)
    gzipped = head.startswith(GZIP_MAGIC[:2]) or (not plain and GZIP_MAGIC in head)
    if not gzipped and (unsupported := unsupported_arc_version(head)) is not None:
        yield unsupported
        return
    if not gzipped:
        yield from _read_plain_warc(_Rejoined(head, stream), not head.startswith(b"WARC/") and looks_like_arc(head), options, counters)
        return
    yield from _read_members(iter_gzip_members(read, options.max_record_bytes), options, counters)


# ---------------------------------------------------------------------------------------------- JSONL


COMPRESSED_SUFFIXES = (".gz", ".zst", ".bz2")


def _decompressed(stream: BinaryIO, name: str) -> BinaryIO:
    """A buffered, line-readable view of the decompressed stream. Lines before damage stay readable:
    the gzip, bzip2 and zstd readers hand out what they decompressed before they raise. Each decodes a
    bounded amount per read (gzip and bz2 ask their decompressor for at most the requested size)."""
    lower = name.lower()
    if lower.endswith(".gz"):
        return gzip.GzipFile(fileobj=stream)  # type: ignore[return-value]
    if lower.endswith(".bz2"):
        return bz2.BZ2File(stream)  # type: ignore[return-value]
    if lower.endswith(".zst"):
        return io.BufferedReader(ZstdReader(stream), buffer_size=CHUNK)  # type: ignore[return-value]
    return io.BufferedReader(stream, buffer_size=CHUNK)  # type: ignore[arg-type]


def _text_record(ordinal: int, item: dict[str, Any], options: JsonlOptions | ParquetOptions) -> RawRecord | Quarantined:
    location = f"line {ordinal + 1}" if isinstance(options, JsonlOptions) else f"row {ordinal}"
    text = item.get(options.text_field)
    if not isinstance(text, str):
        return Quarantined(
            location,
            "missing_text",
            f"field {options.text_field!r} is missing or not a string",
            json.dumps(item, default=str, ensure_ascii=False).encode("utf-8", "backslashreplace")[:MAX_QUARANTINED_PAYLOAD],
        )
    url = item.get(options.url_field) if options.url_field else None
    source_id = item.get(options.id_field) if options.id_field else None
    url = str(url) if url is not None else None
    source_id = str(source_id) if source_id is not None else None
    limit = options.max_line_bytes if isinstance(options, JsonlOptions) else options.max_record_bytes
    if len(text) > limit:  # characters: at most one byte short of the UTF-8 length check below
        return Quarantined(location, "record_too_large", f"the text is longer than {limit} bytes", text[:MAX_QUARANTINED_PAYLOAD].encode("utf-8", "backslashreplace"))
    try:
        content = text.encode("utf-8")
        if len(content) > limit:
            return Quarantined(location, "record_too_large", f"the text is longer than {limit} bytes", content[:MAX_QUARANTINED_PAYLOAD])
        for value in (url, source_id):
            if value is not None:
                value.encode("utf-8")
    except UnicodeEncodeError as error:  # a JSON \ud800-style escape: a lone surrogate is no valid text
        return Quarantined(
            location,
            "invalid_utf8",
            str(error),
            json.dumps(item, default=str, ensure_ascii=False).encode("utf-8", "backslashreplace")[:MAX_QUARANTINED_PAYLOAD],
        )
    return RawRecord(
        ordinal=ordinal,
        url=url,
        fetch_date=_parse_date(item.get(options.date_field)) if options.date_field else None,
        content_type=options.content_type,
        content=content,
        charset="utf-8",
        source_id=source_id,
    )


def read_jsonl(stream: BinaryIO, name: str, options: JsonlOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    compressed = name.lower().endswith(COMPRESSED_SUFFIXES)
    guard = ExpansionGuard(stream)
    reader = _decompressed(guard if compressed else stream, name)  # type: ignore[arg-type]
    lower = name.lower()
    truncated = "truncated_zstd" if lower.endswith(".zst") else "truncated_bz2" if lower.endswith(".bz2") else "truncated_gzip"
    line_number = 0
    decompressed = 0

    def expanded_too_far() -> Quarantined | None:
        if compressed and guard.exceeded(decompressed, options.max_expansion_ratio, max(EXPANSION_FLOOR_BYTES, options.max_line_bytes)):
            return Quarantined(
                f"after line {line_number}",
                "expansion_limit",
                f"{decompressed} bytes decompressed from {guard.bytes_read}: more than max_expansion_ratio "
                f"{options.max_expansion_ratio:g}; the rest of the file is not read",
            )
        return None

    while True:
        try:
            line = reader.readline(options.max_line_bytes + 1)
        except Exception as error:  # EOFError, OSError, zlib.error, zstd errors
            # Reading cannot go on; when nothing was read, the file as a whole is lost (counted as such).
            location = f"after line {line_number}" if line_number else "file"
            reason = truncated if isinstance(error, EOFError) else "corrupt_compression"
            yield Quarantined(location, reason, f"{type(error).__name__}: {error}")
            return
        if not line:
            return
        line_number += 1
        decompressed += len(line)
        if len(line) > options.max_line_bytes and not line.endswith(b"\n"):
            # Skip the rest of an over-long line without holding it in memory.
            head = line[:MAX_QUARANTINED_PAYLOAD]
            while line and not line.endswith(b"\n"):
                try:
                    line = reader.readline(CHUNK)
                except Exception:
                    break
                decompressed += len(line)
                if (stop := expanded_too_far()) is not None:
                    yield Quarantined(f"line {line_number}", "record_too_large", f"longer than {options.max_line_bytes} bytes", head)
                    yield stop
                    return
            yield Quarantined(f"line {line_number}", "record_too_large", f"longer than {options.max_line_bytes} bytes", head)
            continue
        if (stop := expanded_too_far()) is not None:
            yield stop
            return
        stripped = line.strip()
        if not stripped:
            continue
        try:
            item = json.loads(stripped.decode("utf-8-sig" if line_number == 1 else "utf-8"))  # a BOM may start a file
        except UnicodeDecodeError as error:
            yield Quarantined(f"line {line_number}", "invalid_utf8", str(error), stripped[:MAX_QUARANTINED_PAYLOAD])
            continue
        except json.JSONDecodeError as error:
            yield Quarantined(f"line {line_number}", "malformed_json", str(error), stripped[:MAX_QUARANTINED_PAYLOAD])
            continue
        except RecursionError:  # hostile nesting ([[[[...]]]]) deeper than Python's recursion limit
            yield Quarantined(f"line {line_number}", "malformed_json", "nested too deeply", stripped[:MAX_QUARANTINED_PAYLOAD])
            continue
        if not isinstance(item, dict):
            yield Quarantined(f"line {line_number}", "malformed_json", "a line must hold a JSON object", stripped[:MAX_QUARANTINED_PAYLOAD])
            continue
        result = _text_record(line_number - 1, item, options)
        if isinstance(result, Quarantined):
            result.location = f"line {line_number}"
        yield result


# -------------------------------------------------------------------------------------------- Parquet


def _parquet_rows(batch: Any) -> Iterator[dict[str, Any] | UnicodeDecodeError]:
    """The rows of a record batch as dicts; a row with a string that is not valid UTF-8 (Parquet readers
    do not check) comes as the UnicodeDecodeError instead. Binary columns (a BYTE_ARRAY without its UTF8
    annotation, as some writers store strings) are decoded as UTF-8 text too."""
    import pyarrow as pa

    columns: dict[str, list[Any]] = {}
    strings = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            column = column.cast(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            strings.append(name)
        columns[name] = column.to_pylist()
    for index in range(batch.num_rows):
        item = {name: values[index] for name, values in columns.items()}
        try:
            for name in strings:
                if item[name] is not None:
                    item[name] = item[name].decode("utf-8")
        except UnicodeDecodeError as error:
            yield error
            continue
        yield item


def _oversized_page(stream: BinaryIO, group: RowGroupSpan, columns: list[str], limit: int) -> str | None:
    """Why a row group is not read: one of its pages would decompress past `limit` (a Parquet bomb: Arrow
    allocates a whole page at once), from the page headers alone (sluice.io.parquet_pages). None when fine."""
    from sluice.io.parquet_pages import largest_page

    for chunk in group.chunks:
        if chunk.column not in columns or chunk.uncompressed <= limit:
            continue  # no page can be larger than its whole column chunk
        size = largest_page(stream, chunk)
        if size is not None and size > limit:
            return (
                f"column {chunk.column!r} has a page that decompresses to {size} bytes, more than max_record_bytes {limit}; "
                f"its {group.num_rows} rows are not read"
            )
    return None


def _row_group_items(parquet: Any, index: int, start: int, expected: int, wanted: list[str], options: ParquetOptions) -> Iterator[RawRecord | Quarantined]:
    """The records of one row group, numbered from `start`; damage found by Arrow or a short read is quarantined."""
    ordinal = start
    try:
        for batch in parquet.iter_batches(batch_size=options.batch_rows, row_groups=[index], columns=wanted):
            for item in _parquet_rows(batch):
                if isinstance(item, UnicodeDecodeError):
                    yield Quarantined(f"row {ordinal}", "invalid_utf8", str(item))
                else:
                    yield _text_record(ordinal, item, options)
                ordinal += 1
    except Exception as error:
        yield Quarantined(f"row group {index}", "unreadable_parquet", f"{type(error).__name__}: {error}")
        return
    if ordinal - start != expected:  # a damaged page header can make a column read short, silently
        yield Quarantined(f"row group {index}", "unreadable_parquet", f"read {ordinal - start} of its {expected} rows")


def _open_parquet(stream: BinaryIO) -> tuple[Any, list[RowGroupSpan]] | Quarantined:
    """The pyarrow ParquetFile and the row groups decoded from its footer, or why the file is unreadable."""
    import pyarrow.parquet as pq

    from sluice.io.parquet_pages import row_groups

    try:
        # Page CRCs, where the writer stored them, are verified: a flipped byte in a data page is then
        # reported instead of read as a silently different value.
        parquet = pq.ParquetFile(stream, page_checksum_verification=True)
        groups = row_groups(stream)
    except Exception as error:  # pyarrow's errors, or sluice.io.parquet_pages.FooterError
        return Quarantined("file", "unreadable_parquet", f"{type(error).__name__}: {error}")
    if len(groups) != parquet.num_row_groups:
        return Quarantined("file", "unreadable_parquet", f"the footer lists {len(groups)} row groups, Arrow {parquet.num_row_groups}")
    return parquet, groups


def read_parquet(path_or_stream: str | BinaryIO, options: ParquetOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(open(path_or_stream, "rb")) if isinstance(path_or_stream, str) else path_or_stream
        opened = _open_parquet(stream)
        if isinstance(opened, Quarantined):
            yield opened
            return
        parquet, groups = opened
        if options.text_field not in parquet.schema_arrow.names:
            yield Quarantined("file", "missing_text", f"no column {options.text_field!r}; columns: {parquet.schema_arrow.names}")
            return
        wanted = [c for c in (options.text_field, options.id_field, options.url_field, options.date_field) if c and c in parquet.schema_arrow.names]
        start = 0
        for index, group in enumerate(groups):
            oversized = _oversized_page(stream, group, wanted, options.max_record_bytes)
            if oversized is not None:
                yield Quarantined(f"row group {index}", "record_too_large", oversized)
            else:
                yield from _row_group_items(parquet, index, start, group.num_rows, wanted, options)
            start += group.num_rows


def read_records(
    stream: BinaryIO, name: str, fmt: str, options: Any, counters: dict[str, int]
) -> Iterator[RawRecord | Quarantined]:
    """Dispatch on the source format; `counters` collects skipped (not damaged) records by reason."""
    if fmt == "warc":
        yield from read_warc(stream, options, counters)
    elif fmt == "jsonl":
        yield from read_jsonl(stream, name, options, counters)
    elif fmt == "parquet":
        yield from read_parquet(stream, options, counters)
    else:  # the config validator already refuses other formats
        raise ValueError(f"unknown format {fmt!r}")
