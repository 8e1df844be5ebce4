"""Raw ingest: crawl files of one source snapshot -> one Parquet schema, one part file per input file.

Each input file is one task (`ingest_file`), so files run in parallel on the compute backend and every
output is named after its input's position in the sorted listing: the result does not depend on the
worker count. Part files hold no `source`/`snapshot` columns: those are the Hive partition folders
(`raw_documents/source=<s>/snapshot=<n>/`), so the asset's folder reads as one dataset. Damaged records and
unreadable files go to the side dataset `raw_quarantine` with a reason: each task streams its own
`quarantine-NNNNN.parquet` into `raw_quarantine/source=<s>/snapshot=<n>/` (`QUARANTINE_DATASET`), so no list
of damaged records is ever held in memory or sent back to the parent process.

Backpressure: a reader thread parses records into a bounded queue (`PREFETCH_MAX_ITEMS` records and
`PREFETCH_MAX_BYTES` bytes at most) that the writer drains. Reading overlaps with writing, and when
processing is slower than reading the reader blocks instead of filling memory.
"""

from __future__ import annotations

import queue
import shutil
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import xxhash

from sluice.config import FORMAT_OPTIONS, S3Settings
from sluice.ingest.readers import (
    COMPRESSED_SUFFIXES,
    MAX_QUARANTINED_PAYLOAD,
    Quarantined,
    RawRecord,
    read_records,
    supported_format,
)
from sluice.io.layout import ParquetStreamWriter, PartitionRef
from sluice.io.storage import StorageError, StoreSpec, local_temp_dir

RAW_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("url", pa.string()),
        pa.field("fetch_date", pa.timestamp("ms", tz="UTC")),
        pa.field("content_type", pa.string(), nullable=False),  # text/html or text/plain
        pa.field("content", pa.binary(), nullable=False),  # the HTML or text exactly as fetched
        pa.field("charset", pa.string()),  # declared by the HTTP headers / the input, if any
        pa.field("content_hash", pa.string(), nullable=False),  # xxh3-128 of `content`, hex
        pa.field("file", pa.string(), nullable=False),  # input file, relative to the source location
        pa.field("ordinal", pa.int64(), nullable=False),  # record / line / row number in that file
        pa.field("source_id", pa.string()),  # the input's own id (WARC-Record-ID, JSONL id field)
    ]
)

QUARANTINE_DATASET = "raw_quarantine"
QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("file", pa.string(), nullable=False),
        pa.field("location", pa.string(), nullable=False),  # record / line / "file"
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("payload", pa.binary(), nullable=False),  # the damaged bytes, up to 1 MiB
    ]
)


UNVERIFIABLE_STREAM_REASONS = ("corrupt_compression", "truncated_gzip", "truncated_zstd", "truncated_bz2", "expansion_limit")
PREFETCH_MAX_ITEMS = 64
PREFETCH_MAX_BYTES = 16 << 20  # a single record larger than this still passes, alone


def quarantine_part_key(part: int) -> str:
    return f"quarantine-{part:05d}.parquet"


class BoundedPrefetch:
    """Iterate `items` in a background thread through a queue bounded in items and bytes (`size` gives
    an item's size). Exceptions of the producer are raised in the consumer; `close()` stops it."""

    _DONE = object()

    def __init__(self, items: Iterator[Any], size: Any, max_items: int, max_bytes: int) -> None:
        self._items = items
        self._size = size
        self._max_bytes = max_bytes
        self._queue: queue.Queue[tuple[Any, int]] = queue.Queue(maxsize=max_items)
        self._bytes = 0
        self._room = threading.Condition()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._produce, name="sluice-prefetch", daemon=True)
        self._thread.start()

    def _put(self, entry: tuple[Any, int]) -> bool:
        with self._room:  # wait for byte budget (an item alone in the queue always fits)
            while self._bytes > 0 and self._bytes + entry[1] > self._max_bytes and not self._stop.is_set():
                self._room.wait(0.1)
            self._bytes += entry[1]
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            for item in self._items:
                if not self._put((item, self._size(item))):
                    return
        except BaseException as error:  # handed to the consumer
            self._error = error
        finally:
            self._put((self._DONE, 0))

    def __iter__(self) -> Iterator[Any]:
        while True:
            item, size = self._queue.get()
            with self._room:
                self._bytes -= size
                self._room.notify_all()
            if item is self._DONE:
                if self._error is not None:
                    raise self._error
                return
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _item_size(item: RawRecord | Quarantined) -> int:
    return len(item.content) if isinstance(item, RawRecord) else len(item.payload)


def content_hash(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


@dataclass(frozen=True)
class IngestTask:
    source_url: str  # the snapshot folder / prefix
    file_key: str  # relative to source_url
    file_label: str  # relative to the source location (snapshot/file), used in ids and messages
    fmt: str
    options: dict[str, Any]
    output_url: str  # the partition folder / prefix in storage
    part: int
    source: str
    snapshot: str
    s3: S3Settings = field(default_factory=S3Settings)
    quarantine_url: str | None = None  # the partition's raw_quarantine folder (default: output_url)


def snapshot_files(source_url: str, fmt: str, s3: S3Settings) -> tuple[list[str], list[str]]:
    """(the input files of one snapshot folder, the files there whose name matches no known suffix of the
    source's format), both sorted; a missing folder is an empty snapshot. The second list is not read but
    reported by name (raw_documents' `unrecognized_files`), never dropped in silence."""
    store = StoreSpec(source_url, s3).open()
    keys = store.list_files()
    return [key for key in keys if supported_format(key, fmt)], [key for key in keys if not supported_format(key, fmt)]


def list_snapshot_files(source_url: str, fmt: str, s3: S3Settings) -> list[str]:
    """The input files of one snapshot folder, sorted; a missing folder is an empty snapshot."""
    return snapshot_files(source_url, fmt, s3)[0]


def ingest_file(task: IngestTask) -> dict[str, Any]:
    """Read one input file into a raw Parquet part and its quarantine part (records and whole-file damage
    that could not be read, with their bytes and reason); both published atomically, or neither."""
    ingest = _FileIngest(task)
    try:
        ingest.run()
    except BaseException:
        ingest.writer.abort()
        ingest.quarantine_writer.abort()
        raise
    finally:
        if ingest.scratch:
            shutil.rmtree(ingest.scratch, ignore_errors=True)
    return ingest.result()


class _FileIngest:
    """The state of one file's ingest: both writers, the counts, and whether the file itself is damaged."""

    def __init__(self, task: IngestTask) -> None:
        self.task = task
        self.source_store = StoreSpec(task.source_url, task.s3).open()
        self.output_store = StoreSpec(task.output_url, task.s3).open()
        self.options = FORMAT_OPTIONS[task.fmt].model_validate(task.options)
        self.counters: dict[str, int] = {}
        self.quarantine_reasons: Counter[str] = Counter()
        self.file_level_damage = False
        self.writer = ParquetStreamWriter(RAW_SCHEMA)
        self.quarantine_writer = ParquetStreamWriter(QUARANTINE_SCHEMA, batch_rows=64)
        self.records = self.content_bytes = 0
        self.scratch: str | None = None
        # A gzip/zstd stream's checksum is checked only at the end of its member/frame: records decoded before
        # a failed check may hold altered bytes that still parse, and a corrupted deflate stream can also
        # look truncated (it "ends" early). Records of a stream that could not be verified to its end are
        # moved to quarantine (reason unverified_compressed_data, with their bytes), never kept.
        self.compressed_text = task.fmt == "jsonl" and task.file_key.lower().endswith(COMPRESSED_SUFFIXES)
        self.checksum_failed = False
        self.entry: dict[str, Any] | None = None
        self.quarantine_entry: dict[str, Any] | None = None

    def quarantine(self, item: Quarantined) -> None:
        self.quarantine_writer.append(_quarantine_row(self.task, item), size_hint=len(item.payload))
        self.quarantine_reasons[item.reason] += 1
        self.file_level_damage |= item.location == "file" or item.reason == "not_gzip"

    def run(self) -> None:
        source, empty, stream = self._open()
        try:
            if source is not None and empty:
                self.quarantine(Quarantined("file", "empty_file", "the file has no bytes"))
            elif source is not None:
                self._read(source)
        finally:
            if stream is not None:
                stream.close()
        if self.checksum_failed and self.records:
            self.writer = _quarantine_unverified(self.writer, self.quarantine)
            self.records = self.content_bytes = 0
        self.entry = self.writer.publish(self.output_store, f"part-{self.task.part:05d}.parquet")
        quarantine_store = StoreSpec(self.task.quarantine_url, self.task.s3).open() if self.task.quarantine_url else self.output_store
        self.quarantine_entry = self.quarantine_writer.publish(quarantine_store, quarantine_part_key(self.task.part))

    def _open(self) -> tuple[Any, bool, Any]:
        """(source to read or None when unreadable, whether it is empty, the stream to close or None).
        Parquet needs random access: it is read from a local path (downloaded first from S3)."""
        task, store = self.task, self.source_store
        stream = None
        try:
            if task.fmt == "parquet":
                local = store.local_path(task.file_key)
                if local is None:
                    self.scratch = local_temp_dir()
                    local = store.fetch(task.file_key, self.scratch)
                return local, store.size(task.file_key) == 0, None
            stream = store.open_read(task.file_key)
            first = stream.read(1)
            return _Prepend(first, stream), not first, stream
        except (StorageError, OSError) as error:
            self.quarantine(Quarantined("file", "unreadable_file", str(error)))
            return None, False, stream  # (closed by the caller, as a readable one is)

    def _read(self, source: Any) -> None:
        task = self.task
        prefetch = BoundedPrefetch(
            read_records(source, task.file_key, task.fmt, self.options, self.counters), _item_size, PREFETCH_MAX_ITEMS, PREFETCH_MAX_BYTES
        )
        try:
            for item in prefetch:
                if isinstance(item, Quarantined):
                    self.quarantine(item)
                    self.checksum_failed |= self.compressed_text and item.reason in UNVERIFIABLE_STREAM_REASONS
                    continue
                self.writer.append(_raw_row(task, item), size_hint=len(item.content))
                self.records += 1
                self.content_bytes += len(item.content)
        finally:
            prefetch.close()

    def result(self) -> dict[str, Any]:
        return {
            "file": self.task.file_label,
            "part": self.entry,
            "quarantine_part": self.quarantine_entry,
            "records": self.records,
            "content_bytes": self.content_bytes,
            "quarantine_reasons": dict(self.quarantine_reasons),
            "skipped": {key: count for key, count in self.counters.items() if not key.startswith("recovered_")},
            "recovered": {key.removeprefix("recovered_"): count for key, count in self.counters.items() if key.startswith("recovered_")},
            "file_quarantined": self.records == 0 and self.file_level_damage,
        }


def _quarantine_unverified(writer: ParquetStreamWriter, quarantine: Any) -> ParquetStreamWriter:
    """Move every record written so far to quarantine (batch by batch); returns a fresh, empty writer."""
    import pyarrow.parquet as pq

    writer.flush()
    writer.writer.close()
    for batch in pq.ParquetFile(writer.path).iter_batches(batch_size=64, columns=["ordinal", "content"]):
        for row in batch.to_pylist():
            quarantine(
                Quarantined(
                    f"line {row['ordinal'] + 1}",
                    "unverified_compressed_data",
                    "decoded before the stream's checksum failed: the bytes may have been altered",
                    row["content"][:MAX_QUARANTINED_PAYLOAD],
                )
            )
    writer.abort()
    return ParquetStreamWriter(RAW_SCHEMA)


class _Prepend:
    """A read-only stream with some bytes put back in front (used to peek for empty files)."""

    def __init__(self, head: bytes, stream: Any) -> None:
        self.head = head
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        if self.head:
            if size is None or size < 0:
                data, self.head = self.head + self.stream.read(), b""
                return data
            data, self.head = self.head[:size], self.head[size:]
            if len(data) < size:
                data += self.stream.read(size - len(data))
            return data
        return self.stream.read(size)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def flush(self) -> None:
        pass


def _raw_row(task: IngestTask, record: RawRecord) -> dict[str, Any]:
    return {
        "doc_id": f"{task.source}/{task.file_label}#{record.ordinal}",
        "url": record.url,
        "fetch_date": record.fetch_date,
        "content_type": record.content_type,
        "content": record.content,
        "charset": record.charset,
        "content_hash": content_hash(record.content),
        "file": task.file_label,
        "ordinal": record.ordinal,
        "source_id": record.source_id,
    }


def _quarantine_row(task: IngestTask, item: Quarantined) -> dict[str, Any]:
    return {
        "file": task.file_label,
        "location": item.location,
        "reason": item.reason,
        "detail": item.detail,
        "payload": item.payload,
    }


def plan_ingest(
    source_location: str, ref: PartitionRef, fmt: str, options: dict[str, Any], output_url: str, s3: S3Settings,
    quarantine_url: str | None = None, files: list[str] | None = None,
) -> list[IngestTask]:
    """One task per input file of the snapshot (`files`, or the folder's listing when None)."""
    snapshot_url = source_location.rstrip("/") + "/" + ref.snapshot
    if files is None:
        files = list_snapshot_files(snapshot_url, fmt, s3)
    return [
        IngestTask(
            source_url=snapshot_url,
            file_key=key,
            file_label=f"{ref.snapshot}/{key}",
            fmt=fmt,
            options=options,
            output_url=output_url,
            part=index,
            source=ref.source,
            snapshot=ref.snapshot,
            s3=s3,
            quarantine_url=quarantine_url,
        )
        for index, key in enumerate(files)
    ]
