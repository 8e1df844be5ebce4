"""The largest decompressed page of a Parquet column chunk, read from its page headers alone.

Arrow decompresses a Parquet column page by page and allocates what each page header declares, so one
page holding a 2 GiB cell costs 2 GiB however small the file is. The headers say it before any data is
touched: each page starts with a Thrift (compact protocol) `PageHeader` whose field 2 is
`uncompressed_page_size` and field 3 `compressed_page_size` (the bytes to skip to the next header). This
module walks those headers between the chunk's first page offset and its `total_compressed_size`, so the
reader can refuse a row group whose pages would decompress past its limit. Only the two sizes are decoded;
every other field is skipped by its compact-protocol type.

The column chunks' offsets and sizes come from the file's own footer (`FileMetaData`, the same Thrift
encoding), decoded here too: pyarrow's `RowGroupMetaData.column(i)` aborts the process (an uncaught C++
exception) on some damaged footers, e.g. a level histogram of the wrong size, so an untrusted file's column
metadata is never read through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, BinaryIO

MAX_HEADER_BYTES = 1 << 20  # page statistics live in the header: a larger one is taken as damage

# Compact-protocol field types.
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


class _Damaged(Exception):
    pass


class FooterError(ValueError):
    """The footer of a Parquet file cannot be decoded."""


@dataclass(frozen=True)
class ChunkSpan:
    """Where one column chunk's pages lie: its top-level column name, first page offset and sizes."""

    column: str
    start: int
    compressed: int
    uncompressed: int


@dataclass(frozen=True)
class RowGroupSpan:
    num_rows: int
    chunks: tuple[ChunkSpan, ...]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def byte(self) -> int:
        if self.position >= len(self.data):
            raise _Damaged("header cut short")
        value = self.data[self.position]
        self.position += 1
        return value

    def varint(self) -> int:
        result = shift = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise _Damaged("varint too long")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > 64:
            raise _Damaged("nested too deeply")
        if kind in (_BOOL_TRUE, _BOOL_FALSE):
            return
        if kind == _BYTE:
            self.position += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.position += 8
        elif kind == _BINARY:
            length = self.varint()  # (read before `self.position` is: varint() moves it)
            self.position += length
        elif kind in (_LIST, _SET):
            header = self.byte()
            size = header >> 4 if header >> 4 != 15 else self.varint()
            for _ in range(size):
                if (header & 0x0F) in (_BOOL_TRUE, _BOOL_FALSE):
                    self.position += 1
                else:
                    self.skip(header & 0x0F, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4, depth + 1)
                    self.skip(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            self.struct(depth + 1)
        else:
            raise _Damaged(f"unknown field type {kind}")
        if self.position > len(self.data):
            raise _Damaged("header cut short")

    def value(self, kind: int, depth: int = 0) -> Any:
        """One value decoded: int, bytes, list, or a struct as {field id: value}."""
        if depth > 64:
            raise _Damaged("nested too deeply")
        if kind in (_BOOL_TRUE, _BOOL_FALSE):
            return kind == _BOOL_TRUE
        if kind in (_BYTE, _I16, _I32, _I64):
            return self.byte() if kind == _BYTE else self.zigzag()
        if kind == _BINARY:
            length = self.varint()
            if self.position + length > len(self.data):
                raise _Damaged("footer cut short")
            self.position += length
            return self.data[self.position - length : self.position]
        if kind == _LIST:
            header = self.byte()
            size = header >> 4 if header >> 4 != 15 else self.varint()
            item = header & 0x0F
            if size > len(self.data) - self.position:
                raise _Damaged("a list longer than the footer")
            return [self.byte() == 1 if item in (_BOOL_TRUE, _BOOL_FALSE) else self.value(item, depth + 1) for _ in range(size)]
        if kind == _STRUCT:
            return self.fields(depth + 1)
        start = self.position
        self.skip(kind, depth)  # doubles, sets and maps: not needed from a footer
        return self.data[start : self.position]

    def fields(self, depth: int = 0) -> dict[int, Any]:
        """A struct decoded as {field id: value}."""
        decoded: dict[int, Any] = {}
        field = 0
        while True:
            header = self.byte()
            if header == 0:
                return decoded
            delta, kind = header >> 4, header & 0x0F
            field = field + delta if delta else self.zigzag()
            decoded[field] = self.value(kind, depth)

    def struct(self, depth: int = 0, wanted: dict[int, int] | None = None) -> None:
        """Skip a struct; the i32 fields named in `wanted` (id -> 0) are stored there."""
        field = 0
        while True:
            header = self.byte()
            if header == 0:
                return
            delta, kind = header >> 4, header & 0x0F
            field = field + delta if delta else self.zigzag()
            if wanted is not None and field in wanted and kind == _I32:
                wanted[field] = self.zigzag()
            else:
                self.skip(kind, depth)


def _chunk_span(chunk: dict[int, Any]) -> ChunkSpan:
    """ColumnChunk field 3 is its ColumnMetaData: path_in_schema (3), total_uncompressed_size (6),
    total_compressed_size (7), data_page_offset (9), dictionary_page_offset (11)."""
    meta = chunk.get(3)
    if not isinstance(meta, dict) or not isinstance(meta.get(3), list) or not meta[3]:
        raise _Damaged("a column chunk without its metadata")
    sizes = [meta.get(field) for field in (6, 7, 9)]
    if not all(isinstance(size, int) and size >= 0 for size in sizes):
        raise _Damaged("a column chunk without its sizes")
    start = sizes[2]
    dictionary = meta.get(11)
    if isinstance(dictionary, int) and 0 < dictionary < start:
        start = dictionary
    column = bytes(meta[3][0]).decode("utf-8", "replace") if isinstance(meta[3][0], bytes) else ""
    return ChunkSpan(column, start, sizes[1], sizes[0])


def row_groups(stream: BinaryIO) -> list[RowGroupSpan]:
    """Every row group's row count and column chunk spans, decoded from the file's footer
    (FileMetaData field 4: row_groups; RowGroup field 1: columns, field 3: num_rows). Raises FooterError."""
    try:
        stream.seek(-8, 2)
        tail = stream.read(8)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != b"PAR1" or length <= 0:
            raise _Damaged("no Parquet footer")
        stream.seek(-8 - length, 2)
        metadata = _Reader(stream.read(length)).fields()
        groups = metadata.get(4, [])
        if not isinstance(groups, list) or not all(isinstance(group, dict) for group in groups):
            raise _Damaged("row groups unreadable")
        spans = []
        for group in groups:
            chunks, rows = group.get(1), group.get(3)
            if not isinstance(chunks, list) or not isinstance(rows, int) or rows < 0:
                raise _Damaged("a row group without its columns or row count")
            spans.append(RowGroupSpan(rows, tuple(_chunk_span(chunk) for chunk in chunks if isinstance(chunk, dict))))
        return spans
    except (_Damaged, OSError, ValueError) as error:
        raise FooterError(str(error)) from error


def page_sizes(stream: BinaryIO, start: int, length: int) -> list[tuple[int, int]]:
    """(uncompressed, compressed) size of every page of the column chunk at `start` spanning `length` bytes."""
    sizes = []
    position, end = start, start + length
    while position < end:
        stream.seek(position)
        head = stream.read(min(MAX_HEADER_BYTES, end - position))
        reader = _Reader(head)
        fields = {2: -1, 3: -1}
        reader.struct(wanted=fields)
        uncompressed, compressed = fields[2], fields[3]
        if uncompressed < 0 or compressed < 0:
            raise _Damaged("a page header without its sizes")
        sizes.append((uncompressed, compressed))
        position += reader.position + compressed
    return sizes


def largest_page(stream: BinaryIO, chunk: ChunkSpan) -> int | None:
    """Bytes of the largest decompressed page of a column chunk, or None when its headers cannot be read
    (Arrow then reports the damage itself)."""
    try:
        sizes = page_sizes(stream, chunk.start, chunk.compressed)
    except (_Damaged, OSError, ValueError):
        return None
    return max((uncompressed for uncompressed, _ in sizes), default=0)
