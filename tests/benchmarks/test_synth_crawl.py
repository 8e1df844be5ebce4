"""The crawl synthesizer (benchmarks/synth_crawl.py), run on the bundled sample's WARC pages."""

from __future__ import annotations

import html.parser
import random
from pathlib import Path

import polars as pl
import pytest

from benchmarks import synth_crawl
from sluice.config import WarcOptions
from sluice.ingest.readers import RawRecord, read_warc

SAMPLE_WEB = Path(__file__).resolve().parents[2] / "sample_data" / "web"


class _Markup(html.parser.HTMLParser):
    """Everything of a page but its text: tags with attributes, comments, character references (stdlib parser,
    independent of the synthesizer's own markup pattern)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.items: list[tuple] = []

    def handle_starttag(self, tag, attrs):
        self.items.append(("start", tag, tuple(attrs)))

    def handle_endtag(self, tag):
        self.items.append(("end", tag))

    def handle_comment(self, data):
        self.items.append(("comment", data))

    def handle_entityref(self, name):
        self.items.append(("entity", name))

    def handle_charref(self, name):
        self.items.append(("charref", name))


def markup(body: bytes) -> list[tuple]:
    parser = _Markup()
    parser.feed(body.decode("utf-8"))
    parser.close()
    return parser.items


def read_crawl(folder: Path) -> dict[str, RawRecord]:
    records = {}
    for path in sorted(folder.glob("web/*/*.warc.gz")):
        counters: dict[str, int] = {}
        with open(path, "rb") as stream:
            for item in read_warc(stream, WarcOptions(), counters):
                assert isinstance(item, RawRecord), item
                records[item.source_id] = item
    return records


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    out = tmp_path_factory.mktemp("crawl")
    summary = synth_crawl.synthesize(out, scale=0.05, seed=3, snapshots=2, pages_per_file=40, exact_share=0.15, near_share=0.15, corpus=SAMPLE_WEB)
    return out, summary


def test_every_record_reads_back_and_is_in_the_truth(crawl):
    out, summary = crawl
    records = read_crawl(out)
    truth = pl.read_parquet(out / "truth.parquet")
    assert summary["pages"] == truth.height == len(records) == 100
    assert set(truth["record_id"]) == set(records)
    assert set(truth["snapshot"]) == {"2025-01", "2025-02"}
    assert summary["kinds"]["exact"] > 0 and summary["kinds"]["near"] > 0
    assert all(record.content_type == "text/html" for record in records.values())


def test_only_text_nodes_change(crawl):
    out, _ = crawl
    records = read_crawl(out)
    bases = {base.name: base for base in synth_crawl.load_base_pages(SAMPLE_WEB)}
    truth = pl.read_parquet(out / "truth.parquet")
    for row in truth.filter(pl.col("kind") == "unique").iter_rows(named=True):
        original = bases[row["base"]].body
        assert markup(records[row["record_id"]].content) == markup(original)
        assert records[row["record_id"]].content != original


def test_copies_are_what_the_truth_says(crawl):
    out, _ = crawl
    records = read_crawl(out)
    truth = pl.read_parquet(out / "truth.parquet")
    unique = {row["group"]: row for row in truth.filter(pl.col("kind") == "unique").iter_rows(named=True)}
    for row in truth.filter(pl.col("kind") != "unique").iter_rows(named=True):
        original = unique[row["group"]]
        assert original["snapshot"] <= row["snapshot"]  # a copy never predates its page's snapshot
        copy, source = records[row["record_id"]].content, records[original["record_id"]].content
        if row["kind"] == "exact":
            assert copy == source and row["url"] == original["url"]
        else:
            assert copy != source and markup(copy) == markup(source)
            expected = synth_crawl.jaccard(synth_crawl.main_text(source), synth_crawl.main_text(copy))
            assert row["jaccard"] == pytest.approx(expected, abs=1e-4) and 0.5 < row["jaccard"] < 1.0


def test_unique_pages_from_one_real_page_are_not_near_duplicates(tmp_path):
    # More pages than the sample has: each real page is the base of several unique pages.
    pages = synth_crawl.plan_crawl(synth_crawl.load_base_pages(SAMPLE_WEB), scale=0.2, seed=1, exact_share=0, near_share=0)
    bases = synth_crawl.load_base_pages(SAMPLE_WEB)
    by_base: dict[int, list] = {}
    for page in pages:
        by_base.setdefault(page.base, []).append(page)
    checked = 0
    for group in by_base.values():
        texts = [synth_crawl.main_text(synth_crawl.page_body(page, bases)) for page in group[:3]]
        for index in range(1, len(texts)):
            if len(texts[0].split()) >= 50:
                assert synth_crawl.jaccard(texts[0], texts[index]) < 0.3
                checked += 1
    assert checked > 10


def test_the_crawl_is_a_function_of_its_arguments(tmp_path):
    def files(seed: int, name: str) -> dict[str, bytes]:
        out = tmp_path / name
        synth_crawl.synthesize(out, scale=0.01, seed=seed, corpus=SAMPLE_WEB)
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    first, again, other = files(7, "a"), files(7, "b"), files(8, "c")
    assert first == again
    assert first != other


def test_substitution_keeps_character_references_and_scripts():
    page = "<html><script>var words = 1;</script><p title='keep me'>alpha beta &amp; gamma &#8212; delta</p><!-- a comment --></html>"
    edited = synth_crawl.substitute_words(page, 1.0, random.Random(0))
    assert "<script>var words = 1;</script>" in edited and "title='keep me'" in edited and "<!-- a comment -->" in edited
    assert "&amp;" in edited and "&#8212;" in edited
