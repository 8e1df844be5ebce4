"""benchmarks/sizing.py: the at-scale sizing table is fitted from partition_scale's measurements: CPU goes to
the steps running when it was spent, a line through two sizes is recovered exactly, a process whose peak
grew is marked as growing, and the docs page holds the one marked block the benchmark rewrites."""

from __future__ import annotations

import pytest

from benchmarks import sizing


def test_cpu_growth_goes_in_equal_shares_to_the_steps_running_then():
    cpu = sizing.StageCpu()
    cpu(1, {10: (0, 1.0)}, when=0.0)  # a process seen first with 1 s: counted whole
    cpu(1, {10: (0, 3.0), 11: (0, 0.5)}, when=1.0)  # +2 s and a new process's 0.5 s
    cpu(1, {10: (0, 4.0)}, when=2.0)  # +1 s (process 11 gone)
    steps = {"clean": [(0.5, 2.5)], "dedup": [(1.5, 2.5)]}
    assert cpu.by_step(steps) == {"(no step)": 1.0, "clean": 2.5 + 0.5, "dedup": 0.5}
    assert sum(cpu.by_step(steps).values()) == pytest.approx(4.5)  # nothing lost or counted twice


def test_a_line_through_two_sizes_is_recovered_and_evaluated():
    points = [(10_000, 100 + 3 * 10_000), (100_000, 100 + 3 * 100_000)]
    assert sizing.fit(points) == pytest.approx((100, 3))
    assert sizing.at(points, 10**9) == pytest.approx(100 + 3e9)
    assert sizing.fit([(1_000, 5.0), (10_000, 4.0), (100_000, 4.0)]) == pytest.approx((4.0, 0.0))  # the two largest


def result(n: int, run_process: int, worker: int) -> dict:
    return {
        "documents": n, "compute": "local",
        "kinds": {"run process": {"peak_rss_bytes": run_process}, "pool worker": {"peak_rss_bytes": worker}},
        "stage_cpu_s": {"cleaned_documents": 0.01 * n, "dedup_clusters": 0.002 * n},
        "datasets": {"dedup_index": {"files": 3, "bytes": 40 * n}},
    }


def test_a_flat_process_is_printed_flat_and_a_growing_one_is_marked_and_extrapolated():
    runs = [result(10_000, 300 * 2**20, 270 * 2**20), result(100_000, 1000 * 2**20, 275 * 2**20)]
    table = dict(sizing.rows(runs))
    assert all(value == "275 MiB (flat)" for value in table["peak memory per process: pool worker"])
    assert all(value.endswith("(grows)") for value in table["peak memory per process: run process"])
    assert table["core-hours: cleaned_documents"][1] == sizing.human(0.01 * 10**9 / 3600, "")
    assert table["dedup index over 100 partitions of history"][0] == sizing.human(100 * 40 * 10**6, "bytes")


def test_the_page_holds_one_marked_block_and_a_page_without_one_is_an_error():
    page = sizing.PAGE.read_text()
    assert page.count(sizing.SIZING_BEGIN) == 1 and page.count(sizing.SIZING_END) == 1
    runs = [result(10_000, 300, 270), result(100_000, 310, 275)]
    rewritten = sizing.rewrite(page, sizing.table(runs))
    assert rewritten.split(sizing.SIZING_BEGIN)[0] == page.split(sizing.SIZING_BEGIN)[0]  # the text around stays
    assert rewritten.split(sizing.SIZING_END)[1] == page.split(sizing.SIZING_END)[1]
    with pytest.raises(ValueError):
        sizing.rewrite("no markers", "table")


def test_requests_counted_by_the_server_become_a_row_only_when_every_size_has_them():
    runs = [result(10_000, 300, 270), result(100_000, 310, 275)]
    assert not any(name.startswith("object-store requests") for name, _ in sizing.rows(runs))
    runs[0]["s3_requests"], runs[1]["s3_requests"] = {"GET": 100, "PUT": 60}, {"GET": 1000, "PUT": 600}
    table = dict(sizing.rows(runs))
    assert table["object-store requests (every process, as the S3 server counts them)"][0] == sizing.human(16 * 10**6 / 1000, "")
