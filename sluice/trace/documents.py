"""One traced document: its rows in every stage, read by probes (`sluice.mix.lineage`), and its filter values."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from sluice.config import SluiceConfig
from sluice.dedup.lookup import GlobalCluster
from sluice.io.layout import PartitionRef
from sluice.io.storage import StorageError
from sluice.loader.data import MixedTokens
from sluice.mix.lineage import (
    DEDUPED,
    DocId,
    RowReader,
    cluster_row,
    dedup_cluster,
    part_key,
    raw_record,
    shard_part,
)
from sluice.tokens.shards import binary_folder

CLEANED_COLUMNS = [
    "doc_id", "url", "fetch_date", "language", "language_score", "n_chars", "pii_redactions", "quality_score", "code_share",
    "toxicity_score", "toxic_terms", "perplexity", "perplexity_bucket",
]
RAW_COLUMNS = ["ordinal", "file", "source_id", "fetch_date", "url", "content_type", "charset", "content", "doc_id"]  # source, snapshot: the folder


class DocumentTracer:
    """Traces documents of one mix. `measures`: replay cleaning on each raw record to recompute the filter
    statistics (reads the raw content and the cleaned text); off, the trace reads only small columns."""

    def __init__(self, data: MixedTokens, config: SluiceConfig | None, tokenizer_json: str | None, margin: float = 0.1,
                 preview_chars: int = 160, measures: bool = True) -> None:
        self.data = data
        self.store = data.store
        self.config = config
        self.margin = margin
        self.preview_chars = preview_chars
        self.measures = measures and config is not None
        self.reader = RowReader(data.store)
        self.clusters: dict[tuple[int, int], GlobalCluster | None] = {}  # (shard, document) -> its global dedup cluster
        self.cluster_rows: dict[tuple[int, int], dict[str, Any]] = {}  # (shard, document) -> its dedup_clusters row
        self.cluster_error: str | None = None
        self.tokenizer = None
        self.tokenizer_note = None
        if tokenizer_json is not None:
            from sluice.tokens.tokenize import load_tokenizer, tokenizer_sha256

            if tokenizer_sha256(tokenizer_json) != data.manifest.get("tokenizer_sha256"):
                self.tokenizer_note = "the published tokenizer is not the one the mix's shards were tokenized with: no preview"
            else:
                self.tokenizer = load_tokenizer(tokenizer_json)

    def close(self) -> None:
        self.reader.close()

    def tokens(self, shard: int, doc: int, begin: int = 0, end: int | None = None) -> np.ndarray:
        """Tokens [begin, end) of a document (its EOS is the last token)."""
        info = self.data.shard_info(shard)
        start, stop = self._doc_bounds(info, doc)
        end = stop - start if end is None else end
        out = np.empty(max(0, end - begin), dtype=self.data.token_dtype)
        if len(out):
            self.data.read_shard(shard, start + begin, memoryview(out).cast("B"), len(out))
        return out.astype(np.int64)

    def _doc_bounds(self, info: dict[str, Any], doc: int) -> tuple[int, int]:
        key = f"{binary_folder(info, info['prefix'])}/{info['name']}.idx"
        path = self.store.local_path(key)
        if path is None:
            with self.reader_local(key) as local:
                bounds = np.fromfile(local, "<u8", count=2, offset=8 * doc)
        else:
            bounds = np.fromfile(path, "<u8", count=2, offset=8 * doc)
        return int(bounds[0]), int(bounds[1])

    def reader_local(self, key: str):
        from sluice.io.layout import local_copy

        return local_copy(self.store, key)

    def decode(self, ids: np.ndarray) -> str | None:
        if self.tokenizer is None:
            return None
        return self.tokenizer.decode(ids.tolist(), skip_special_tokens=False)

    def trace(self, shard: int, doc: int, spans: list[tuple[int, int]]) -> dict[str, Any]:
        """Everything known about document `doc` of mix shard `shard`; `spans`: its token spans in the batch."""
        info = self.data.shard_info(shard)
        source, snapshot = info["partition"].split("/", 1)
        ref = PartitionRef(source, snapshot)
        start, stop = self._doc_bounds(info, doc)
        out: dict[str, Any] = {
            "shard": shard, "doc": doc, "source": source, "snapshot": snapshot, "shard_name": f"{info['prefix']}/{info['name']}",
            "doc_tokens": stop - start, "batch_tokens": sum(end - begin for begin, end in spans), "problems": [],
        }
        ids_row = self.reader.rows(f"{info['prefix']}/{info['name']}.docs.parquet", [doc], ["doc_id", "language"]).to_pylist()[0]
        doc_id = out["doc_id"] = ids_row["doc_id"]
        part, first_row = shard_part(info, self.reader.manifest(info["prefix"]))
        out["deduped_part"], out["deduped_row"] = part, first_row + doc
        deduped_key = part_key(self.reader, DEDUPED, ref, part)
        cleaned: dict[str, Any] = {}
        if deduped_key is None:
            out["problems"].append(f"deduplicated part {part} of {ref.key} is not published any more")
        else:
            columns = CLEANED_COLUMNS + (["text"] if self.measures else [])
            cleaned = self.reader.rows(deduped_key, [first_row + doc], columns).to_pylist()[0]
            if cleaned["doc_id"] != doc_id:
                out["problems"].append(f"{deduped_key} row {first_row + doc} is {cleaned['doc_id']}, the shard says {doc_id}: outputs of different runs")
        for column in CLEANED_COLUMNS[1:]:
            out[column] = cleaned.get(column)
        out["language"] = cleaned.get("language") or ids_row.get("language")
        parsed = DocId.parse(doc_id)
        out["raw_file"], out["raw_ordinal"] = parsed.file, parsed.ordinal
        raw = raw_record(self.reader, parsed, RAW_COLUMNS if self.measures else ["ordinal", "source_id", "fetch_date", "url"])
        if raw is None:
            out["problems"].append(f"no raw record {parsed.file}#{parsed.ordinal} in raw_documents {ref.key}")
            raw = {}
        raw.update(source=ref.source, snapshot=ref.snapshot)  # the partition's, not columns of the files
        out["record_id"] = raw.get("source_id")
        out["fetch_date"] = out.get("fetch_date") or raw.get("fetch_date")
        out["url"] = out.get("url") or raw.get("url")
        settings = None if self.config is None or self.cluster_error else self.config.dedup
        known = self.cluster_rows.get((shard, doc))
        known = known if known is not None and known["doc_id"] == doc_id else None
        cluster = dedup_cluster(self.reader, ref, part, doc_id, settings, first_row + doc, self.clusters.get((shard, doc)), known)
        if self.cluster_error:
            out["problems"].append(self.cluster_error)
        out["dedup_cluster"], out["dedup_cluster_size"] = cluster.get("cluster_id"), cluster.get("cluster_size")
        out["dedup_scope"] = cluster.get("scope")
        out["measures"], out["near_thresholds"], out["replay_matches"] = [], [], None
        if self.measures and raw.get("content") is not None and cleaned:
            out.update(self._measure(raw, cleaned, source))
        if spans:
            begin, end = spans[0]
            text = self.decode(self.tokens(shard, doc, begin, min(end, begin + 4 * self.preview_chars)))
            out["preview"] = None if text is None else " ".join(text.split())[: self.preview_chars]
        else:
            text = self.decode(self.tokens(shard, doc, 0, min(stop - start, 4 * self.preview_chars)))
            out["preview"] = None if text is None else " ".join(text.split())[: self.preview_chars]
        if self.tokenizer_note:
            out["problems"].append(self.tokenizer_note)
        return out

    def search_clusters(self, places: list[tuple[int, int]]) -> None:
        """Find the global dedup clusters of these documents (shard, document) together: one index probe per
        table and round for all of them (`sluice.dedup.lookup.global_clusters`); `trace` then uses them."""
        if self.config is None or not places:
            return
        from sluice.dedup.lookup import global_clusters

        located = []
        for shard, doc in places:
            info = self.data.shard_info(shard)
            try:
                part, first_row = shard_part(info, self.reader.manifest(info["prefix"]))
            except ValueError:
                continue  # trace() reports it
            ref = PartitionRef(*info["partition"].split("/", 1))
            doc_id = self.reader.rows(f"{info['prefix']}/{info['name']}.docs.parquet", [doc], ["doc_id"]).column("doc_id")[0].as_py()
            row = cluster_row(self.reader, ref, part, doc_id, first_row + doc)
            if row is not None:
                self.cluster_rows[(shard, doc)] = row
                located.append(((shard, doc), ref, int(row["doc"])))
        try:
            found = global_clusters(self.store, self.config.dedup, [(ref, position) for _, ref, position in located])
        except (FileNotFoundError, ValueError, StorageError) as error:  # e.g. signatures deleted since: the partition's view
            self.cluster_error = f"global dedup cluster not searched ({error}): the size is the cluster as the document's partition saw it"
            return
        self.clusters.update({place: cluster for (place, _, _), cluster in zip(located, found, strict=True)})

    def _measure(self, raw: dict[str, Any], cleaned: dict[str, Any], source: str) -> dict[str, Any]:
        from sluice.clean.steps import Document
        from sluice.clean.steps.pii import PIIRedactor
        from sluice.trace.measures import measure_document

        settings = self.config.cleaning.for_source(source)
        result = measure_document(raw, cleaned, settings, self.margin)
        measures = result["measures"]
        replayed = Document.from_text(result["replayed_text"])
        if settings.pii.enabled:
            PIIRedactor(settings.pii).apply(replayed)
        matches = (replayed.text or "") == (cleaned.get("text") or "")
        return {
            "measures": [m.as_dict() for m in measures],
            "near_thresholds": [m.describe() for m in measures if m.near and m.keep_if != "info"],
            "failed_rules": [m.describe() for m in measures if not m.kept],
            "replay_matches": matches,
            "text_sha256": hashlib.sha256((cleaned.get("text") or "").encode()).hexdigest(),
        }


def settings_digest(config: SluiceConfig | None) -> str | None:
    if config is None:
        return None
    return hashlib.sha256(config.cleaning.model_dump_json().encode()).hexdigest()[:16]


def local_tokenizer_json(store: Any) -> str | None:
    key = "tokenizer/tokenizer.json"
    return store.read_bytes(key).decode("utf-8") if store.exists(key) else None


