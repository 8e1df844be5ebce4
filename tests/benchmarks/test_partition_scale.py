"""benchmarks/partition_scale.py: its planted truth (fast), and the benchmark at two tiny sizes (slow)."""

from __future__ import annotations

import re

import pytest

from benchmarks import partition_scale
from sluice.dedup.minhash import shingles
from tests.support.bench import run_benchmark


def jaccard(a: str, b: str) -> float:
    first, second = set(shingles(a, 5)), set(shingles(b, 5))
    return len(first & second) / len(first | second)


def test_the_snapshot_is_seeded_and_its_planted_copies_are_near_their_originals():
    docs = list(partition_scale.documents(3000, seed=7))
    assert docs == list(partition_scale.documents(3000, seed=7))
    assert docs != list(partition_scale.documents(3000, seed=8))
    texts = {doc_id: text for doc_id, text, _ in docs}
    copies = [(doc_id, group) for doc_id, _, group in docs if group != doc_id]
    assert 0.02 * len(docs) < len(copies) < 0.04 * len(docs)
    for doc_id, group in copies:
        assert int(group[1:]) < int(doc_id[1:])  # the original comes first, as dedup keeps the first
        assert 0.8 <= jaccard(texts[doc_id], texts[group]) < 1
    originals = [text for doc_id, text, group in docs if group == doc_id][:200]
    assert max(jaccard(a, b) for a, b in zip(originals, originals[1:], strict=False)) < 0.2


def test_process_kinds_follow_the_place_in_the_tree():
    run = "command>python -m data_assets.daemon>python -m dagster>python -B -c"
    assert [partition_scale.kind_of(name) for name in (
        "command", "command>python -m data_assets.daemon", "command>python -m data_assets.daemon>python -m dagster", run,
        f"{run}>forkserver", f"{run}>forkserver>child", f"{run}>forkserver>child>forkserver>child", f"{run}>tail -F -c",
        f"{run}>raylet --raylet_socket_name",
    )] == ["command", "daemon", "code server", "run process", "forkserver", "pool worker", "cleaning child", "log helper", "ray service"]
    assert partition_scale.kind_of(f"{run}>raylet raylet plasma_store>ray::run_recorded", "ray::run_recorded") == "ray worker"
    assert partition_scale.kind_of(f"{run}>raylet raylet plasma_store>ray::IDLE", "ray::IDLE") == "ray worker"
    tracker = "python -B -c from multiprocessing.resource_tracker import main;main(11)"
    assert partition_scale.kind_of("command>python -m data_assets.daemon>python -m dagster>python -B -c", tracker) == "resource tracker"
    assert partition_scale.kind_of(f"{run}>python -B -c", tracker) == "resource tracker"


@pytest.mark.slow
def test_the_benchmark_measures_every_process_kind_at_two_sizes(tmp_path):
    out, figures = run_benchmark("partition_scale.py", ["--sizes", "2000", "4000", "--sizing-page", ""], tmp_path)  # the docs stay as measured
    for size in (2000, 4000):
        counts = re.search(rf"^{size} documents.*\n.*documents raw (\d+), cleaned (\d+), deduped (\d+)", out, re.MULTILINE)
        assert counts, out
        raw, cleaned, deduped = map(int, counts.groups())
        assert raw == size and 0.9 * size < cleaned <= raw and 0.95 * cleaned < deduped < cleaned
        # every planted copy is within J 0.87 of its original: all found, nothing else removed
        assert float(figures[f"partition_scale_near_dup_recall_{size}"]) >= 0.95
        assert float(figures[f"partition_scale_near_dup_precision_{size}"]) >= 0.99
        assert float(figures[f"partition_scale_cpu_ms_per_doc_{size}"]) > 0
    for kind in ("command", "daemon", "code_server", "run_process", "pool_worker"):
        assert 0.3 < float(figures[f"partition_scale_peak_rss_ratio_4000_over_2000_{kind}"]) < 5, kind
    assert 0.2 < float(figures["partition_scale_cpu_per_doc_ratio_4000_over_2000"]) < 2
    assert "partition_scale_largest_process_bytes_per_doc_4000_vs_2000" in figures


def test_a_fork_before_its_exec_is_told_from_the_process_it_becomes():
    import os
    import signal
    import subprocess
    import sys
    import time

    with open("/proc/self/cmdline", "rb") as cmdline:
        own = cmdline.read()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only waits to be killed
        time.sleep(30)
        os._exit(0)
    try:
        assert partition_scale.forked_before_exec(child, own)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    execed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.5)
        with open(f"/proc/{execed.pid}/cmdline", "rb") as cmdline:
            assert not partition_scale.forked_before_exec(execed.pid, cmdline.read())
    finally:
        execed.kill()
        execed.wait()


def test_a_run_process_peak_is_given_per_step_it_ran():
    peaks = partition_scale.ProcessPeaks()
    name = "command>python -m data_assets.daemon>python -m dagster>python -B -c"
    peaks.peaks, peaks.kinds = {(7, name): (300, 5.0)}, {(7, name): "run process"}
    peaks.timelines[7] = [(1.0, 100), (2.0, 200), (3.0, 150), (5.0, 300), (6.0, 250)]
    steps = {"raw_documents": [(0.5, 2.5)], "dedup_clusters": [(4.0, 7.0)], "mixed_dataset": [(8.0, 9.0)]}
    assert peaks.run_processes(steps) == [(300, ["dedup_clusters"], {"raw_documents": 200, "dedup_clusters": 300})]


def test_the_s3_request_counter_counts_what_every_client_sent(monkeypatch):
    """`SeaweedS3.request_counts` (partition_scale's `--store s3` figures) is the server's own counter: the
    bucket's creation, 3 PUTs, 2 ranged GETs (one through sluice's presigned path) and a listing, exactly."""
    import sluice.io.storage
    from benchmarks.s3_server import shared_server, use_credentials
    from sluice.config import S3Settings
    from sluice.io.storage import open_store

    with shared_server() as server:
        bucket = server.create_bucket("counted")
        client = server.client()
        for index in range(3):
            client.put_object(Bucket=bucket, Key=f"k{index}", Body=b"0123456789")
        client.get_object(Bucket=bucket, Key="k0", Range="bytes=2-4")
        use_credentials(monkeypatch, server.access_key, server.secret_key)
        try:
            assert open_store(f"s3://{bucket}", S3Settings(endpoint_url=server.endpoint_url)).read_range("k1", 3, 2) == b"34"
        finally:
            sluice.io.storage._CLIENTS.clear()
        client.list_objects_v2(Bucket=bucket)
        assert server.request_counts(bucket) == {"PUT": 4, "GET": 2, "LIST": 1}
        assert server.request_counts("no-such-bucket") == {}
