"""Each per-page stage of the graph alone, on the pages a graph run processed: the library's own task and
partition functions (the ones the assets call) in one fresh process, serially, with no Dagster, no worker
pool, no manifests, checks or metadata of the assets' own. This is the "sum of its steps" that
benchmarks/end_to_end.py's cost model sets the graph's CPU beside.

    python benchmarks/stage_costs.py STAGE CONFIG SCRATCH GRAPH_DATA

STAGE, and what it runs for every source x snapshot partition of the graph run (in the global order):
- `imports`: nothing; this script's imports (the baseline subtracted from every stage's process);
- `raw`: `plan_ingest` + `ingest_file` for each crawl file;
- `cleaned`: `clean_part` for each raw part (the source's cleaning settings; models where the config uses them);
- `signatures`: `sign_partition`;
- `index_clusters`: `index_partition` for every partition, then `cluster_partition` and `dedup_partition`;
- `tokenized`: `tokenize_part` for each deduplicated part, with the tokenizer the graph trained.

SCRATCH must hold what the stage reads and none of what it writes: `prepare` makes it, a hard-linked copy of
GRAPH_DATA without the stage's own datasets (outputs are written to new files and renamed into place, so
the graph's files are never changed). The caller measures the process's CPU, its own and its children's (the
budget's forkserver, with the supervised cleaning children it reaped, is stopped and reaped before exit),
and subtracts the `imports` run; `differing_outputs` then checks that the stage wrote the graph's bytes.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sluice.clean import DROPPED_DATASET, CleanTask, clean_part  # noqa: E402
from sluice.clean.attributes import ATTRIBUTES_DATASET  # noqa: E402
from sluice.clean.steps.codeshare import CODE_DATASET  # noqa: E402
from sluice.config import SluiceConfig  # noqa: E402
from sluice.config.file import load_config  # noqa: E402
from sluice.dedup import cluster_partition, dedup_partition, index_partition, sign_partition  # noqa: E402
from sluice.ingest.raw import QUARANTINE_DATASET, ingest_file, plan_ingest  # noqa: E402
from sluice.io.layout import (  # noqa: E402
    PartitionRef,
    list_partitions,
    partition_prefix,
    read_manifest,
    required_manifest,
    side_prefix,
)
from sluice.io.storage import Store, open_store  # noqa: E402
from sluice.runtime import workers  # noqa: E402
from sluice.runtime.compute import Executor  # noqa: E402
from sluice.tokens.shards import BINARY_DATASET  # noqa: E402
from sluice.tokens.tokenize import TokenizeTask, tokenize_part  # noqa: E402

# What each stage writes (top-level datasets of the storage root): removed from its scratch copy.
OUTPUTS = {
    "imports": (),
    "raw": ("raw_documents", QUARANTINE_DATASET),
    "cleaned": ("cleaned_documents", DROPPED_DATASET, CODE_DATASET, ATTRIBUTES_DATASET),
    "signatures": ("dedup_signatures", "dedup_shingles"),
    "index_clusters": ("dedup_index", "dedup_clusters", "deduped_documents", "deduped_removed"),
    "tokenized": ("tokenized_shards", BINARY_DATASET),
}
STAGES = tuple(OUTPUTS)


def prepare(stage: str, graph_data: Path, scratch: Path) -> None:
    """SCRATCH: GRAPH_DATA hard-linked, less the stage's outputs and every task-record folder."""
    shutil.rmtree(scratch, ignore_errors=True)
    skip = set(OUTPUTS[stage])
    scratch.mkdir(parents=True)
    for dataset in graph_data.iterdir():
        if dataset.name not in skip and not dataset.name.endswith("_tasks"):
            shutil.copytree(dataset, scratch / dataset.name, copy_function=os.link)


def differing_outputs(stage: str, graph_data: Path, scratch: Path) -> tuple[int, list[str]]:
    """The stage's files in SCRATCH compared byte for byte with the graph's at the same paths (the same work,
    the same bytes): (files compared, those that differ or that the graph lacks)."""
    compared, differing = 0, []
    for dataset in OUTPUTS[stage]:
        for path in sorted((scratch / dataset).rglob("*")):
            if path.is_file():
                compared += 1
                theirs = graph_data / path.relative_to(scratch)
                if not theirs.is_file() or theirs.read_bytes() != path.read_bytes():
                    differing.append(str(path.relative_to(scratch)))
    return compared, differing


def run_raw(config: SluiceConfig, store: Store, refs: list[PartitionRef]) -> None:
    for ref in refs:
        source = config.source(ref.source)
        tasks = plan_ingest(
            source.location, ref, source.format, source.options, store.uri(partition_prefix("raw_documents", ref)), config.s3,
            store.uri(side_prefix(QUARANTINE_DATASET, ref)),
        )
        for task in tasks:
            ingest_file(task)


def run_cleaned(config: SluiceConfig, store: Store, refs: list[PartitionRef]) -> None:
    for ref in refs:
        cleaning = config.cleaning.for_source(ref.source)
        if cleaning.uses_quality_model or cleaning.uses_perplexity_model:
            raise SystemExit("stage_costs: the cleaning config scores with a model; give the tasks its location first")
        for index, entry in enumerate(required_manifest(store, "raw_documents", ref)["files"]):
            clean_part(CleanTask(
                store.uri(partition_prefix("raw_documents", ref)), entry["key"], store.uri(partition_prefix("cleaned_documents", ref)), index,
                cleaning, config.s3, source=ref.source, snapshot=ref.snapshot, dropped_url=store.uri(side_prefix(DROPPED_DATASET, ref)),
                attributes_url=store.uri(side_prefix(ATTRIBUTES_DATASET, ref)),
            ))


def run_signatures(config: SluiceConfig, store: Store, refs: list[PartitionRef]) -> None:
    for ref in refs:
        sign_partition(store, ref, config.dedup, Executor(), config.s3)


def run_index_clusters(config: SluiceConfig, store: Store, refs: list[PartitionRef]) -> None:
    for ref in refs:
        index_partition(store, ref, config.dedup, Executor(), config.s3)
    for ref in refs:
        cluster_partition(store, ref, config.dedup, Executor(), config.s3)
        dedup_partition(store, ref, config.dedup)


def run_tokenized(config: SluiceConfig, store: Store, refs: list[PartitionRef]) -> None:
    tokenizer_json = store.read_bytes("tokenizer/tokenizer.json").decode()
    samples = config.checks.tokenized_sample_documents
    for ref in refs:
        files = required_manifest(store, "deduped_documents", ref)["files"]
        for index, entry in enumerate(files):
            tokenize_part(TokenizeTask(
                store.uri(partition_prefix("deduped_documents", ref)), entry["key"], store.uri(partition_prefix("tokenized_shards", ref)), index,
                tokenizer_json, config.tokenizer.eos_token, max_shard_tokens=config.tokenizer.max_shard_tokens, s3=config.s3,
                sample_documents=-(-samples // max(1, len(files))), binary_url=store.uri(side_prefix(BINARY_DATASET, ref)),
            ))


def main(argv: list[str]) -> int:
    stage, config_path, scratch, graph_data = argv
    if stage == "imports":
        return 0
    config = load_config(config_path)
    refs = list_partitions(open_store(graph_data), "raw_documents")
    store = open_store(scratch)
    if read_manifest(store, partition_prefix(OUTPUTS[stage][0], refs[0])) is not None:
        raise SystemExit(f"stage_costs: {scratch} already holds {stage}'s output (run `prepare` first)")
    {"raw": run_raw, "cleaned": run_cleaned, "signatures": run_signatures, "index_clusters": run_index_clusters,
     "tokenized": run_tokenized}[stage](config, store, refs)
    workers.shutdown()  # reaps the budget's forkserver, with its children's CPU, before this process exits
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
