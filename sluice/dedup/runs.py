"""Reading the global index's run files (`sluice.dedup.index`): whole; by binary search of a run's key
file memory-mapped (a local store), the matching rows gathered from its `.rows` file memory-mapped (no
Parquet file opened) where the columns wanted are fixed-width, else from the row groups holding matches;
or by ranged reads, a constant number per file (S3): the footer, the key file's (or key column's) rows of
the row groups a probe key can hit, the row groups holding matches."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from sluice.dedup.schemas import parquet_file
from sluice.io.storage import Store

# The `.rows` side file's record of each table: every fixed-width column but the key (in the `.keys` file).
ROW_FIELDS = {
    "exact": np.dtype([("lo", "<u8"), ("part", "<u8"), ("doc", "<i8")]),
    "bands": np.dtype([("band", "u1"), ("part", "<u8"), ("doc", "<i8")]),
}


def read_run(
    store: Store, key: str, probe_keys: np.ndarray | None = None, keys_file: str | None = None, size: int | None = None, footer: int | None = None,
    rows_file: str | None = None, table: str | None = None, columns: list[str] | None = None,
) -> pl.DataFrame:
    """A run file's rows: all of them, or (with `probe_keys`, sorted uint64) exactly those whose key is a
    probe key; with `columns`, those columns only (in that order). On a local store the matches are found
    by binary search in the run's key file (`keys_file`, memory-mapped: a probe touches O(probe keys x log
    rows) pages, not the whole key column); when the run has a `.rows` file (`rows_file`) and `columns`
    (named, of `table`) are all fixed-width, the rows are gathered from it memory-mapped and the Parquet file
    is not opened; otherwise the other columns are read from the row groups holding matches only. Elsewhere
    (S3) by ranged reads: the footer, the key file's (or key column's) rows of the row groups whose key
    range holds a probe key, then the row groups holding matches, or the candidate row groups whole
    (`_read_run_ranged`). `size`, `footer`: the run file's size and its footer's (its last bytes:
    metadata, length, magic), if known (saves a HEAD, and reads the footer exactly)."""
    local_keys = store.local_path(keys_file) if probe_keys is not None and keys_file is not None else None
    if local_keys is not None and rows_file is not None and table is not None and columns is not None and set(columns) <= {"key", *ROW_FIELDS[table].names}:
        local_rows = store.local_path(rows_file)
        if local_rows is not None:
            return _gather_rows(local_keys, local_rows, probe_keys, ROW_FIELDS[table], columns)  # type: ignore[arg-type]
    path = store.local_path(key)
    if probe_keys is not None and path is None:
        return _read_run_ranged(store, key, probe_keys, keys_file, size, footer, columns)
    with parquet_file(store, key) if path is None else contextlib.nullcontext(pq.ParquetFile(path)) as parquet:
        if probe_keys is None:
            return pl.from_arrow(parquet.read(columns))  # type: ignore[return-value]
        sizes = np.array([parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)], dtype=np.int64)
        rows = _rows_by_key_file(local_keys, probe_keys) if local_keys is not None else _rows_by_key_column(parquet, probe_keys, sizes)
        return _take_rows(parquet, rows, sizes, columns)


def _gather_rows(keys_path: str, rows_path: str, probe_keys: np.ndarray, fields: np.dtype, columns: list[str]) -> pl.DataFrame:
    """The rows matching the probe keys (in row order; these columns: `key` and fields of the records),
    from the memory-mapped key and row files of a run."""
    keys = np.memmap(keys_path, dtype="<u8", mode="r")
    try:
        rows = _matches(keys, probe_keys)
        matched = {"key": np.asarray(keys[rows], dtype=np.uint64)}
    finally:
        del keys
    records = np.memmap(rows_path, dtype=fields, mode="r") if len(rows) else np.empty(0, fields)
    try:
        picked = records[rows]
    finally:
        del records
    for name in fields.names:
        matched[name] = picked[name]
    return pl.DataFrame({name: matched[name] for name in columns})  # dtypes as the records' (uint64, uint8, int64)


def _take_rows(parquet: pq.ParquetFile, rows: np.ndarray, sizes: np.ndarray, columns: list[str] | None = None) -> pl.DataFrame:
    """These rows (sorted row numbers of the file; of some columns), reading the row groups that hold them only."""
    if not len(rows):
        return pl.from_arrow(parquet.schema_arrow.empty_table().select(columns or parquet.schema_arrow.names))  # type: ignore[return-value]
    ends = np.cumsum(sizes)
    which = np.searchsorted(ends, rows, side="right")  # the row group of each matching row
    needed = np.unique(which)
    table = parquet.read_row_groups(needed.tolist(), columns=columns)
    starts = np.zeros(len(sizes), dtype=np.int64)  # first row of each needed group in `table`
    starts[needed] = np.concatenate([[0], np.cumsum(sizes[needed])[:-1]])
    positions = starts[which] + rows - (ends[which] - sizes[which])
    return pl.from_arrow(table.take(pa.array(positions)))  # type: ignore[return-value]


# Ranged reads (S3): byte ranges closer than HOLE are read as one; a probe reads at most MAX_RANGES ranges
# per file and step (the smallest gaps are closed first), so its requests per run are a constant; the
# footer is read first: its recorded size, else the file's last FOOTER_READ bytes (more if it is longer).
HOLE = 1 << 16
MAX_RANGES = 4
FOOTER_READ = 1 << 14


def coalesce(spans: Iterable[tuple[int, int]], hole: int = HOLE, most: int = MAX_RANGES) -> list[tuple[int, int]]:
    """Sorted, merged (start, end) byte ranges covering `spans`: neighbours less than `hole` apart are
    merged, then the closest neighbours until at most `most` are left."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start - merged[-1][1] <= hole:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    if len(merged) > most:
        gaps = np.array([merged[i + 1][0] - merged[i][1] for i in range(len(merged) - 1)])
        keep = set(np.argsort(gaps, kind="stable")[len(gaps) - (most - 1) :].tolist())  # the widest gaps stay
        out = [list(merged[0])]
        for i in range(1, len(merged)):
            if i - 1 in keep:
                out.append(list(merged[i]))
            else:
                out[-1][1] = merged[i][1]
        merged = out
    return [(start, end) for start, end in merged]


def read_ranges(store: Store, key: str, ranges: list[tuple[int, int]]) -> list[bytes]:
    """The bytes of these (start, end) ranges of `key`, the GETs in flight together (threads)."""
    if len(ranges) <= 1:
        return [store.read_range(key, start, end - start) for start, end in ranges]
    with ThreadPoolExecutor(len(ranges)) as pool:
        return list(pool.map(lambda span: store.read_range(key, span[0], span[1] - span[0]), ranges))


class RangedFile:
    """A read-only file over one object of a store, for pyarrow: reads are served from the byte ranges
    fetched beforehand (`fetch`: one ranged read per coalesced range); a read outside them is one more."""

    def __init__(self, store: Store, key: str, size: int) -> None:
        self.store, self.key, self._size = store, key, size
        self._pos = 0
        self._spans: list[tuple[int, bytes]] = []  # (start, bytes), non-overlapping
        self.closed = False

    def fetch(self, spans: Iterable[tuple[int, int]]) -> None:
        wanted = [(max(0, a), min(self._size, b)) for a, b in spans if min(self._size, b) > max(0, a) and not self._covered(a, b)]
        ranges = coalesce(wanted)
        for (start, _), data in zip(ranges, read_ranges(self.store, self.key, ranges), strict=True):
            self._spans.append((start, data))
        self._spans.sort(key=lambda span: span[0])

    def read_at(self, start: int, length: int) -> bytes:
        self.seek(start)
        return self.read(length)

    def _covered(self, start: int, end: int) -> bool:
        return any(s <= start and end <= s + len(data) for s, data in self._spans)

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        for start, data in self._spans:
            if start <= self._pos and end <= start + len(data):
                out = data[self._pos - start : end - start]
                break
        else:
            out = self.store.read_range(self.key, self._pos, end - self._pos)
        self._pos += len(out)
        return out

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = offset if whence == 0 else self._pos + offset if whence == 1 else self._size + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True
        self._spans = []


def _group_span(meta: pq.FileMetaData, group: int, columns: Iterable[int] | None = None) -> tuple[int, int]:
    """The bytes of a row group (or of some of its column chunks): (first, end)."""
    row_group = meta.row_group(group)
    spans = []
    for i in columns if columns is not None else range(row_group.num_columns):
        column = row_group.column(i)
        start = column.dictionary_page_offset if column.has_dictionary_page and column.dictionary_page_offset else column.data_page_offset
        spans.append((start, start + column.total_compressed_size))
    return min(a for a, _ in spans), max(b for _, b in spans)


def _candidate_groups(meta: pq.FileMetaData, probe_keys: np.ndarray) -> list[int]:
    """The row groups whose key range (statistics of column 0) holds a probe key."""
    groups = []
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(0).statistics
        low, high = (int(stats.min), int(stats.max)) if stats is not None and stats.has_min_max else (0, (1 << 64) - 1)
        at = int(np.searchsorted(probe_keys, np.uint64(low)))
        if at < len(probe_keys) and int(probe_keys[at]) <= high:
            groups.append(group)
    return groups


def footer_size(path: str) -> int:
    """The bytes of a Parquet file's footer: its metadata, the metadata's length and the magic."""
    with open(path, "rb") as stream:
        stream.seek(-8, os.SEEK_END)
        return int.from_bytes(stream.read(4), "little") + 8


def _read_run_ranged(
    store: Store, key: str, probe_keys: np.ndarray, keys_file: str | None, size: int | None, footer: int | None, columns: list[str] | None = None
) -> pl.DataFrame:
    """`read_run` by ranged reads: at most 1 (footer; 2 if its size is not recorded and it is long) + 2 x
    MAX_RANGES requests, whatever the run's size. Of the row groups, only the column chunks of the key and
    of `columns` (None: all) are read."""
    size = store.size(key) if size is None else size
    handle = RangedFile(store, key, size)
    handle.fetch([(size - (footer or FOOTER_READ), size)])
    length = footer or int.from_bytes(handle.read_at(size - 8, 4), "little") + 8
    handle.fetch([(size - length, size)])  # nothing more when the footer was in the first read
    meta = pq.read_metadata(pa.BufferReader(b"PAR1" + handle.read_at(size - length, length)))
    parquet = pq.ParquetFile(handle, metadata=meta)  # type: ignore[arg-type]
    names = meta.schema.to_arrow_schema().names
    wanted = sorted(names.index(name) for name in columns) if columns is not None else list(range(len(names)))
    read = sorted({0, *wanted})  # the key column (0) finds the matches where the key file is not read
    sizes = np.array([meta.row_group(g).num_rows for g in range(meta.num_row_groups)], dtype=np.int64)
    firsts = np.cumsum(sizes) - sizes
    groups = _candidate_groups(meta, probe_keys)
    rows, values = np.empty(0, np.int64), None
    # The key file holds the key column raw (8 bytes a row, groups contiguous): read it where the other
    # wanted columns weigh at least as much (exact: lo, doc_id); else (bands: a band byte and a small doc)
    # the candidate row groups' wanted columns are read whole, which costs no more than their keys and the
    # groups with matches.
    whole = sum(end - start for start, end in (_group_span(meta, g, read) for g in groups))
    if groups and keys_file is not None and 2 * 8 * int(sizes[groups].sum()) <= whole:
        spans = coalesce([(int(firsts[g]) * 8, int(firsts[g] + sizes[g]) * 8) for g in groups], hole=0)
        found, matched = [], []
        for (start, _), data in zip(spans, read_ranges(store, keys_file, spans), strict=True):
            keys = np.frombuffer(data, dtype="<u8")
            at = _matches(keys, probe_keys)
            found.append(at + start // 8)
            matched.append(keys[at])
        rows, values = np.concatenate(found), np.concatenate(matched).astype(np.uint64)
    elif groups:
        handle.fetch(_group_span(meta, g, read) for g in groups)
        rows = _rows_by_key_column(parquet, probe_keys, sizes)
    if not len(rows):
        return pl.from_arrow(meta.schema.to_arrow_schema().empty_table().select(columns or names))  # type: ignore[return-value]
    # The matching rows' other wanted columns (their key is known when it came from the key file), from
    # the row groups holding them only.
    other = [i for i in wanted if values is None or i != 0]
    frame = pl.DataFrame({"key": pl.Series(values, dtype=pl.UInt64)} if values is not None else {})
    if other:
        handle.fetch(_group_span(meta, int(g), other) for g in np.unique(np.searchsorted(np.cumsum(sizes), rows, side="right")))
        frame = pl.concat([frame, _take_rows(parquet, rows, sizes, [names[i] for i in other])], how="horizontal")
    return frame.select(columns or names)


def _matches(keys: np.ndarray, probe_keys: np.ndarray) -> np.ndarray:
    """Positions in sorted `keys` of every element equal to a probe key."""
    first, last = np.searchsorted(keys, probe_keys, "left"), np.searchsorted(keys, probe_keys, "right")
    counts = last - first
    return np.repeat(first, counts) + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


def _rows_by_key_file(path: str, probe_keys: np.ndarray) -> np.ndarray:
    keys = np.memmap(path, dtype="<u8", mode="r")
    try:
        return _matches(keys, probe_keys)
    finally:
        del keys


def _rows_by_key_column(parquet: pq.ParquetFile, probe_keys: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Matching row numbers, from the key column of the row groups whose key range holds a probe key."""
    groups = _candidate_groups(parquet.metadata, probe_keys)
    if not groups:
        return np.empty(0, np.int64)
    keys = parquet.read_row_groups(groups, columns=["key"]).column("key").to_numpy()
    local = _matches(keys, probe_keys)  # row numbers within the selected groups
    selected = np.asarray(sizes)[groups]
    group_of = np.searchsorted(np.cumsum(selected), local, side="right")
    first_row = (np.cumsum(sizes) - sizes)[groups]
    return first_row[group_of] + local - (np.cumsum(selected) - selected)[group_of]
