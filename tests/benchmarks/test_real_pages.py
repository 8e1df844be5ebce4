"""benchmarks/real_pages.py: the shipped real-page set loads, and its token scores are what they claim."""

from __future__ import annotations

import pytest

from benchmarks.real_pages import DEPARTURES, decisions, gold_text, load_pages, scores, tokens


def test_token_scores_against_a_hand_count():
    # extracted a b c d, gold a b e: 2 tokens in common, precision 2/4, recall 2/3
    precision, recall, f1 = scores("A b, c d.", "a B e")
    assert (precision, recall) == (0.5, pytest.approx(2 / 3))
    assert f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert scores("", "a b") == (0.0, 0.0, 0.0) and scores("x", "a") == (0.0, 0.0, 0.0)
    # repeated words count as often as they occur (bags, not sets); a CJK character is one token
    assert scores("go go go", "go")[0] == pytest.approx(1 / 3)
    assert tokens("東京タワーabc") == {"東": 1, "京": 1, "タ": 1, "ワ": 1, "ー": 1, "a": 1, "b": 1, "c": 1}


def test_gold_text_puts_blocks_on_their_own_lines():
    text = gold_text(b"<div><h1>Title</h1><p>First <b>bold</b> para.</p><ul><li>one</li><li>two</li></ul></div>")
    assert [line for line in text.splitlines() if line.strip()] == ["Title", "First bold para.", "one", "two"]


def test_the_shipped_set_holds_the_articles_with_their_gold_text():
    pages = load_pages()
    names = [page["name"] for page in pages]
    assert len(pages) == 91 and len(set(names)) == 91  # 93 real pages, 2 marked readerable: false
    assert all(len(page["gold"]) > 100 and "<" not in page["gold"][:200] for page in pages)
    assert {"nytimes-1", "lemonde-1", "heise", "qq"} <= set(names)  # news in several languages


def test_paired_bootstrap_interval_brackets_the_mean_difference():
    from benchmarks.real_pages import paired_bootstrap

    ours = {f"p{i}": 0.5 + 0.01 * i for i in range(40)}
    assert paired_bootstrap(ours, {name: value - 0.1 for name, value in ours.items()}) == pytest.approx((0.1, 0.1))
    mixed = {name: value + (0.2 if i % 2 else -0.2) for i, (name, value) in enumerate(ours.items())}
    low, high = paired_bootstrap(ours, mixed)
    assert low < 0.0 < high and high - low < 0.3  # mean difference 0, spread from resampling 40 pages


def test_the_non_article_pages_load_apart_and_a_reverted_departure_shows_as_a_changed_decision():
    junk = load_pages(articles=False)
    assert len(junk) == 2 and not any(page["gold"] for page in junk)
    # The Mercurial how-to's gold text has one shell line with a `{...}` template (its only curly bracket).
    mercurial = next(page for page in load_pages() if page["name"] == "mercurial")
    assert mercurial["gold"].count("{") == 3 and "--template '{rev}" in mercurial["gold"]
    document = [("mercurial", "https://example.org/mercurial", "text/plain", mercurial["gold"].encode(), "utf-8")]
    assert decisions(document, {}) == ["kept"]
    assert decisions(document, DEPARTURES["c4.curly_bracket_code_lines: drop_document"]) == ["curly_bracket"]
