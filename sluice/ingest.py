"""Raw ingest: crawl files of one source snapshot -> one Parquet schema, one part file per input file.

Each input file is one task (`ingest_file`), so files run in parallel on the compute backend and every
output is named after its input's position in the sorted listing: the result does not depend on the
worker count. Damaged records and unreadable files go to a quarantine Parquet file with a reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import xxhash

from sluice.config import FORMAT_OPTIONS, S3Settings
from sluice.layout import ParquetStreamWriter, PartitionRef
from sluice.readers import Quarantined, RawRecord, read_records, supported_format
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
    quarantined: list[dict[str, Any]] = []
    quarantine_reasons: Counter[str] = Counter()
    writer = ParquetStreamWriter(RAW_SCHEMA)
    records = 0
    content_bytes = 0
    scratch = None
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
            quarantined.append(_quarantine_row(task, Quarantined("file", "unreadable_file", str(error))))
        try:
            if source is not None and empty:
                quarantined.append(_quarantine_row(task, Quarantined("file", "empty_file", "the file has no bytes")))
            elif source is not None:
                for item in read_records(source, task.file_key, task.fmt, options, counters):
                    if isinstance(item, Quarantined):
                        quarantined.append(_quarantine_row(task, item))
                        continue
                    writer.append(_raw_row(task, item), size_hint=len(item.content))
                    records += 1
                    content_bytes += len(item.content)
        finally:
            if stream is not None:
                stream.close()
        part_key = f"part-{task.part:05d}.parquet"
        entry = writer.publish(output_store, part_key)
    except BaseException:
        writer.abort()
        raise
    finally:
        if scratch:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    for row in quarantined:
        quarantine_reasons[row["reason"]] += 1
    file_quarantined = records == 0 and any(row["location"] == "file" or row["reason"] in ("not_gzip",) for row in quarantined)
    return {
        "file": task.file_label,
        "part": entry,
        "records": records,
        "content_bytes": content_bytes,
        "quarantined_rows": quarantined,
        "quarantine_reasons": dict(quarantine_reasons),
        "skipped": counters,
        "file_quarantined": file_quarantined,
    }


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
