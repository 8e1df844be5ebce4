"""Charset detection, HTML extraction (resiliparse / trafilatura) within the per-page budget, language ID on
pages of 12 languages, and the whole default chain with its funnel counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.clean import CleaningPipeline, LanguageFilter
from sluice.clean.steps import Document
from sluice.clean.steps.extract import DecodeText, ExtractHtml, detect_charset, nesting_estimate
from sluice.config import CleaningSettings, ExtractionSettings

PAGES = Path(__file__).resolve().parents[2] / "data" / "pages"
LANGUAGES = sorted(path.stem for path in PAGES.glob("*.html"))


def html_doc(content: bytes, charset: str | None = None, doc_id: str = "d") -> Document:
    return Document(doc_id, "web", "s", f"https://example.org/{doc_id}", None, "text/html", content, charset)


# --- charset ------------------------------------------------------------------------------------------

def test_charset_from_http_header_meta_bom_and_bytes():
    russian = "<html><body><p>Привет, мир! Это проверка кодировки.</p></body></html>"
    assert detect_charset(russian.encode("koi8-r"), "koi8-r", True) == ("koi8-r", "http")
    meta = '<html><head><meta charset="windows-1251"></head><body><p>Привет, мир!</p></body></html>'
    assert detect_charset(meta.encode("cp1251"), None, True) == ("cp1251", "meta")
    equiv = '<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1"><p>café</p>'
    assert detect_charset(equiv.encode("latin-1"), None, True) == ("iso8859-1", "meta")
    assert detect_charset("\ufeff<p>hi</p>".encode("utf-16"), None, True) == ("utf-16", "bom")
    assert detect_charset("<p>naïve café</p>".encode(), None, True) == ("utf-8", "utf8")
    charset, origin = detect_charset(("<p>" + "Größere Übungen für Anfänger und Fortgeschrittene. " * 20 + "</p>").encode("cp1252"), None, True)
    assert origin == "detected" and "Größere".encode("cp1252").decode(charset) == "Größere"


def test_decode_step_uses_the_detected_charset_and_names_bad_bytes():
    step = DecodeText()
    doc = html_doc('<meta charset="windows-1251"><p>Привет</p>'.encode("cp1251"))
    assert step.apply(doc) is None and "Привет" in doc.text
    assert step.apply(html_doc(b"<p>\xff\xfe broken</p>", "utf-8")).reason == "invalid_utf8"
    assert step.apply(html_doc(b"<p>x</p>", "no-such-charset")).reason == "unknown_charset"


# --- extraction and its budget -------------------------------------------------------------------------

def test_resiliparse_extracts_main_text():
    doc = html_doc((PAGES / "en.html").read_bytes())
    assert DecodeText().apply(doc) is None
    step = ExtractHtml()
    try:
        assert step.apply(doc) is None
    finally:
        step.close()
    assert "DoudouLinux" in doc.text and "<div" not in doc.text


@pytest.mark.parametrize("isolate", ["never", "always"])
def test_a_posts_byline_is_left_out_unless_post_meta_is_on(isolate):
    body = "<p>" + " ".join(["The council approved the new budget after a long debate on Tuesday evening."] * 6) + "</p>"
    page = f"<html><body><article><header><h1>Budget passes</h1><div class='byline'>by Jane Doe</div></header>{body}</article></body></html>"
    texts = {}
    for post_meta in (False, True):
        doc = html_doc(page.encode())
        step = ExtractHtml(ExtractionSettings(isolate=isolate, post_meta=post_meta))
        try:
            assert DecodeText().apply(doc) is None and step.apply(doc) is None
        finally:
            step.close()
        texts[post_meta] = doc.text
    assert "council approved" in texts[False] and "Jane Doe" not in texts[False]  # the default
    assert "council approved" in texts[True] and "Jane Doe" in texts[True]
    assert ExtractionSettings().post_meta is False


def test_trafilatura_is_selectable():
    doc = html_doc((PAGES / "de.html").read_bytes())
    DecodeText().apply(doc)
    step = ExtractHtml(ExtractionSettings(extractor="trafilatura"))
    try:
        assert step.apply(doc) is None
        assert step.isolated == 1  # trafilatura always runs in the helper process under `auto`
    finally:
        step.close()
    assert len(doc.text) > 200 and "<" not in doc.text


SENTENCE = "The committee met on Tuesday to discuss the new proposal for the river crossing, which residents had long requested."
# An article resiliparse's main-content heuristic takes for boilerplate (it sits in a `modal` box) beside a
# short navigation block: its main text is empty while the page has thousands of characters.
HIDDEN_ARTICLE = (
    "<html><body><ul class='nav'><li><a href='/'>Home</a></li><li><a href='/news'>News</a></li></ul>"
    "<div class='modal'><h1>River crossing</h1>" + ("<p>" + " ".join([SENTENCE] * 3) + "</p>") * 12 + "</div></body></html>"
)


@pytest.mark.parametrize("isolate", ["never", "always"])
def test_a_missed_article_gets_trafilaturas_second_opinion(isolate):
    from sluice.clean.steps.extract import extract_resiliparse

    assert extract_resiliparse(HIDDEN_ARTICLE).strip() == ""  # the premise: resiliparse alone loses it
    step = ExtractHtml(ExtractionSettings(isolate=isolate))
    off = ExtractHtml(ExtractionSettings(isolate=isolate, second_opinion=None))
    try:
        doc, plain = html_doc(HIDDEN_ARTICLE.encode()), html_doc(HIDDEN_ARTICLE.encode())
        for d in (doc, plain):
            d.text = HIDDEN_ARTICLE
        assert step.apply(doc) is None
        assert doc.text.count(SENTENCE) == 36 and "Home" not in doc.text
        assert off.apply(plain).reason == "empty_text"
    finally:
        step.close()
        off.close()


def test_the_second_opinion_is_asked_only_where_resiliparse_looks_lost(monkeypatch):
    import sluice.clean.steps.extract as extract

    asked: list[str] = []
    monkeypatch.setattr(extract, "extract_trafilatura", lambda html: asked.append(html) or "")
    article = "<html><body><article>" + ("<p>" + " ".join([SENTENCE] * 3) + "</p>") * 12 + "</article></body></html>"
    short_page = "<html><body><div class='modal'><p>" + SENTENCE + "</p></div></body></html>"
    for html in (article, short_page):  # a found article; a page with little text at all
        extract.extract_with_second_opinion(html, below_chars=500, page_chars=2000)
    assert asked == []
    assert extract.extract_with_second_opinion(HIDDEN_ARTICLE, below_chars=500, page_chars=2000) == ""  # (nothing better)
    assert asked == [HIDDEN_ARTICLE]


# A news page's chrome inside the article container, where resiliparse's own heuristic keeps it: a header
# bar with the share buttons, a promotion box and a video player's controls.
CHROME_PAGE = (
    "<html><body><article><div class='article-header'><span>Share on Facebook</span> <span>Tweet this</span></div>"
    + ("<p>" + " ".join([SENTENCE] * 3) + "</p>") * 4
    + "<table><thead class='table-header'><tr><th class='header-cell'>Crossing year</th></tr></thead><tr><td>2031</td></tr></table>"
    + "<h2 class='section-header'>What residents said</h2><p>" + SENTENCE + "</p>"
    + "<div class='promo-box'>Subscribe now for one euro a week</div>"
    + "<div class='video-player'><span>Autoplay on or off</span></div></article></body></html>"
)
ARTICLE = ("<p>" + " ".join([SENTENCE] * 3) + "</p>") * 8


def test_page_chrome_is_skipped_but_headings_and_table_parts_stay():
    from sluice.clean.steps.extract import extractor_for

    chrome = ("Share on Facebook", "Subscribe now", "Autoplay")
    plain = extractor_for(ExtractionSettings(skip_elements=[], link_density=None, trailing_labels=0))(CHROME_PAGE)
    assert all(text in plain for text in chrome)  # the premise: resiliparse alone keeps the chrome
    text = extractor_for(ExtractionSettings())(CHROME_PAGE)
    assert not any(chrome_text in text for chrome_text in chrome)
    assert text.count(SENTENCE) == 13 and "Crossing year" in text and "What residents said" in text
    own = extractor_for(ExtractionSettings(skip_elements=["table"]))(CHROME_PAGE)  # a user's own list replaces it
    assert "Crossing year" not in own and "Share on Facebook" in own


# Boxes inside the article's container that resiliparse's heuristic keeps, named as themes and plugins name
# them (class names seen on trafilatura's evaluation pages: WordPress, its share / newsletter / affiliate
# plugins, print-hidden parts).
CHROME_BOXES = {
    "author box": "<div class='mh-author-box'><p>{marker}</p></div>",
    "newsletter": "<div class='wp-block-newsletter'><strong>{marker}</strong></div>",
    "sidebar widget": "<div class='widget widget_text'><div class='textwidget'>{marker}</div></div>",
    "paywall": "<div class='paywall-template-container'><p>{marker}</p></div>",
    "breadcrumb": "<div class='breadcrumb-navigation'><span>{marker}</span></div>",
    "copyright": "<div class='article-copyright'>{marker}</div>",
    "print-hidden": "<div class='article-main__explore my-4 d-print-none'><p>{marker}</p></div>",
    "share plugin": "<div class='shariff'><p>{marker}</p></div>",
    "comment form": "<div id='respond'><h3>Leave a reply</h3><p>{marker}</p></div>",
    "article footer": "<footer><p>{marker}</p></footer>",
}


@pytest.mark.parametrize("box", CHROME_BOXES.values(), ids=CHROME_BOXES.keys())
def test_boxes_around_the_article_are_skipped(box):
    from sluice.clean.steps.extract import extractor_for

    marker = "Marker text of a box that is not the article."
    half = ("<p>" + " ".join([SENTENCE] * 3) + "</p>") * 4
    page = f"<html><body><div id='main'><article><h1>River crossing</h1>{half}{box.format(marker=marker)}{half}</article></div></body></html>"
    assert marker in extractor_for(ExtractionSettings(skip_elements=[]))(page)  # the premise: resiliparse alone keeps it
    text = extractor_for(ExtractionSettings())(page)
    assert marker not in text and text.count(SENTENCE) == 24


@pytest.mark.parametrize("second_opinion", [None, "trafilatura"])
@pytest.mark.parametrize(
    "page",
    [
        f"<html><body><form id='aspnetForm'><div id='content'>{ARTICLE}</div></form></body></html>",  # ASP.NET WebForms
        f"<html><body class='has-header promo-page'>{ARTICLE}</body></html>",
        f"<html><body><div class='layout-header-fixed'><div class='content'>{ARTICLE}</div></div></body></html>",
        f"<html><body><div class='promo-wrapper'><div class='story'>{ARTICLE}</div></div></body></html>",
        f"<html><body><div class='has-sidebar'><div class='entry'>{ARTICLE}</div></div></body></html>",
        f"<html><body><div id='author-archive'><div class='entry'>{ARTICLE}</div></div></body></html>",
    ],
    ids=["form-wrapper", "body-class", "header-wrapper", "promo-wrapper", "sidebar-wrapper", "author-id-wrapper"],
)
def test_a_page_laid_out_inside_a_skipped_element_keeps_its_article(page, second_opinion):
    from sluice.clean.steps.extract import extract_resiliparse, extractor_for

    text = extractor_for(ExtractionSettings(second_opinion=second_opinion))(page)
    assert text.count(SENTENCE) == 24
    assert text == extract_resiliparse(page)  # the unskipped main text


@pytest.mark.parametrize("selector", ["div[[[", "[class*=header", "p /* a comment"])
def test_a_selector_the_extraction_cannot_use_is_a_setup_error(selector):
    with pytest.raises(ValueError, match="skip_elements"):
        ExtractionSettings(skip_elements=[selector])


def test_nesting_estimate_ignores_void_elements():
    assert nesting_estimate(b"<html><body><div><p>x</p></div></body></html>") == 4
    assert nesting_estimate(b"<div>" * 5000 + b"</div>" * 5000) == 5000
    assert nesting_estimate(b"<p>a<br>b<img src=x><hr/><meta charset=x></p>" * 50) == 1
    # With a limit, the cheap count (voids included) answers when it is within the limit ...
    assert nesting_estimate(b"<div><br>" * 10 + b"</div>" * 10, limit=256) == 20
    # ... and the refined one when it is not (300 <br> are not 300 levels of nesting).
    assert nesting_estimate(b"<br>" * 300, limit=256) == 0
    assert nesting_estimate(b"<div>" * 300, limit=256) == 300


def test_pathological_pages_are_dropped_within_budget_and_the_rest_goes_on():
    normal = (PAGES / "en.html").read_bytes()
    deep = b"<html><body>" + b"<div>" * 30_000 + b"deep text " + b"</div>" * 30_000 + b"</body></html>"
    huge = b"<html><body>" + b"<p>filler paragraph of text.</p>" * 40_000 + b"</body></html>"
    settings = CleaningSettings(min_chars=0, extraction=ExtractionSettings(timeout_s=1.0, max_html_bytes=1 << 20))
    pipeline = CleaningPipeline([DecodeText(), ExtractHtml(settings.extraction)])
    outcomes = []
    try:
        for index, content in enumerate([normal, deep, huge, normal]):
            result = pipeline.run(html_doc(content, "utf-8", str(index)))
            outcomes.append(None if result is None else result[1].reason)
    finally:
        pipeline.close()
    assert outcomes == [None, "extract_timeout", "too_large", None]
    assert pipeline.stats.drops == {"extract_timeout": 1, "too_large": 1}


def test_a_helper_that_dies_mid_page_drops_only_that_page(monkeypatch):
    from sluice.clean.steps.extract import ExtractorProcess

    step = ExtractHtml(ExtractionSettings(isolate="always"))
    real_read = ExtractorProcess._read
    calls = []

    def dying_read(fd, size, deadline):
        if not calls:  # the helper dies while working on the first page (as a segfault would)
            calls.append(fd)
            step.worker.process.kill()
            step.worker.process.wait()
        return real_read(fd, size, deadline)

    monkeypatch.setattr(ExtractorProcess, "_read", staticmethod(dying_read))
    try:
        first = html_doc(b"<html><body><p>first page</p></body></html>", "utf-8")
        DecodeText().apply(first)
        drop = step.apply(first)
        assert drop is not None and drop.reason == "extract_crashed"
        again = html_doc(b"<html><body><p>fine again</p></body></html>", "utf-8")
        DecodeText().apply(again)
        assert step.apply(again) is None and "fine again" in again.text  # a fresh helper took over
    finally:
        step.close()


def test_mojibake_repair_is_optional_and_fixes_double_encoded_text():
    pytest.importorskip("ftfy")
    from sluice.clean.steps.extract import FixMojibake

    step = FixMojibake()
    doc = Document.from_text("The cafÃ© served crÃ¨me brÃ»lÃ©e all Ã©tÃ©.")
    assert step.apply(doc) is None
    assert doc.text == "The café served crème brûlée all été." and step.repaired == 1
    clean = Document.from_text("Nothing to repair here: café.")
    step.apply(clean)
    assert clean.text == "Nothing to repair here: café." and step.repaired == 1
    names = [s.name for s in CleaningPipeline.from_settings(CleaningSettings(fix_mojibake=True)).steps]
    assert names.index("unicode_repair") == names.index("extract") + 1
    assert "unicode_repair" not in [s.name for s in CleaningPipeline.from_settings(CleaningSettings()).steps]


# --- language ID --------------------------------------------------------------------------------------

def test_at_least_eight_languages_in_the_test_pages():
    assert len(LANGUAGES) >= 8


@pytest.mark.parametrize("language", LANGUAGES)
def test_language_identified_on_real_pages(language):
    doc = html_doc((PAGES / f"{language}.html").read_bytes())
    extract = ExtractHtml(ExtractionSettings(isolate="never"))
    assert DecodeText().apply(doc) is None and extract.apply(doc) is None
    step = LanguageFilter((), 0.65, None)
    assert step.apply(doc) is None
    assert doc.language == language and doc.language_score >= 0.65


def test_language_filter_keep_list_and_per_language_minimum():
    doc = Document.from_text((PAGES / "en.html").read_text(encoding="utf-8"))
    doc.content_type = "text/html"
    ExtractHtml(ExtractionSettings(isolate="never")).apply(doc)
    assert LanguageFilter(("de", "fr"), 0.65, None).apply(doc).reason == "language_not_kept"
    assert LanguageFilter((), 0.65, None, {"en": 0.9999}).apply(doc).reason == "low_language_score"
    assert LanguageFilter((), 0.65, None, {"de": 0.9999}).apply(doc) is None


# --- the default chain --------------------------------------------------------------------------------

def test_default_chain_counts_a_funnel(tmp_path):
    blocklist = tmp_path / "urls.txt"
    blocklist.write_text("blocked.example\n")
    settings = CleaningSettings(url_blocklist=str(blocklist))
    pipeline = CleaningPipeline.from_settings(settings)
    names = [step.name for step in pipeline.steps]
    assert names == [
        "url", "decode", "extract", "length", "code_share", "language", "gopher_quality", "gopher_repetition",
        "c4", "fineweb_quality", "length_after_filters", "toxicity", "pii",
    ]
    docs = [html_doc((PAGES / f"{language}.html").read_bytes(), None, language) for language in LANGUAGES]
    docs.append(Document("x", "web", "s", "https://blocked.example/a", None, "text/html", b"<p>x</p>", None))
    try:
        results = [pipeline.run(doc) for doc in docs]
    finally:
        pipeline.close()
    stats = pipeline.stats
    assert stats.documents_in == len(docs)
    assert stats.reached["url"] == len(docs) and stats.reached["decode"] == len(docs) - 1
    assert stats.drops["url_blocked_domain"] == 1
    # Every document is either kept or dropped with one reason, and the funnel only narrows.
    assert stats.documents_out + sum(stats.drops.values()) == len(docs)
    reached = [stats.reached[name] for name in names]
    assert reached == sorted(reached, reverse=True)
    assert stats.documents_out == sum(1 for r in results if r is None) == sum(stats.languages.values())
    assert stats.output_chars.count == stats.documents_out and stats.input_bytes.count == len(docs)
    assert stats.input_bytes.sum() == sum(len(doc.content) for doc in docs)


def test_trafilatura_second_opinion_does_not_depend_on_the_pages_extracted_before():
    """trafilatura's `deduplicate` counts text segments in a process-wide cache: a paragraph shared with pages
    the same worker extracted earlier was dropped from a later page's text (checked with trafilatura's own
    call: the shared paragraph is gone after five extractions of the other page). sluice's call gives a page
    the same text whatever came before it."""
    import trafilatura

    from sluice.clean.steps.extract import extract_trafilatura

    def page(title: str, own: str) -> str:
        paragraphs = [f"{own} {i} goes on at some length, with numbers, names and places, so that it counts as text." for i in range(5)]
        body = "".join(f"<p>{p}</p>" for p in [*paragraphs, SHARED])
        return f"<html><head><title>{title}</title></head><body><article><h1>{title}</h1>{body}</article></body></html>"

    first, second = page("Page A", "The weather paragraph"), page("Page B", "The old mill paragraph")
    alone = extract_trafilatura(second)
    assert SHARED in alone
    for _ in range(5):
        extract_trafilatura(first)
    assert extract_trafilatura(second) == alone
    for _ in range(5):  # the oracle: trafilatura's own call with its cache left as it is
        trafilatura.extract(first, favor_precision=True, include_comments=False, deduplicate=True)
    assert SHARED not in (trafilatura.extract(second, favor_precision=True, include_comments=False, deduplicate=True) or "")


SHARED = "This shared paragraph about the harbour festival appears on every page of the site and talks about boats, music and food."


# Link-dense boxes inside the article's container, laid out as on trafilatura's evaluation pages (dtb.de's
# "Weiterführende Links" section, tennisnet.com's most-viewed teasers, an article tile wrapping its teaser in
# one link): resiliparse's own heuristic keeps them, and their class names say nothing skip_elements knows.
LINK_BOXES = (
    "<section class='main-article-links'><h3>Further links</h3><ul><li><a href='/a'>The federation's statement</a></li>"
    "<li><a href='/b'>Minutes of the meeting</a></li></ul></section>"
    "<div class='article-mostviewed'><h4>Most read</h4><div class='article'><a href='/c'>Raonic withdraws from the "
    "tournament in Pune</a></div><div class='article'><a href='/d'>Five surprises of the season so far</a></div></div>"
    "<section><article class='article-tile'><a class='article' href='/e'><span class='h3'>Last appearance at the "
    "river festival</span> <span>What the mayor said</span></a></article></section>"
)
CITED = ("<div class='source'><a href='/r'>The report</a>, published by the city in March, counts the crossings of "
         "every weekday and names the streets where most people wait.</div>")  # a div holding a link directly: judged, kept


def test_link_dense_blocks_are_skipped_but_text_with_links_stays():
    from sluice.clean.steps.extract import extractor_for

    linked = "<p>The council published <a href='/p'>its plan</a> on Monday, and " + " ".join([SENTENCE] * 2) + "</p>"
    half = ("<p>" + " ".join([SENTENCE] * 3) + "</p>") * 4
    page = f"<html><body><div id='main'><article><h1>River crossing</h1>{half}{linked}{CITED}{LINK_BOXES}{half}</article></div></body></html>"
    boxes = ("Further links", "Most read", "Raonic", "Five surprises")  # (the lists and the tile resiliparse drops itself)
    plain = extractor_for(ExtractionSettings(link_density=None))(page)
    assert all(text in plain for text in boxes)  # the premise: resiliparse and skip_elements keep them
    text = extractor_for(ExtractionSettings())(page)
    assert not any(box in text for box in boxes)
    assert text.count(SENTENCE) == 26 and "its plan" in text and "The report, published by the city" in text
    # a block longer than link_density_max_words is not judged by its links (the most-read box has 16 words,
    # 14 of them linked; each teaser in it 7, all linked)
    assert "Raonic" not in extractor_for(ExtractionSettings(link_density_max_words=10))(page)  # (a teaser goes)
    assert "Raonic" in extractor_for(ExtractionSettings(link_density_max_words=5))(page)
    # the share: CITED has 2 of its 23 words linked (0.09)
    assert "The report, published" not in extractor_for(ExtractionSettings(link_density=0.05))(page)


def test_mark_link_dense_marks_the_outermost_dense_block_only():
    from resiliparse.parse.html import HTMLTree

    from sluice.clean.steps.extract import LINK_DENSE, mark_link_dense

    tree = HTMLTree.parse(f"<html><body><article><p>{SENTENCE}</p>{LINK_BOXES}{CITED}</article></body></html>")
    assert mark_link_dense(tree, 0.5, 300) == 3  # the section, the most-read box, the tile's section; not CITED
    marked = tree.body.query_selector_all(f"[{LINK_DENSE}]").values()
    assert [node.tag for node in marked] == ["section", "div", "section"]
    assert mark_link_dense(HTMLTree.parse("<html></html>"), 0.5, 300) in (0, 1)  # no body of its own: no error


def test_trailing_labels_are_trimmed():
    from sluice.clean.steps.extract import extractor_for, trim_trailing_labels

    half = ("<p>" + " ".join([SENTENCE] * 3) + "</p>") * 4
    # a related-links box whose links go (resiliparse drops the all-link list itself), and a share label
    # after it, as on dtb.de's and verbaende.com's pages of trafilatura's evaluation
    page = (f"<html><body><div id='main'><article><h1>River crossing</h1>{half}<p>{SENTENCE}</p>"
            "<h3>More on this topic</h3><ul><li><a href='/a'>The bridge</a></li><li><a href='/b'>The ferry</a></li></ul>"
            "<p>Share:</p></article></div></body></html>")
    plain = extractor_for(ExtractionSettings(trailing_labels=0))(page)
    assert plain.endswith("More on this topic\n\nShare:")  # the premise
    text = extractor_for(ExtractionSettings())(page)
    assert text.endswith(SENTENCE) and "More on this" not in text and text.count(SENTENCE) == 13
    assert extractor_for(ExtractionSettings(trailing_labels=1))(page).endswith("More on this topic")
    # what stays: a sentence's end (also a CJK one), a longer last line, a label before the last line
    for ending in ("It ends here.", "\u5b83\u5728\u8fd9\u91cc\u7ed3\u675f\u3002", "Five words is not a label"):
        assert trim_trailing_labels(f"{SENTENCE}\n\nMore on this\n{ending}", 1).endswith(ending)
    assert trim_trailing_labels(f"{SENTENCE}\n\nMore on this\nEdited", 1) == f"{SENTENCE}\n\nMore on this"
    assert trim_trailing_labels("Home\n\nShare:", 2) == "Home\n\nShare:"  # labels only: kept whole
    assert trim_trailing_labels(f"{SENTENCE}\nShare:\n", 0) == f"{SENTENCE}\nShare:\n"  # off: unchanged


def test_lines_of_only_spaces_are_emptied():
    from sluice.clean.steps.extract import extractor_for

    # `&nbsp;` paragraphs between a press release's paragraphs, as on ekiba.de's page of trafilatura's evaluation
    half = ("<p>" + " ".join([SENTENCE] * 3) + "</p>") * 4
    page = f"<html><body><article><h1>River crossing</h1>{half}<p>&nbsp;</p><p>{SENTENCE}</p><p>&nbsp;</p><p>{SENTENCE}.</p></article></body></html>"
    plain = extractor_for(ExtractionSettings(empty_space_lines=False))(page)
    assert plain.count("\n\xa0\n") == 2  # the premise: resiliparse keeps them as lines of a no-break space
    text = extractor_for(ExtractionSettings())(page)
    assert "\xa0" not in text and text.replace("\n", "") == plain.replace("\n", "").replace("\xa0", "")
    assert not any(line and not line.strip() for line in text.split("\n"))


def test_the_link_density_pass_stops_on_deep_nesting():
    from resiliparse.parse.html import HTMLTree

    from sluice.clean.steps.extract import mark_link_dense

    # every nested block's text is read whole, so nesting makes the pass quadratic: it reads at most 16x the
    # page's text (+ 64 KiB), then judges no further block (real pages read at most 4.3x)
    def page(depth: int) -> str:
        prose = "<p>" + " ".join([SENTENCE] * 20) + "</p>"  # 360 words: the outer blocks are never judged
        links = "<ul><li><a href='/a'>The bridge</a></li><li><a href='/b'>The ferry</a></li></ul>"
        return f"<html><body>{'<section>' * depth}{prose}<div>{links}</div>{'</section>' * depth}</body></html>"

    assert mark_link_dense(HTMLTree.parse(page(5)), 0.5, 300) == 1
    assert mark_link_dense(HTMLTree.parse(page(200)), 0.5, 300) == 0  # 200 x 2,300 characters: over budget


def test_a_document_c4_drops_is_measured_by_the_later_rules_on_the_lines_c4_keeps():
    """cleaned_attributes of a document C4 drops for too few sentences: the later steps measure the text a
    looser C4 would have kept (its kept lines, not the text before line removal), for sluice whatif; the
    dropped document itself is left as it was. Oracle: the same steps run on what C4 with no sentence
    minimum leaves."""
    from sluice.clean.steps.filters import C4QualityFilter, FineWebQualityFilter
    from sluice.config import C4Settings

    text = "\n".join([
        "The first line is a sentence that ends well.", "a menu entry without an end", "Home | News | Contact",
        "The second line is a sentence as well.", "Share this", "And a third sentence closes the text.",
    ])
    doc = Document("d", "s", "x", None, None, "text/plain", b"", "utf-8", text=text)
    pipeline = CleaningPipeline([C4QualityFilter(), FineWebQualityFilter()], attributes=True)
    step, drop = pipeline.run(doc)
    assert (step.name, drop.reason) == ("c4", "too_few_sentences") and doc.text == text

    looser = Document("d", "s", "x", None, None, "text/plain", b"", "utf-8", text=text, attributes={})
    assert C4QualityFilter(C4Settings(min_num_sentences=0)).apply(looser) is None
    FineWebQualityFilter().measure(looser)
    assert doc.attributes["measured_text"] == looser.text != text
    fineweb = {key: value for key, value in doc.attributes.items() if key.startswith("fineweb_quality.")}
    assert fineweb == {key: value for key, value in looser.attributes.items() if key.startswith("fineweb_quality.")} != {}
