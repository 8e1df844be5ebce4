"""Bounded decompression: every decoder the readers use stops at a configured output size.

A few hundred compressed bytes can expand to gigabytes (deflate ~1,000-fold, zstd ~30,000-fold, bzip2 and
brotli far more). Readers therefore never ask a decoder for "everything":

- `decode_http_body(body, headers, limit)`: an HTTP response body as the crawler stored it, de-chunked
  (`Transfer-Encoding: chunked`) and decoded (`Content-Encoding: gzip | x-gzip | deflate | br | zstd`), at most
  `limit` bytes of output, else `TooLarge`. A body that declares an encoding but does not start as one is
  taken as it is (servers mislabel; warcio does the same); one that breaks off mid-stream raises
  `CorruptEncoding` instead of being cut silently.
- `ZstdReader`: zstd frames as a raw stream, fed a little input at a time so each step's output is bounded,
  and raising at a truncated frame (zstandard's own reader ends quietly there).
- `ExpansionGuard`: counts the compressed bytes read under a decompressing reader, so a caller can stop a
  stream that expands more than `ratio` times (a bzip2 bomb of one megabyte is a terabyte of zeros).
"""

from __future__ import annotations

import io
import zlib
from typing import Any

CHUNK = 1 << 16  # compressed bytes per decoder call: deflate turns 64 KiB into at most ~66 MB


class TooLarge(Exception):
    """The decoded output would exceed the limit."""


class CorruptEncoding(Exception):
    """The body declares a content encoding and breaks off or fails inside it."""


def dechunk(body: bytes) -> bytes:
    """The payload of a `Transfer-Encoding: chunked` body (the body itself when it is not validly chunked,
    as browsers and warcio read it). De-chunking never makes data larger."""
    out = bytearray()
    position = 0
    while True:
        end = body.find(b"\r\n", position)
        if end < 0:
            return bytes(out) if out else body
        size_text = body[position:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return bytes(out) if out else body
        if size == 0:
            return bytes(out)
        start = end + 2
        if start + size > len(body):  # a last chunk cut short: keep what is there
            out += body[start:]
            return bytes(out)
        out += body[start : start + size]
        position = start + size + 2


def _inflate(body: bytes, wbits: int, limit: int) -> bytes:
    decompressor = zlib.decompressobj(wbits)
    pieces, produced = [], 0
    data = body
    while data:
        out = decompressor.decompress(data, limit - produced + 1)
        produced += len(out)
        if produced > limit:
            raise TooLarge
        pieces.append(out)
        data = decompressor.unconsumed_tail
        if decompressor.eof:
            break
    if not decompressor.eof:
        raise CorruptEncoding("the compressed body ends early")
    return b"".join(pieces)


def _brotli(body: bytes, limit: int) -> bytes:
    import brotli

    decompressor = brotli.Decompressor()
    pieces, produced = [], 0
    for start in range(0, max(len(body), 1), CHUNK):
        data = body[start : start + CHUNK]
        out = decompressor.process(data, output_buffer_limit=limit - produced + 1)
        while True:
            produced += len(out)
            if produced > limit:
                raise TooLarge
            pieces.append(out)
            if decompressor.can_accept_more_data():
                break
            out = decompressor.process(b"", output_buffer_limit=limit - produced + 1)
    if not decompressor.is_finished():
        raise CorruptEncoding("the brotli body ends early")
    return b"".join(pieces)


def _zstd(body: bytes, limit: int) -> bytes:
    reader = ZstdReader(io.BytesIO(body))
    out = reader.read(limit + 1)
    if len(out) > limit:
        raise TooLarge
    return out


def _supported(encoding: str) -> bool:
    if encoding in ("gzip", "x-gzip", "deflate", "zstd"):
        return True
    if encoding == "br":
        try:
            import brotli
        except ImportError:
            return False
        return "output_buffer_limit" in (brotli.Decompressor.process.__doc__ or "")
    return False


def decode_http_body(body: bytes, transfer_encoding: str | None, content_encoding: str | None, limit: int) -> bytes:
    """The response payload: de-chunked and decoded, at most `limit` bytes (see the module docstring)."""
    if transfer_encoding and transfer_encoding.strip().lower() == "chunked":
        body = dechunk(body)
    encoding = (content_encoding or "").strip().lower()
    if not encoding or not _supported(encoding) or not body:
        if len(body) > limit:
            raise TooLarge
        return body
    try:
        if encoding in ("gzip", "x-gzip"):
            return _inflate(body, 16 + zlib.MAX_WBITS, limit)
        if encoding == "deflate":
            try:
                return _inflate(body, zlib.MAX_WBITS, limit)  # zlib-wrapped, as the RFC says
            except (zlib.error, CorruptEncoding):
                return _inflate(body, -zlib.MAX_WBITS, limit)  # raw deflate, as many servers send
        if encoding == "br":
            return _brotli(body, limit)
        return _zstd(body, limit)
    except TooLarge:
        raise
    except Exception as error:  # zlib.error, brotli.error, zstd errors, EOFError
        if _starts_as(encoding, body):
            raise CorruptEncoding(f"{encoding}: {type(error).__name__}: {error}") from None
        if len(body) > limit:  # mislabelled: not encoded at all
            raise TooLarge from None
        return body


def _starts_as(encoding: str, body: bytes) -> bool:
    """Whether the body begins like data of that encoding (else the label is wrong, not the data)."""
    if encoding in ("gzip", "x-gzip"):
        return body.startswith(b"\x1f\x8b")
    if encoding == "zstd":
        return body.startswith(b"\x28\xb5\x2f\xfd")
    if encoding == "deflate":
        try:
            zlib.decompressobj(-zlib.MAX_WBITS).decompress(body[:64], 1)
            return True
        except zlib.error:
            return False
    return True  # brotli has no magic number: a failure is taken as damage


class ZstdReader(io.RawIOBase):
    """One or more zstd frames, decompressed as a raw stream. zstandard's own stream_reader ends quietly
    when the input stops inside a frame; this one raises EOFError there, so truncation is reported."""

    FEED = 64  # compressed bytes per step: zstd expands a byte at most ~32,000-fold, so a step yields <= 2 MiB

    def __init__(self, stream: Any) -> None:
        import zstandard

        self._decompressor = zstandard.ZstdDecompressor()
        self._stream = stream
        self._frame: Any = None
        self._input = b""
        self._input_position = 0
        self._output = b""
        self._output_position = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._output_position >= len(self._output):
            if self._input_position >= len(self._input):
                self._input, self._input_position = self._stream.read(1 << 20), 0
                if not self._input:
                    if self._frame is not None:
                        raise EOFError("the file ends inside a zstd frame")
                    return 0
            if self._frame is None:
                self._frame = self._decompressor.decompressobj()
            piece = self._input[self._input_position : self._input_position + self.FEED]
            self._input_position += len(piece)
            self._output, self._output_position = self._frame.decompress(piece), 0
            if self._frame.eof:
                self._input = self._frame.unused_data + self._input[self._input_position :]
                self._input_position = 0
                self._frame = None
        size = min(len(buffer), len(self._output) - self._output_position)
        buffer[:size] = self._output[self._output_position : self._output_position + size]
        self._output_position += size
        return size


class ExpansionGuard(io.RawIOBase):
    """A raw stream that counts the bytes read through it (the compressed side of a decompressing reader)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self.bytes_read += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def exceeded(self, decompressed: int, ratio: float, floor: int) -> bool:
        """Whether `decompressed` bytes out of the compressed bytes read so far is past the allowed expansion."""
        return decompressed > max(floor, ratio * self.bytes_read)
