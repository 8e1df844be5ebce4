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


def test_the_held_out_set_loads_apart_from_the_tuned_set():
    from benchmarks.real_pages import load_heldout

    pages = load_heldout()
    assert len(pages) == 267 and len({page["url"] for page in pages}) == 267 and len({page["name"] for page in pages}) == 267
    assert all(1 <= len(page["with"]) <= 6 and 1 <= len(page["without"]) <= 6 for page in pages)  # trafilatura's bounds
    assert all("<" in page["html"][:5000] and "\ufffd" not in page["html"] for page in pages[:50])  # decoded HTML
    tuned = {page["html"] for page in load_pages()} | {page["html"] for page in load_pages(articles=False)}
    assert not tuned & {page["html"] for page in pages}  # no page of the tuned set is held out


def _build_script():
    import importlib.util

    from benchmarks.real_pages import ROOT

    spec = importlib.util.spec_from_file_location("build_trafilatura_pages", ROOT / "scripts" / "build_trafilatura_pages.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)  # type: ignore[union-attr]
    return build


def _first_digit(url: str) -> str:
    import hashlib

    return hashlib.sha256(url.encode()).hexdigest()[0]


def test_the_two_splits_built_from_one_repository_share_no_page(tmp_path):
    """Both archives built by the script from a git repository laid out as trafilatura's evaluation."""
    import json
    import subprocess
    import tarfile

    build = _build_script()
    work = tmp_path / "trafilatura"
    (work / "tests" / "eval").mkdir(parents=True)
    evaldata = {}
    for i in range(64):
        url = f"https://example.org/page-{i}"
        evaldata[url] = {"file": f"page-{i}.html", "with": ["a"], "without": ["b"]}
        (work / "tests" / "eval" / f"page-{i}.html").write_text(f"<html><p>page {i}</p></html>")
    (work / "tests" / "evaldata.json").write_text(json.dumps(evaldata))
    (work / "LICENSE").write_text("Apache License 2.0")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "eval"], check=True)
    urls = {}
    for split in ("heldout", "dev"):
        out = build.build(str(work / ".git"), split, tmp_path / split / f"{split}-pages.tar.xz")
        with tarfile.open(out, "r:xz") as archive:
            urls[split] = set(json.load(archive.extractfile("annotations.json")))  # type: ignore[arg-type]
            assert {m.name for m in archive.getmembers()} == {"annotations.json"} | {f"pages/{evaldata[u]['file']}" for u in urls[split]}
    expected = {split: {u for u in evaldata if _first_digit(u) in build.SPLITS[split][0]} for split in urls}
    assert urls == expected and urls["heldout"] and urls["dev"]  # chosen by the URL alone
    assert not urls["heldout"] & urls["dev"]


def test_the_held_out_archive_holds_only_its_split():
    from benchmarks.real_pages import load_heldout

    build = _build_script()
    heldout_digits, dev_digits = build.SPLITS["heldout"][0], build.SPLITS["dev"][0]
    assert not set(heldout_digits) & set(dev_digits)
    assert all(_first_digit(page["url"]) in heldout_digits for page in load_heldout())


@pytest.mark.may_skip  # the development archive is built from a clone of trafilatura's repository, never shipped
def test_the_built_development_archive_holds_only_its_split():
    from benchmarks.real_pages import DEV, load_heldout

    if not DEV.exists():
        pytest.skip(f"{DEV} is built on demand (scripts/build_trafilatura_pages.py --split dev)")
    dev = load_heldout(DEV)
    assert len(dev) == 252 and all(_first_digit(page["url"]) in _build_script().SPLITS["dev"][0] for page in dev)


def test_the_development_set_asked_for_but_not_built_is_an_error_naming_the_build(tmp_path, monkeypatch, capsys):
    import benchmarks.real_pages as real_pages

    monkeypatch.setattr(real_pages, "DEV", tmp_path / "absent.tar.xz")
    monkeypatch.setattr("sys.argv", ["real_pages.py", "--sets", "dev"])
    with pytest.raises(SystemExit):
        real_pages.main()
    assert "--split dev" in capsys.readouterr().err


def test_snippet_counts_follow_trafilaturas_evaluation():
    from benchmarks.real_pages import snippet_counts

    page = {"with": ["Die GEMA dreht völlig am Zeiger!", "http://www.openpetition.de"], "without": ["31. Mai", "Impressum", "Steuerdarling"]}
    # whitespace-normalized substring match: line breaks and runs of spaces inside a snippet still match
    assert snippet_counts("Text. Die GEMA  dreht\nvöllig am Zeiger! See http://www.openpetition.de now", page) == (2, 0, 0, 3)
    # case-sensitive, as trafilatura's count_item: "impressum" is not the must-not-contain "Impressum"
    assert snippet_counts("impressum 31. Mai", page) == (0, 1, 2, 2)
    assert snippet_counts("", page) == (0, 0, 2, 3)


def test_a_real_page_whose_snippets_are_all_present_scores_recall_one():
    from benchmarks.real_pages import heldout_articles, load_heldout, pooled_scores, snippet_counts

    page = load_heldout()[0]
    with_all = "\n".join(page["with"])
    assert snippet_counts(with_all, page) == (len(page["with"]), 0, 0, len(page["without"]))
    assert pooled_scores([snippet_counts(with_all, page)]) == (1.0, 1.0, 1.0)
    only_junk = "\n".join(page["without"])
    assert pooled_scores([snippet_counts(only_junk, page)]) == (0.0, 0.0, 0.0)  # precision 0/len(without), recall 0
    # the filter section's articles: a vouched text over 500 characters with every snippet; one missing leaves it out
    long_text = with_all + "\n" + "Filler sentence of the article body. " * 20
    assert [a["gold"] for a in heldout_articles([page], [long_text])] == [long_text]
    assert heldout_articles([page], ["\n".join(page["with"][1:]) + " x" * 300]) == []


def test_pooled_scores_sum_the_counts_over_pages():
    from benchmarks.real_pages import pooled_bootstrap, pooled_scores

    # TP 2+1, FP 1+0, FN 1+2: precision 3/4, recall 3/6, F1 2*3 / (2*3 + 1 + 3)
    assert pooled_scores([(2, 1, 1, 2), (1, 0, 2, 3)]) == (0.75, 0.5, pytest.approx(0.6))
    counts = [(3, i % 2, 0, 3 - i % 2) for i in range(30)]
    assert pooled_bootstrap(counts, counts) == (0.0, 0.0)
    low, high = pooled_bootstrap(counts, [(0, 0, 3, 3)] * 30)  # ours F1 2*90 / (180 + 15) against 0
    assert low == pytest.approx(high, abs=0.05) and 0.88 < low <= 180 / 195 <= high + 1e-9


def test_timed_texts_scores_the_first_pass_of_a_stateful_extractor():
    from benchmarks.real_pages import timed_texts

    seen: dict[str, int] = {}

    def remembering(html: str) -> str:  # like trafilatura's deduplicate: text seen before is cut
        seen[html] = seen.get(html, 0) + 1
        return html if seen[html] == 1 else ""

    texts, pages_per_s = timed_texts(remembering, [{"html": "a"}, {"html": "b"}], repeats=3)
    assert texts == ["a", "b"] and seen == {"a": 3, "b": 3} and pages_per_s > 0
