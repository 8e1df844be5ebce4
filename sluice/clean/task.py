"""One cleaning task: a raw part file through the chain, in a budgeted worker, into a cleaned part, its
dropped part and (when routing) its code part; the counts come back for the asset to merge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluice.clean.attributes import ATTRIBUTE_COLUMNS, attributes_row, attributes_schema
from sluice.clean.pipeline import CleaningPipeline
from sluice.clean.schema import CLEANED_SCHEMA, DROPPED_SCHEMA, cleaned_row, dropped_row
from sluice.clean.stats import CleaningStats
from sluice.clean.steps import Document, Route
from sluice.config import CleaningSettings, S3Settings
from sluice.io.layout import ParquetStreamWriter
from sluice.io.storage import StoreSpec

CHUNK_DOCUMENTS = 64  # documents per message from the budgeted worker (what a kill makes it redo, at most)
CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class CleanTask:
    input_url: str  # raw partition folder
    input_key: str  # raw part file
    output_url: str  # cleaned partition folder
    part: int
    settings: CleaningSettings
    s3: S3Settings = field(default_factory=S3Settings)
    quality_model_url: str | None = None  # folder holding the quality model's model.bin, when used
    quality_max_chars: int = 4000
    code_url: str | None = None  # side dataset folder for documents routed by code share, when routing
    perplexity_model_url: str | None = None  # folder of the perplexity_model asset, when cleaning.perplexity is on
    perplexity_models: dict[str, dict] | None = None  # its manifest's entries by language
    source: str = ""  # the partition's source and snapshot (the Hive folders; not columns of the part files)
    snapshot: str = ""
    dropped_url: str | None = None  # the partition's cleaned_dropped folder (default: output_url)
    attributes_url: str | None = None  # the partition's cleaned_attributes folder (None: not written)


@dataclass(frozen=True)
class _PartInput:
    """What the cleaning of one part needs in its (budgeted) worker process: local paths and picklable
    objects only."""

    path: str  # the raw part file
    settings: CleaningSettings
    model_path: str | None
    quality_max_chars: int
    perplexity_models: tuple[dict[str, dict], Any] | None
    source: str = ""
    snapshot: str = ""
    attributes: bool = False  # record every rule's statistic (cleaned_attributes rows)


def _documents(path: str, start: int, source: str, snapshot: str) -> Any:
    """(row index, Document) of a raw part file from row `start`, reading only the row groups needed."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    first = 0
    for group in range(parquet.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        if first + rows <= start:
            first += rows
            continue
        for batch in parquet.iter_batches(batch_size=256, row_groups=[group]):
            for row in batch.to_pylist():
                if first >= start:
                    yield first, Document(
                        doc_id=row["doc_id"],
                        source=source,
                        snapshot=snapshot,
                        url=row["url"],
                        fetch_date=row["fetch_date"],
                        content_type=row["content_type"],
                        content=row["content"],
                        charset=row["charset"],
                    )
                first += 1


def clean_documents(part: _PartInput, start: int, skips: dict[int, Any], heartbeat: Any, send: Any) -> None:
    """Clean the documents of a part from row `start` (the work function of sluice.runtime.budget): sends
    ("chunk", next row, (rows, stats)) every CHUNK_DOCUMENTS documents and ("done", (rows, stats)) at the
    end, where rows are ("kept" | "routed" | "dropped", output row). Rows in `skips` are dropped unprocessed
    with reason `step_timeout:<step>` (or `step_crashed:<step>`)."""
    from sluice.clean.steps.pii import find_pii
    from sluice.config import PIISettings

    pipeline = CleaningPipeline.from_settings(
        part.settings, part.model_path, part.quality_max_chars, part.perplexity_models, attributes=part.attributes,
    )
    pipeline.on_step = heartbeat.stage
    output_stage = len(pipeline.steps)
    names = pipeline.attribute_names()
    # With redaction off for a source every kind is looked for, so the check reports what is left.
    pii_kinds = part.settings.pii if part.settings.pii.enabled else PIISettings()
    rows: list[tuple[str, dict[str, Any]]] = []
    size = 0
    try:
        for index, doc in _documents(part.path, start, part.source, part.snapshot):
            if rows and (len(rows) >= CHUNK_DOCUMENTS or size >= CHUNK_BYTES):
                send(("chunk", index, (rows, pipeline.take_stats())))
                rows, size = [], 0
            heartbeat.item(index)
            skip = skips.get(index)
            if skip is not None:
                reason = "step_timeout" if skip.kind == "timeout" else "step_crashed"
                drop = pipeline.count_skipped(doc, skip.stage, reason, skip.detail)
                rows.append(("dropped", dropped_row(doc, pipeline.stage_name(skip.stage), drop)))
                if part.attributes:
                    rows.append(("attributes", attributes_row(doc, names, "dropped", pipeline.stage_name(skip.stage), drop, None)))
                continue
            outcome = pipeline.run(doc)
            if outcome is not None and not isinstance(outcome[1], Route):
                step, drop = outcome
                rows.append(("dropped", dropped_row(doc, step.name, drop)))
                if part.attributes:
                    rows.append(("attributes", attributes_row(doc, names, "dropped", step.name, drop, None)))
                size += len(doc.text or "")
                continue
            heartbeat.stage(output_stage)
            text = doc.text or ""
            # Independent re-scan of exactly what is written (the blocking asset check reads it).
            pipeline.stats.residual_pii.update(find_pii(text, pii_kinds))
            rows.append(("kept" if outcome is None else "routed", cleaned_row(doc, text)))
            if part.attributes:
                step, drop = outcome or (None, None)
                rows.append(("attributes", attributes_row(doc, names, "kept" if outcome is None else "routed", step and step.name, drop, text)))
            size += len(text)
        final = (rows, pipeline.take_stats())
    finally:
        pipeline.close()  # (first: its helper processes are waited for, so their CPU time is counted)
    send(("done", final))


def clean_part(task: CleanTask) -> dict[str, Any]:
    """Clean one raw part file into `part-NNNNN.parquet` and `dropped-NNNNN.parquet` (and, when code
    share routes, the side dataset's `part-NNNNN.parquet` under `code_url`). With a step budget
    (`cleaning.step_cpu_budget_s`) the chain runs in a supervised worker process (sluice.runtime.budget); without,
    in this process."""
    from sluice.io.layout import _remove_tree
    from sluice.io.storage import local_temp_dir
    from sluice.runtime.budget import NoHeartbeat, supervise

    input_store = StoreSpec(task.input_url, task.s3).open()
    output_store = StoreSpec(task.output_url, task.s3).open()
    scratch = local_temp_dir()
    kept = ParquetStreamWriter(CLEANED_SCHEMA)
    dropped = ParquetStreamWriter(DROPPED_SCHEMA)
    routed = ParquetStreamWriter(CLEANED_SCHEMA)
    attributes: list[ParquetStreamWriter] = []  # opened at the first row: its columns are the chain's
    stats = CleaningStats()
    skipped: dict[int, Any] = {}

    def deliver(payload: tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]) -> None:
        rows, part_stats = payload
        for kind, row in rows:
            if kind == "attributes":
                if not attributes:
                    attributes.append(ParquetStreamWriter(attributes_schema(list(row)[len(ATTRIBUTE_COLUMNS) :]), batch_rows=4096))
                attributes[0].append(row)
                continue
            writer = kept if kind == "kept" else routed if kind == "routed" else dropped
            writer.append(row, size_hint=len(row["text"] or ""))
        stats.merge(part_stats)

    try:
        model_path = None
        if task.quality_model_url and task.settings.uses_quality_model:
            from sluice.clean.steps.quality import MODEL_FILE

            model_store = StoreSpec(task.quality_model_url, task.s3).open()
            model_path = model_store.fetch(MODEL_FILE, scratch)
        perplexity_models = None
        if task.perplexity_model_url and task.perplexity_models is not None:
            from sluice.clean.steps.perplexity import ModelFetcher

            perplexity_models = (task.perplexity_models, ModelFetcher(task.perplexity_model_url, task.s3, scratch))
        part = _PartInput(
            input_store.fetch(task.input_key, scratch), task.settings, model_path, task.quality_max_chars, perplexity_models,
            task.source, task.snapshot, attributes=task.attributes_url is not None,
        )
        budget = task.settings.step_cpu_budget_s
        worker_cpu_s = None
        if budget is None:
            clean_documents(part, 0, {}, NoHeartbeat(), lambda message: deliver(message[-1]))
        else:
            supervised = supervise(clean_documents, part, budget, deliver)
            deliver(supervised.payload)
            skipped, worker_cpu_s = supervised.skips, supervised.worker_cpu_s
        kept_entry = kept.publish(output_store, f"part-{task.part:05d}.parquet")
        dropped_store = StoreSpec(task.dropped_url, task.s3).open() if task.dropped_url else output_store
        dropped_entry = dropped.publish(dropped_store, f"dropped-{task.part:05d}.parquet")
        attributes_entry = None
        if task.attributes_url is not None:
            if not attributes:  # (a part without documents)
                attributes.append(ParquetStreamWriter(attributes_schema([])))
            attributes_entry = attributes[0].publish(StoreSpec(task.attributes_url, task.s3).open(), f"attributes-{task.part:05d}.parquet")
        code_entry = None
        if task.code_url:
            code_entry = routed.publish(StoreSpec(task.code_url, task.s3).open(), f"part-{task.part:05d}.parquet")
        elif routed.rows or routed.total_rows:
            raise ValueError("documents were routed to cleaned_code but the task names no code_url")
        else:
            routed.abort()
    except BaseException:
        for writer in (kept, dropped, routed, *attributes):
            writer.abort()
        raise
    finally:
        _remove_tree(scratch)
    return {
        "part": kept_entry, "dropped": dropped_entry, "code": code_entry, "attributes": attributes_entry, "stats": stats.as_dict(),
        "budget_skips": len(skipped), "worker_cpu_s": worker_cpu_s,
    }
