"""Streaming readers for crawl files: WARC (`.warc.gz`, `.warc`), JSONL (plain, gzip, zstd) and Parquet.

Each reader turns one file into a stream of `RawRecord`s and `Quarantined` entries, holding at most one
record (or one Parquet batch) in memory. Damage never stops a file early when the format lets the reader
find the next good record: a gzip-compressed WARC is read member by member (one record per member, as
crawlers write it), so a broken member is quarantined and reading resumes at the next gzip header; JSONL
resumes at the next line. What cannot be read is quarantined with a reason code and the bytes involved.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, BinaryIO

from sluice.config import JsonlOptions, ParquetOptions, WarcOptions

GZIP_MAGIC = b"\x1f\x8b\x08"
CHUNK = 1 << 20
MAX_QUARANTINED_PAYLOAD = 1 << 20  # bytes of a damaged record kept in the quarantine output


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
        return lower.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".ndjson"))
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
    buffer = bytearray()
    base = 0  # stream offset of buffer[0]
    eof = False

    def fill() -> bool:
        nonlocal eof
        if eof:
            return False
        chunk = read(CHUNK)
        if not chunk:
            eof = True
            return False
        buffer.extend(chunk)
        return True

    def resync(start: int) -> None:
        """Drop bytes up to the next gzip header after buffer position `start`."""
        nonlocal base
        while True:
            found = buffer.find(GZIP_MAGIC, start)
            if found >= 0:
                del buffer[:found]
                base += found
                return
            keep = max(len(buffer) - 2, start)  # a header may straddle two chunks
            del buffer[:keep]
            base += keep
            start = 0
            if not fill():
                base += len(buffer)
                buffer.clear()
                return

    while True:
        if len(buffer) < 3 and not fill() and not buffer:
            return
        if not buffer.startswith(GZIP_MAGIC):
            if len(buffer) < 3 and not eof and fill():
                continue
            start_offset = base
            resync(1)
            yield start_offset, None, "not_gzip", f"{base - start_offset} bytes that are not gzip data"
            continue
        decompressor = zlib.decompressobj(wbits=31)
        pieces: list[bytes] = []
        produced = 0
        position = 0
        member_offset = base
        failure: tuple[str, str] | None = None
        while True:
            if position >= len(buffer) and not fill():
                failure = ("truncated_gzip", "the file ends inside a gzip member")
                break
            data = bytes(buffer[position:])
            try:
                out = decompressor.decompress(data, max(0, max_member_bytes - produced) + 1)
            except zlib.error as error:
                failure = ("corrupt_gzip", str(error))
                break
            consumed = len(data) - len(decompressor.unconsumed_tail) - len(decompressor.unused_data)
            position += consumed
            produced += len(out)
            if produced > max_member_bytes:
                failure = ("record_too_large", f"a record decompresses to more than {max_member_bytes} bytes")
                break
            pieces.append(out)
            if decompressor.eof:
                break
        if failure is None:
            del buffer[:position]
            base += position
            yield member_offset, b"".join(pieces), "", ""
            continue
        payload = b"".join(pieces)[:MAX_QUARANTINED_PAYLOAD]
        resync(1)
        yield member_offset, payload or None, failure[0], failure[1]


# ---------------------------------------------------------------------------------------------- WARC


def _warc_record_from_bytes(data: bytes) -> tuple[Any, bytes]:
    """Parse one uncompressed WARC record; returns (record, http payload)."""
    from warcio.archiveiterator import ArchiveIterator

    iterator = ArchiveIterator(io.BytesIO(data), ensure_http_headers=False)
    record = next(iter(iterator))
    payload = record.content_stream().read()
    return record, payload


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


def read_warc(stream: BinaryIO, options: WarcOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    head = stream.read(3)
    rest = stream.read
    pending = [head]

    def read(size: int) -> bytes:
        if pending:
            return pending.pop()
        return rest(size)

    if not head.startswith(GZIP_MAGIC[:2]):
        # An uncompressed WARC: the whole file is parsed in one pass by warcio.
        members: Iterator[tuple[int, bytes | None, str, str]] = iter([(0, head + stream.read(), "", "")])
    else:
        members = iter_gzip_members(read, options.max_record_bytes)

    ordinal = -1
    for offset, data, reason, detail in members:
        ordinal += 1
        location = f"record {ordinal} @ byte {offset}"
        if data is None or reason:
            yield Quarantined(location, reason, detail, data or b"")
            continue
        if not data.strip():
            continue
        try:
            record, payload = _warc_record_from_bytes(data)
        except Exception as error:  # warcio raises several types for malformed headers
            yield Quarantined(location, "bad_warc_record", f"{type(error).__name__}: {error}", data[:MAX_QUARANTINED_PAYLOAD])
            continue
        if record.rec_type != "response":
            counters["skipped_non_response"] = counters.get("skipped_non_response", 0) + 1
            continue
        http_type = record.http_headers.get_header("Content-Type") if record.http_headers else None
        content_type, charset = _content_type_and_charset(http_type)
        if content_type not in options.content_types:
            counters["skipped_content_type"] = counters.get("skipped_content_type", 0) + 1
            continue
        yield RawRecord(
            ordinal=ordinal,
            url=record.rec_headers.get_header("WARC-Target-URI"),
            fetch_date=_parse_date(record.rec_headers.get_header("WARC-Date")),
            content_type="text/plain" if content_type == "text/plain" else "text/html",
            content=payload,
            charset=charset,
            source_id=record.rec_headers.get_header("WARC-Record-ID"),
        )


# ---------------------------------------------------------------------------------------------- JSONL


def _decompressed(stream: BinaryIO, name: str) -> BinaryIO:
    lower = name.lower()
    if lower.endswith(".gz"):
        return gzip.GzipFile(fileobj=stream)  # type: ignore[return-value]
    if lower.endswith(".zst"):
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)  # type: ignore[return-value]
    return stream


def _text_record(ordinal: int, item: dict[str, Any], options: JsonlOptions | ParquetOptions) -> RawRecord | Quarantined:
    text = item.get(options.text_field)
    if not isinstance(text, str):
        return Quarantined(
            f"line {ordinal + 1}" if isinstance(options, JsonlOptions) else f"row {ordinal}",
            "missing_text",
            f"field {options.text_field!r} is missing or not a string",
            json.dumps(item, default=str, ensure_ascii=False).encode()[:MAX_QUARANTINED_PAYLOAD],
        )
    url = item.get(options.url_field) if options.url_field else None
    source_id = item.get(options.id_field) if options.id_field else None
    return RawRecord(
        ordinal=ordinal,
        url=str(url) if url is not None else None,
        fetch_date=_parse_date(item.get(options.date_field)) if options.date_field else None,
        content_type=options.content_type,
        content=text.encode("utf-8"),
        charset="utf-8",
        source_id=str(source_id) if source_id is not None else None,
    )


def read_jsonl(stream: BinaryIO, name: str, options: JsonlOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    reader = io.BufferedReader(_decompressed(stream, name), buffer_size=CHUNK)  # type: ignore[arg-type]
    line_number = 0
    while True:
        try:
            line = reader.readline(options.max_line_bytes + 1)
        except (EOFError, OSError, zlib.error) as error:
            reason = "truncated_gzip" if isinstance(error, EOFError) else "corrupt_compression"
            yield Quarantined(f"after line {line_number}", reason, f"{type(error).__name__}: {error}")
            return
        except Exception as error:  # zstd errors
            yield Quarantined(f"after line {line_number}", "corrupt_compression", f"{type(error).__name__}: {error}")
            return
        if not line:
            return
        line_number += 1
        if len(line) > options.max_line_bytes and not line.endswith(b"\n"):
            # Skip the rest of an over-long line without holding it in memory.
            head = line[:MAX_QUARANTINED_PAYLOAD]
            while line and not line.endswith(b"\n"):
                try:
                    line = reader.readline(CHUNK)
                except Exception:
                    break
            yield Quarantined(f"line {line_number}", "line_too_long", f"longer than {options.max_line_bytes} bytes", head)
            continue
        stripped = line.strip()
        if not stripped:
            continue
        try:
            item = json.loads(stripped.decode("utf-8"))
        except UnicodeDecodeError as error:
            yield Quarantined(f"line {line_number}", "invalid_utf8", str(error), stripped[:MAX_QUARANTINED_PAYLOAD])
            continue
        except json.JSONDecodeError as error:
            yield Quarantined(f"line {line_number}", "malformed_json", str(error), stripped[:MAX_QUARANTINED_PAYLOAD])
            continue
        if not isinstance(item, dict):
            yield Quarantined(f"line {line_number}", "malformed_json", "a line must hold a JSON object", stripped[:MAX_QUARANTINED_PAYLOAD])
            continue
        result = _text_record(line_number - 1, item, options)
        if isinstance(result, Quarantined):
            result.location = f"line {line_number}"
        yield result


# -------------------------------------------------------------------------------------------- Parquet


def read_parquet(path_or_stream: str | BinaryIO, options: ParquetOptions, counters: dict[str, int]) -> Iterator[RawRecord | Quarantined]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path_or_stream)
    except Exception as error:
        yield Quarantined("file", "unreadable_parquet", f"{type(error).__name__}: {error}")
        return
    if options.text_field not in parquet.schema_arrow.names:
        yield Quarantined("file", "missing_text", f"no column {options.text_field!r}; columns: {parquet.schema_arrow.names}")
        return
    wanted = [c for c in (options.text_field, options.id_field, options.url_field, options.date_field) if c and c in parquet.schema_arrow.names]
    ordinal = 0
    for group in range(parquet.num_row_groups):
        try:
            table = parquet.read_row_group(group, columns=wanted)
        except Exception as error:
            yield Quarantined(f"row group {group}", "unreadable_parquet", f"{type(error).__name__}: {error}")
            ordinal += parquet.metadata.row_group(group).num_rows
            continue
        for item in table.to_pylist():
            yield _text_record(ordinal, item, options)
            ordinal += 1


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
