"""sluice.whatif_report: the flips counted per source x snapshot x language x flip class (checked against a
count by hand of the same rows), samples chosen by id hash whatever the row order, deterministic and escaped
output."""

from __future__ import annotations

import random
from collections import Counter

import polars as pl

from sluice.storage import open_store
from sluice.whatif_report import FlipSample, flip_counts, render_html, render_png, sample_ids, write_report


def flips(n: int = 60, seed: int = 1) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kept_now = rng.random() < 0.4
        rule = None if kept_now else rng.choice(["min_chars", "gopher_short_doc", "fineweb_line_punct_ratio"])
        rows.append({
            "doc_id": f"d{i:03d}", "source": rng.choice(["web", "news"]), "snapshot": rng.choice(["2026-01", "2026-02"]),
            "language": rng.choice(["en", "de"]), "before": "dropped" if kept_now else "kept", "after": "kept" if kept_now else "dropped",
            "rule": rule, "before_rule": rng.choice(["min_chars", "language_score"]) if kept_now else None, "tokens": rng.randrange(10, 500),
        })
    return pl.DataFrame(rows)


def test_counts_equal_a_count_by_hand_with_the_before_rule_for_documents_newly_kept():
    frame = flips()
    expected_docs, expected_tokens = Counter(), Counter()
    for row in frame.iter_rows(named=True):
        key = (row["source"], row["snapshot"], row["language"], row["before"], row["after"], row["rule"] or row["before_rule"])
        expected_docs[key] += 1
        expected_tokens[key] += row["tokens"]
    counts = flip_counts(frame)
    got = {tuple(row[:6]): (row[6], row[7]) for row in counts.iter_rows()}
    assert got == {key: (expected_docs[key], expected_tokens[key]) for key in expected_docs}
    assert counts.equals(flip_counts(frame.sample(fraction=1.0, shuffle=True, seed=3)))  # any row order, same rows


def test_samples_are_chosen_by_id_hash_whatever_the_order_and_stay_in_their_class():
    frame = flips(200)
    chosen = sample_ids(frame, 3)
    assert chosen == sample_ids(frame.reverse(), 3)
    classes = {row["doc_id"]: (row["before"], row["after"], row["rule"] or row["before_rule"]) for row in frame.iter_rows(named=True)}
    for key, ids in chosen.items():
        assert 0 < len(ids) <= 3 and all(classes[doc_id] == key for doc_id in ids)
    assert set(chosen) == set(classes.values())
    assert sample_ids(frame, 3, seed="other") != chosen  # the seed, not the order, decides


def test_picture_is_deterministic_and_draws_the_flips():
    frame = flips()
    png = render_png(flip_counts(frame))
    assert png.startswith(b"\x89PNG") and png == render_png(flip_counts(frame))
    assert render_png(flip_counts(frame.head(10))) != png
    assert render_png(flip_counts(frame.head(0))).startswith(b"\x89PNG")  # no flips still draws a picture


def test_page_marks_the_statistic_that_moved_and_escapes_every_text(tmp_path):
    sample = FlipSample("d<1>", "web", "2026-01", "kept", "dropped", "min_chars", "chars", 312, 200, 400, "<script>alert(1)</script>" + "x" * 5000)
    page = render_html(flip_counts(flips()), [sample])
    assert "<mark>chars = 312</mark>: threshold 200 &rarr; 400" in page
    assert "<script>" not in page and "&lt;script&gt;" in page and "d&lt;1&gt;" in page
    assert "x" * 1300 not in page  # an excerpt, not the whole text
    sizes = write_report(open_store(str(tmp_path)), flips(), [sample])
    assert {p.name: p.stat().st_size for p in tmp_path.iterdir()} == sizes
