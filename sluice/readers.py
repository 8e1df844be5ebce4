"""Streaming readers for crawl files: WARC (`.warc.gz`, `.warc`), JSONL (plain, gzip, zstd, bzip2) and Parquet.

Each reader turns one file into a stream of `RawRecord`s and `Quarantined` entries, holding at most one
record (or one Parquet batch) in memory. No decompression is unbounded (sluice.inflate): a WARC gzip member
and a response's decoded HTTP payload (Content-Encoding gzip/deflate/br/zstd, chunked transfer) stop at
`max_record_bytes`, a JSONL line at `max_line_bytes`, a Parquet text cell at `max_record_bytes` (and a row
group whose page headers declare a larger page is not decompressed at all, sluice.parquet_pages); such a
record is quarantined as `record_too_large` and reading resumes at the next one. A compressed JSONL stream
that expands more than `max_expansion_ratio` times its compressed size stops (`expansion_limit`). Damage never stops a file early when the format lets the reader
find the next good record: a gzip-compressed WARC is read member by member (one record per member, as
crawlers write it), so a broken member is quarantined and reading resumes at the next gzip header; JSONL
resumes at the next line. What cannot be read is quarantined with a reason code and the bytes involved;
when nothing of a file could be read, the location is "file". An uncompressed WARC has no such resync
points: reading stops at its first broken record.
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
from sluice.inflate import CorruptEncoding, ExpansionGuard, TooLarge, ZstdReader, decode_http_body
from sluice.parquet_pages import RowGroupSpan

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


def supported_format(name: str, fmt: str) -> bool:
    lower = name.lower()
    if fmt == "warc":
        return lower.endswith((".warc.gz", ".warc"))
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
    reading resumes at the next gzip header in the stream.
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
        payload = b"".join(pieces)[:MAX_QUARANTINED_PAYLOAD]
        stream.resync(1)
        yield member_offset, payload or None, failure[0], failure[1]


class _GzipStream:
    """A read-ahead buffer over a byte stream: `buffer` starts at stream offset `base`."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self.read = read
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
        """Drop bytes up to the next gzip header after buffer position `start`."""
        buffer = self.buffer
        while True:
            found = buffer.find(GZIP_MAGIC, start)
            if found >= 0:
                self.consume(found)
                return
            self.consume(max(len(buffer) - 2, start))  # a header may straddle two chunks
            start = 0
            if not self.fill():
                self.consume(len(buffer))
                return

    def member(self, max_member_bytes: int) -> tuple[int, list[bytes], tuple[str, str] | None]:
        """Decompress the member at the buffer's start, at most `max_member_bytes` (+1 to notice more):
        (bytes of the buffer it used, its decompressed pieces, (reason, detail) when damaged)."""
        decompressor = zlib.decompressobj(wbits=31)
        pieces: list[bytes] = []
        produced = position = 0
        while True:
            if position >= len(self.buffer) and not self.fill():
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


def _http_payload(record: Any, max_record_bytes: int) -> bytes | _Unreadable:
    """A response record's HTTP payload, de-chunked and decoded (Content-Encoding), at most
    `max_record_bytes` after decoding: a small compressed body cannot inflate past the limit."""
    body = record.raw_stream.read(max_record_bytes + 1)
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


def _warc_records(stream: Any, max_record_bytes: int) -> Iterator[tuple[int, Any, bytes | _Unreadable]]:
    """The WARC records of an uncompressed stream: (offset, record, HTTP payload of a response record, or
    why it cannot be read; b"" for other record types).

    Only the WARC format is accepted (warcio would take other text for ARC records), the Content-Length
    must be a number and the record must hold that many bytes; otherwise `_BadWarcRecord` is raised.
    """
    from warcio.archiveiterator import WARCIterator

    iterator = WARCIterator(stream, ensure_http_headers=False)
    try:
        for record in iterator:
            declared = record.rec_headers.get_header("Content-Length")
            if declared is None or not declared.strip().isdigit():
                raise ValueError(f"the record has no valid Content-Length (got {declared!r})")
            payload: bytes | _Unreadable
            if int(declared) > max_record_bytes:
                payload = _Unreadable("record_too_large", f"a record is longer than {max_record_bytes} bytes")
            elif record.rec_type == "response":
                payload = _http_payload(record, max_record_bytes)
            else:
                payload = b""
            while record.raw_stream.read(CHUNK):
                pass
            if getattr(record.raw_stream, "limit", 0) > 0:
                raise ValueError(f"the record ends {record.raw_stream.limit} bytes before its Content-Length {declared}")
            yield iterator.get_record_offset(), record, payload
    except Exception as error:  # warcio raises several types for malformed headers
        raise _BadWarcRecord(iterator.offset, f"{type(error).__name__}: {error}") from error


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


def _warc_item(
    ordinal: int, location: str, record: Any, payload: bytes | _Unreadable, options: WarcOptions, counters: dict[str, int]
) -> RawRecord | Quarantined | None:
    if isinstance(payload, _Unreadable):
        return Quarantined(location, payload.reason, payload.detail)
    if record.rec_type != "response":
        counters["skipped_non_response"] = counters.get("skipped_non_response", 0) + 1
        return None
    http_type = record.http_headers.get_header("Content-Type") if record.http_headers else None
    content_type, charset = _content_type_and_charset(http_type)
    if content_type not in options.content_types:
        counters["skipped_content_type"] = counters.get("skipped_content_type", 0) + 1
        return None
    return RawRecord(
        ordinal=ordinal,
        url=record.rec_headers.get_header("WARC-Target-URI"),
        fetch_date=_parse_date(record.rec_headers.get_header("WARC-Date")),
        content_type="text/plain" if content_type == "text/plain" else "text/html",
        content=payload,
        charset=charset,
        source_id=record.rec_headers.get_header("WARC-Record-ID"),
    )


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


def _read_plain_warc(stream: Any, options: WarcOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    """An uncompressed WARC, streamed record by record. Without gzip members there is no way to find the
    next record after a damaged one, so the rest of the file is quarantined (the whole file when the
    damage is in its first record)."""
    ordinal = 0
    try:
        for offset, record, payload in _warc_records(stream, options.max_record_bytes):
            item = _warc_item(ordinal, f"record {ordinal} @ byte {offset}", record, payload, options, counters)
            ordinal += 1
            if item is not None:
                yield item
    except _BadWarcRecord as error:
        location = "file" if ordinal == 0 else f"record {ordinal} @ byte {error.offset}"
        yield Quarantined(location, "bad_warc_record", f"{error}; the rest of the uncompressed file cannot be read")


def read_warc(stream: BinaryIO, options: WarcOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    head = stream.read(CHUNK)
    # Gzip unless the file starts like a plain WARC: junk before the first gzip member (a partial
    # download, a proxy's error text) is quarantined as `not_gzip` and reading resumes at the member.
    gzipped = head.startswith(GZIP_MAGIC[:2]) or (not head.startswith(b"WARC/") and GZIP_MAGIC in head)
    if not gzipped:
        yield from _read_plain_warc(_Rejoined(head, stream), options, counters)
        return

    rest = stream.read
    pending = [head]

    def read(size: int) -> bytes:
        if pending:
            return pending.pop()
        return rest(size)

    ordinal = 0  # one per gzip member; a member that holds several records gives each its own
    for offset, data, reason, detail in iter_gzip_members(read, options.max_record_bytes):
        if data is None or reason:
            yield Quarantined(f"record {ordinal} @ byte {offset}", reason, detail, data or b"")
            ordinal += 1
            continue
        if not data.strip():
            ordinal += 1
            continue
        count = 0
        try:
            for _, record, payload in _warc_records(io.BytesIO(data), options.max_record_bytes):
                item = _warc_item(ordinal + count, f"record {ordinal + count} @ byte {offset}", record, payload, options, counters)
                count += 1
                if item is not None:
                    yield item
        except _BadWarcRecord as error:
            yield Quarantined(f"record {ordinal + count} @ byte {offset}", "bad_warc_record", str(error), data[:MAX_QUARANTINED_PAYLOAD])
            count += 1
        ordinal += max(count, 1)


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
    allocates a whole page at once), from the page headers alone (sluice.parquet_pages). None when fine."""
    from sluice.parquet_pages import largest_page

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

    from sluice.parquet_pages import row_groups

    try:
        # Page CRCs, where the writer stored them, are verified: a flipped byte in a data page is then
        # reported instead of read as a silently different value.
        parquet = pq.ParquetFile(stream, page_checksum_verification=True)
        groups = row_groups(stream)
    except Exception as error:  # pyarrow's errors, or sluice.parquet_pages.FooterError
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
