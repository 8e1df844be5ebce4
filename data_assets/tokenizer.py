"""`tokenizer`: byte-level BPE trained on deduplicated documents of chosen sources, or a given tokenizer.json.

Its SHA-256 is stamped into every tokenized shard, so the tokenizer is part of the lineage and a mix
refuses shards from two different tokenizers.
"""


import json
from pathlib import Path

from dagster import AssetDep, AssetExecutionContext, MaterializeResult, MetadataValue, asset

from data_assets.automation import stage_automation
from data_assets.batch import in_group
from data_assets.versions import CODE_VERSIONS
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.tokens.tokenize import TrainingTask, load_tokenizer, tokenizer_sha256, train_from_store

ASSET = "tokenizer"


@asset(
    name=ASSET,
    code_version=CODE_VERSIONS[ASSET],
    automation_condition=stage_automation(ASSET),
    deps=[AssetDep("deduped_documents")],
    **in_group("tokenization"),
    kinds={"python", "huggingface"},
    owners=["team:data-engineering"],
    description="The HF tokenizers tokenizer.json used for every shard: trained byte-level BPE, or tokenizer.path from the config.",
)
def tokenizer(
    context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> MaterializeResult:
    config = settings.config
    store = storage.store()
    used: list[str] = []
    if config.tokenizer.path:
        json_text = Path(config.tokenizer.path).read_text(encoding="utf-8")
        origin = config.tokenizer.path
    else:
        sources = list(config.tokenizer.train_sources or config.source_names)
        task = TrainingTask(store.spec, tuple(sources), config.tokenizer.max_training_documents,
                            config.tokenizer.vocab_size, config.tokenizer.eos_token, config.tokenizer.max_training_bytes)
        json_text, used = compute.executor().isolated(train_from_store, task)  # its memory leaves with the worker
        if not used:
            raise FileNotFoundError(f"no deduped_documents partitions of {sources} exist to train the tokenizer on")
        origin = f"trained byte-level BPE on {len(used)} partitions"
    loaded = load_tokenizer(json_text)
    eos_id = loaded.token_to_id(config.tokenizer.eos_token)
    if eos_id is None:
        raise ValueError(f"tokenizer.eos_token {config.tokenizer.eos_token!r} is not in the tokenizer from {origin}")
    digest = tokenizer_sha256(json_text)
    vocab_size = loaded.get_vocab_size(with_added_tokens=True)
    store.write_bytes(f"{ASSET}/tokenizer.json", json_text.encode("utf-8"))
    manifest = {
        "asset": ASSET,
        "sha256": digest,
        "vocab_size": vocab_size,
        "eos_token": config.tokenizer.eos_token,
        "eos_id": eos_id,
        "origin": origin,
        "trained_on": used,
    }
    store.write_bytes(f"{ASSET}/_manifest.json", json.dumps(manifest, indent=2, sort_keys=True).encode())
    store.remove_stale_temp(ASSET)  # temp files of a crashed earlier run
    return MaterializeResult(
        metadata={
            "dagster/uri": MetadataValue.path(store.uri(f"{ASSET}/tokenizer.json")),
            "sha256": digest,
            "vocab_size": vocab_size,
            "eos_id": eos_id,
            "origin": origin,
            "trained_on": MetadataValue.json(used),
        },
    )
