"""`perplexity_model`: one KenLM n-gram model per language, trained on a reference source (sluice.clean.steps.perplexity).

Layout: `perplexity_model/lang=<code>/model-<sha256 prefix>.arpa` (named by content hash) and
`perplexity_model/_manifest.json`, whose `models` map each language to its file, SHA-256, training size and
bucket cut-offs. The asset's data version is the SHA-256 of that table, recorded in the metadata of every
cleaned partition scored with it.
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
from data_assets.metadata import markdown_table
from data_assets.versions import CODE_VERSIONS
from resources import SluiceSettings, StorageResource
from sluice.clean.models.training import PERPLEXITY_ASSET, build_perplexity_models

ASSET = PERPLEXITY_ASSET
CUTOFF_CHECK = "cutoffs_from_other_sources"


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
    store = storage.store()
    build = build_perplexity_models(store, config.perplexity_model, config.cleaning.langid_model)
    models, version = build.manifest["models"], build.manifest["sha256"]
    from_reference = sorted(code for code, m in models.items() if m["cutoffs_from"] == "reference")
    rows = [
        (code, m["documents"], m["tokens"], f"{m['cutoffs'][0]:.1f}", f"{m['cutoffs'][1]:.1f}", m["cutoff_documents"], m["cutoffs_from"])
        for code, m in models.items()
    ]
    return MaterializeResult(
        data_version=DataVersion(version),
        metadata={
            "dagster/uri": MetadataValue.path(store.uri(ASSET)),
            "sha256": version,
            "languages": len(models),
            "order": build.manifest["order"],
            "models": markdown_table(["language", "documents", "tokens", "head <=", "tail >", "cut-off documents", "cut-offs from"], rows),
            "skipped_languages": MetadataValue.json(build.skipped),
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
