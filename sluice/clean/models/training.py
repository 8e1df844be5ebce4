"""Building the cleaning models from stored raw partitions: the fastText quality classifier (sluice.clean.steps.quality)
and the per-language KenLM models with their bucket cut-offs (sluice.clean.steps.perplexity).

Both read the raw documents back, decode and extract them the way cleaning does, train, and publish the model
files and a `_manifest.json` under their asset's folder (the manifest's SHA-256 is the asset's data version).
The Dagster assets (data_assets/quality_model.py, perplexity_model.py) call these and report the results.

What is extracted is bounded by the settings, not by the corpus: the quality model's negatives are the
`max_negatives` raw documents of the other sources with the smallest seeded hash of the document id
(`SeededSample`'s key), chosen from the raw documents' id column before anything is extracted, and only
those are read whole and extracted (a chosen document that does not extract is left out of the sample); its positives
are the positive source's first `max_positives` documents that extract, read in order until there are that
many. The perplexity models read their reference sources whole (a document's language decides whether it
is training text) and, of the other sources, only `CUTOFF_CANDIDATES_PER_LANGUAGE` x `cutoff_sample` per
modelled language, chosen by the same id hash before extraction, for their cut-offs.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from sluice.clean.steps import Document
from sluice.clean.steps.extract import DecodeText, ExtractHtml
from sluice.config import ExtractionSettings, PerplexityModelSettings, QualityModelSettings
from sluice.io.layout import PartitionRef, list_partitions, partition_prefix, read_manifest
from sluice.io.storage import Store, local_temp_dir

QUALITY_ASSET = "quality_model"
PERPLEXITY_ASSET = "perplexity_model"
# The perplexity cut-offs' candidates from the sources that are no language's reference: this many times
# `cutoff_sample` per modelled language, the documents with the smallest id hashes (the same key as the
# per-language sample's, so each language's sample is its true smallest-hash documents while it fills; a
# language rarer than 1 / (this x languages) among them gets fewer than `cutoff_sample`).
CUTOFF_CANDIDATES_PER_LANGUAGE = 4


def _extracted(ref: PartitionRef, row: dict[str, Any], decode: DecodeText, extract: ExtractHtml) -> Document | None:
    """A raw row as a Document with its extracted text, the way cleaning decodes and extracts it; None when
    it does not decode or extract."""
    doc = Document(row["doc_id"], ref.source, ref.snapshot, row["url"], None, row["content_type"], row["content"], row["charset"])
    return doc if decode.apply(doc) is None and extract.apply(doc) is None else None


def extracted_raw_documents(store: Store, refs: list[PartitionRef]) -> Iterator[tuple[PartitionRef, Document]]:
    """Every raw document of `refs` that decodes and extracts (default extraction settings), in order."""
    decode, extract = DecodeText(), ExtractHtml(ExtractionSettings())
    scratch = local_temp_dir()
    try:
        for ref in refs:
            prefix = partition_prefix("raw_documents", ref)
            manifest = read_manifest(store, prefix) or {"files": []}
            for entry in manifest["files"]:
                path = store.fetch(f"{prefix}/{entry['key']}", scratch)
                for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
                    for row in batch.to_pylist():
                        if (doc := _extracted(ref, row, decode, extract)) is not None:
                            yield ref, doc
    finally:
        extract.close()
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True, order=True)
class RawRow:
    """Where one raw document is: its partition (in the global order), part file and row; and its id."""

    order: tuple[str, str]
    file: str
    row: int
    doc_id: str
    ref: PartitionRef = field(compare=False)


def raw_rows(store: Store, refs: list[PartitionRef]) -> Iterator[RawRow]:
    """Every raw document of `refs`, from the parts' `doc_id` column alone."""
    scratch = local_temp_dir()
    try:
        for ref in refs:
            prefix = partition_prefix("raw_documents", ref)
            for entry in (read_manifest(store, prefix) or {"files": []})["files"]:
                path = store.fetch(f"{prefix}/{entry['key']}", scratch)
                ids = pq.read_table(path, columns=["doc_id"]).column("doc_id").to_pylist()
                yield from (RawRow(ref.sort_key(), entry["key"], row, doc_id, ref) for row, doc_id in enumerate(ids))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def seeded_sample(rows: Iterable[RawRow], size: int, seed: int) -> list[RawRow]:
    """The `size` rows with the smallest seeded hash of their document id (SeededSample's key, the one the
    perplexity cut-offs sample by), in storage order: the same whatever order the rows come in; memory
    O(size)."""
    from sluice.clean.steps.perplexity import SeededSample

    sample = SeededSample(size, seed)
    for row in rows:
        sample.add("", row.doc_id, row)
    return sorted(sample.items(""))


def extract_rows(store: Store, rows: list[RawRow]) -> Iterator[tuple[RawRow, Document]]:
    """The rows (sorted) that decode and extract, reading only the row groups that hold them."""
    decode, extract = DecodeText(), ExtractHtml(ExtractionSettings())
    scratch = local_temp_dir()
    try:
        for (_, file), group in itertools.groupby(rows, key=lambda r: (r.order, r.file)):
            chosen = list(group)
            ref = chosen[0].ref
            parquet = pq.ParquetFile(store.fetch(f"{partition_prefix('raw_documents', ref)}/{file}", scratch))
            starts = np.cumsum([0] + [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)])
            for index, in_group in itertools.groupby(chosen, key=lambda r: int(np.searchsorted(starts, r.row, side="right")) - 1):
                table = parquet.read_row_group(index, columns=["doc_id", "url", "content_type", "content", "charset"])
                for item in in_group:
                    if (doc := _extracted(ref, table.slice(item.row - int(starts[index]), 1).to_pylist()[0], decode, extract)) is not None:
                        yield item, doc
    finally:
        extract.close()
        shutil.rmtree(scratch, ignore_errors=True)


def build_quality_model(store: Store, settings: QualityModelSettings) -> dict[str, Any]:
    """Train the quality classifier (positives: `positive_source`'s first documents; negatives: a seeded
    sample of the others', chosen before extraction), publish `quality_model/model.bin` and its manifest;
    returns the manifest."""
    from sluice.clean.steps.quality import MODEL_FILE, train_model

    if not settings.positive_source:
        raise ValueError("quality_model.positive_source is not set: name the curated source whose documents are the positives")
    refs = list_partitions(store, "raw_documents")
    reference = [ref for ref in refs if ref.source == settings.positive_source]
    with contextlib.closing(extracted_raw_documents(store, reference)) as documents:  # stops reading once there are enough
        positives = [doc.text or "" for _, doc in itertools.islice(documents, settings.max_positives)]
    chosen = seeded_sample(raw_rows(store, [ref for ref in refs if ref.source != settings.positive_source]), settings.max_negatives, settings.seed)
    negatives = [doc.text or "" for _, doc in extract_rows(store, chosen)]
    used = [ref.key for ref in refs]
    if not positives or not negatives:
        raise ValueError(
            f"quality_model needs documents of both classes; found {len(positives)} of {settings.positive_source!r} "
            f"and {len(negatives)} of other sources in raw_documents partitions {used}"
        )
    scratch = local_temp_dir()
    try:
        scores = train_model(positives, negatives, f"{scratch}/{MODEL_FILE}", settings)
        with open(f"{scratch}/{MODEL_FILE}", "rb") as stream:
            blob = stream.read()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    store.write_bytes(f"{QUALITY_ASSET}/{MODEL_FILE}", blob)
    manifest = {
        "asset": QUALITY_ASSET,
        "sha256": hashlib.sha256(blob).hexdigest(),
        "positive_source": settings.positive_source,
        "positives": len(positives),
        "negatives": len(negatives),
        "negatives_chosen": len(chosen),  # chosen by id hash before extraction; those that did not extract are left out
        "max_chars": settings.max_chars,
        "trained_on_partitions": used,
        **scores,
    }
    store.write_bytes(f"{QUALITY_ASSET}/_manifest.json", json.dumps(manifest, indent=2, sort_keys=True).encode())
    return {**manifest, "bytes": len(blob)}


@dataclass
class PerplexityBuild:
    manifest: dict[str, Any]  # as published
    skipped: dict[str, int]  # languages with too few reference documents: their document counts


def build_perplexity_models(store: Store, settings: PerplexityModelSettings, langid_model: str | None) -> PerplexityBuild:
    """One KenLM model per language with enough reference documents, and its head / middle / tail cut-offs
    from a seeded sample of the other sources' documents in that language; publishes the models
    (`lang=<code>/model-<sha256 prefix>.arpa`, stale ones deleted) and the manifest."""
    from sluice.clean.models.langid import LanguageIdentifier
    from sluice.clean.steps.perplexity import SeededSample, text_line

    s = settings
    if not s.reference_source and not s.sources:
        raise ValueError("perplexity_model.reference_source is not set: name the source whose documents are the reference text")
    refs = sorted(list_partitions(store, "raw_documents"), key=PartitionRef.sort_key)
    identifier = LanguageIdentifier(langid_model)
    training: dict[str, list[str]] = {}
    sample = SeededSample(s.cutoff_sample, s.seed)  # other sources' documents, scored once the models exist
    reference_sources = {s.reference_source, *s.sources.values()} - {None}
    # The reference sources' documents are all read (their language decides whether one is training text).
    for ref, doc in extracted_raw_documents(store, [ref for ref in refs if ref.source in reference_sources]):
        language, _ = identifier.predict(doc.text or "")
        line = text_line(doc.text or "")
        if ref.source == s.sources.get(language, s.reference_source):
            if (not s.languages or language in s.languages) and len(training.setdefault(language, [])) < s.max_documents:
                training[language].append(line)
        else:
            sample.add(language, doc.doc_id, line)
    trained = {code: lines for code, lines in sorted(training.items()) if len(lines) >= s.min_documents}
    # The other sources' only in the cut-off sample: candidates by id hash, chosen before extraction.
    candidates = s.cutoff_sample * CUTOFF_CANDIDATES_PER_LANGUAGE * max(1, len(trained))
    others = [ref for ref in refs if ref.source not in reference_sources]
    add_cutoff_candidates(store, others, sample, lambda text: identifier.predict(text)[0], candidates, s.seed)
    if not trained:
        reference_sources = sorted({s.reference_source, *s.sources.values()} - {None})
        raise ValueError(
            f"perplexity_model: no language has {s.min_documents}+ documents in the reference source(s) "
            f"{reference_sources} (found {dict((k, len(v)) for k, v in training.items())}); materialize their raw partitions"
        )
    models = {code: _perplexity_model(store, code, lines, sample, s) for code, lines in trained.items()}
    version = hashlib.sha256(json.dumps(models, sort_keys=True).encode()).hexdigest()
    manifest = {
        "asset": PERPLEXITY_ASSET,
        "sha256": version,
        "order": s.order,
        "quantiles": list(s.quantiles),
        "models": models,
        "trained_on_partitions": [ref.key for ref in refs],
    }
    store.write_bytes(f"{PERPLEXITY_ASSET}/_manifest.json", json.dumps(manifest, indent=2, sort_keys=True).encode())
    published = {m["key"] for m in models.values()}
    store.delete([key for key in store.list_files(PERPLEXITY_ASSET) if key.endswith(".arpa") and key.removeprefix(f"{PERPLEXITY_ASSET}/") not in published])
    return PerplexityBuild(manifest, {code: len(lines) for code, lines in training.items() if code not in trained})


def add_cutoff_candidates(store: Store, refs: list[PartitionRef], sample: Any, language_of: Callable[[str], str], count: int, seed: int) -> int:
    """Add to the per-language `sample` (a SeededSample) the documents of `refs` among the `count` with the
    smallest id hashes, chosen before extraction; returns how many of them extracted."""
    from sluice.clean.steps.perplexity import text_line

    added = 0
    for _, doc in extract_rows(store, seeded_sample(raw_rows(store, refs), count, seed)):
        sample.add(language_of(doc.text or ""), doc.doc_id, text_line(doc.text or ""))
        added += 1
    return added


def _perplexity_model(store: Store, code: str, lines: list[str], sample: Any, s: PerplexityModelSettings) -> dict[str, Any]:
    """Train, publish and describe one language's model; its cut-offs from the other sources' sampled
    documents, or from its own training text when there are none (biased low; the asset check warns)."""
    from sluice.clean.steps.perplexity import load_model, perplexity, quantile_cutoffs, train_arpa

    scratch = local_temp_dir()
    try:
        arpa = f"{scratch}/{code}.arpa"
        sizes = train_arpa(lines, arpa, s.order, s.memory)
        with open(arpa, "rb") as stream:
            blob = stream.read()
        digest = hashlib.sha256(blob).hexdigest()
        key = f"lang={code}/model-{digest[:16]}.arpa"
        store.write_bytes(f"{PERPLEXITY_ASSET}/{key}", blob)
        model = load_model(arpa)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    values = [perplexity(model, line) for line in sample.items(code)]
    origin = "other sources"
    if not values:
        values, origin = sorted(perplexity(model, line) for line in lines), "reference"
    return {
        "key": key,
        "sha256": digest,
        "bytes": len(blob),
        "source": s.sources.get(code, s.reference_source),
        "cutoffs": list(quantile_cutoffs(values, s.quantiles)),
        "cutoffs_from": origin,
        "cutoff_documents": len(values),
        **sizes,
    }
