"""Node faults on Ray: the first three stages of a partition run on a two-node Ray cluster started on
127.0.0.1 (`ray start --head` and `ray start --address=...`); the second node is SIGKILLed mid-run
(raylet and workers, like a machine failure). Ray retries the lost tasks on the surviving node, the run
succeeds, its outputs equal an uninterrupted run's byte for byte, and the Dagster run records the loss.
"""

from __future__ import annotations

import gzip
import json
import random
import threading
import time

import pytest

from tests.conftest import SAMPLE, base_config, tree_digest, write_config
from tests.support.ray_cluster import RayCluster

pytestmark = pytest.mark.slow
STAGES = ["raw_documents", "cleaned_documents", "dedup_signatures", "dedup_index", "dedup_clusters", "deduped_documents"]
FILES = 24  # enough per-file tasks that the stages outlast the moment of the kill


def make_crawl(folder) -> str:
    """reference/2026-01 with FILES JSONL files: the sample's lines, each file's text made distinct."""
    lines = gzip.decompress((SAMPLE / "reference" / "2026-01" / "debian-reference.jsonl.gz").read_bytes()).splitlines()
    snapshot = folder / "reference" / "2026-01"
    snapshot.mkdir(parents=True)
    for index in range(FILES):
        rows = []
        for line in lines:
            item = json.loads(line)
            item["id"] = f"{item.get('id')}-{index}"
            item["text"] = f"{item['text']}\n\nCopy {index} of this page, kept for the node-fault test."
            rows.append(json.dumps(item))
        (snapshot / f"part-{index:03d}.jsonl.gz").write_bytes(gzip.compress("\n".join(rows).encode(), mtime=0))
    return str(folder / "reference")


def test_worker_node_killed_mid_stage_completes_identically(tmp_path, monkeypatch):
    import ray
    from dagster import DagsterInstance, materialize

    from data_assets.cli import register_snapshots
    from data_assets.definitions import ASSETS, build_resources
    from data_assets.partitions import multi_key

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    crawl = make_crawl(tmp_path / "crawl")
    with RayCluster(head_cpus=1, worker_cpus=2) as cluster:
        def run(root: str, name: str):
            raw = base_config(root)
            raw["sources"][1]["location"] = crawl
            raw["compute"] = {"backend": "ray", "max_workers": 3, "ray_address": cluster.address}
            resources = build_resources(write_config(tmp_path / f"{name}.yaml", raw))
            with DagsterInstance.ephemeral() as instance:
                register_snapshots(instance, resources)
                result = materialize(ASSETS, selection=STAGES, partition_key=multi_key("reference", "2026-01"), instance=instance, resources=resources)
                logs = [entry.user_message for entry in instance.all_logs(result.run_id)]
            return result, logs

        try:
            run(str(tmp_path / "warmup"), "warmup")  # connects the driver, warms the workers
            started = time.monotonic()
            reference, _ = run(str(tmp_path / "reference"), "reference")
            duration = time.monotonic() - started
            assert reference.success

            outcome: dict = {}
            worker = threading.Thread(target=lambda: outcome.update(zip(("result", "logs"), run(str(tmp_path / "faulty"), "faulty"), strict=True)))
            worker.start()
            kill_at = random.Random(5).uniform(0.2, 0.4) * duration
            time.sleep(kill_at)
            assert worker.is_alive(), "the run ended before the node could be killed"
            killed = cluster.kill_worker_node()
            worker.join(timeout=600)
        finally:
            ray.shutdown()
    result = outcome["result"]
    assert result.success
    print(f"ray node fault: killed {killed} processes of the worker node after {kill_at:.1f} of {duration:.1f} s")
    # Whichever stage notices the loss (Ray marks a node dead after its health checks fail, so the next
    # stage may be the one) says so in the run's log.
    lost = [line for line in outcome["logs"] if "Ray nodes died" in line]
    assert lost, outcome["logs"][-20:]
    assert tree_digest(str(tmp_path / "faulty")) == tree_digest(str(tmp_path / "reference"))
