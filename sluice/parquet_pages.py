"""The largest decompressed page of a Parquet column chunk, read from its page headers alone.

Arrow decompresses a Parquet column page by page and allocates what each page header declares, so one
page holding a 2 GiB cell costs 2 GiB however small the file is. The headers say it before any data is
touched: each page starts with a Thrift (compact protocol) `PageHeader` whose field 2 is
`uncompressed_page_size` and field 3 `compressed_page_size` (the bytes to skip to the next header). This
module walks those headers between the chunk's first page offset and its `total_compressed_size`, so the
reader can refuse a row group whose pages would decompress past its limit. Only the two sizes are decoded;
every other field is skipped by its compact-protocol type.
"""

from __future__ import annotations

from typing import Any, BinaryIO

MAX_HEADER_BYTES = 1 << 20  # page statistics live in the header: a larger one is taken as damage

# Compact-protocol field types.
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


class _Damaged(Exception):
    pass


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


def largest_page(stream: BinaryIO, column_chunk: Any) -> int | None:
    """Bytes of the largest decompressed page of a column chunk (pyarrow ColumnChunkMetaData), or None
    when its headers cannot be read (Arrow then reports the damage itself)."""
    start = column_chunk.data_page_offset
    if column_chunk.has_dictionary_page and column_chunk.dictionary_page_offset:
        start = min(start, column_chunk.dictionary_page_offset)
    try:
        sizes = page_sizes(stream, start, column_chunk.total_compressed_size)
    except (_Damaged, OSError, ValueError):
        return None
    return max((uncompressed for uncompressed, _ in sizes), default=0)
