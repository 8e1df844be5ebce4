"""`quality_model`: a fastText classifier, reference source vs a random sample of raw documents (sluice.quality).

Its SHA-256 is the asset's data version and goes into the metadata of every cleaned partition scored with
it, so the lineage says which model scored which documents.
"""


import hashlib
import json

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
from data_assets.versions import CODE_VERSIONS
from resources import SluiceSettings, StorageResource
from sluice.config import ExtractionSettings
from sluice.extract import DecodeText, ExtractHtml
from sluice.layout import list_partitions, partition_prefix, read_manifest
from sluice.quality import MODEL_FILE, TrainingSet, train_model
from sluice.steps import Document
from sluice.storage import local_temp_dir

ASSET = "quality_model"
ACCURACY_CHECK = "held_out_accuracy_above_chance"


@asset(
    name=ASSET,
    code_version=CODE_VERSIONS[ASSET],
    automation_condition=stage_automation(ASSET),
    deps=[AssetDep("raw_documents")],
    **in_group("curation"),
    kinds={"python", "fasttext"},
    owners=["team:data-engineering"],
    description=(
        "fastText quality classifier: documents of quality_model.positive_source against a seeded random sample "
        "of the other sources' raw documents; cleaned_documents scores with it when cleaning.quality_threshold is set."
    ),
    check_specs=[
        AssetCheckSpec(ACCURACY_CHECK, asset=ASSET, description="Held-out accuracy (20 % of the data) is above 0.5 (warns).")
    ],
)
def quality_model(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource) -> MaterializeResult:
    config = settings.config
    model_settings = config.quality_model
    if not model_settings.positive_source:
        raise ValueError("quality_model.positive_source is not set: name the curated source whose documents are the positives")
    store = storage.store()
    decode, extract = DecodeText(), ExtractHtml(ExtractionSettings())
    data = TrainingSet()
    used: list[str] = []
    scratch = local_temp_dir()
    try:
        for ref in list_partitions(store, "raw_documents"):
            prefix = partition_prefix("raw_documents", ref)
            manifest = read_manifest(store, prefix) or {"files": []}
            used.append(ref.key)
            for entry in manifest["files"]:
                key = f"{prefix}/{entry['key']}"
                path = store.fetch(key, scratch)
                for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
                    for row in batch.to_pylist():
                        doc = Document(row["doc_id"], ref.source, ref.snapshot, row["url"], None, row["content_type"], row["content"], row["charset"])
                        if decode.apply(doc) is None and extract.apply(doc) is None:
                            data.add(doc.doc_id, doc.text or "", ref.source == model_settings.positive_source, model_settings)
    finally:
        extract.close()
    positives, negatives = [text for _, text in data.positives], [text for _, text in data.negatives]
    if not positives or not negatives:
        raise ValueError(
            f"quality_model needs documents of both classes; found {len(positives)} of {model_settings.positive_source!r} "
            f"and {len(negatives)} of other sources in raw_documents partitions {used}"
        )
    model_path = f"{scratch}/{MODEL_FILE}"
    scores = train_model(positives, negatives, model_path, model_settings)
    with open(model_path, "rb") as stream:
        blob = stream.read()
    digest = hashlib.sha256(blob).hexdigest()
    store.write_bytes(f"{ASSET}/{MODEL_FILE}", blob)
    manifest = {
        "asset": ASSET,
        "sha256": digest,
        "positive_source": model_settings.positive_source,
        "positives": len(positives),
        "negatives": len(negatives),
        "max_chars": model_settings.max_chars,
        "trained_on_partitions": used,
        **scores,
    }
    store.write_bytes(f"{ASSET}/_manifest.json", json.dumps(manifest, indent=2, sort_keys=True).encode())
    accuracy = scores["held_out_accuracy"]
    return MaterializeResult(
        data_version=DataVersion(digest),
        metadata={
            "dagster/uri": MetadataValue.path(store.uri(f"{ASSET}/{MODEL_FILE}")),
            "sha256": digest,
            "positives": len(positives),
            "negatives": len(negatives),
            "held_out_accuracy": accuracy,
            "held_out_documents": int(scores["held_out"]),
            "model_bytes": len(blob),
            "trained_on_partitions": MetadataValue.json(used),
        },
        check_results=[
            AssetCheckResult(
                check_name=ACCURACY_CHECK,
                passed=accuracy > 0.5,
                severity=AssetCheckSeverity.WARN,
                metadata={"held_out_accuracy": accuracy},
            )
        ],
    )
