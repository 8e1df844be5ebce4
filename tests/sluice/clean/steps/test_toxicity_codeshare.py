"""Toxicity (listed terms from the glin-profanity wheel, whole tokens, per-language lists and switches) and
code share (code-like lines, drop, routing to cleaned_code with language ID and PII redaction), with pass and
fail documents in several languages and the funnel counts of the pipeline."""

from __future__ import annotations

import pytest

from sluice.clean import CleaningPipeline, LanguageFilter
from sluice.clean.steps import ByLanguage, Document, Route
from sluice.clean.steps.codeshare import CODE_DATASET, CodeShare, code_line_counts, is_code_line
from sluice.clean.steps.pii import PIIRedactor
from sluice.clean.steps.toxicity import TermMatcher, ToxicityFilter
from sluice.config import CleaningSettings, CodeShareSettings, ToxicitySettings
from sluice.config.toxicity_lists import LIST_LANGUAGES, load_terms
from sluice.words import NO_SPACE_CHAR, tokenize

PROSE = {
    "en": "The river runs past the old mill and the town that grew around it over the centuries. ",
    "de": "Der Fluss fließt an der alten Mühle vorbei und die Stadt wuchs über die Jahrhunderte um sie herum. ",
    "ru": "Река течёт мимо старой мельницы, и город вырос вокруг неё за многие века. ",
    "zh": "河流流过旧磨坊，小镇在几个世纪里围绕着它发展起来。",
}


def listed(language: str, multi_token: bool = False) -> str:
    """A term of the shipped list (taken from the package, so the test file holds none)."""
    for term in load_terms(language):
        tokens = tokenize(term.lower())
        spaceless = NO_SPACE_CHAR.search(term) is not None
        if any(ch.isdigit() for ch in term) or (not spaceless and (len(tokens) > 1) != multi_token):
            continue
        if spaceless and (len(term) < 2 or " " in term):
            continue
        settings = ToxicitySettings()
        usable = term.lower() not in settings.ignore_terms and term.lower() not in settings.reporting_terms
        if all(ch.isalpha() or ch == " " for ch in term) and usable:
            return term.lower()
    raise AssertionError(f"no usable term in the {language} list")


def oracle_count(text: str, term: str) -> int:
    """Independent count: occurrences of the term's token sequence in the lower-cased token sequence."""
    tokens, needle = [t.lower() for t in tokenize(text)], tokenize(term.lower())
    return sum(tokens[i : i + len(needle)] == needle for i in range(len(tokens) - len(needle) + 1))


def test_lists_ship_in_the_package_for_two_dozen_languages():
    assert len(LIST_LANGUAGES) == 24 and {"en", "de", "fr", "ru", "zh", "ja", "ar", "tr"} <= LIST_LANGUAGES
    assert all(load_terms(code) for code in LIST_LANGUAGES)


@pytest.mark.parametrize("language", ["en", "de", "ru", "zh"])
def test_listed_terms_drop_a_document_and_clean_text_passes(language):
    term = listed(language)
    step = ToxicityFilter(ToxicitySettings(max_score=0.005, min_terms=3))
    clean = Document.from_text(PROSE[language] * 8, language=language)
    assert step.apply(clean) is None and clean.values.get("toxic_terms") == 0 and clean.values.get("toxicity_score") == 0.0
    joiner = "" if language == "zh" else " "
    toxic_text = joiner.join([PROSE[language], term, PROSE[language], term.capitalize(), PROSE[language], term.upper()])
    toxic = Document.from_text(toxic_text, language=language)
    drop = step.apply(toxic)
    expected = oracle_count(toxic_text, term)
    assert expected == 3 and toxic.values.get("toxic_terms") == expected
    words = sum(1 for t in tokenize(toxic_text) if t not in "，。,.")
    assert toxic.values.get("toxicity_score") == pytest.approx(expected / words, rel=0.05)
    assert drop is not None and drop.reason == "toxic_content" and term in drop.detail.lower()


def test_reporting_terms_count_in_the_score_but_cannot_drop_a_report_on_their_own():
    reporting = ToxicitySettings().reporting_terms
    assert {"rape", "pedophile", "sex"} <= set(reporting) <= {t.lower() for t in load_terms("en")}  # all listed terms
    report = " ".join([
        PROSE["en"], "The court heard that the pedophile had been convicted of rape before.", PROSE["en"],
        "Prosecutors said the sex offender denied the rape and the pedophile charges.", PROSE["en"],
    ])
    step = ToxicityFilter()
    doc = Document.from_text(report, language="en")
    assert step.apply(doc) is None
    expected = sum(oracle_count(report, term) for term in ("pedophile", "rape", "sex"))
    assert expected == 5 and doc.values.get("toxic_terms") == expected and doc.values.get("toxicity_score") > ToxicitySettings().max_score
    # The same report with min_terms of the other listed terms is dropped, and so is it without the exemption.
    term = listed("en")
    abusive = Document.from_text(" ".join([report, term, term, term]), language="en")
    assert step.apply(abusive).reason == "toxic_content"
    assert ToxicityFilter(ToxicitySettings(reporting_terms=())).apply(Document.from_text(report, language="en")).reason == "toxic_content"


def test_multi_token_terms_whole_words_only_and_score_only_mode():
    phrase = listed("en", multi_token=True)
    word = listed("en")
    text = f"{PROSE['en']} {phrase} and {phrase.title()} again. Classy assessments of {word}ly {word}s mean nothing."
    doc = Document.from_text(text, language="en")
    ToxicityFilter(ToxicitySettings(max_score=None)).apply(doc)
    assert doc.values.get("toxic_terms") == oracle_count(text, phrase) == 2  # the word inside longer words does not count
    matcher = TermMatcher([word, phrase])
    assert matcher.count(tokenize("classy"), __import__("collections").Counter(tokenize("classy"))) == {}


def test_languages_without_a_list_are_not_scored_and_extra_languages_apply():
    term = listed("en")
    text = f"Il fiume scorre accanto al vecchio mulino {term} {term} {term} e la città."
    doc = Document.from_text(text, language="vi")  # no Vietnamese list
    assert ToxicityFilter().apply(doc) is None and doc.values.get("toxicity_score") is None and doc.values.get("toxic_terms") is None
    with_english = ToxicityFilter(ToxicitySettings(extra_languages=("en",)))
    doc = Document.from_text(text, language="vi")
    assert with_english.apply(doc).reason == "toxic_content" and doc.values.get("toxic_terms") == 3


def test_ignored_terms_and_single_spaceless_characters_are_not_counted():
    assert "durum" in load_terms("tr") and "性" in load_terms("zh")
    text = "Sistemin durum bilgisi ve durum kodu. " * 5
    doc = Document.from_text(text, language="tr")
    ToxicityFilter().apply(doc)
    assert doc.values.get("toxic_terms") == 0
    doc = Document.from_text("系统的安全性和可靠性很重要。" * 5, language="zh")
    ToxicityFilter().apply(doc)
    assert doc.values.get("toxic_terms") == 0
    matcher = TermMatcher(load_terms("zh"))
    assert not any(len(t) == 1 and NO_SPACE_CHAR.match(t) for t in matcher.spellings)


def test_per_language_switch_through_the_pipeline_counts_a_funnel():
    settings = CleaningSettings(languages={"de": {"toxicity": {"enabled": False}}})
    steps = CleaningPipeline.from_settings(settings).steps
    [toxicity] = [s for s in steps if s.name == "toxicity"]
    assert isinstance(toxicity, ByLanguage) and toxicity.by_language["de"] is None
    pipeline = CleaningPipeline([toxicity])
    docs = {
        language: Document.from_text(" ".join([PROSE[language], listed(language)] * 3), language=language)
        for language in ("en", "de", "ru")
    }
    outcomes = {language: pipeline.run(doc) for language, doc in docs.items()}
    assert outcomes["de"] is None and docs["de"].values.get("toxic_terms") is None  # switched off for German
    assert outcomes["en"][1].reason == outcomes["ru"][1].reason == "toxic_content"
    assert pipeline.stats.reached == {"toxicity": 3} and pipeline.stats.drops == {"toxic_content": 2}


# --- code share --------------------------------------------------------------------------------------

CODE_LINES = [
    "int main(void) {",
    "    return 0;",
    "}",
    "$ sudo apt install nginx",
    "# systemctl restart ssh.service",
    ">>> print(sum(range(10)))",
    "def parse(line):",
    "    if line.startswith('#'):",
    "for i in $(seq 3); do echo $i; done",
    "ExecStart=/usr/sbin/sshd -D $SSHD_OPTS",
    "smtpd_tls_cert_file = /etc/ssl/certs/mail.pem",
    "\ttype filter hook input priority 0; policy drop;",
    "#include <stdio.h>",
    '<div class="note">',
    "ls -la --color=auto /var/log | grep -v old",
]
PROSE_LINES = [
    "The river runs past the old mill and the town that grew around it.",
    "Der Fluss fließt an der alten Mühle vorbei; die Stadt wuchs um sie herum.",
    "Le paquet est installé avec la commande suivante :",
    "  • kern: message coming from the kernel;",
    "Each log message is associated with an application subsystem (called “facility” in the documentation):",
    "dpkg is the base command for handling Debian packages on the system.",
    "Река течёт мимо старой мельницы, и город вырос вокруг неё.",
    "河流流过旧磨坊，小镇在几个世纪里围绕着它发展起来。",
    "Import duties are paid at the border (see the table below).",
    "The programs included with the Debian GNU/Linux system are free software;",
]


@pytest.mark.parametrize("line", CODE_LINES)
def test_code_lines_are_recognised(line):
    assert is_code_line(line)


@pytest.mark.parametrize("line", PROSE_LINES)
def test_prose_lines_in_several_languages_are_not_code(line):
    assert not is_code_line(line)


def test_code_share_is_the_share_of_code_like_lines_and_drops_above_max():
    text = "\n".join(PROSE_LINES[:6] + ["", "   "] + CODE_LINES[:3])
    assert code_line_counts(text) == (3, 9)  # blank lines do not count
    doc = Document.from_text(text)
    assert CodeShare(CodeShareSettings(max_share=0.5)).apply(doc) is None and doc.values.get("code_share") == pytest.approx(3 / 9)
    heavy = Document.from_text("\n".join(CODE_LINES + PROSE_LINES[:2]))
    drop = CodeShare(CodeShareSettings(max_share=0.5)).apply(heavy)
    assert drop.reason == "code_heavy" and heavy.values.get("code_share") == pytest.approx(15 / 17)
    tiny = Document.from_text("\n".join(CODE_LINES[:2]))
    assert CodeShare(CodeShareSettings(max_share=0.1)).apply(tiny) is None  # fewer than min_lines lines


def test_code_heavy_documents_are_routed_with_language_and_pii_but_no_prose_filter():
    code = "\n".join(CODE_LINES + ["# ping 8.8.8.8", "Mail the admin at ops@example.com for access."])
    prose = "\n".join(PROSE_LINES[:1] * 3)
    settings = CleaningSettings(code_share=CodeShareSettings(route_above=0.5, max_share=0.2))
    steps = [s for s in CleaningPipeline.from_settings(settings).steps if s.name in ("code_share", "language", "gopher_quality", "pii")]
    assert [s.name for s in steps] == ["code_share", "language", "gopher_quality", "pii"]
    assert isinstance(steps[1], LanguageFilter) and isinstance(steps[3], PIIRedactor)
    pipeline = CleaningPipeline(steps)
    routed_doc, prose_doc = Document.from_text(code, language="unknown"), Document.from_text(prose, language="unknown")
    step, outcome = pipeline.run(routed_doc)
    assert isinstance(outcome, Route) and outcome.dataset == CODE_DATASET and step.name == "code_share"
    assert routed_doc.language != "unknown"  # identified although the language filter would not keep it
    assert "<IP_ADDRESS>" in routed_doc.text and "<EMAIL>" in routed_doc.text
    assert pipeline.run(prose_doc)[1].reason == "gopher_short_doc"  # a prose page still meets the filters
    stats = pipeline.stats
    assert stats.routed == {CODE_DATASET: 1} and stats.drops == {"gopher_short_doc": 1}
    assert stats.reached["gopher_quality"] == 1  # the routed page never reached the prose filters
    assert stats.documents_in == stats.documents_out + sum(stats.drops.values()) + sum(stats.routed.values())
