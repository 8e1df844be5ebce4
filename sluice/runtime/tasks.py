"""Durable per-task completion: a killed partition resumes where it stopped.

The per-file stages (raw ingest, cleaning, dedup signatures, tokenization) run one task per input file or
part. Each task is wrapped in a `RecordedTask`: when it has published its outputs it writes a completion
record, `task-NNNNN.json` (N = the task's part number), in the stage's record folder
`<asset>_tasks/source=<s>/snapshot=<n>/` beside the asset's dataset. The record holds the task's identity
digest and its result, whose output entries carry each file's SHA-256. Written after the outputs and
atomically (a rename on a local store, a single PUT on S3), a record exists only for a task that finished.

A re-run of the partition runs `run_recorded` for every task again: a task whose record has the same
digest, and whose recorded outputs all exist with the recorded SHA-256 (hashed again, not just listed),
returns the recorded result (`reused`); every other task runs. The identity digest covers:

- the stage and its code version (`STAGE_VERSIONS`: bumped when a stage writes other bytes for the same
  input and settings),
- the input's identity: the SHA-256 from the upstream manifest, or for a crawl file its size and
  modification time (local) / ETag (S3), read by the task itself,
- the settings the task uses: every field of the task object (its stage's settings for its source, model
  digests, part number) except where things are stored (`*_url` fields count only as present/absent) and
  the S3 client settings.

So a changed input file or setting invalidates exactly the tasks that read it. The stage then publishes the
whole set with its manifest as before; the manifest lists the records (`task_records`), and `write_manifest`
deletes records no task of this run wrote or reused (inputs that went away), as it deletes unlisted outputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.config import S3Settings
from sluice.io.layout import PartitionRef, partition_prefix, sha256_file
from sluice.io.storage import Store, StoreSpec, local_temp_dir

# Bump a stage's version when its code writes different bytes for the same input and settings: every
# record of the older version stops matching and the stage runs again.
STAGE_VERSIONS = {"raw_documents": 2, "cleaned_documents": 2, "dedup_signatures": 2, "tokenized_shards": 2}
RECORD_FORMAT = 1


def records_prefix(asset: str, ref: PartitionRef) -> str:
    """Folder of the completion records of `asset`'s tasks for one partition."""
    return partition_prefix(f"{asset}_tasks", ref)


def record_key(part: int) -> str:
    return f"task-{part:05d}.json"


def _plain(value: Any) -> Any:
    """A JSON-able form of a task field (dataclasses and pydantic models by their fields)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def settings_of(task: Any) -> dict[str, Any]:
    """What of a task object goes into its identity: every field but the S3 client settings, with the
    storage locations (`*_url`) reduced to whether they are set."""
    identity = {}
    for f in dataclasses.fields(task):
        value = getattr(task, f.name)
        if isinstance(value, S3Settings):
            continue
        identity[f.name] = (value is not None) if f.name.endswith("_url") else _plain(value)
    return identity


def task_digest(stage: str, task: Any, inputs: Iterable[str] = ()) -> str:
    """SHA-256 of the stage, its code version, the input identities and the task's settings."""
    body = json.dumps(
        {"stage": stage, "version": STAGE_VERSIONS[stage], "inputs": list(inputs), "task": settings_of(task)},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class RecordedTask:
    """One stage task with its completion record. `outputs` names the result fields holding the manifest
    entries (one entry, a list of them, or None) of the files the task publishes, with their folder."""

    fn: Callable[[Any], dict[str, Any]]  # a module-level function (it is pickled to the workers)
    task: Any
    label: str  # the input file or part, for messages
    digest: str
    record_url: str
    record_key: str
    outputs: tuple[tuple[str, str], ...]
    s3: S3Settings = field(default_factory=S3Settings)
    input_url: str | None = None  # an input whose identity the task reads itself (a crawl file) ...
    input_key: str | None = None  # ... and its key there
    volatile: tuple[str, ...] = ()  # result fields not recorded (timings): absent from a reused result


def run_recorded(job: RecordedTask) -> dict[str, Any]:
    """Return the recorded result of `job` when its record matches and its outputs verify; else run it,
    then record it. The result carries `reused` (True / False) and `task` (the label)."""
    records = StoreSpec(job.record_url, job.s3).open()
    digest = job.digest
    if job.input_url is not None and job.input_key is not None:
        identity = StoreSpec(job.input_url, job.s3).open().identity(job.input_key)
        digest = hashlib.sha256(f"{digest}:{identity}".encode()).hexdigest()
    record = _read_record(records, job.record_key)
    if record is not None and record.get("digest") == digest and _outputs_verify(job, record["result"]):
        return {**record["result"], "reused": True, "task": job.label}
    result = job.fn(job.task)
    kept = {key: value for key, value in result.items() if key not in job.volatile}
    body = {"format": RECORD_FORMAT, "task": job.label, "digest": digest, "result": kept}
    # Keys in the result's own order (a stage reads some orders from it, e.g. the cleaning funnel's steps).
    records.write_bytes(job.record_key, json.dumps(body, default=_json_default).encode())
    return {**result, "reused": False, "task": job.label}


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"a task result holds {type(value).__name__}, which a completion record cannot store")


def _read_record(store: Store, key: str) -> dict[str, Any] | None:
    try:
        if not store.exists(key):
            return None
        record = json.loads(store.read_bytes(key))
    except (OSError, ValueError):
        return None  # unreadable: the task runs again and rewrites it
    return record if isinstance(record, dict) and record.get("format") == RECORD_FORMAT else None


def _entries(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _outputs_verify(job: RecordedTask, result: dict[str, Any]) -> bool:
    """Every output the record names exists with its recorded SHA-256."""
    scratch = None
    try:
        for name, url in job.outputs:
            if name not in result:
                return False
            entries = _entries(result[name])
            if not entries:
                continue
            store = StoreSpec(url, job.s3).open()
            for entry in entries:
                if not store.exists(entry["key"]):
                    return False
                path = store.local_path(entry["key"])
                if path is None:
                    scratch = scratch or local_temp_dir()
                    path = store.fetch(entry["key"], scratch)
                if sha256_file(path) != entry["sha256"]:
                    return False
        return True
    finally:
        if scratch is not None:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)


@dataclass
class TaskCounts:
    """How many of a stage's tasks were reused from completion records and how many ran."""

    reused: int = 0
    run: int = 0

    @classmethod
    def of(cls, results: Sequence[dict[str, Any]]) -> TaskCounts:
        reused = sum(1 for result in results if result.get("reused"))
        return cls(reused, len(results) - reused)

    def line(self, what: str) -> str:
        total = self.reused + self.run
        return f"{what}: {self.run} of {total} tasks run, {self.reused} reused from verified completion records"

    def metadata(self) -> dict[str, int]:
        return {"tasks_run": self.run, "tasks_reused": self.reused}


def record_listing(asset: str, ref: PartitionRef, parts: Iterable[int]) -> dict[str, Any]:
    """The manifest's `task_records` entry: the records folder and the records of this run's tasks (the
    others are deleted when the manifest is written)."""
    return {"prefix": records_prefix(asset, ref), "keys": [record_key(part) for part in parts]}
