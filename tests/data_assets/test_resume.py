"""A killed partition resumes where it stopped (sluice.runtime.tasks): the run process of a stage is SIGKILLed (with
its worker processes) once about half of the partition's files are done; the re-run runs only the tasks
that had not finished and publishes outputs byte-identical to an uninterrupted run's.

The oracle for "only the rest ran" is the filesystem, not the stage's own counters: a reused task's output
files and completion record are not written again (their inode and modification time stay), every other
task's are. The counters in the materialization's metadata must agree with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize

from benchmarks.crash_harness import wait_group_gone
from data_assets.cli import register_snapshots
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import multi_key
from tests.conftest import PROJECT_ROOT, base_config, tree_digest, write_config

COPIES = 4  # of each of the 3 sample WARC files: 12 input files in one partition
CHILD_TIMEOUT_S = 300


def make_crawl(folder: Path) -> Path:
    snapshot = folder / "web" / "2026-02"
    snapshot.mkdir(parents=True)
    for copy in range(COPIES):
        for path in sorted((PROJECT_ROOT / "sample_data/web/2026-02").iterdir()):
            shutil.copy2(path, snapshot / f"{copy:02d}-{path.name}")
    earlier = folder / "web" / "2026-01"  # as in the sample: global dedup orders it before 2026-02
    shutil.copytree(PROJECT_ROOT / "sample_data/web/2026-01", earlier)
    return folder / "web"


def make_config(folder: Path, crawl: Path) -> str:
    raw = base_config(str(folder / "data"))
    for source in raw["sources"]:
        if source["name"] == "web":
            source["location"] = str(crawl)
    raw["compute"] = {"backend": "local", "max_workers": 2}
    return write_config(folder / "sluice.yaml", raw)


def run_stage(config: str, stage: str, partition: object = "web|2026-02") -> dict:
    """Materialize `stage` (for web/2026-02, or unpartitioned: None) in this process; returns its metadata."""
    resources = build_resources(config)
    key = multi_key(*partition.split("|")) if isinstance(partition, str) else None
    with DagsterInstance.ephemeral() as instance:
        register_snapshots(instance, resources)
        result = materialize(ASSETS, selection=[stage], partition_key=key, instance=instance, resources=resources)
    assert result.success
    event = result.get_asset_materialization_events()[0]
    return {key: getattr(value, "value", value) for key, value in event.event_specific_data.materialization.metadata.items()}


def kill_at_half(config: str, stage: str, records: Path, total: int, scratch: Path) -> None:
    """Start the stage in a child process and SIGKILL its process group once half its tasks have records."""
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(PROJECT_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.crash_harness", config, stage, "web|2026-02"],
        cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while child.poll() is None and time.monotonic() < deadline:
        if records.is_dir() and len([p for p in records.iterdir() if p.name.startswith("task-")]) >= total // 2:
            os.killpg(child.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    _, err = child.communicate(timeout=CHILD_TIMEOUT_S)
    assert child.returncode == -signal.SIGKILL, f"the run ended before half its tasks were recorded: {err[-2000:]}"
    wait_group_gone(child.pid)  # its workers too (one inside an fsync lives until it returns)


def file_stamps(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()} if folder.is_dir() else {}


@pytest.fixture(scope="module")
def crawl(tmp_path_factory) -> Path:
    return make_crawl(tmp_path_factory.mktemp("resume_crawl"))


ORDER = (
    "raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents", "tokenizer", "tokenized_shards",
)


# The sample's partitions that global dedup orders before web/2026-02 (snapshot, then source): they must be
# in the dedup index before web/2026-02 can be deduplicated.
EARLIER = ("reference|2026-01", "web|2026-01", "reference|2026-02")


@pytest.fixture(scope="module")
def reference_upto(tmp_path_factory, crawl):
    """reference_upto(stage): the storage root of an uninterrupted run of web/2026-02 up to `stage` (the
    stages are run once, as far as a test needs them)."""
    folder = tmp_path_factory.mktemp("resume_reference")
    config = make_config(folder, crawl)
    done: list[str] = []

    def upto(stage: str) -> Path:
        for name in ORDER[len(done) : ORDER.index(stage) + 1]:
            if name == "dedup_signatures":  # global dedup: the partitions ordered before web/2026-02 first
                for partition in EARLIER:
                    for earlier_stage in ("raw_documents", "cleaned_documents", "dedup_signatures"):
                        run_stage(config, earlier_stage, partition)
            if name in ("dedup_index", "dedup_clusters", "deduped_documents"):
                for partition in EARLIER:
                    run_stage(config, name, partition)
            run_stage(config, name, None if name == "tokenizer" else "web|2026-02")
            done.append(name)
        return folder / "data"

    return upto


@pytest.fixture
def reference(reference_upto) -> Path:
    return reference_upto("cleaned_documents")


PARTITION = "source=web/snapshot=2026-02"
# stage -> (the folders it writes, its records folder, the result fields naming a task's output files, its
# metadata's counter prefix)
STAGES = {
    "raw_documents": (("raw_documents", "raw_quarantine"), "raw_documents_tasks", ("part", "quarantine_part"), "tasks"),
    "cleaned_documents": (
        ("cleaned_documents", "cleaned_dropped", "cleaned_attributes"), "cleaned_documents_tasks", ("part", "dropped", "attributes"), "tasks",
    ),
    # dedup: the signing tasks are the per-part work (signatures, shingle sets, band rows and text hashes by
    # hash range of each cleaned part)
    "dedup_signatures": (
        ("dedup_signatures", "dedup_shingles", "dedup_bands", "dedup_hashes"), "dedup_signatures_tasks", ("signatures", "shingles", "bands", "hashes"), "tasks",
    ),
    # .docs.parquet files in tokenized_shards, .bin / .idx / .urls in tokenized_binary; none for an empty part
    "tokenized_shards": (("tokenized_shards", "tokenized_binary"), "tokenized_shards_tasks", ("files", "binary_files"), "tasks"),
}


def output_names(record: Path, fields: tuple[str, ...]) -> list[str]:
    result = json.loads(record.read_bytes())["result"]
    entries = [entry for name in fields for entry in (result[name] if isinstance(result[name], list) else [result[name]])]
    return [entry["key"] for entry in entries if entry]


@pytest.mark.parametrize(
    "stage", [stage if stage in ("raw_documents", "cleaned_documents") else pytest.param(stage, marks=pytest.mark.slow) for stage in STAGES]
)
def test_killed_at_half_rerun_runs_only_the_rest_and_matches_an_uninterrupted_run(reference_upto, crawl, tmp_path, stage):
    total = COPIES * 3
    reference = reference_upto(stage)
    config = make_config(tmp_path, crawl)
    work = tmp_path / "data"
    datasets, records_name, fields, counter = STAGES[stage]
    written = (*datasets, records_name)
    shutil.copytree(reference, work)
    for dataset in written:  # this stage's outputs for web/2026-02 (earlier partitions keep theirs)
        shutil.rmtree(work / dataset / PARTITION, ignore_errors=True)
    folder = work / datasets[0] / PARTITION
    folders = [work / dataset / PARTITION for dataset in datasets]
    records = work / records_name / PARTITION
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    kill_at_half(config, stage, records, total, scratch)

    assert not (folder / "_manifest.json").exists()  # killed before publishing
    done = sorted(int(p.name[5:10]) for p in records.iterdir() if p.name.startswith("task-"))
    assert total // 2 <= len(done) < total, done
    before = {k: v for f in folders for k, v in file_stamps(f).items()} | {f"record:{k}": v for k, v in file_stamps(records).items()}

    metadata = run_stage(config, stage)

    after = {k: v for f in folders for k, v in file_stamps(f).items()} | {f"record:{k}": v for k, v in file_stamps(records).items()}
    for part in range(total):
        outputs = output_names(records / f"task-{part:05d}.json", fields)
        assert outputs or stage == "tokenized_shards"
        names = [f"record:task-{part:05d}.json", *outputs]
        assert all(name in after for name in names), names
        unchanged = [name in before and before[name] == after[name] for name in names]
        # A task recorded before the kill is reused: none of its files is written again; any other runs.
        assert all(unchanged) if part in done else not any(unchanged), (part, names)
    assert metadata[f"{counter}_reused"] == len(done)
    assert metadata[f"{counter}_run"] == total - len(done)
    mine = lambda tree: {k: v for k, v in tree.items() if k.split("/", 1)[0] in written}  # noqa: E731
    assert mine(tree_digest(str(work))) == mine(tree_digest(str(reference)))  # published outputs and records, byte for byte
    manifest = json.loads((folder / "_manifest.json").read_bytes())
    assert len(manifest["task_records"]["keys"]) == total


def test_changed_input_file_invalidates_exactly_its_task(reference, crawl, tmp_path):
    """A changed crawl file reruns its raw task only; a changed cleaning setting reruns every cleaning task."""
    copy = tmp_path / "crawl"
    shutil.copytree(crawl, copy)  # copy2 keeps modification times: the copies are the same inputs
    config = make_config(tmp_path, copy)
    shutil.copytree(reference, tmp_path / "data")
    assert run_stage(config, "raw_documents")["tasks_run"] == 0
    changed = sorted((copy / "2026-02").iterdir())[5]
    changed.write_bytes(changed.read_bytes())  # same bytes, new modification time: may have changed
    metadata = run_stage(config, "raw_documents")
    assert (metadata["tasks_run"], metadata["tasks_reused"]) == (1, COPIES * 3 - 1)
    assert run_stage(config, "cleaned_documents")["tasks_run"] == 0  # same raw parts (their digests)
    raw = base_config(str(tmp_path / "data"))
    raw["sources"] = [s if s["name"] != "web" else {**s, "location": str(copy)} for s in raw["sources"]]
    raw["compute"] = {"backend": "local", "max_workers": 2}
    raw["cleaning"]["min_chars"] = 201
    config = write_config(tmp_path / "changed.yaml", raw)
    assert run_stage(config, "cleaned_documents")["tasks_run"] == COPIES * 3


def test_a_tampered_output_is_not_reused(reference, crawl, tmp_path):
    """Reuse checks the output's SHA-256, not only that it exists."""
    config = make_config(tmp_path, crawl)
    shutil.copytree(reference, tmp_path / "data")
    part = tmp_path / "data/cleaned_documents/source=web/snapshot=2026-02/part-00003.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    metadata = run_stage(config, "cleaned_documents")
    assert (metadata["tasks_run"], metadata["tasks_reused"]) == (1, COPIES * 3 - 1)
    assert tree_digest(str(tmp_path / "data")) == tree_digest(str(reference))
