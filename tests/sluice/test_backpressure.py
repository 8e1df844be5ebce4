"""Bounded memory when reading outpaces processing: peak RSS of one ingest task, with the per-record work
slowed down artificially, must not grow with the input size.

Each measurement runs in a fresh process (peak RSS is per process). Inputs of 24 MB and 96 MB of JSONL
(8 KiB records) are ingested while every record's processing sleeps; the reader thread would otherwise
run ahead and queue most of the file. The same measurement with the queue made unbounded shows the growth
the bound prevents, so the test can tell the difference.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import PROJECT_ROOT

RECORD_TEXT = 8 << 10

MEASURE = textwrap.dedent(
    """
    import json, os, random, resource, sys, time
    import sluice.ingest.raw as ingest
    from sluice.ingest.raw import IngestTask, ingest_file

    folder, records, unbounded = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    if unbounded:
        ingest.PREFETCH_MAX_ITEMS = 0  # queue.Queue(0) has no bound
        ingest.PREFETCH_MAX_BYTES = 1 << 62
    slow_row = ingest._raw_row

    def slowed(task, record):  # the processing side is ~10x slower than reading
        time.sleep(0.0008)
        return slow_row(task, record)

    ingest._raw_row = slowed
    os.makedirs(folder + "/in", exist_ok=True)
    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz      "
    with open(folder + "/in/data.jsonl", "w") as handle:
        block = "".join(rng.choice(alphabet) for _ in range({size}))
        for i in range(records):
            handle.write(json.dumps({{"id": str(i), "text": block[i % 97:] + block[: i % 97]}}) + "\\n")
    def peak_kb():
        # VmHWM, reset below: ru_maxrss would keep the peak inherited across fork+exec from a big parent.
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # reset the peak-RSS high-water mark
    except OSError:
        pass
    before = peak_kb()
    result = ingest_file(IngestTask(folder + "/in", "data.jsonl", "s/data.jsonl", "jsonl", {{}}, folder + "/out", 0, "reference", "s"))
    after = peak_kb()
    print(json.dumps({{"records": result["records"], "before_kb": before, "peak_kb": after}}))
    """
).format(size=RECORD_TEXT)


def peak_rss_mb(tmp_path, records: int, unbounded: bool = False) -> float:
    folder = tmp_path / f"{records}-{int(unbounded)}"
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(folder), str(records), "1" if unbounded else "0"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["records"] == records
    return report["peak_kb"] / 1024


@pytest.mark.slow
def test_peak_memory_is_flat_in_input_size_when_processing_is_slow(tmp_path):
    small, large = 3_000, 12_000  # ~24 MB and ~96 MB of input
    bounded = peak_rss_mb(tmp_path, small), peak_rss_mb(tmp_path, large)
    unbounded = peak_rss_mb(tmp_path, small, True), peak_rss_mb(tmp_path, large, True)
    print(f"peak RSS MB, bounded queue: {bounded}; unbounded queue: {unbounded}")
    assert bounded[1] - bounded[0] < 20  # 72 MB more input, (almost) no more memory
    assert unbounded[1] - unbounded[0] > 40  # what the bound prevents (the measurement can see it)
