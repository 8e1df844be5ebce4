"""Building the cleaning models from stored raw partitions: the fastText quality classifier (sluice.clean.steps.quality)
and the per-language KenLM models with their bucket cut-offs (sluice.clean.steps.perplexity).

Both read the raw documents back, decode and extract them the way cleaning does, train, and publish the model
files and a `_manifest.json` under their asset's folder (the manifest's SHA-256 is the asset's data version).
The Dagster assets (data_assets/quality_model.py, perplexity_model.py) call these and report the results.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from sluice.clean.steps import Document
from sluice.clean.steps.extract import DecodeText, ExtractHtml
from sluice.config import ExtractionSettings, PerplexityModelSettings, QualityModelSettings
from sluice.layout import PartitionRef, list_partitions, partition_prefix, read_manifest
from sluice.storage import Store, local_temp_dir

QUALITY_ASSET = "quality_model"
PERPLEXITY_ASSET = "perplexity_model"


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
                        doc = Document(row["doc_id"], ref.source, ref.snapshot, row["url"], None, row["content_type"], row["content"], row["charset"])
                        if decode.apply(doc) is None and extract.apply(doc) is None:
                            yield ref, doc
    finally:
        extract.close()
        shutil.rmtree(scratch, ignore_errors=True)


def build_quality_model(store: Store, settings: QualityModelSettings) -> dict[str, Any]:
    """Train the quality classifier (positives: `positive_source`'s documents; negatives: a seeded sample of
    the others'), publish `quality_model/model.bin` and its manifest; returns the manifest."""
    from sluice.clean.steps.quality import MODEL_FILE, TrainingSet, train_model

    if not settings.positive_source:
        raise ValueError("quality_model.positive_source is not set: name the curated source whose documents are the positives")
    refs = list_partitions(store, "raw_documents")
    data = TrainingSet()
    for ref, doc in extracted_raw_documents(store, refs):
        data.add(doc.doc_id, doc.text or "", ref.source == settings.positive_source, settings)
    positives, negatives = [text for _, text in data.positives], [text for _, text in data.negatives]
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
    from sluice.clean.steps.perplexity import SeededSample, text_line
    from sluice.langid import LanguageIdentifier

    s = settings
    if not s.reference_source and not s.sources:
        raise ValueError("perplexity_model.reference_source is not set: name the source whose documents are the reference text")
    refs = sorted(list_partitions(store, "raw_documents"), key=PartitionRef.sort_key)
    identifier = LanguageIdentifier(langid_model)
    training: dict[str, list[str]] = {}
    sample = SeededSample(s.cutoff_sample, s.seed)  # other sources' documents, scored once the models exist
    for ref, doc in extracted_raw_documents(store, refs):
        language, _ = identifier.predict(doc.text or "")
        line = text_line(doc.text or "")
        if ref.source == s.sources.get(language, s.reference_source):
            if (not s.languages or language in s.languages) and len(training.setdefault(language, [])) < s.max_documents:
                training[language].append(line)
        else:
            sample.add(language, doc.doc_id, line)
    trained = {code: lines for code, lines in sorted(training.items()) if len(lines) >= s.min_documents}
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
