"""scripts/update_bench_results.py: the results table of docs/benchmarks/results.md is rebuilt from the benchmarks'
figure: lines; the page's text around the marked table stays."""

from __future__ import annotations

import pytest

from scripts import update_bench_results as update

LOG = """\
some progress output
figure: cleaning_docs_per_s_ratio[resiliparse both sides, 520 pages, 13 langs, CPU time] = 7.21 (goal >= 10)
figure: filter_decision_agreement[same texts | english] = 0.977 (goal >= 0.97)
figure: end_to_end_peak_rss_ratio_16x_over_1x[16x / 1x] = 1.1 (goal <= 1.3)
figure: minhash_docs_per_s_per_core = 963 (goal as high as possible)
figure: loader_tokens_per_s_1e7_vs_1e6 (1e8 skipped) = 0.95 (goal >= 0.9)
not a figure: x = 1 (goal >= 2)
"""


def test_figure_lines_are_parsed_with_their_configuration():
    items = update.parse(LOG)
    assert [item["name"] for item in items] == [
        "cleaning_docs_per_s_ratio", "filter_decision_agreement", "end_to_end_peak_rss_ratio_16x_over_1x", "minhash_docs_per_s_per_core",
        "loader_tokens_per_s_1e7_vs_1e6 (1e8 skipped)",
    ]
    assert items[0]["config"] == "resiliparse both sides, 520 pages, 13 langs, CPU time"
    assert items[0]["value"] == "7.21" and items[0]["goal"] == ">= 10"
    assert items[3]["config"] is None


@pytest.mark.parametrize(
    ("value", "goal", "met"),
    [("7.21", ">= 10", "**no**"), ("12", ">= 10", "yes"), ("16.9", ">= 10x", "yes"), ("1.1", "<= 1.3", "yes"), ("1.4", "<= 1.3", "**no**"),
     ("963", "as high as possible", ""), ("0.5", "informational", "")],
)
def test_goals_that_are_bounds_are_checked(value, goal, met):
    assert update.goal_met(value, goal) == met


def test_only_the_marked_block_is_replaced(tmp_path):
    results = tmp_path / "results.md"
    results.write_text(f"# title\nbefore\n{update.FIGURES_BEGIN}\nold table\n{update.FIGURES_END}\nafter\n")
    log = tmp_path / "cleaning.log"
    log.write_text(LOG)
    assert update.main([str(log), "--results", str(results)]) == 0
    text = results.read_text()
    assert text.startswith("# title\nbefore\n") and text.endswith(f"{update.FIGURES_END}\nafter\n")
    assert "old table" not in text
    assert "| `cleaning` | `cleaning_docs_per_s_ratio` | resiliparse both sides, 520 pages, 13 langs, CPU time | 7.21 | >= 10 | **no** |" in text
    assert "same texts \\| english" in text  # a | in a configuration does not break the table
    assert update.main([str(log), "--results", str(results)]) == 0  # idempotent: the markers stay
    assert results.read_text().count(update.FIGURES_BEGIN) == 1


def test_a_page_without_markers_or_logs_without_figures_is_an_error(tmp_path):
    results = tmp_path / "results.md"
    results.write_text("# no markers\n")
    log = tmp_path / "x.log"
    log.write_text(LOG)
    with pytest.raises(ValueError):
        update.main([str(log), "--results", str(results)])
    log.write_text("nothing here\n")
    assert update.main([str(log), "--results", str(results)]) == 1


def test_keep_others_replaces_only_the_rows_of_the_scripts_given(tmp_path, monkeypatch):
    monkeypatch.setattr(update, "machine", lambda: "machine A, 2 cores")
    results = tmp_path / "results.md"
    old_table = (
        "Measured 2026-11-23 21:17 UTC on some machine; `make bench` (scripts: cleaning, loader).\n\n"
        "| script | figure | configuration | value | goal | met |\n|---|---|---|---|---|---|\n"
        "| `cleaning` | `cleaning_docs_per_s_ratio` | old config | 6.5 | >= 10 | **no** |\n"
        "| `loader` | `loader_resume_ms` | 1e6 ranges \\| mapped | 5.1 | <= 50 | yes |\n"
    )
    results.write_text(f"{update.FIGURES_BEGIN}\n{old_table}{update.FIGURES_END}\n")
    log = tmp_path / "cleaning.log"
    log.write_text(LOG)
    assert update.main([str(log), "--results", str(results), "--keep-others"]) == 0
    text = results.read_text()
    assert "old config" not in text and "| 7.21 | >= 10 | **no** |" in text
    # the other script's row stays, dated by the table it came from; the new rows by their log
    assert "| `loader` | `loader_resume_ms` | 1e6 ranges \\| mapped | 5.1 | <= 50 | yes | 2026-11-23 21:17 UTC |" in text
    assert f"| {update.stamp_of(log)} on machine A, 2 cores |" in text and "(scripts: cleaning, loader)" in text
    assert update.main([str(log), "--results", str(results), "--keep-others"]) == 0  # a second run keeps the same rows
    assert results.read_text().count("`loader_resume_ms`") == 1
    assert update.main([str(log), "--results", str(results)]) == 0  # without the option only the logs' rows remain
    assert "`loader_resume_ms`" not in results.read_text()


def test_keep_others_keeps_the_figures_a_partial_run_did_not_print(tmp_path, monkeypatch):
    """`end_to_end.py --skip-datatrove` prints no `end_to_end_vs_datatrove`: that row stays with its own date,
    the figures the run printed are replaced."""
    results = tmp_path / "results.md"
    old_table = (
        "| script | figure | configuration | value | goal | met | measured |\n|---|---|---|---|---|---|---|\n"
        "| `end_to_end` | `end_to_end_vs_datatrove` | 1x | 1.28 | >= 5 | **no** | 2026-11-27 20:41 UTC |\n"
        "| `end_to_end` | `end_to_end_graph_over_steps_16x` | 16x / 1x | 1.46 | <= 1.3 | **no** | 2026-11-27 20:41 UTC |\n"
    )
    results.write_text(f"{update.FIGURES_BEGIN}\n{old_table}{update.FIGURES_END}\n")
    log = tmp_path / "end_to_end.log"
    log.write_text("figure: end_to_end_graph_over_steps_16x[16x / 1x] = 1.23 (goal <= 1.3)\n")
    monkeypatch.setattr(update, "machine", lambda: "machine A, 2 cores")
    assert update.main([str(log), "--results", str(results), "--keep-others"]) == 0
    text = results.read_text()
    assert "| `end_to_end` | `end_to_end_vs_datatrove` | 1x | 1.28 | >= 5 | **no** | 2026-11-27 20:41 UTC |" in text
    assert "| 1.46 |" not in text and f"| 1.23 | <= 1.3 | yes | {update.stamp_of(log)} on machine A, 2 cores |" in text


def test_the_docs_results_page_holds_one_marked_table():
    """`make bench` rewrites docs/benchmarks/results.md: its markers are there once, in order, around a table."""
    page = update.RESULTS.read_text(encoding="utf-8")
    assert page.count(update.FIGURES_BEGIN) == 1 and page.count(update.FIGURES_END) == 1
    block = update.block_of(page)
    assert update.HEADER[0] in block
    assert update.ROW_SCRIPT.match(next(line for line in block.splitlines() if line.startswith("| `")))


def test_kept_rows_keep_the_machine_they_were_measured_on(tmp_path, monkeypatch):
    """A partial re-run on another machine (or under another load) names that machine on its own rows only:
    the rows it keeps still name the machine of the run that measured them."""
    results = tmp_path / "results.md"
    results.write_text(f"{update.FIGURES_BEGIN}\n{update.FIGURES_END}\n")
    first, second = tmp_path / "cleaning.log", tmp_path / "loader.log"
    first.write_text(LOG)
    second.write_text("figure: loader_resume_ms[1e6 ranges] = 5.1 (goal <= 50)\n")
    monkeypatch.setattr(update, "machine", lambda: "machine A, 2 cores")
    assert update.main([str(first), "--results", str(results)]) == 0
    monkeypatch.setattr(update, "machine", lambda: "machine B, 16 cores")
    assert update.main([str(second), "--results", str(results), "--keep-others"]) == 0
    rows = [line for line in results.read_text().splitlines() if line.startswith("| `")]
    assert rows and all(line.endswith("on machine A, 2 cores |") for line in rows if line.startswith("| `cleaning`"))
    assert [line for line in rows if line.startswith("| `loader`")][0].endswith("on machine B, 16 cores |")
