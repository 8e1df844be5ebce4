"""WebDataset export: POSIX tar shards `shard-NNNNNN.tar`, one sample = the members sharing a key.

    <key>.input_ids.npy   int32 [L]          (NumPy .npy; webdataset's default decoder gives an ndarray)
    <key>.labels.npy      int32 [L]
    <key>.cu_seqlens.npy  int32 [segments + 1]
    <key>.json            {"sample_id": int, "doc_ids": [str, ...]}

The key is the export row number, zero-padded to 12 digits (no dots: WebDataset splits a member name at its
first dot into key and field). Members carry fixed metadata (mtime 0, mode 0444, no owner), so the same
export gives the same bytes.
"""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import numpy as np

from sluice.export.samples import Block
from sluice.export.shard_writer import ShardWriter

BLOCK = tarfile.BLOCKSIZE  # 512


def ustar_member(name: str, data: bytes) -> bytes:
    """One regular-file member of a POSIX ustar archive: its 512-byte header, the data, zero padding to 512.

    The header is the one `tarfile` writes for mode 0444, uid/gid 0, mtime 0 and no owner names (tested to be
    byte-identical), built directly because tarfile's per-member Python costs ~85 us.
    """
    encoded = name.encode("utf-8")
    if len(encoded) > 100:
        raise ValueError(f"tar member name longer than 100 bytes: {name!r}")
    header = bytearray(BLOCK)
    header[0 : len(encoded)] = encoded
    header[100:148] = b"0000444\x000000000\x000000000\x00" + b"%011o\x00" % len(data) + b"00000000000\x00"
    header[148:156] = b" " * 8  # the checksum is computed with its own field as spaces
    header[156] = ord(tarfile.REGTYPE)
    header[257:265] = b"ustar\x0000"
    header[148:155] = b"%06o\x00" % sum(header)
    return bytes(header) + data + bytes(-len(data) % BLOCK)


def _npy_header(shape: tuple[int, ...]) -> bytes:
    """The .npy header of an int32 array of `shape` (what np.save writes before the data)."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.zeros(shape, "<i4"), version=(1, 0))
    return buffer.getvalue()[: -4 * int(np.prod(shape))]


class WebDatasetShards(ShardWriter):
    # an archive ends with two zero blocks, padded to a multiple of tar's 10,240-byte record (as tarfile does)
    shard_overhead = tarfile.RECORDSIZE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.file = None
        self.written = 0
        self._headers: dict[int, bytes] = {}

    def shard_name(self, number: int) -> str:
        return f"shard-{number:06d}.tar"

    def _npy(self, values: np.ndarray) -> bytes:
        header = self._headers.get(len(values))
        if header is None:
            header = self._headers[len(values)] = _npy_header((len(values),))
        return header + values.astype("<i4", copy=False).tobytes()

    def prepare(self, block: Block) -> tuple[np.ndarray, list[bytes]]:
        items = []
        doc_ids = block.doc_ids.to_pylist()
        cu, docs = block.cu_offsets.tolist(), block.doc_offsets.tolist()
        for i, (row, sample_id) in enumerate(zip(block.rows.tolist(), block.sample_ids.tolist(), strict=True)):
            key = f"{row:012d}"
            meta = {"sample_id": sample_id, "doc_ids": doc_ids[docs[i] : docs[i + 1]]}
            items.append(
                ustar_member(f"{key}.cu_seqlens.npy", self._npy(block.cu_values[cu[i] : cu[i + 1]]))
                + ustar_member(f"{key}.input_ids.npy", self._npy(block.input_ids[i]))
                + ustar_member(f"{key}.json", json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
                + ustar_member(f"{key}.labels.npy", self._npy(block.labels[i]))
            )
        return np.array([len(item) for item in items], np.int64), items

    def open(self, path: str) -> None:
        self.file = open(path, "wb")  # noqa: SIM115 - open until finish()
        self.written = 0

    def write(self, block: Block, items: list[bytes]) -> None:
        for item in items:
            self.file.write(item)
            self.written += len(item)

    def finish(self) -> None:
        end = self.written + 2 * BLOCK
        self.file.write(bytes(end + -end % tarfile.RECORDSIZE - self.written))
        self.file.close()
        self.file = None
