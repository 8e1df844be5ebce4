"""`blocklist` (the versioned training blocklist) and `blocklist_matches` (what it matches per partition).

`blocklist` publishes the configured list (`blocklist.path`) under its content hash and records it as the
asset's data version, so every `mixed_dataset` materialization names the blocklist version it was built
with in its lineage (Dagster's input data versions) and metadata. `blocklist_matches` matches each
deduplicated partition once per blocklist version (`sluice.blocklist`); every mix leaves the matched
documents out. Code versions carry the list's hash: Dagster shows them stale when the list changes.
"""

import json
from collections.abc import Iterator
from typing import Any

from dagster import (
    AssetDep,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    asset,
)

from data_assets.automation import stage_automation
from data_assets.batch import PartitionResult, in_group, run_source_partitions, stage_asset
from data_assets.metadata import counts_table, prefixed_counts
from data_assets.partitions import source_snapshot_partitions
from data_assets.versions import CODE_VERSIONS
from resources import ComputeResource, SluiceSettings, StorageResource
from sluice.blocklist import (
    ASSET,
    MATCHES,
    MATCHES_FILE,
    Blocklist,
    MatchTask,
    load_configured,
    match_part,
    matches_identity,
    matches_schema,
)
from sluice.io.layout import (
    PartitionRef,
    named_prefix,
    partition_prefix,
    read_manifest,
    write_manifest,
    write_parquet,
)


@asset(
    name=ASSET,
    code_version=CODE_VERSIONS[ASSET],
    automation_condition=stage_automation(ASSET),
    **in_group("training"),
    kinds={"python"},
    owners=["team:data-engineering"],
    description=(
        "The training blocklist (blocklist.path): document ids, URLs, domains and text patterns no mix may contain, "
        "published under its content hash (blocklist/version=<sha>/blocklist.txt). Its data version is that hash, so "
        "each mix's lineage names the blocklist version it was built with."
    ),
)
def blocklist(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource) -> MaterializeResult:
    config = settings.config
    listed = load_configured(config.blocklist)
    store = storage.store()
    version = listed.sha256
    previous = read_manifest(store, ASSET) or {}
    folder = named_prefix(ASSET, "version", version[:16])
    store.write_bytes(f"{folder}/blocklist.txt", listed.canonical().encode("utf-8"))
    old = set()
    if previous.get("sha256") and previous["sha256"] != version:
        key = f"{named_prefix(ASSET, 'version', previous['sha256'][:16])}/blocklist.txt"
        if store.exists(key):
            old = set(store.read_bytes(key).decode("utf-8").splitlines())
    entries = set(listed.entries())
    manifest = {
        "asset": ASSET, "sha256": version, "path": config.blocklist.path, "entries": listed.counts(), "key": f"{folder}/blocklist.txt",
        "previous_sha256": previous.get("sha256") if previous.get("sha256") != version else previous.get("previous_sha256"),
        "versions": sorted({*previous.get("versions", []), version}),
    }
    # The manifest names the current version; older versions' files stay (they say what built older mixes).
    store.write_bytes(f"{ASSET}/_manifest.json", json.dumps(manifest, indent=2, sort_keys=True).encode())
    context.log.info(f"blocklist {version[:16]}: {len(listed)} entries {listed.counts()}")
    return MaterializeResult(
        metadata={
            "sha256": version,
            "entries": len(listed),
            **prefixed_counts("entries", listed.counts()),
            "added_since_previous": len(entries - old) if old else len(entries),
            "removed_since_previous": len(old - entries),
            "previous_sha256": str(manifest["previous_sha256"]),
            "dagster/uri": MetadataValue.path(store.uri(f"{folder}/blocklist.txt")),
        },
        data_version=DataVersion(version[:16]),
    )


@stage_asset(
    MATCHES,
    partitions_def=source_snapshot_partitions,
    deps=[AssetDep("deduped_documents"), AssetDep(ASSET)],
    automation_condition=stage_automation(MATCHES),
    code_version=CODE_VERSIONS[MATCHES],
    **in_group("training"),
    kinds={"python", "parquet"},
    owners=["team:data-engineering"],
    description=(
        "Documents of a deduplicated partition the training blocklist matches (doc_id, rule, entry): computed once per "
        "partition and blocklist version, left out of every mix."
    ),
)
def blocklist_matches(context: AssetExecutionContext, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource) -> Iterator[Any]:
    yield from run_source_partitions(context, MATCHES, lambda ref: match_partition(context, ref, settings, storage, compute))


def match_partition(
    context: AssetExecutionContext, ref: PartitionRef, settings: SluiceSettings, storage: StorageResource, compute: ComputeResource
) -> PartitionResult:
    config = settings.config
    store = storage.store()
    deduped_prefix = partition_prefix("deduped_documents", ref)
    manifest_key = f"{deduped_prefix}/_manifest.json"
    if not store.exists(manifest_key):
        raise FileNotFoundError(f"{store.uri(deduped_prefix)} has no manifest: materialize deduped_documents for {ref.key} first")
    listed = load_configured(config.blocklist)
    identity = matches_identity(listed.sha256, store.read_bytes(manifest_key))
    prefix = partition_prefix(MATCHES, ref)
    previous = read_manifest(store, prefix)
    if previous is not None and previous.get("identity") == identity:
        context.log.info(f"{ref.key}: deduplicated partition and blocklist unchanged; the published matches stand")
        return PartitionResult(metadata={**_metadata(store, prefix, previous), "reused": True})
    deduped = read_manifest(store, deduped_prefix) or {}
    parts = [entry["key"] for entry in deduped.get("files", [])]
    tasks = [MatchTask(store.uri(deduped_prefix), key, listed, config.s3) for key in parts] if len(listed) else []
    rows = [row for found in compute.executor().map(match_part, tasks) for row in found]
    import pyarrow as pa

    table = pa.Table.from_pylist(rows, schema=matches_schema()).sort_by([("doc_id", "ascending")])
    by_rule: dict[str, int] = {}
    for row in rows:
        by_rule[row["rule"]] = by_rule.get(row["rule"], 0) + 1
    manifest = {
        "asset": MATCHES,
        "partition": {"source": ref.source, "snapshot": ref.snapshot},
        "identity": identity,
        "documents_scanned": sum(int(entry.get("rows") or 0) for entry in deduped.get("files", [])) if tasks else 0,
        "matched": len(rows),
        "by_rule": by_rule,
        "timed_out": sum(1 for row in rows if row["timed_out"]),
        "files": [write_parquet(store, f"{prefix}/{MATCHES_FILE}", table)],
    }
    write_manifest(store, prefix, manifest)
    return PartitionResult(metadata={**_metadata(store, prefix, manifest), "reused": False})


def _metadata(store, prefix: str, manifest: dict) -> dict:
    return {
        "dagster/uri": MetadataValue.path(store.uri(prefix)),
        "dagster/row_count": manifest["matched"],
        "blocklist_sha256": manifest["identity"]["blocklist_sha256"],
        "documents_scanned": manifest["documents_scanned"],
        "regex_timeouts": manifest["timed_out"],
        **prefixed_counts("matched", manifest["by_rule"]),
        "matched_by_rule": counts_table(manifest["by_rule"], key="rule"),
    }


def blocked_reader(store, config, blocklist_obj: Blocklist):
    """blocked(ref): the documents of a partition the current blocklist matches, from its `blocklist_matches`
    output, refused when that output is missing or was computed for another partition or blocklist version."""
    import pyarrow as pa

    from sluice.io.layout import read_parquet_file
    from sluice.mix import MixError

    version = blocklist_obj.sha256

    def blocked(ref) -> pa.Table:
        prefix = partition_prefix(MATCHES, ref)
        manifest = read_manifest(store, prefix)
        deduped_key = f"{partition_prefix('deduped_documents', ref)}/_manifest.json"
        fix = f"materialize blocklist_matches for {ref.key} (after blocklist and deduped_documents) before mixing"
        if manifest is None:
            raise MixError(f"{store.uri(prefix)} has no manifest: {fix}")
        if not store.exists(deduped_key) or manifest.get("identity") != matches_identity(version, store.read_bytes(deduped_key)):
            raise MixError(f"{store.uri(prefix)} was matched against another deduplicated partition or blocklist version: {fix}")
        return read_parquet_file(store, f"{prefix}/{MATCHES_FILE}").select(["doc_id", "rule", "entry"])

    return blocked
