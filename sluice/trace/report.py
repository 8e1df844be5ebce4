"""A batch trace: its documents, as a text table, JSON, Parquet and Markdown."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sluice.config import SluiceConfig
from sluice.io.storage import Store
from sluice.loader.data import MixedTokens
from sluice.trace.batch import BatchSpec, Segment, batch_segments
from sluice.trace.documents import DocumentTracer, local_tokenizer_json, settings_digest

FORMAT = "sluice-batch-trace"
VERSION = 1


@dataclass
class Trace:
    """The traced batch: `documents` (one dict per document, first seen first), `segments`, and `meta`."""

    meta: dict[str, Any]
    documents: list[dict[str, Any]]
    segments: list[dict[str, Any]] = field(default_factory=list)

    # -- formats
    def as_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "meta": self.meta, "documents": self.documents, "segments": self.segments}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, default=_json_default, ensure_ascii=False)

    def to_arrow(self) -> pa.Table:
        """One row per document; measures and segments as list columns."""
        rows = []
        for document in self.documents:
            row = {key: value for key, value in document.items() if key not in ("measures", "segments")}
            row["segments"] = document.get("segments", [])
            row["measures"] = [{k: m[k] for k in ("step", "rule", "value", "threshold", "keep_if", "kept", "near")} for m in document.get("measures", [])]
            rows.append(row)
        if not rows:
            return pa.table({"doc_id": pa.array([], pa.string())})
        return pa.Table.from_pylist(rows)

    def table(self, width: int = 160) -> str:
        """A text table: one line per document, then the values near a threshold and any problem."""
        header = ("#", "rank:row", "source/snapshot", "url", "record", "fetched", "lang", "q / ppl / tox", "cluster", "tokens", "preview")
        lines = []
        for number, doc in enumerate(self.documents):
            places = ",".join(f"{s['rank']}:{s['row']}" for s in doc.get("segments", [])[:3]) + ("..." if len(doc.get("segments", [])) > 3 else "")
            scores = "/".join(_short(doc.get(key)) for key in ("quality_score", "perplexity", "toxicity_score"))
            record = str(doc.get("record_id") or f"#{doc.get('raw_ordinal')}")
            lines.append((
                str(number), places or "-", f"{doc['source']}/{doc['snapshot']}", _clip(doc.get("url"), 40), _clip(record, 28),
                _short(doc.get("fetch_date")), f"{doc.get('language')} {_short(doc.get('language_score'))}", scores,
                f"{doc.get('dedup_cluster_size') or 1}", f"{doc.get('batch_tokens')}/{doc.get('doc_tokens')}", _clip(doc.get("preview"), 48),
            ))
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        out = [f"Trace of {self.meta.get('label')} of mix {self.meta.get('mix')!r}: {len(self.documents)} documents, "
               f"{len(self.segments)} segments ({self.meta.get('seconds', 0):.2f}s)"]
        for row in [header, *lines]:
            out.append("  ".join(value.ljust(w) for value, w in zip(row, widths, strict=True))[:width])
        for number, doc in enumerate(self.documents):
            notes = []
            if doc.get("near_thresholds"):
                notes.append("near threshold: " + "; ".join(doc["near_thresholds"]))
            if doc.get("failed_rules"):
                notes.append("fails now: " + "; ".join(doc["failed_rules"]))
            if doc.get("replay_matches") is False:
                notes.append("the replayed cleaning does not give the stored text (settings or code changed since)")
            notes += doc.get("problems", [])
            if notes:
                out.append(f"  [{number}] {doc['doc_id']}: " + " | ".join(notes))
        return "\n".join(out)

    def markdown(self, max_rows: int = 200) -> str:
        meta = self.meta
        out = [f"**Trace of {meta.get('label')}**, mix `{meta.get('mix')}` ({meta.get('split')}): {len(self.documents)} documents, "
               f"{len(self.segments)} segments, ranks {meta.get('ranks')}", ""]
        out.append("| # | rank:row | source/snapshot | URL | record | fetched | lang | quality / ppl / tox | near thresholds | cluster | tokens | preview |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for number, doc in enumerate(self.documents[:max_rows]):
            places = ", ".join(f"{s['rank']}:{s['row']}" for s in doc.get("segments", [])[:4])
            scores = " / ".join(_short(doc.get(k)) for k in ("quality_score", "perplexity", "toxicity_score"))
            near = "; ".join(doc.get("near_thresholds", [])[:4])
            out.append("| " + " | ".join(_md(x) for x in (
                number, places, f"{doc['source']}/{doc['snapshot']}", doc.get("url") or "", doc.get("record_id") or f"{doc.get('raw_file')}#{doc.get('raw_ordinal')}",
                _short(doc.get("fetch_date")), f"{doc.get('language')} {_short(doc.get('language_score'))}", scores, near,
                f"{doc.get('dedup_cluster_size') or 1}", f"{doc.get('batch_tokens')}/{doc.get('doc_tokens')}", _clip(doc.get("preview"), 80),
            )) + " |")
        if len(self.documents) > max_rows:
            out.append(f"\n({len(self.documents) - max_rows} more documents in the JSON / Parquet files)")
        problems = [(n, d) for n, d in enumerate(self.documents) if d.get("problems") or d.get("failed_rules") or d.get("replay_matches") is False]
        if problems:
            out.append("\nNotes:")
            for number, doc in problems:
                notes = list(doc.get("problems", [])) + [f"fails now: {rule}" for rule in doc.get("failed_rules", [])]
                if doc.get("replay_matches") is False:
                    notes.append("replayed cleaning differs from the stored text")
                out.append(f"- [{number}] `{doc['doc_id']}`: " + "; ".join(notes))
        return "\n".join(out)

    def write(self, store: Store, prefix: str) -> dict[str, str]:
        """Write trace.json, trace.parquet and trace.md under `prefix`; returns their URIs."""
        import os
        import tempfile

        def key(name: str) -> str:
            return f"{prefix}/trace.{name}" if prefix else f"trace.{name}"

        store.write_bytes(key("json"), self.to_json().encode("utf-8"))
        store.write_bytes(key("md"), self.markdown().encode("utf-8"))
        with tempfile.TemporaryDirectory(prefix="sluice-trace-") as folder:
            path = os.path.join(folder, "trace.parquet")
            pq.write_table(self.to_arrow(), path)
            store.put_file(path, key("parquet"))
        return {name: store.uri(key(name)) for name in ("json", "parquet", "md")}


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, datetime):
        return value.date().isoformat()
    return str(value)


def _clip(value: Any, size: int) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= size else text[: size - 1] + "…"


def _md(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _grouped(segments: list[Segment]) -> dict[tuple[int, int], list[Segment]]:
    by_doc: dict[tuple[int, int], list[Segment]] = defaultdict(list)
    for segment in segments:
        by_doc[(segment.shard, segment.doc)].append(segment)
    return by_doc


def trace_batch(
    store: Store, config: SluiceConfig | None, spec: BatchSpec, margin: float = 0.1, preview_chars: int = 160, measures: bool = True,
    tokenizer_json: str | None = None, data: MixedTokens | None = None,
) -> Trace:
    """Trace the batch `spec` names (see `sluice.trace`). `config`: the cleaning settings the filter values are
    compared with (None: no filter replay); `tokenizer_json`: default the published `tokenizer/tokenizer.json`."""
    started = time.perf_counter()
    data = data or MixedTokens(store, spec.mix, split=spec.split)
    tokenizer_json = tokenizer_json if tokenizer_json is not None else local_tokenizer_json(store)
    tracer = DocumentTracer(data, config, tokenizer_json, margin, preview_chars, measures)
    try:
        if spec.doc_ids:
            return _trace_ids(data, tracer, spec, started)
        segments = batch_segments(data, spec)
        located = time.perf_counter()
        documents = []
        tracer.search_clusters(list(_grouped(segments)))
        for (shard, doc), pieces in _grouped(segments).items():
            traced = tracer.trace(shard, doc, [(s.token_begin, s.token_end) for s in pieces])
            traced["segments"] = [s.as_dict() for s in pieces]
            traced["component"] = pieces[0].component
            documents.append(traced)
    finally:
        tracer.close()
    meta = _meta(data, spec, config, margin, started)
    meta["locate_seconds"] = located - started
    return Trace(meta, documents, [s.as_dict() for s in segments])


def _trace_ids(data: MixedTokens, tracer: DocumentTracer, spec: BatchSpec, started: float) -> Trace:
    found = data.locate_documents(list(spec.doc_ids))
    documents = []
    tracer.search_clusters([places[0] for places in found.values() if places])
    for doc_id in spec.doc_ids:
        places = found.get(doc_id) or []
        if not places:
            from sluice.mix.lineage import absent_reason

            source, _, rest = doc_id.partition("/")
            documents.append({"doc_id": doc_id, "source": source, "snapshot": rest.split("/", 1)[0], "segments": [],
                              "problems": [f"not in the shards mix {data.mix!r} reads: {absent_reason(tracer.reader, doc_id)}"]})
            continue
        shard, doc = places[0]
        traced = tracer.trace(shard, doc, [])
        traced["segments"] = []
        documents.append(traced)
    meta = _meta(data, spec, tracer.config, tracer.margin, started)
    return Trace(meta, documents, [])


def trace_documents(store: Store, config: SluiceConfig | None, mix: str, doc_ids: list[str], **options: Any) -> Trace:
    """Trace documents by id (no batch): where each came from and why it was kept."""
    return trace_batch(store, config, BatchSpec(mix=mix, doc_ids=tuple(doc_ids)), **options)


def _meta(data: MixedTokens, spec: BatchSpec, config: SluiceConfig | None, margin: float, started: float) -> dict[str, Any]:
    spec_dict = {key: value for key, value in asdict(spec).items() if key not in ("provenance", "checkpoint") and value not in (None, ())}
    ranks = sorted({int(p.get("rank", 0)) for p in spec.provenance}) if spec.provenance else (list(spec.ranks) if spec.ranks is not None else "all")
    return {
        "mix": data.mix, "split": data.split, "label": spec.label(), "spec": spec_dict, "ranks": ranks,
        "checkpoint": None if spec.checkpoint is None else {k: spec.checkpoint.get(k) for k in ("step", "epoch", "position", "global_batch", "seed")},
        "index_sha256": data.index_sha256, "sequence_length": data.sequence_length, "margin": margin,
        "cleaning_settings_sha256": settings_digest(config), "seconds": time.perf_counter() - started,
        "traced_at": datetime.now().astimezone().isoformat(timespec="seconds"),
    }
