"""benchmarks/end_to_end.py: its process-tree measurement, and (slow) the whole script on a tiny crawl."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benchmarks.end_to_end import process_tree, run_measured
from tests.support.bench import run_benchmark

PARENT = "import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; x = bytearray(64 << 20); time.sleep(30)']); time.sleep(30)"


def test_the_process_tree_holds_every_descendant_and_their_memory():
    parent = subprocess.Popen([sys.executable, "-c", PARENT])
    try:
        deadline = time.monotonic() + 20
        tree = process_tree(parent.pid)
        while len(tree) < 2 or sum(rss for rss, _ in tree.values()) < 64 << 20:
            assert time.monotonic() < deadline, tree
            time.sleep(0.1)
            tree = process_tree(parent.pid)
        assert parent.pid in tree and len(tree) == 2
        assert process_tree(os.getpid()).keys() >= tree.keys()  # we are their ancestor
    finally:
        parent.kill()
        parent.wait()


def test_run_measured_counts_the_childrens_memory_and_cpu(tmp_path):
    burn = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'x = bytearray(96 << 20); sum(range(3 * 10**7))'])"
    measured = run_measured([sys.executable, "-c", burn], dict(os.environ), tmp_path / "log")
    assert measured["peak_rss_bytes"] >= 96 << 20  # the grandchild's buffer
    assert measured["cpu_reaped_s"] > 0.2 and measured["cpu_s"] >= measured["cpu_reaped_s"]
    with pytest.raises(RuntimeError, match="exited with 3"):
        run_measured([sys.executable, "-c", "import sys; print('bad'); sys.exit(3)"], dict(os.environ), tmp_path / "log")


def test_run_measured_hands_every_sample_of_the_tree_to_its_observer(tmp_path):
    samples = []
    child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; x = bytearray(64 << 20); time.sleep(1.5)'])"
    run_measured([sys.executable, "-c", child], dict(os.environ), tmp_path / "log", observe=lambda root, tree: samples.append((root, dict(tree))))
    assert len(samples) >= 3 and len({root for root, _ in samples}) == 1
    root = samples[0][0]
    assert any(len(tree) >= 2 and root in tree for _, tree in samples)  # the command and its child
    assert max(rss for _, tree in samples for pid, (rss, _) in tree.items() if pid != root) >= 64 << 20


@pytest.mark.slow
def test_the_benchmark_runs_the_graph_on_a_tiny_crawl(tmp_path):
    _, figures = run_benchmark("end_to_end.py", ["--scales", "0.1", "--skip-datatrove"], tmp_path)
    assert float(figures["end_to_end_near_dup_recall_0.1x"]) >= 0.9
    assert float(figures["end_to_end_near_dup_precision_0.1x"]) >= 0.9
    assert float(figures["end_to_end_pages_per_s_per_core_0.1x"]) > 0
    assert (tmp_path / "crawl-0.1x" / "truth.parquet").exists()


def test_the_same_steps_config_turns_off_what_datatroves_pipeline_lacks_and_nothing_else(tmp_path):
    """The config of the headline ratio's run, loaded by sluice's own validation."""
    from benchmarks.end_to_end import write_config
    from sluice.config import load_config

    crawl = tmp_path / "crawl"
    (crawl / "web").mkdir(parents=True)
    (tmp_path / "default").mkdir()
    (tmp_path / "same").mkdir()
    default = load_config(write_config(crawl, tmp_path / "default", 1))
    same = load_config(write_config(crawl, tmp_path / "same", 1, same_steps=True))
    assert default.cleaning.toxicity.enabled and default.cleaning.code_share.enabled and default.cleaning.pii.enabled
    assert default.cleaning.url_blocklist and default.cleaning.min_chars > 0 and default.dedup.verify_min_jaccard is not None
    off = same.cleaning
    assert not (off.toxicity.enabled or off.code_share.enabled or off.url_blocklist or off.min_chars)
    assert off.pii == default.cleaning.pii  # the graph's blocking no_pii_left check needs redaction on
    assert same.dedup.verify_min_jaccard is None
    # datatrove's rule definitions and extractor call: preset datatrove, no second opinion, no skipped chrome
    assert (off.preset, off.word_splitting, off.gopher_quality.alpha_words) == ("datatrove", "english", "tokens")
    assert off.c4.curly_bracket_code_lines == "drop_document"
    assert off.extraction.second_opinion is None and off.extraction.skip_elements == [] and off.extraction.link_density is None
    restored = {"second_opinion": "trafilatura", "skip_elements": default.cleaning.extraction.skip_elements,
                "link_density": default.cleaning.extraction.link_density}
    assert off.extraction.model_copy(update=restored) == default.cleaning.extraction
    # the filters' thresholds, the language threshold and the rest of the graph are untouched
    assert off.gopher_quality.model_copy(update={"alpha_words": "whitespace", "stop_word_count": "occurrences"}) == default.cleaning.gopher_quality
    assert off.c4.model_copy(update={"curly_bracket_code_lines": "remove_line"}) == default.cleaning.c4
    assert off.fineweb_quality.model_copy(update={"variant": "fineweb"}) == default.cleaning.fineweb_quality
    for name in ("gopher_repetition", "min_language_score", "max_chars"):
        assert getattr(off, name) == getattr(default.cleaning, name), name
    assert same.mixes == default.mixes and same.tokenizer == default.tokenizer
    assert same.dedup.model_copy(update={"verify_min_jaccard": 0.8}) == default.dedup.model_copy(update={"verify_min_jaccard": 0.8})
