"""The one YAML config file that points sluice at a crawl.

`load_config(path)` parses and validates it. Every model forbids unknown keys and every enumerated
value is a `Literal`, so a typo or a wrong value fails at load with the key path and the allowed
values (`ConfigError`). Relative paths are resolved against the config file's folder.
The file is found at `$SLUICE_CONFIG`, else `sluice.yaml` in the current directory.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import warnings
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

CONFIG_ENV_VAR = "SLUICE_CONFIG"
DEFAULT_CONFIG_NAME = "sluice.yaml"

# Names become partition keys, folder names and S3 key parts: keep them to a safe alphabet.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
SNAPSHOT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file, the key and what is allowed."""


def check_name(value: str, what: str) -> str:
    if not NAME_PATTERN.match(value):
        raise ValueError(
            f"{what} {value!r} must match {NAME_PATTERN.pattern} (lowercase letters, digits, '_' or '-')"
        )
    return value


def check_snapshot_name(value: str) -> str:
    if not SNAPSHOT_PATTERN.match(value) or ".." in value:
        raise ValueError(
            f"snapshot {value!r} must match {SNAPSHOT_PATTERN.pattern} and contain no '..'"
        )
    return value


# S3 bucket names (the DNS-compatible rules) and the characters a key part may hold without quoting.
S3_BUCKET_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
S3_KEY_PART_PATTERN = re.compile(r"^[A-Za-z0-9._=+-]+$")


def check_location(value: str, what: str) -> str:
    """A local path or s3://bucket/prefix whose parts are safe: no `..`/`.`/empty segments, no control
    characters, and in S3 only characters that need no quoting in keys (`A-Za-z0-9._=+-`)."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"{what} {value!r} contains control characters")
    if value.startswith("s3://"):
        bucket, _, prefix = value[len("s3://") :].partition("/")
        if not S3_BUCKET_PATTERN.match(bucket) or ".." in bucket:
            raise ValueError(
                f"{what} {value!r}: bucket {bucket!r} is not a valid S3 bucket name "
                "(3-63 characters: lowercase letters, digits, '.', '-')"
            )
        parts = prefix.rstrip("/").split("/") if prefix.rstrip("/") else []
        for part in parts:
            if part in ("", ".", "..") or not S3_KEY_PART_PATTERN.match(part):
                raise ValueError(
                    f"{what} {value!r}: key part {part!r} is not allowed "
                    "(no empty, '.' or '..' parts; characters A-Z a-z 0-9 . _ = + - only)"
                )
        return value
    if "://" in value:
        raise ValueError(f"{what} {value!r}: unsupported URL scheme; use a local path or s3://bucket/prefix")
    return value  # local paths are resolved against the config file's folder (`..` is fine there)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class S3Settings(_Model):
    """How to reach an S3-compatible store. Credentials never live here: boto3 reads them from the
    environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, instance roles)."""

    endpoint_url: str | None = None  # None = AWS; e.g. http://127.0.0.1:8333 for SeaweedFS/MinIO
    region: str = "us-east-1"
    max_attempts: int = Field(10, ge=1, le=50)  # botocore retries, counting the first attempt
    retry_mode: Literal["standard", "adaptive", "legacy"] = "standard"
    addressing_style: Literal["path", "virtual", "auto"] = "path"
    connect_timeout_s: float = Field(10.0, gt=0, le=600)  # per attempt; a timeout counts as a retryable error
    read_timeout_s: float = Field(60.0, gt=0, le=3600)

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint_url {value!r} must be an http:// or https:// URL with a host")
        if parts.username or parts.password:
            # Never echo the value: it holds a credential.
            raise ValueError(
                "endpoint_url must not carry credentials (user:password@); set AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY in the environment instead"
            )
        return value


class StorageSettings(_Model):
    root: str = ".sluice_data"  # local folder or s3://bucket/prefix; every asset writes below it

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        return check_location(value, "storage.root")


class JsonlOptions(_Model):
    text_field: str = "text"
    id_field: str | None = "id"
    url_field: str | None = "url"
    date_field: str | None = "date"
    content_type: Literal["text/plain", "text/html"] = "text/plain"
    # A longer line (after decompression) is quarantined as record_too_large; reading goes on at the next.
    max_line_bytes: int = Field(64 << 20, ge=1024)
    # A compressed file (.gz/.zst/.bz2) whose decompressed bytes exceed this many times the compressed bytes
    # read (past its first GiB) stops there (`expansion_limit`): a decompression bomb costs bounded time.
    # Text rarely compresses 20-fold; gzip cannot exceed ~1,030-fold.
    max_expansion_ratio: float = Field(1000.0, ge=10.0)


class ParquetOptions(_Model):
    text_field: str = "text"
    id_field: str | None = "id"
    url_field: str | None = "url"
    date_field: str | None = "date"
    content_type: Literal["text/plain", "text/html"] = "text/plain"
    batch_rows: int = Field(1024, ge=1)
    # A longer text cell is quarantined as record_too_large; a row group whose page headers declare a page
    # larger than this (decompressed) is quarantined unread (Arrow allocates a page at once).
    max_record_bytes: int = Field(64 << 20, ge=1024)


class WarcOptions(_Model):
    # Response records with one of these HTTP content types are read; other records are counted and skipped.
    content_types: tuple[str, ...] = ("text/html", "application/xhtml+xml", "text/plain")
    # A longer record, or one whose HTTP payload decodes (Content-Encoding) to more, is quarantined as
    # record_too_large; reading resumes at the next record.
    max_record_bytes: int = Field(64 << 20, ge=1024)


FORMAT_OPTIONS: dict[str, type[_Model]] = {
    "warc": WarcOptions,
    "jsonl": JsonlOptions,
    "parquet": ParquetOptions,
}


class SourceSettings(_Model):
    """One crawl source. Each sub-folder (or sub-prefix) of `location` is one snapshot."""

    name: str
    location: str  # local folder or s3://bucket/prefix
    format: Literal["warc", "jsonl", "parquet"]
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "source name")

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        return check_location(value, "location")

    @model_validator(mode="after")
    def _options(self) -> SourceSettings:
        # Validate options against the model of the chosen format, so a wrong key names the format.
        FORMAT_OPTIONS[self.format].model_validate(self.options)
        return self

    def parsed_options(self) -> Any:
        return FORMAT_OPTIONS[self.format].model_validate(self.options)


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
    min_stop_words: int | None = 2
    # The stop words counted by min_stop_words; null = sluice.words.STOP_WORDS for the document's language
    # (Gopher's list for English). Usually set per language: cleaning.languages.<code>.gopher_quality.stop_words.
    stop_words: tuple[str, ...] | None = None


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
    """C4 rules (Raffel et al. 2020); defaults are datatrove's C4QualityFilter defaults. Line-level rules
    remove lines; lorem ipsum, a curly bracket in a kept line and too few sentences drop the document."""

    enabled: bool = True
    remove_citations: bool = True
    filter_no_terminal_punct: bool = True
    min_num_sentences: int = 5  # -1 disables
    min_words_per_line: int = 3  # -1 disables
    max_word_length: int = 1000  # -1 disables
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True


class FineWebQualitySettings(_Model):
    """FineWeb's own rules; defaults are datatrove's FineWebQualityFilter defaults."""

    enabled: bool = True
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
                raise ValueError("pii: give `ip` only (`ip_address` is its deprecated earlier name)")
            warnings.warn("pii.ip_address is deprecated: name it pii.ip (public | all | none)", FutureWarning, stacklevel=2)
            values = {("ip" if key == "ip_address" else key): value for key, value in values.items()}
        return values

    @field_validator("ip", mode="before")
    @classmethod
    def _ip_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "all" if value else "none"
        return value


def check_language(value: str, what: str) -> str:
    from sluice.langid import LID176_LANGUAGES

    if value not in LID176_LANGUAGES:
        raise ValueError(f"{what} {value!r} is not a lid.176 language code (such as en, de, zh, pt; see sluice/langid.py)")
    return value


class ToxicitySettings(_Model):
    """Listed toxic / profane terms per word (see sluice.toxicity; word lists of the glin-profanity package)."""

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

    @field_validator("extra_languages")
    @classmethod
    def _extra(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from sluice.toxicity import LIST_LANGUAGES

        for code in value:
            if code not in LIST_LANGUAGES:
                raise ValueError(f"toxicity.extra_languages: no word list for {code!r}; lists: {sorted(LIST_LANGUAGES)}")
        return value


class CodeShareSettings(_Model):
    """Share of a document's lines that look like code (see sluice.codeshare); measured before language ID."""

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
    # above the second), e.g. [tail] (`perplexity_bucket_dropped`).
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
            check_language(code, "perplexity_model.languages:")
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
            raise ValueError(f"quantiles must be [low, high] with 0 < low < high < 1, got {list(value)}")
        return value


# The keys `cleaning.languages.<code>` may set: the settings of the steps that run once the language is known.
LANGUAGE_KEYS = (
    "min_language_score", "gopher_quality", "gopher_repetition", "c4", "fineweb_quality", "toxicity",
    "perplexity", "quality_threshold",
)


class QualityModelSettings(_Model):
    """The `quality_model` asset: a fastText classifier, positives from a reference source, negatives a
    random sample of raw documents of the other sources (see sluice.quality)."""

    positive_source: str | None = None  # e.g. a curated source; null = the asset refuses to train
    max_positives: int = Field(20_000, ge=1)
    max_negatives: int = Field(20_000, ge=1)
    seed: int = 0
    epochs: int = Field(10, ge=1)
    learning_rate: float = Field(0.5, gt=0.0)
    word_ngrams: int = Field(2, ge=1, le=5)
    dim: int = Field(32, ge=2)
    max_chars: int = Field(4000, ge=100)  # of each text, for training and scoring


class CleaningSettings(_Model):
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
    url_blocklist: str | None = None  # file of blocked domains / `word:` entries (see sluice.urlfilter)
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
    # restarted after that document (sluice.budget). Normal documents take milliseconds. null: the chain
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
    def _keep_list(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("languages"), list | tuple):
            if data.get("keep_languages"):
                raise ValueError("languages is a list (the languages to keep) and keep_languages is set too; use keep_languages")
            data = {**data, "keep_languages": data["languages"]}
            del data["languages"]
        return data

    @model_validator(mode="after")
    def _per_source(self) -> CleaningSettings:
        for code, override in self.languages.items():
            check_language(code, "cleaning.languages key")
            unknown = sorted(set(override) - set(LANGUAGE_KEYS))
            if unknown:
                raise ValueError(
                    f"cleaning.languages.{code}: {', '.join(unknown)} cannot be set per language; "
                    f"allowed: {', '.join(LANGUAGE_KEYS)} (the settings of steps after language ID)"
                )
            try:
                self.for_language(code)
            except ValidationError as error:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()
                )
                raise ValueError(f"cleaning.languages.{code}: {problems}") from None
        for name in self.per_source:
            check_name(name, "cleaning.per_source key (a source name)")
            try:
                self.for_source(name)
            except ValidationError as error:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()
                )
                raise ValueError(f"cleaning.per_source.{name}: {problems}") from None
        if self.drop_rate_bounds and not 0 <= self.drop_rate_bounds[0] <= self.drop_rate_bounds[1] <= 1:
            raise ValueError(f"drop_rate_bounds must be [low, high] with 0 <= low <= high <= 1, got {self.drop_rate_bounds}")
        return self

    def for_source(self, source: str) -> CleaningSettings:
        """These settings with the source's overrides merged in (and no per_source table); the source's
        `languages` entries are merged into the global ones, language by language."""
        override = self.per_source.get(source)
        base = self.model_dump(exclude={"per_source"})
        if override:
            if "per_source" in override:
                raise ValueError("per_source cannot be nested")
            if isinstance(override.get("languages"), list | tuple):
                override = {**override, "keep_languages": override["languages"]}
                del override["languages"]
            base = _deep_merge(base, override)
        return CleaningSettings.model_validate(base)

    def for_language(self, language: str) -> CleaningSettings:
        """These settings with `languages.<language>` merged in (and no languages table): what the steps
        after language ID apply to a document of that language."""
        base = self.model_dump(exclude={"per_source", "languages"})
        override = self.languages.get(language)
        if override:
            base = _deep_merge(base, override)
        return CleaningSettings.model_validate(base)

    def language_min_scores(self) -> dict[str, float]:
        """`min_language_scores` with each language's own `min_language_score` override on top."""
        scores = dict(self.min_language_scores)
        for code, override in self.languages.items():
            if "min_language_score" in override:
                scores[code] = float(override["min_language_score"])
        return scores


def _perplexity_enabled(cleaning: CleaningSettings) -> bool:
    return cleaning.perplexity.enabled or any(o.get("perplexity", {}).get("enabled") for o in cleaning.languages.values())


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


class TokenizerSettings(_Model):
    path: str | None = None  # an existing tokenizer.json; None = train byte-level BPE on `train_sources`
    vocab_size: int = Field(8192, ge=256, le=1 << 22)
    train_sources: tuple[str, ...] = ()  # empty = every source
    # BPE training reads the deduplicated documents of `train_sources` in the global partition order, up to
    # both bounds. HF's BPE trainer holds every distinct word it is given (its memory grows with the text
    # read), so `max_training_bytes` (UTF-8 bytes of text; the document that reaches it is cut there) is what
    # keeps the tokenizer step's memory flat as the crawl grows.
    max_training_documents: int = Field(20_000, ge=1)
    max_training_bytes: int = Field(16_000_000, ge=1)
    eos_token: str = "<|endoftext|>"
    # A tokenized shard is closed when the next document would take it past this many tokens
    # (2**28 tokens = 512 MiB of uint16); one document longer than this gets a shard of its own.
    max_shard_tokens: int = Field(1 << 28, ge=1024)


class ComputeSettings(_Model):
    backend: Literal["local", "ray"] = "local"
    max_workers: int = Field(2, ge=1, le=4096)  # processes of the local pool / CPUs of a local Ray
    ray_address: str | None = None  # None with backend=ray starts a local Ray; "auto" or ray://host:10001 joins one


class DedupSettings(_Model):
    """Near-duplicate detection (MinHash LSH, see sluice.minhash); defaults as datatrove's."""

    fuzzy: bool = True  # False: exact dedup only
    ngram_size: int = Field(5, ge=1, le=64)  # words per shingle
    bands: int = Field(14, ge=1, le=255)  # LSH bands; candidates share at least one band
    rows_per_band: int = Field(8, ge=1, le=64)  # signature values per band (num_perm = bands * rows)
    seed: int = Field(1, ge=0, lt=1 << 32)  # seed of the permutations (datasketch's default is 1)
    hash_function: Literal["poly", "sha1"] = "poly"  # shingle hash; sha1 = datasketch's default (slow)
    # A candidate pair (sharing an LSH bucket) is linked only if the Jaccard similarity of the two shingle
    # sets, computed from their texts, is at least this: the false-positive check of NeMo Curator's fuzzy
    # dedup. 0.8 by default (LSH alone links many pairs below 0.8: precision 0.53 vs 1.0 on
    # benchmarks/dedup_quality.py); reads only the candidates' texts. None: documents sharing a bucket are
    # near duplicates (datatrove's rule, no texts read).
    verify_min_jaccard: float | None = Field(0.8, ge=0.0, le=1.0)
    # With verification, each document of a bucket is checked against the bucket's first `verify_anchors`
    # documents in the global order (its anchors), not against every member: the pairs to verify grow
    # linearly with a bucket, not quadratically (NeMo Curator's num_anchors, 2 there). Members near-equal to
    # an anchor are linked through it.
    verify_anchors: int = Field(4, ge=1, le=1024)
    # The global index (sluice/dedup/index.py): keys are split into this many hash ranges (a power of two;
    # a probe reads only the row groups of the ranges its keys fall in, a merge holds one range in memory).
    # The newest partitions stay separate delta runs until there are `index_max_deltas`; the others form
    # leveled runs, each level `index_fanout` times the one below (a partition's rows are rewritten at most
    # fanout - 1 times per level; a probe reads one file per level and delta).
    index_shards: int = Field(16, ge=1, le=4096)
    index_fanout: int = Field(8, ge=2, le=1024)
    index_max_deltas: int = Field(8, ge=1, le=1024)

    @field_validator("index_shards")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"must be a power of two (1, 2, 4, ... 4096), got {value}")
        return value
    # Share of a partition's documents removed (exact + fuzzy) outside these bounds makes the
    # `removed_share_within_bounds` check warn.
    min_removed_share: float = Field(0.0, ge=0.0, le=1.0)
    max_removed_share: float = Field(0.8, ge=0.0, le=1.0)


class BlocklistSettings(_Model):
    """The training blocklist (see sluice.blocklist): documents, URLs, domains and text patterns that no mix
    may contain. Matched once per deduplicated partition (`blocklist_matches`) and left out of every mix."""

    path: str | None = None  # the blocklist file; null = none (an empty list)
    regex_timeout_s: float = Field(0.05, gt=0.0)  # per document and pattern; a search that runs out counts as a match


class CheckSettings(_Model):
    max_quarantined_file_share: float = Field(0.25, ge=0.0, le=1.0)
    min_cleaned_drop_rate: float = Field(0.0, ge=0.0, le=1.0)
    max_cleaned_drop_rate: float = Field(0.95, ge=0.0, le=1.0)
    mix_share_tolerance: float = Field(0.01, gt=0.0, le=1.0)  # realized vs configured token share, absolute
    tokenized_sample_documents: int = Field(16, ge=1)


class ExportSettings(_Model):
    """`sluice export` and `export_job`: a mix split as Parquet, WebDataset or MDS shards (`sluice.export`)."""

    root: str | None = None  # default destination (local or s3://); None = <storage.root>/mixed_export
    # Uncompressed sample bytes per shard file (Parquet files are smaller after zstd); MDS offsets are 32-bit
    shard_bytes: int = Field(1 << 27, ge=1 << 12, lt=1 << 32)
    mask_document_boundaries: bool = False  # labels = -100 where the next token starts another document (the loader's option)
    seed: int | None = None  # order of the rows: the loader's with this seed; None = the mix's seed


LANGUAGE_PATTERN = re.compile(r"^[a-z]{2,3}(_[a-z]+)?$")


def split_weight_key(key: str) -> tuple[str, str | None]:
    """`web` -> ("web", None): all of a source; `web:en` -> ("web", "en"): its documents in one language."""
    source, _, language = key.partition(":")
    return source, (language or None)


class MixSettings(_Model):
    """A named training mix; each is one partition of `mixed_dataset`."""

    # Share of the mix's training tokens per source (`web`) or per source and lid.176 language (`web:en`),
    # normalised to sum 1. A source is given either whole or by language, not both.
    weights: dict[str, float]
    token_budget: int = Field(ge=1)  # training tokens, met exactly
    sequence_length: int = Field(2048, ge=8)
    seed: int = 0
    max_epochs: float = Field(4.0, ge=1.0)  # how often a source's tokens may repeat to meet its weight
    # Share of each source's documents held out for validation, chosen by a hash of the document id, so the
    # same documents are held out by every mix and every rebuild; validation never shares a document with training.
    validation_share: float = Field(0.0, ge=0.0, le=0.5)
    # JSONL files (local or s3://) of evaluation texts; training and validation documents sharing a word
    # n-gram of `decontamination_ngram` words with any of them are removed from the mix and counted.
    eval_sets: tuple[str, ...] = ()
    eval_text_field: str = "text"
    decontamination_ngram: int = Field(13, ge=3, le=64)

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError("a mix needs at least one source weight")
        whole, by_language = set(), set()
        for key, weight in value.items():
            source, language = split_weight_key(key)
            check_name(source, "source name")
            if language is not None:
                if not LANGUAGE_PATTERN.match(language):
                    raise ValueError(f"{key!r}: language {language!r} must be a lid.176 code such as 'en' or 'zh'")
                by_language.add(source)
            else:
                whole.add(source)
            if weight < 0:
                raise ValueError(f"weight of {key!r} must be >= 0, got {weight}")
        if whole & by_language:
            raise ValueError(f"source(s) {sorted(whole & by_language)} are weighted both whole and by language; use one")
        if sum(value.values()) <= 0:
            raise ValueError("the weights must not all be zero")
        return value

    @property
    def sources(self) -> list[str]:
        return sorted({split_weight_key(key)[0] for key in self.weights})


class SluiceConfig(_Model):
    storage: StorageSettings = StorageSettings()
    s3: S3Settings = S3Settings()
    sources: tuple[SourceSettings, ...]
    cleaning: CleaningSettings = CleaningSettings()
    tokenizer: TokenizerSettings = TokenizerSettings()
    compute: ComputeSettings = ComputeSettings()
    dedup: DedupSettings = DedupSettings()
    checks: CheckSettings = CheckSettings()
    export: ExportSettings = ExportSettings()
    quality_model: QualityModelSettings = QualityModelSettings()
    perplexity_model: PerplexityModelSettings = PerplexityModelSettings()
    blocklist: BlocklistSettings = BlocklistSettings()
    mixes: dict[str, MixSettings]

    @model_validator(mode="after")
    def _cross_references(self) -> SluiceConfig:
        names = [source.name for source in self.sources]
        if not names:
            raise ValueError("at least one source is required")
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique, got {names}")
        for mix_name, mix in self.mixes.items():
            check_name(mix_name, "mix name")
            for source_name in mix.sources:
                if source_name not in names:
                    raise ValueError(
                        f"mixes.{mix_name}.weights names unknown source {source_name!r}; sources are {names}"
                    )
        for source_name in self.cleaning.per_source:
            if source_name not in names:
                raise ValueError(f"cleaning.per_source names unknown source {source_name!r}; sources are {names}")
        if self.quality_model.positive_source and self.quality_model.positive_source not in names:
            raise ValueError(
                f"quality_model.positive_source names unknown source {self.quality_model.positive_source!r}; sources are {names}"
            )
        for source_name in {self.perplexity_model.reference_source, *self.perplexity_model.sources.values()} - {None}:
            if source_name not in names:
                raise ValueError(f"perplexity_model names unknown source {source_name!r}; sources are {names}")
        for source_name in self.tokenizer.train_sources:
            if source_name not in names:
                raise ValueError(
                    f"tokenizer.train_sources names unknown source {source_name!r}; sources are {names}"
                )
        if not self.mixes:
            raise ValueError("at least one mix is required")
        scored = [name for name in names if self.cleaning.for_source(name).quality_threshold is not None]
        unavailable = self.quality_model_unavailable()
        if scored and unavailable:
            raise ValueError(
                f"cleaning.quality_threshold is set (sources {scored}) but the quality model cannot be trained: "
                f"{unavailable}; remove the threshold or fix quality_model"
            )
        perplexity = [name for name in names if _perplexity_enabled(self.cleaning.for_source(name))]
        if perplexity and not (self.perplexity_model.reference_source or self.perplexity_model.sources):
            raise ValueError(
                f"cleaning.perplexity is enabled (sources {perplexity}) but perplexity_model.reference_source is not set: "
                "no model can be trained; name the reference source or disable cleaning.perplexity"
            )
        return self

    def perplexity_model_unavailable(self) -> str | None:
        """Why this config cannot feed the optional `perplexity_model` asset (None when it can)."""
        if not (self.perplexity_model.reference_source or self.perplexity_model.sources):
            return "perplexity_model.reference_source is not set"
        return None

    def quality_model_unavailable(self) -> str | None:
        """Why this config cannot feed the optional `quality_model` asset (None when it can): the classifier
        needs a positive source and at least one other source for its negatives."""
        positive = self.quality_model.positive_source
        if not positive:
            return "quality_model.positive_source is not set"
        if not [source.name for source in self.sources if source.name != positive]:
            return f"it needs two classes, and {positive!r} (quality_model.positive_source) is the only source"
        return None

    @property
    def source_names(self) -> list[str]:
        return [source.name for source in self.sources]

    def source(self, name: str) -> SourceSettings:
        for source in self.sources:
            if source.name == name:
                return source
        raise KeyError(f"source {name!r} is not in the config; sources are {self.source_names}")


def _format_location(loc: tuple[Any, ...], data: Any) -> str:
    """Turn pydantic's loc tuple into `sources[1].format`, using names where the list holds named items."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in FORMAT_OPTIONS or item.startswith("function-"):
            continue  # pydantic's internal union/validator tags
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(top level)"


def _annotation_models(annotation: Any) -> list[Any]:
    """The annotations inside `annotation` (unions, Optional) that may hold a nested value."""
    import typing

    origin = typing.get_origin(annotation)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return [inner for arg in typing.get_args(annotation) for inner in _annotation_models(arg)]
    if origin is typing.Annotated:
        return _annotation_models(typing.get_args(annotation)[0])
    return [annotation]


def _child_annotation(annotation: Any, part: Any) -> Any:
    """The annotation of `part` (a field name, list index or dict key) inside a value of `annotation`."""
    import typing

    for candidate in _annotation_models(annotation):
        origin = typing.get_origin(candidate)
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            field_info = candidate.model_fields.get(part) if isinstance(part, str) else None
            if field_info is not None:
                return field_info.annotation
        elif origin in (list, tuple) and isinstance(part, int):
            return typing.get_args(candidate)[0]
        elif origin is dict and isinstance(part, str):
            return typing.get_args(candidate)[1]
    return None


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed where the unknown key `loc[-1]` was found (empty when the place is not a model)."""
    annotation: Any = SluiceConfig
    for part in loc[:-1]:
        if isinstance(part, str) and (part in FORMAT_OPTIONS or part.startswith("function-")):
            continue  # pydantic's union/validator tags
        annotation = _child_annotation(annotation, part)
        if annotation is None:
            return []
    return [
        name
        for candidate in _annotation_models(annotation)
        if isinstance(candidate, type) and issubclass(candidate, BaseModel)
        for name in candidate.model_fields
    ]


def did_you_mean(word: str, candidates: list[str]) -> str:
    """` (did you mean 'x'?)` for the closest candidate (difflib), else ``."""
    import difflib

    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _resolve_paths(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    """Resolve relative local paths against the config file's folder (s3:// and absolute paths stay)."""

    def resolve(value: str | None) -> str | None:
        if value is None or "://" in value or os.path.isabs(value):
            return value
        return str((base / value).resolve())

    raw = dict(raw)
    if isinstance(raw.get("storage"), dict) and "root" in raw["storage"]:
        raw["storage"] = {**raw["storage"], "root": resolve(raw["storage"]["root"])}
    elif "storage" not in raw:
        raw["storage"] = {"root": resolve(StorageSettings().root)}
    if isinstance(raw.get("sources"), list):
        raw["sources"] = [
            {**s, "location": resolve(s["location"])} if isinstance(s, dict) and isinstance(s.get("location"), str) else s
            for s in raw["sources"]
        ]
    for section, key in (("cleaning", "langid_model"), ("cleaning", "url_blocklist"), ("cleaning", "blocklist"), ("tokenizer", "path"), ("blocklist", "path")):
        if isinstance(raw.get(section), dict) and isinstance(raw[section].get(key), str):
            raw[section] = {**raw[section], key: resolve(raw[section][key])}
    if isinstance(raw.get("mixes"), dict):
        raw["mixes"] = {
            name: {**mix, "eval_sets": [resolve(p) if isinstance(p, str) else p for p in mix["eval_sets"]]}
            if isinstance(mix, dict) and isinstance(mix.get("eval_sets"), list)
            else mix
            for name, mix in raw["mixes"].items()
        }
    cleaning = raw.get("cleaning")
    if isinstance(cleaning, dict) and isinstance(cleaning.get("per_source"), dict):
        per_source = {}
        for name, override in cleaning["per_source"].items():
            if isinstance(override, dict):
                override = {
                    **override,
                    **{key: resolve(override[key]) for key in ("url_blocklist", "langid_model", "blocklist") if isinstance(override.get(key), str)},
                }
            per_source[name] = override
        raw["cleaning"] = {**cleaning, "per_source": per_source}
    return raw


_SECRET_KEYS = re.compile(r"(secret|password|access_key|token_value|credential)", re.IGNORECASE)


def _refuse_literal_secrets(node: Any, path: str = "") -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if _SECRET_KEYS.search(str(key)) and value not in (None, ""):
                raise ConfigError(
                    f"{here}: secrets do not belong in the config file; set them in the environment "
                    "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_PROFILE) instead"
                )
            _refuse_literal_secrets(value, here)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _refuse_literal_secrets(value, f"{path}[{index}]")


def parse_config(raw: Any, origin: str = "<config>", base_dir: Path | None = None) -> SluiceConfig:
    """Validate an already-parsed YAML document; errors name `origin`, the key path and allowed values."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping, got {type(raw).__name__}")
    _refuse_literal_secrets(raw)
    raw = _resolve_paths(raw, base_dir or Path.cwd())
    try:
        return SluiceConfig.model_validate(raw)
    except ValidationError as error:
        lines = []
        for item in error.errors():
            where = _format_location(item["loc"], raw)
            got = item.get("input")
            # Never echo a value that may hold a credential (endpoint URLs with user:password@, secret keys).
            sensitive = any(isinstance(part, str) and (part == "endpoint_url" or _SECRET_KEYS.search(part)) for part in item["loc"])
            shown = "" if isinstance(got, dict | list) or got is None or sensitive else f" (got {got!r})"
            message = item["msg"].removeprefix("Value error, ")
            if item["type"] == "extra_forbidden" and isinstance(item["loc"][-1], str):
                allowed = _allowed_keys(tuple(item["loc"]))
                message = "unknown key (Extra inputs are not permitted)" + did_you_mean(item["loc"][-1], allowed)
                shown = ""
            lines.append(f"{where}: {message}{shown}")
        if len(lines) == 1:  # one line naming the file, the key and what is wrong
            raise ConfigError(f"{origin}: {lines[0]}") from None
        raise ConfigError(f"{origin}: invalid config\n  " + "\n  ".join(lines)) from None


def config_path_from_env(default_dir: Path | None = None) -> Path:
    value = os.environ.get(CONFIG_ENV_VAR)
    if value:
        return Path(value).expanduser().resolve()
    return ((default_dir or Path.cwd()) / DEFAULT_CONFIG_NAME).resolve()


@functools.lru_cache(maxsize=16)
def _parsed_yaml(text: str) -> Any:
    """The YAML document `text`, parsed once per process (callers copy it): every Dagster run builds its
    resources again and loads the config, ~3 times per run, and parsing is most of what a load costs. The
    document is still validated (and its relative paths resolved) on every load."""
    return yaml.safe_load(text)


def load_config(path: str | os.PathLike[str] | None = None) -> SluiceConfig:
    """Load and validate the YAML config at `path` (default: `$SLUICE_CONFIG`, else ./sluice.yaml)."""
    config_path = Path(path).expanduser().resolve() if path else config_path_from_env()
    try:
        text = config_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"config file {config_path} does not exist (set {CONFIG_ENV_VAR} to the path of your sluice.yaml)"
        ) from None
    try:
        raw = copy.deepcopy(_parsed_yaml(text))
    except yaml.YAMLError as error:
        raise ConfigError(f"{config_path}: not valid YAML: {error}") from None
    return parse_config(raw, origin=str(config_path), base_dir=config_path.parent)
