"""`quality_model`: a fastText classifier, reference source vs a random sample of raw documents (sluice.clean.steps.quality).

Its SHA-256 is the asset's data version and goes into the metadata of every cleaned partition scored with
it, so the lineage says which model scored which documents.
"""


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
from sluice.clean.models.training import QUALITY_ASSET, build_quality_model
from sluice.clean.steps.quality import MODEL_FILE

ASSET = QUALITY_ASSET
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
    store = storage.store()
    manifest = build_quality_model(store, settings.config.quality_model)
    accuracy = manifest["held_out_accuracy"]
    return MaterializeResult(
        data_version=DataVersion(manifest["sha256"]),
        metadata={
            "dagster/uri": MetadataValue.path(store.uri(f"{ASSET}/{MODEL_FILE}")),
            "sha256": manifest["sha256"],
            "positives": manifest["positives"],
            "negatives": manifest["negatives"],
            "held_out_accuracy": accuracy,
            "held_out_documents": int(manifest["held_out"]),
            "model_bytes": manifest["bytes"],
            "trained_on_partitions": MetadataValue.json(manifest["trained_on_partitions"]),
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
