"""Raw ingest: crawl files of one source snapshot -> one Parquet schema, one part file per input file.

Each input file is one task (`ingest_file`), so files run in parallel on the compute backend and every
output is named after its input's position in the sorted listing: the result does not depend on the
worker count. Damaged records and unreadable files go to a quarantine Parquet file with a reason: each
task streams its own (`quarantine-NNNNN.parquet`, beside its part file) and the stage merges them into
the partition's `quarantine.parquet` (`merge_quarantine`), so no list of damaged records is ever held
in memory or sent back to the parent process.

Backpressure: a reader thread parses records into a bounded queue (`PREFETCH_MAX_ITEMS` records and
`PREFETCH_MAX_BYTES` bytes at most) that the writer drains. Reading overlaps with writing, and when
processing is slower than reading the reader blocks instead of filling memory.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import xxhash

from sluice.config import FORMAT_OPTIONS, S3Settings
from sluice.layout import ParquetStreamWriter, PartitionRef
from sluice.readers import (
    COMPRESSED_SUFFIXES,
    MAX_QUARANTINED_PAYLOAD,
    Quarantined,
    RawRecord,
    read_records,
    supported_format,
)
from sluice.storage import StorageError, StoreSpec, local_temp_dir

RAW_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("snapshot", pa.string(), nullable=False),
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

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("snapshot", pa.string(), nullable=False),
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


def list_snapshot_files(source_url: str, fmt: str, s3: S3Settings) -> list[str]:
    """The input files of one snapshot folder, sorted; a missing folder is an empty snapshot."""
    store = StoreSpec(source_url, s3).open()
    return [key for key in store.list_files() if supported_format(key, fmt)]


def ingest_file(task: IngestTask) -> dict[str, Any]:
    source_store = StoreSpec(task.source_url, task.s3).open()
    output_store = StoreSpec(task.output_url, task.s3).open()
    options = FORMAT_OPTIONS[task.fmt].model_validate(task.options)
    counters: dict[str, int] = {}
    quarantine_reasons: Counter[str] = Counter()
    file_level_damage = False
    writer = ParquetStreamWriter(RAW_SCHEMA)
    quarantine_writer = ParquetStreamWriter(QUARANTINE_SCHEMA, batch_rows=64)
    records = 0
    content_bytes = 0
    scratch = None

    # A gzip/zstd stream's checksum is checked only at the end of its member/frame: records decoded before
    # a failed check may hold altered bytes that still parse, and a corrupted deflate stream can also
    # look truncated (it "ends" early). Records of a stream that could not be verified to its end are
    # moved to quarantine (reason unverified_compressed_data, with their bytes), never kept.
    compressed_text = task.fmt == "jsonl" and task.file_key.lower().endswith(COMPRESSED_SUFFIXES)
    checksum_failed = False

    def quarantine(item: Quarantined) -> None:
        nonlocal file_level_damage
        quarantine_writer.append(_quarantine_row(task, item), size_hint=len(item.payload))
        quarantine_reasons[item.reason] += 1
        file_level_damage |= item.location == "file" or item.reason == "not_gzip"

    try:
        stream: Any = None
        try:
            if task.fmt == "parquet":
                # Parquet needs random access: read it from a local path (downloaded first from S3).
                local = source_store.local_path(task.file_key)
                if local is None:
                    scratch = local_temp_dir()
                    local = source_store.fetch(task.file_key, scratch)
                source: Any = local
                empty = source_store.size(task.file_key) == 0
            else:
                stream = source_store.open_read(task.file_key)
                first = stream.read(1)
                empty = not first
                source = _Prepend(first, stream)
        except (StorageError, OSError) as error:
            source = None
            quarantine(Quarantined("file", "unreadable_file", str(error)))
        try:
            if source is not None and empty:
                quarantine(Quarantined("file", "empty_file", "the file has no bytes"))
            elif source is not None:
                prefetch = BoundedPrefetch(
                    read_records(source, task.file_key, task.fmt, options, counters),
                    _item_size,
                    PREFETCH_MAX_ITEMS,
                    PREFETCH_MAX_BYTES,
                )
                try:
                    for item in prefetch:
                        if isinstance(item, Quarantined):
                            quarantine(item)
                            checksum_failed |= compressed_text and item.reason in UNVERIFIABLE_STREAM_REASONS
                            continue
                        writer.append(_raw_row(task, item), size_hint=len(item.content))
                        records += 1
                        content_bytes += len(item.content)
                finally:
                    prefetch.close()
        finally:
            if stream is not None:
                stream.close()
        if checksum_failed and records:
            writer = _quarantine_unverified(writer, quarantine)
            records = content_bytes = 0
        part_key = f"part-{task.part:05d}.parquet"
        entry = writer.publish(output_store, part_key)
        quarantine_entry = quarantine_writer.publish(output_store, quarantine_part_key(task.part))
    except BaseException:
        writer.abort()
        quarantine_writer.abort()
        raise
    finally:
        if scratch:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    return {
        "file": task.file_label,
        "part": entry,
        "quarantine_part": quarantine_entry,
        "records": records,
        "content_bytes": content_bytes,
        "quarantine_reasons": dict(quarantine_reasons),
        "skipped": counters,
        "file_quarantined": records == 0 and file_level_damage,
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


def merge_quarantine(store: Any, prefix: str, results: list[dict[str, Any]], key: str = "quarantine.parquet") -> dict[str, Any]:
    """Concatenate the tasks' quarantine files (in task order) into `prefix/key`, batch by batch; the
    per-task files are left for `write_manifest` to remove as unlisted."""
    import pyarrow.parquet as pq

    merged = ParquetStreamWriter(QUARANTINE_SCHEMA, batch_rows=64)
    scratch = local_temp_dir()
    try:
        for result in results:
            part = result["quarantine_part"]
            if part["rows"] == 0:
                continue
            part_key = f"{prefix}/{part['key']}"
            path = store.fetch(part_key, scratch)
            for batch in pq.ParquetFile(path).iter_batches(batch_size=64):
                for row in batch.to_pylist():
                    merged.append(row, size_hint=len(row["payload"]))
        return merged.publish(store, f"{prefix}/{key}")
    except BaseException:
        merged.abort()
        raise
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


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
        "source": task.source,
        "snapshot": task.snapshot,
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
        "source": task.source,
        "snapshot": task.snapshot,
        "file": task.file_label,
        "location": item.location,
        "reason": item.reason,
        "detail": item.detail,
        "payload": item.payload,
    }


def plan_ingest(
    source_location: str, ref: PartitionRef, fmt: str, options: dict[str, Any], output_url: str, s3: S3Settings
) -> list[IngestTask]:
    snapshot_url = source_location.rstrip("/") + "/" + ref.snapshot
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
        )
        for index, key in enumerate(files)
    ]
