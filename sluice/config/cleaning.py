"""The `cleaning` section: extraction, every filter's thresholds (datatrove's published defaults), PII,
toxicity, code share, perplexity, the quality and perplexity models, and per-source / per-language overrides."""

from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from sluice.config.base import (
    _Model,
    check_language,
    check_name,
)

# Page chrome by class: never the page's or the article's container (a wrapper classed `layout-header-fixed`
# would take the article with it), nor headings or table parts (their text is content).
_NOT_CONTAINERS = ":not(html):not(body):not(main):not(article)"
_NOT_CONTENT = ":not(h1):not(h2):not(h3):not(h4):not(h5):not(h6):not(table):not(thead):not(tbody):not(tr):not(th):not(td):not(dt)"
# Boxes around the article, named by class (or id) the way themes and plugins name them: author boxes,
# related / next-post links, share and newsletter prompts, comment forms, footers, sidebars and widgets,
# paywall and subscription offers, breadcrumbs, copyright and credit lines, print-hidden parts (`noprint`,
# `d-print-none`), pagination, carousels, ratings, info boxes, modals. Chosen on the development quarter of
# trafilatura's evaluation pages (scripts/build_trafilatura_pages.py --split dev) and checked on the
# Readability set: each removed boilerplate on one of them, and the list loses no article text on either
# (docs/benchmarks/results.md, the held-out notes).
_CHROME_NAMES = (
    "author", "related", "newsletter", "share", "sociable", "shariff", "comment", "footer", "paywall",
    "sidebar", "breadcrumb", "copyright", "credit", "subscri", "noprint", "print-none", "next-post", "pagination",
    "disclaimer", "carousel", "rating", "infobox", "modal",
)
DEFAULT_SKIP_ELEMENTS = (
    f"[class*=header]{_NOT_CONTAINERS}{_NOT_CONTENT}",
    f"[class*=promo]{_NOT_CONTAINERS}",
    f"[class*=player]{_NOT_CONTAINERS}",
    *(f"[class*={name}]{_NOT_CONTAINERS}" for name in _CHROME_NAMES),
    *(f"[id*={name}]{_NOT_CONTAINERS}" for name in ("author", "comment", "footer", "sidebar")),
    f"[class~=widget]{_NOT_CONTAINERS}",  # WordPress's sidebar widgets (a page builder's `elementor-widget` is not one)
    "footer",
    "[id=respond]",  # WordPress's comment form
)


class ExtractionSettings(_Model):
    """HTML -> main text. Each document gets a size and a time budget, so one pathological page cannot
    stall a worker: it is dropped with reason `too_large` / `extract_timeout` and the partition goes on."""

    extractor: Literal["resiliparse", "trafilatura"] = "resiliparse"  # trafilatura: slower, needs the `extract` extra
    max_html_bytes: int = Field(4 << 20, ge=1024)  # larger pages are dropped unparsed (`too_large`)
    timeout_s: float = Field(5.0, gt=0.0)  # wall-clock budget per page (`extract_timeout`)
    # Where extraction runs. A helper process is killed at the budget: a hard limit even inside C code.
    # auto: pages whose estimated tag nesting exceeds `inline_max_depth` (resiliparse is quadratic in
    # depth) or larger than `inline_max_bytes` go to the helper, ordinary pages are extracted in-process
    # (~15% faster; linear-time there); trafilatura (pure Python, unbounded) always uses the helper.
    # always: every page in the helper. never: in-process, the budget only checked after the fact.
    isolate: Literal["auto", "always", "never"] = "auto"
    inline_max_depth: int = Field(256, ge=1)
    inline_max_bytes: int = Field(1 << 20, ge=1)
    # A second opinion where resiliparse's main-content heuristic looks lost: its text is shorter than
    # `second_opinion_below_chars` while the page's whole text (navigation included) has at least
    # `second_opinion_page_chars`, i.e. the article was taken for boilerplate. trafilatura (favor_precision)
    # then extracts the page and its text is kept when longer. null: never. Rare on real pages (1 in 93 of
    # benchmarks/real_pages.py's set, none of the corpus's 3,519), so it costs almost nothing.
    second_opinion: Literal["trafilatura"] | None = "trafilatura"
    # Keep a post's metadata (byline, date, "posted in" lines: resiliparse's `post_meta`) in the main text.
    # Off by default: it is not article text (trafilatura leaves it out too). Its effect on the real-page set
    # is in docs/benchmarks/results.md.
    post_meta: bool = False
    second_opinion_below_chars: int = Field(500, ge=0)
    second_opinion_page_chars: int = Field(2000, ge=0)
    # Page chrome left out of resiliparse's main text (CSS selectors, resiliparse's `skip_elements`): site and
    # article headers (title, byline, share bars; headings and table parts are kept), promotion boxes,
    # media-player controls and the boxes around an article (DEFAULT_SKIP_ELEMENTS). Where skipping leaves less than `second_opinion_below_chars` and under half of
    # the unskipped main text, the unskipped text is taken (a page laid out inside such an element keeps its
    # article). Its effect on the real-page set is in docs/benchmarks/results.md; [] turns it off.
    skip_elements: list[str] = Field(default_factory=lambda: list(DEFAULT_SKIP_ELEMENTS))
    # Blocks whose text is mostly link text left out of resiliparse's main text (related-article and teaser
    # lists, "more on this" boxes, menus inside the article's container), as trafilatura, Readability and
    # jusText judge blocks by link density: a list, table, section, aside, nav, or a div holding links, lists or
    # headings directly, with at most `link_density_max_words` words of which at least this share are inside
    # links (the outermost such block goes). Chosen on the development quarter of trafilatura's evaluation
    # pages; its effect is in docs/benchmarks/results.md. null: off.
    link_density: float | None = Field(0.5, gt=0.0, le=1.0)
    link_density_max_words: int = Field(300, ge=1)  # a longer block is never judged by its links (an article is)
    # Up to this many label lines removed from the end of resiliparse's main text: a last line of at most 4
    # words and 60 characters that does not end a sentence (or ends in a colon), the heading of a related-links
    # box whose links were left out ("More on this", "Next article", "Share:"). 0: off.
    trailing_labels: int = Field(2, ge=0)
    # Lines of resiliparse's main text holding only spaces (a paragraph of `&nbsp;`) emptied: the repetition
    # rules would count each as a repeated line (on the development set, 2 more of its 175 articles kept).
    empty_space_lines: bool = True

    @field_validator("skip_elements")
    @classmethod
    def _selectors_parse(cls, value: list[str]) -> list[str]:
        """A selector the extraction call cannot use is a setup error, not a failure on every page. Checked
        with the call itself (it joins the selectors with commas, so an unclosed bracket breaks them all); a
        comment would silently swallow the selectors after it."""
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree

        for selector in value:
            if "/*" in selector:
                raise ValueError(f"skip_elements: a CSS comment hides the selectors after it: {selector!r}; fix: remove the comment")
            try:
                extract_plain_text(HTMLTree.parse("<p>x</p>"), main_content=True, skip_elements=[selector])
            except Exception as error:  # resiliparse's CSSParserException
                raise ValueError(f"skip_elements: not a CSS selector resiliparse can use: {selector!r} ({error}); fix: correct or remove the selector") from None
        return value


class GopherQualitySettings(_Model):
    """Gopher quality rules (Rae et al. 2021); defaults are datatrove's GopherQualityFilter defaults.
    null disables a rule."""

    enabled: bool = True
    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1  # '#' and '...' per word
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8  # (sic, datatrove's name) minimum share of words with a letter
    # The words of that share: whitespace-separated words (the Gopher paper's definition: "2015," is one word
    # without a letter) or the word splitter's tokens (datatrove: `,` `.` `%` and each number are tokens
    # without a letter, so number-heavy news falls under 0.8; preset datatrove).
    alpha_words: Literal["whitespace", "tokens"] = "whitespace"
    min_stop_words: int | None = 2
    # The stop words counted by min_stop_words; null = sluice.words.STOP_WORDS for the document's language
    # (Gopher's list for English). Usually set per language: cleaning.languages.<code>.gopher_quality.stop_words.
    stop_words: tuple[str, ...] | None = None
    # How min_stop_words counts: every occurrence (as datatrove did when FineWeb was built, before its
    # 2025 fix #329, v0.5: "the the" is two) or distinct listed words (datatrove >= 0.5 and the Gopher paper,
    # "at least two of the following words"; preset datatrove).
    stop_word_count: Literal["occurrences", "distinct"] = "occurrences"


class GopherRepetitionSettings(_Model):
    """Gopher repetition rules; defaults are datatrove's GopherRepetitionFilter defaults (Gopher table A1)."""

    enabled: bool = True
    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: dict[int, float] = Field(default_factory=lambda: {2: 0.2, 3: 0.18, 4: 0.16})
    dup_n_grams: dict[int, float] = Field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    )


class C4Settings(_Model):
    """C4 rules (Raffel et al. 2020); defaults are datatrove's C4QualityFilter defaults but for
    `curly_bracket_code_lines` (`preset: datatrove` restores it). Line-level rules remove lines; lorem ipsum,
    a curly bracket in a kept prose line and too few sentences drop the document."""

    enabled: bool = True
    remove_citations: bool = True
    filter_no_terminal_punct: bool = True
    min_num_sentences: int = 5  # -1 disables
    min_words_per_line: int = 3  # -1 disables
    max_word_length: int = 1000  # -1 disables
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    # A kept line with a curly bracket that looks like code (sluice.clean.steps.codeshare.is_code_line: a shell prompt, a
    # statement, a block): drop_document (C4, datatrove) or remove_line, dropping the document only for a
    # bracket in prose (preset sluice: a tutorial's one template line no longer drops the article).
    curly_bracket_code_lines: Literal["drop_document", "remove_line"] = "remove_line"
    filter_policy: bool = True


class FineWebQualitySettings(_Model):
    """FineWeb's own rules; defaults are datatrove's FineWebQualityFilter defaults."""

    enabled: bool = True
    # The rule's version (sluice.clean.steps.filters.FineWebQualityFilter): fineweb, the one the FineWeb
    # dataset was built with (datatrove < 0.4: blank lines count in the line ratios, a ratio at its threshold
    # drops, a line ending in a quote is punctuated), or datatrove, datatrove 0.10's (blank lines left out, a
    # ratio at its threshold keeps, Unicode's sentence terminators only; preset datatrove).
    variant: Literal["fineweb", "datatrove"] = "fineweb"
    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: float = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3


class PIISettings(_Model):
    """Replace personal data in kept texts by placeholders; counts per kind go to the metadata."""

    enabled: bool = True
    email: bool = True
    # public: redact globally reachable addresses only; loopback, private, link-local, documentation and the
    # other special-purpose ranges of the IANA registries (127.0.0.1, 10.0.0.0/8, ::1, fe80::/10,
    # 2001:db8::/32, ...) in docs and configs are not personal data and stay (datatrove's default too).
    # all: every address; none: no address. true / false mean all / none (the earlier boolean).
    ip: Literal["public", "all", "none"] = "public"
    phone: bool = True

    @model_validator(mode="before")
    @classmethod
    def _old_ip_key(cls, values: Any) -> Any:
        """`ip_address`, the earlier name of `ip`, is still read, with one warning."""
        if isinstance(values, dict) and "ip_address" in values:
            if "ip" in values:
                raise ValueError("pii: `ip` and `ip_address` (its deprecated earlier name) are both set; fix: remove ip_address")
            warnings.warn("pii.ip_address is deprecated: name it pii.ip (public | all | none)", FutureWarning, stacklevel=2)
            values = {("ip" if key == "ip_address" else key): value for key, value in values.items()}
        return values

    @field_validator("ip", mode="before")
    @classmethod
    def _ip_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "all" if value else "none"
        return value


class ToxicitySettings(_Model):
    """Listed toxic / profane terms per word (see sluice.clean.steps.toxicity; word lists of the glin-profanity package)."""

    enabled: bool = True  # score every document in a language with a list (`toxicity_score`, `toxic_terms`)
    # Drop (`toxic_content`) when at least `min_terms` listed terms occur and they are more than `max_score`
    # of the words; null = score only. The lists hold ordinary words too (`anal`, Portuguese `amador`), so one
    # occurrence never drops a page.
    max_score: float | None = Field(0.005, ge=0.0, le=1.0)
    min_terms: int = Field(3, ge=1)
    extra_languages: tuple[str, ...] = ()  # lists applied to every document besides its language's, e.g. [en]
    # Listed terms not counted: ordinary words in the shipped lists, found matching on a technical handbook
    # (Turkish durum 'status', destek 'support', takip 'follow'; Italian montare 'to mount'; ...).
    ignore_terms: tuple[str, ...] = (
        "it", "durum", "destek", "takip", "edit", "am", "got", "montare", "monta", "venire", "duro", "gat",
    )
    # Listed terms that news, court and medical reporting uses to name what happened (an op-ed on an abuse
    # case: "sex x3, pedophile x2, raping x1"). They count in the score but cannot drop a document on their
    # own: a drop needs `min_terms` occurrences of the other listed terms too. (Spam stays caught: it
    # carries the other terms as well.)
    reporting_terms: tuple[str, ...] = (
        "sex", "rape", "raping", "rapist", "pedophile", "paedophile", "incest", "nude", "nudity", "genitals",
        "penis", "vagina", "intercourse", "sodomy", "bestiality", "semen", "anus", "orgasm", "ejaculation",
    )

    @field_validator("extra_languages")
    @classmethod
    def _extra(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from sluice.config.toxicity_lists import LIST_LANGUAGES

        for code in value:
            if code not in LIST_LANGUAGES:
                raise ValueError(f"toxicity.extra_languages: no word list for {code!r}; fix: use languages that have one: {sorted(LIST_LANGUAGES)}")
        return value


class CodeShareSettings(_Model):
    """Share of a document's lines that look like code (see sluice.clean.steps.codeshare); measured before language ID."""

    enabled: bool = True  # measure every document (`code_share` column)
    # Documents with a larger share go to the side dataset `cleaned_code/` (language-identified and
    # PII-redacted, not quality-filtered) instead of `cleaned_documents`; null = no routing. Checked first.
    route_above: float | None = Field(None, ge=0.0, le=1.0)
    max_share: float | None = Field(None, ge=0.0, le=1.0)  # drop above (`code_heavy`); null = keep
    min_lines: int = Field(3, ge=1)  # documents with fewer non-empty lines are measured, never routed or dropped


class PerplexitySettings(_Model):
    """Perplexity under the `perplexity_model` asset's n-gram model of the document's language (CCNet)."""

    enabled: bool = False  # needs the perplexity_model asset; records `perplexity` and `perplexity_bucket`
    max_perplexity: float | None = Field(None, gt=0.0)  # drop above (`high_perplexity`); null = keep
    # Drop documents in these buckets (head / middle / tail: below the model's first cut-off, between,
    # above the second), e.g. [tail] (drop reason `perplexity_tail`).
    drop_buckets: tuple[Literal["head", "middle", "tail"], ...] = ()


class PerplexityModelSettings(_Model):
    """The `perplexity_model` asset: one KenLM n-gram model per language, trained on a reference source."""

    reference_source: str | None = None  # whose documents are the training text; null = the asset refuses to train
    sources: dict[str, str] = Field(default_factory=dict)  # per language: another reference source, e.g. {zh: wiki_zh}
    languages: tuple[str, ...] = ()  # languages to model; empty = every language with >= min_documents
    order: int = Field(5, ge=2, le=6)  # n-gram order (CCNet: 5); the kenlm build holds orders <= 6
    min_documents: int = Field(3, ge=1)  # fewer reference documents in a language: no model for it
    max_documents: int = Field(50_000, ge=1)  # per language, the first by document-id hash
    # Cut-offs of the head / middle / tail buckets: these quantiles of the perplexity of a seeded sample of
    # the other sources' documents in that language (CCNet: 1/3 and 2/3).
    quantiles: tuple[float, float] = (1 / 3, 2 / 3)
    cutoff_sample: int = Field(5_000, ge=1)  # documents per language for the cut-offs
    seed: int = 0
    memory: str = "256M"  # lmplz -S (sorting memory)

    @field_validator("languages")
    @classmethod
    def _languages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for code in value:
            check_language(code, "language")
        return value

    @field_validator("sources")
    @classmethod
    def _sources(cls, value: dict[str, str]) -> dict[str, str]:
        for code in value:
            check_language(code, "perplexity_model.sources key")
        return value

    @field_validator("quantiles")
    @classmethod
    def _quantiles(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0 < value[0] < value[1] < 1:
            raise ValueError(f"quantiles must be [low, high] with 0 < low < high < 1, got {list(value)}; fix: e.g. [0.33, 0.67]")
        return value


# The keys `cleaning.languages.<code>` may set: the settings of the steps that run once the language is known.
LANGUAGE_KEYS = (
    "min_language_score", "gopher_quality", "gopher_repetition", "c4", "fineweb_quality", "toxicity",
    "perplexity", "quality_threshold",
)


class QualityModelSettings(_Model):
    """The `quality_model` asset: a fastText classifier, positives from a reference source, negatives a
    random sample of raw documents of the other sources (see sluice.clean.steps.quality)."""

    positive_source: str | None = None  # e.g. a curated source; null = the asset refuses to train
    max_positives: int = Field(20_000, ge=1)
    max_negatives: int = Field(20_000, ge=1)
    seed: int = 0
    epochs: int = Field(10, ge=1)
    learning_rate: float = Field(0.5, gt=0.0)
    word_ngrams: int = Field(2, ge=1, le=5)
    dim: int = Field(32, ge=2)
    max_chars: int = Field(4000, ge=100)  # of each text, for training and scoring


# What `cleaning.preset` sets (under the keys a config gives explicitly). Each preset names every key any
# preset sets, so a per-source preset replaces the global one's choices. sluice: the defaults; datatrove:
# the quality filters as datatrove 0.10 defines them (English word splitting for every language, the
# Gopher alpha rule over tokens), which the like-for-like benchmarks use. Steps datatrove has no counterpart
# of (PII, toxicity, code share) stay as configured.
PRESETS: dict[str, dict[str, Any]] = {
    "sluice": {
        "word_splitting": "multilingual", "gopher_quality": {"alpha_words": "whitespace", "stop_word_count": "occurrences"},
        "c4": {"curly_bracket_code_lines": "remove_line"}, "fineweb_quality": {"variant": "fineweb"},
    },
    "datatrove": {
        "word_splitting": "english", "gopher_quality": {"alpha_words": "tokens", "stop_word_count": "distinct"},
        "c4": {"curly_bracket_code_lines": "drop_document"}, "fineweb_quality": {"variant": "datatrove"},
    },
}


def _inner_problems(error: ValidationError) -> str:
    """The problems of an override's settings as `key: problem` parts of one line, the last one's fix kept
    (or, where the rule gave none, the fix to give the key a value its cleaning setting accepts)."""
    parts = [f"{'.'.join(str(p) for p in item['loc'])}: {item['msg'].removeprefix('Value error, ')}".removeprefix(": ") for item in error.errors()]
    text = "; ".join(parts)
    return text if "fix:" in text else f"{text}; fix: give each named key a value its cleaning.<key> accepts"


class CleaningSettings(_Model):
    # Named defaults for the rule definitions (PRESETS): sluice (its own, measured on real pages:
    # benchmarks/real_pages.py) or datatrove (datatrove's). Keys set explicitly win over the preset.
    preset: Literal["sluice", "datatrove"] = "sluice"
    min_chars: int = Field(200, ge=0)  # shorter extracted texts are dropped (`too_short`)
    max_chars: int = Field(1_000_000, ge=1)  # longer ones are dropped (`too_long`)
    # ISO 639 codes as lid.176 reports them (en, de, zh, ...); empty keeps every language. (A list under
    # `languages`, this setting's earlier name, is still read as keep_languages.)
    keep_languages: tuple[str, ...] = ()
    min_language_score: float = Field(0.65, ge=0.0, le=1.0)  # datatrove's LanguageFilter default
    min_language_scores: dict[str, float] = Field(default_factory=dict)  # per language, e.g. {zh: 0.5}
    langid_model: str | None = None  # path of lid.176.ftz; None = the copy `make` extracts
    # Word splitting of the quality filters: multilingual (spaceless scripts split per character, stop
    # words per language) or english (datatrove's default behaviour for every language). See sluice.words.
    word_splitting: Literal["multilingual", "english"] = "multilingual"
    url_blocklist: str | None = None  # file of blocked domains / `word:` entries (see sluice.clean.steps.urlfilter)
    # A training blocklist (sluice.blocklist; usually the same file as blocklist.path) applied while cleaning,
    # so new snapshots never carry its documents (reasons blocklisted_doc / _url / _domain / _regex); null = off.
    blocklist: str | None = None
    # Repair mojibake (UTF-8 decoded as cp1252 and the like) with ftfy after extraction; needs the
    # `unicode` extra. Off by default: it costs time and most pages are fine.
    fix_mojibake: bool = False
    # Model-based quality filter (the `quality_model` asset must exist): null = off; a number = score into
    # the `quality_score` column and drop below it (`low_quality_score`); 0 = score only.
    quality_threshold: float | None = Field(None, ge=0.0, le=1.0)
    # CPU seconds one step may spend on one document. A step over it (a pathological page in C code that
    # nothing else interrupts) gets the document dropped as `step_timeout:<step>`, kept in the dropped
    # output, and the part goes on: the chain runs in a supervised worker process that is killed and
    # restarted after that document (sluice.runtime.budget). Normal documents take milliseconds. null: the chain
    # runs in the task's own process, unbudgeted.
    step_cpu_budget_s: float | None = Field(10.0, gt=0.0)
    extraction: ExtractionSettings = ExtractionSettings()
    gopher_repetition: GopherRepetitionSettings = GopherRepetitionSettings()
    gopher_quality: GopherQualitySettings = GopherQualitySettings()
    c4: C4Settings = C4Settings()
    fineweb_quality: FineWebQualitySettings = FineWebQualitySettings()
    pii: PIISettings = PIISettings()
    toxicity: ToxicitySettings = ToxicitySettings()
    code_share: CodeShareSettings = CodeShareSettings()
    perplexity: PerplexitySettings = PerplexitySettings()
    # Bounds of the `drop_rate_within_bounds` check (warns); null = checks.min/max_cleaned_drop_rate.
    drop_rate_bounds: tuple[float, float] | None = None
    # Per source: any of the keys above, deep-merged over them, e.g.
    # {reference: {gopher_quality: {min_doc_words: 20}, extraction: {extractor: trafilatura}}}.
    per_source: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Per language (lid.176 code): any of LANGUAGE_KEYS, deep-merged over the source's settings for documents
    # identified as that language (FineWeb-2 keeps one such set per language), e.g.
    # {de: {min_language_score: 0.82, gopher_repetition: {dup_line_frac: 0.263}, gopher_quality: {stop_words: [der, und]}}}.
    # Precedence, most specific last: defaults < cleaning.<key> < per_source.<source>.<key>
    # < languages.<code>.<key> < per_source.<source>.languages.<code>.<key>.
    languages: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        """The preset's values under the keys given explicitly."""
        if isinstance(data, dict) and data.get("preset", "sluice") in PRESETS:
            given = {key: value.model_dump(exclude_unset=True) if isinstance(value, _Model) else value for key, value in data.items()}
            data = _deep_merge(PRESETS[data.get("preset", "sluice")], given)
        return data

    @model_validator(mode="before")
    @classmethod
    def _keep_list(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("languages"), list | tuple):
            if data.get("keep_languages"):
                raise ValueError("languages is a list (the languages to keep) and keep_languages is set too; fix: list them in keep_languages only")
            data = {**data, "keep_languages": data["languages"]}
            del data["languages"]
        return data

    @model_validator(mode="after")
    def _per_source(self) -> CleaningSettings:
        """Every per-language and per-source override makes valid settings (their problems in one line each,
        the inner keys named)."""
        for code, override in self.languages.items():
            check_language(code, "cleaning.languages key")
            unknown = sorted(set(override) - set(LANGUAGE_KEYS))
            if unknown:
                raise ValueError(
                    f"cleaning.languages.{code}: {', '.join(unknown)} cannot be set per language; "
                    f"allowed: {', '.join(LANGUAGE_KEYS)} (the settings of steps after language ID); fix: set the others in cleaning or per_source"
                )
            try:
                self.for_language(code)
            except ValidationError as error:
                raise ValueError(f"cleaning.languages.{code}: {_inner_problems(error)}") from None
        for name in self.per_source:
            check_name(name, "cleaning.per_source key (a source name)")
            try:
                self.for_source(name)
            except ValidationError as error:
                raise ValueError(f"cleaning.per_source.{name}: {_inner_problems(error)}") from None
        return self

    @field_validator("drop_rate_bounds")
    @classmethod
    def _drop_rate_bounds(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value and not 0 <= value[0] <= value[1] <= 1:
            raise ValueError(f"must be [low, high] with 0 <= low <= high <= 1, got {list(value)}; fix: e.g. [0.0, 0.9]")
        return value

    def for_source(self, source: str) -> CleaningSettings:
        """These settings with the source's overrides merged in (and no per_source table); the source's
        `languages` entries are merged into the global ones, language by language."""
        override = self.per_source.get(source)
        base = self.model_dump(exclude={"per_source"})
        if override:
            if "per_source" in override:
                raise ValueError("per_source cannot be nested; fix: move the inner entries up to cleaning.per_source")
            if isinstance(override.get("languages"), list | tuple):
                override = {**override, "keep_languages": override["languages"]}
                del override["languages"]
            if "preset" in override:  # the source's preset replaces the global one's choices
                base = _deep_merge(base, PRESETS.get(override["preset"], {}))
            base = _deep_merge(base, override)
        return CleaningSettings.model_validate(base)

    @property
    def uses_quality_model(self) -> bool:
        """Whether a quality threshold is set, globally or for some language: the quality model is needed."""
        return self.quality_threshold is not None or any(
            override.get("quality_threshold") is not None for override in self.languages.values()
        )

    @property
    def uses_perplexity_model(self) -> bool:
        """Whether perplexity scoring is enabled, globally or for some language: the perplexity models are needed."""
        return self.perplexity.enabled or any(
            (override.get("perplexity") or {}).get("enabled") for override in self.languages.values()
        )

    def for_language(self, language: str) -> CleaningSettings:
        """These settings with `languages.<language>` merged in (and no languages table): what the steps
        after language ID apply to a document of that language."""
        base = self.model_dump(exclude={"per_source", "languages"})
        override = self.languages.get(language)
        if override:
            if "preset" in override:  # the source's preset replaces the global one's choices
                base = _deep_merge(base, PRESETS.get(override["preset"], {}))
            base = _deep_merge(base, override)
        return CleaningSettings.model_validate(base)

    def language_min_scores(self) -> dict[str, float]:
        """`min_language_scores` with each language's own `min_language_score` override on top."""
        scores = dict(self.min_language_scores)
        for code, override in self.languages.items():
            if "min_language_score" in override:
                scores[code] = float(override["min_language_score"])
        return scores




_RENAMED_KEYS = {"ip_address": "ip"}  # deprecated earlier name -> current name (pii.ip)


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if key in _RENAMED_KEYS and _RENAMED_KEYS[key] in merged:  # an override in a deprecated name sets the current key
            warnings.warn(f"{key} is deprecated: name it {_RENAMED_KEYS[key]}", FutureWarning, stacklevel=2)
            key = _RENAMED_KEYS[key]
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key not in ("top_n_grams", "dup_n_grams", "min_language_scores", "sources"):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
