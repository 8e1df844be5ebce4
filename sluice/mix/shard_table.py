"""A mix's shard table: one row per tokenized shard it reads, in shard-id order, as Parquet read by row group.

    mixed_index/mix=<name>/shards.parquet   id, prefix, binary_prefix, name, source, partition, documents,
                                            tokens, part, first_row (`SCHEMA`); row i is shard id i (the
                                            `shard` of the index records, `sluice.mix.index`); row groups of
                                            `ROW_GROUP` rows, so shard i is in row group i // ROW_GROUP

The mix manifest names the table (`shard_table`: key, prefix, rows, row_group, tokens, sha256) instead of
listing the shards, so it stays a few kB however many shards the mix reads (one per CommonCrawl part: 10^8
over a history). A loader rank reads the footer and only the row groups of the shards its samples touch
(`ShardTable`, ranged reads on S3); whole-table readers (export, trace lookups) call `all()`. At 10^8
shards the table is about 1-3 GB (dictionary-encoded prefixes; under S3's 5 GB single PUT, and published
by multipart upload anyway) and its footer a few MB (one entry per row group and column).

Mixes built before the table (manifest version < 4) list `shards` in the manifest; `ShardTable` reads those too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sluice.io.storage import RangedFile, Store

SHARD_TABLE = "shards.parquet"
ROW_GROUP = 65536
CACHED_GROUPS = 16  # row groups a reader keeps decoded (least recently used dropped)
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("prefix", pa.string(), nullable=False),
        pa.field("binary_prefix", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("source", pa.string()),
        pa.field("partition", pa.string()),
        pa.field("documents", pa.int64(), nullable=False),
        pa.field("tokens", pa.int64(), nullable=False),
        pa.field("part", pa.int64()),
        pa.field("first_row", pa.int64()),
    ]
)
OPTIONAL = ("source", "partition", "part", "first_row")  # left out of a row's dict when null (as the old entries)


class ShardTableWriter:
    """The mix scan's shard entries, appended in id order and written a row group at a time, so the builder
    holds one row group of them, not the whole table. `row_group`: rows per group (default `ROW_GROUP`)."""

    def __init__(self, path: str, row_group: int | None = None) -> None:
        self.path = path
        self.row_group = int(row_group or ROW_GROUP)
        self.rows = 0
        self.tokens = 0
        self._pending: list[dict[str, Any]] = []
        self._writer: pq.ParquetWriter | None = None

    def __len__(self) -> int:
        return self.rows

    def append(self, shard: dict[str, Any]) -> None:
        if int(shard["id"]) != self.rows:
            raise ValueError(f"shard entries must come in id order: got id {shard['id']}, expected {self.rows}")
        self._pending.append(shard)
        self.rows += 1
        self.tokens += int(shard["tokens"])
        if len(self._pending) == self.row_group:
            self._flush()

    def _flush(self) -> None:
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, SCHEMA, compression="zstd", use_dictionary=["prefix", "binary_prefix", "source", "partition"])
        if self._pending:
            self._writer.write_table(pa.Table.from_pylist(self._pending, schema=SCHEMA), row_group_size=self.row_group)
        self._pending = []

    def close(self) -> int:
        """Finish the file; returns the total of the shards' tokens."""
        self._flush()
        self._writer.close()
        return self.tokens


def write_shard_table(path: str, shards: list[dict[str, Any]], row_group: int | None = None) -> int:
    """Write shard entries (ids 0..n-1, in order) to `path`; returns the total of their tokens."""
    writer = ShardTableWriter(path, row_group)
    for shard in shards:
        writer.append(shard)
    return writer.close()


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return [{key: value for key, value in row.items() if value is not None or key not in OPTIONAL} for row in table.to_pylist()]


class ShardTable:
    """The shard rows of one mix, read on demand: `table[i]` decodes only the row group holding shard i.

    Pickling sends the store, the table's name and size; each process opens the file itself.
    """

    def __init__(self, store: Store, manifest: dict[str, Any]) -> None:
        self.store = store
        entry = manifest.get("shard_table")
        self._listed: list[dict[str, Any]] | None = None if entry else list(manifest.get("shards", []))
        self.key = f"{entry['prefix']}/{entry['key']}" if entry else None
        self.bytes = int(entry["bytes"]) if entry else 0
        self.count = int(entry["rows"]) if entry else len(self._listed or [])
        self.row_group = int(entry["row_group"]) if entry else ROW_GROUP
        listed_tokens = [shard.get("tokens") for shard in self._listed or []]
        # The shards' total tokens (None: an old manifest entry without them).
        self.tokens = int(entry["tokens"]) if entry else (None if None in listed_tokens else sum(map(int, listed_tokens)))
        self._reset()

    def _reset(self) -> None:
        self._file: pq.ParquetFile | None = None
        self._groups: OrderedDict[int, list[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key not in ("_file", "_groups", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __len__(self) -> int:
        return self.count

    def _parquet(self) -> pq.ParquetFile:
        if self._file is None:
            local = self.store.local_path(self.key)
            self._file = pq.ParquetFile(local if local is not None else RangedFile(self.store, self.key, self.bytes))
            if self._file.metadata.num_rows != self.count:
                raise ValueError(f"{self.store.uri(self.key)}: {self._file.metadata.num_rows} rows, the mix manifest says {self.count}")
        return self._file

    def __getitem__(self, shard_id: int) -> dict[str, Any]:
        shard_id = int(shard_id)
        if not 0 <= shard_id < self.count:
            raise IndexError(f"shard id {shard_id} outside the mix's {self.count} shards")
        if self._listed is not None:
            return self._listed[shard_id]
        group, at = divmod(shard_id, self.row_group)
        with self._lock:
            rows = self._groups.get(group)
            if rows is None:
                rows = self._groups[group] = _rows(self._parquet().read_row_group(group))
                while len(self._groups) > CACHED_GROUPS:
                    self._groups.popitem(last=False)
            else:
                self._groups.move_to_end(group)
        return rows[at]

    def all(self) -> list[dict[str, Any]]:
        """Every row (tools that scan the whole mix: export, document lookups)."""
        if self._listed is not None:
            return self._listed
        return _rows(self._parquet().read())
