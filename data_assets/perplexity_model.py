"""`perplexity_model`: one KenLM n-gram model per language, trained on a reference source (sluice.perplexity).

Layout: `perplexity_model/lang=<code>/model-<sha256 prefix>.arpa` (named by content hash) and
`perplexity_model/_manifest.json`, whose `models` map each language to its file, SHA-256, training size and
bucket cut-offs. The asset's data version is the SHA-256 of that table, recorded in the metadata of every
cleaned partition scored with it.
"""

import hashlib
import json
from collections import Counter

import pyarrow.parquet as pq
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    asset,
)

from data_assets.automation import stage_automation
from data_assets.batch import in_group
from data_assets.metadata import markdown_table
from data_assets.versions import CODE_VERSIONS
from resources import SluiceSettings, StorageResource
from sluice.config import ExtractionSettings
from sluice.extract import DecodeText, ExtractHtml
from sluice.langid import LanguageIdentifier
from sluice.layout import PartitionRef, list_partitions, partition_prefix, read_manifest
from sluice.perplexity import SeededSample, load_model, perplexity, quantile_cutoffs, text_line, train_arpa
from sluice.steps import Document
from sluice.storage import local_temp_dir

ASSET = "perplexity_model"
CUTOFF_CHECK = "cutoffs_from_other_sources"


def _documents(store, refs: list[PartitionRef], extract: ExtractHtml, identifier: LanguageIdentifier):
    """(partition, doc_id, language, model line) of every raw document of `refs` that extracts, in order."""
    decode = DecodeText()
    scratch = local_temp_dir()
    for ref in refs:
        prefix = partition_prefix("raw_documents", ref)
        manifest = read_manifest(store, prefix) or {"files": []}
        for entry in manifest["files"]:
            path = store.fetch(f"{prefix}/{entry['key']}", scratch)
            for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
                for row in batch.to_pylist():
                    doc = Document(row["doc_id"], ref.source, ref.snapshot, row["url"], None, row["content_type"], row["content"], row["charset"])
                    if decode.apply(doc) is None and extract.apply(doc) is None:
                        language, _ = identifier.predict(doc.text or "")
                        yield ref, doc.doc_id, language, text_line(doc.text or "")


@asset(
    name=ASSET,
    code_version=CODE_VERSIONS[ASSET],
    automation_condition=stage_automation(ASSET),
    deps=[AssetDep("raw_documents")],
    **in_group("curation"),
    kinds={"python", "kenlm"},
    owners=["team:data-engineering"],
    description=(
        "KenLM n-gram model per language (lmplz, modified Kneser-Ney) on perplexity_model.reference_source, with "
        "head/middle/tail cut-offs from the other sources; cleaned_documents scores with it when cleaning.perplexity is on."
    ),
    check_specs=[
        AssetCheckSpec(
            CUTOFF_CHECK,
            asset=ASSET,
            description="Every model's bucket cut-offs come from other sources' documents, not from its own training text (warns).",
        )
    ],
)
def perplexity_model(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource) -> MaterializeResult:
    config = settings.config
    s = config.perplexity_model
    if not s.reference_source and not s.sources:
        raise ValueError("perplexity_model.reference_source is not set: name the source whose documents are the reference text")
    store = storage.store()
    refs = sorted(list_partitions(store, "raw_documents"), key=PartitionRef.sort_key)
    reference_sources = {s.reference_source, *s.sources.values()} - {None}
    extract = ExtractHtml(ExtractionSettings())
    identifier = LanguageIdentifier(config.cleaning.langid_model)
    training: dict[str, list[str]] = {}
    sample = SeededSample(s.cutoff_sample, s.seed)  # other sources' documents, scored once the models exist
    try:
        for ref, doc_id, language, line in _documents(store, refs, extract, identifier):
            if ref.source == s.sources.get(language, s.reference_source):
                if (not s.languages or language in s.languages) and len(training.setdefault(language, [])) < s.max_documents:
                    training[language].append(line)
            else:
                sample.add(language, doc_id, line)
    finally:
        extract.close()
    trained = {code: lines for code, lines in sorted(training.items()) if len(lines) >= s.min_documents}
    if not trained:
        raise ValueError(
            f"perplexity_model: no language has {s.min_documents}+ documents in the reference source(s) "
            f"{sorted(reference_sources)} (found {dict((k, len(v)) for k, v in training.items())}); materialize their raw partitions"
        )
    scratch = local_temp_dir()
    models: dict[str, dict] = {}
    for code, lines in trained.items():
        arpa = f"{scratch}/{code}.arpa"
        sizes = train_arpa(lines, arpa, s.order, s.memory)
        with open(arpa, "rb") as stream:
            blob = stream.read()
        digest = hashlib.sha256(blob).hexdigest()
        key = f"lang={code}/model-{digest[:16]}.arpa"
        store.write_bytes(f"{ASSET}/{key}", blob)
        model = load_model(arpa)
        values = [perplexity(model, line) for line in sample.items(code)]
        origin = "other sources"
        if not values:  # no other document in this language: the reference's own texts (biased low)
            values, origin = sorted(perplexity(model, line) for line in lines), "reference"
        models[code] = {
            "key": key,
            "sha256": digest,
            "bytes": len(blob),
            "source": s.sources.get(code, s.reference_source),
            "cutoffs": list(quantile_cutoffs(values, s.quantiles)),
            "cutoffs_from": origin,
            "cutoff_documents": len(values),
            **sizes,
        }
    version = hashlib.sha256(json.dumps(models, sort_keys=True).encode()).hexdigest()
    manifest = {
        "asset": ASSET,
        "sha256": version,
        "order": s.order,
        "quantiles": list(s.quantiles),
        "models": models,
        "trained_on_partitions": [ref.key for ref in refs],
    }
    store.write_bytes(f"{ASSET}/_manifest.json", json.dumps(manifest, indent=2, sort_keys=True).encode())
    stale = [key for key in store.list_files(ASSET) if key.endswith(".arpa") and key.removeprefix(f"{ASSET}/") not in {m["key"] for m in models.values()}]
    store.delete(stale)
    from_reference = sorted(code for code, m in models.items() if m["cutoffs_from"] == "reference")
    rows = [
        (code, m["documents"], m["tokens"], f"{m['cutoffs'][0]:.1f}", f"{m['cutoffs'][1]:.1f}", m["cutoff_documents"], m["cutoffs_from"])
        for code, m in models.items()
    ]
    skipped = Counter({code: len(lines) for code, lines in training.items() if code not in trained})
    return MaterializeResult(
        data_version=DataVersion(version),
        metadata={
            "dagster/uri": MetadataValue.path(store.uri(ASSET)),
            "sha256": version,
            "languages": len(models),
            "order": s.order,
            "models": markdown_table(["language", "documents", "tokens", "head <=", "tail >", "cut-off documents", "cut-offs from"], rows),
            "skipped_languages": MetadataValue.json(dict(skipped)),
            "model_bytes": sum(m["bytes"] for m in models.values()),
        },
        check_results=[
            AssetCheckResult(
                check_name=CUTOFF_CHECK,
                passed=not from_reference,
                severity=AssetCheckSeverity.WARN,
                metadata={"from_reference": MetadataValue.json(from_reference)},
                description="cut-offs from other sources for every language"
                if not from_reference
                else f"no other-source documents in {from_reference}: cut-offs from the reference texts themselves",
            )
        ],
    )
