"""The whole config file: `SluiceConfig` (every section, cross-checked), and `load_config` / `parse_config`,
which turn YAML into it or into one `ConfigError` naming the file, the key and what is allowed."""

from __future__ import annotations

import copy
import difflib
import functools
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError, ValidationInfo, model_validator

from sluice.config.base import (
    CONFIG_ENV_VAR,
    DEFAULT_CONFIG_NAME,
    ConfigError,
    _Model,
    check_name,
)
from sluice.config.cleaning import (
    CleaningSettings,
    PerplexityModelSettings,
    QualityModelSettings,
)
from sluice.config.storage import (
    FORMAT_OPTIONS,
    S3Settings,
    SourceSettings,
    StorageSettings,
)
from sluice.config.training import (
    BlocklistSettings,
    CheckSettings,
    ComputeSettings,
    DedupSettings,
    ExportSettings,
    MixSettings,
    OrchestrationSettings,
    TokenizerSettings,
)

DEFER_REFERENCES = "defer_references"  # validation context: leave the cross-reference check to the caller


def _unknown_source(key: str, name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    fix = f"rename it to {close[0]!r} (the sources: {names})" if close else f"use one of the sources {names}"
    return f"{key}: names unknown source {name!r}{did_you_mean(name, names)}; fix: {fix}"


class SluiceConfig(_Model):
    storage: StorageSettings = StorageSettings()
    s3: S3Settings = S3Settings()
    sources: tuple[SourceSettings, ...]
    cleaning: CleaningSettings = CleaningSettings()
    tokenizer: TokenizerSettings = TokenizerSettings()
    compute: ComputeSettings = ComputeSettings()
    orchestration: OrchestrationSettings = OrchestrationSettings()
    dedup: DedupSettings = DedupSettings()
    checks: CheckSettings = CheckSettings()
    export: ExportSettings = ExportSettings()
    quality_model: QualityModelSettings = QualityModelSettings()
    perplexity_model: PerplexityModelSettings = PerplexityModelSettings()
    blocklist: BlocklistSettings = BlocklistSettings()
    mixes: dict[str, MixSettings]

    @model_validator(mode="after")
    def _cross_references(self, info: ValidationInfo) -> SluiceConfig:
        """Every name the config refers to exists, and every optional model it uses can be trained; all
        problems at once (one per line). `parse_config` defers this check (context `DEFER_REFERENCES`) to
        report it together with the schema's problems."""
        problems = [] if (info.context or {}).get(DEFER_REFERENCES) else self.reference_problems()
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def reference_problems(self, known: list[str] | None = None) -> list[str]:
        """One `key: problem; fix: ...` line per name that refers to nothing; `known`: the source names to
        check against (default: this config's; `parse_config` passes the file's when it had to leave a
        source out to validate the rest)."""
        names = self.source_names if known is None else known
        if not names:
            return ["sources: at least one source is required; fix: add one (name, location, format)"]
        if len(set(names)) != len(names):
            return [f"sources: source names must be unique, got {names}; fix: rename the repeated ones"]
        problems = []
        if not self.mixes:
            problems.append("mixes: at least one mix is required; fix: add one (weights, token_budget)")
        for mix_name, mix in self.mixes.items():
            try:
                check_name(mix_name, "mix name")
            except ValueError as error:
                problems.append(f"mixes.{mix_name}: {error}")
            problems += [_unknown_source(f"mixes.{mix_name}.weights", s, names) for s in mix.sources if s not in names]
        problems += [_unknown_source("cleaning.per_source", s, names) for s in self.cleaning.per_source if s not in names]
        positive = self.quality_model.positive_source
        if positive and positive not in names:
            problems.append(_unknown_source("quality_model.positive_source", positive, names))
        referenced = sorted({self.perplexity_model.reference_source, *self.perplexity_model.sources.values()} - {None})
        problems += [_unknown_source("perplexity_model", s, names) for s in referenced if s not in names]
        problems += [_unknown_source("tokenizer.train_sources", s, names) for s in self.tokenizer.train_sources if s not in names]
        return problems + self._model_problems(names)

    def _model_problems(self, names: list[str]) -> list[str]:
        """Cleaning settings that need a model this config cannot train."""
        problems = []
        scored = [name for name in names if self.cleaning.for_source(name).uses_quality_model]
        unavailable = self.quality_model_unavailable()
        if scored and unavailable:
            problems.append(
                f"cleaning.quality_threshold: set (sources {scored}) but the quality model cannot be trained: "
                f"{unavailable}; fix: remove the threshold or fix quality_model"
            )
        perplexity = [name for name in names if self.cleaning.for_source(name).uses_perplexity_model]
        if perplexity and not (self.perplexity_model.reference_source or self.perplexity_model.sources):
            problems.append(
                f"cleaning.perplexity: enabled (sources {perplexity}) but perplexity_model.reference_source is not set: "
                "no model can be trained; fix: name the reference source or disable cleaning.perplexity"
            )
        return problems

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


def _literal_secrets(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Where the document holds a literal secret (a key such as `aws_secret_access_key` with a value)."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if _SECRET_KEYS.search(str(key)) and value not in (None, ""):
                found.append((*path, key))
            else:
                found += _literal_secrets(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _literal_secrets(value, (*path, index))
    return found


def _error_line(item: dict[str, Any]) -> list[str]:
    """A pydantic error as `key: problem` lines (a validator may report several, one per line): an unknown
    key's fix is the closest allowed key (else the allowed keys), a wrong type's or bound's is the rule; the
    config's own validators' messages say what is allowed."""
    where = _format_location(item["loc"], None)
    got = item.get("input")
    # Never echo a value that may hold a credential (endpoint URLs with user:password@, secret keys).
    sensitive = any(isinstance(part, str) and (part == "endpoint_url" or _SECRET_KEYS.search(part)) for part in item["loc"])
    shown = "" if isinstance(got, dict | list) or got is None or sensitive else f" (got {got!r})"
    message = item["msg"].removeprefix("Value error, ")
    if item["type"] == "extra_forbidden" and isinstance(item["loc"][-1], str):
        allowed = _allowed_keys(tuple(item["loc"]))
        close = difflib.get_close_matches(item["loc"][-1], allowed, n=1, cutoff=0.6)
        fix = f"rename it to {close[0]!r}" if close else f"remove it (allowed here: {', '.join(allowed)})" if allowed else "remove it"
        message, shown = f"unknown key (Extra inputs are not permitted){did_you_mean(item['loc'][-1], allowed)}; fix: {fix}", ""
    elif item["type"] == "missing":
        message = "Field required; fix: add it"
    elif item["type"] not in ("value_error", "assertion_error"):  # a type or bound of the schema: the fix is the rule
        return [f"{where}: invalid value{shown}; fix: {message[0].lower()}{message[1:]}"]
    prefix = f"{where}: " if item["loc"] else ""
    if got is not None and repr(got) in message:
        shown = ""  # the validator's message shows the value already
    # The config's validators end their messages with `; fix: ...`; one without it still gets a line that says what to do.
    return [f"{prefix}{part}{shown}" + ("" if "fix:" in part else "; fix: change the value as the message says") for part in message.split("\n")]


def _data_path(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """pydantic's loc without its union/validator tags: the path of the value in the document."""
    return tuple(part for part in loc if not (isinstance(part, str) and (part in FORMAT_OPTIONS or part.startswith("function-"))))


def _prune(data: Any, path: tuple[Any, ...]) -> bool:
    """Remove the value at `path` from the document (its default then applies); False when not there."""
    for part in path[:-1]:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return False
    try:
        del data[path[-1]]
    except (KeyError, IndexError, TypeError):
        return False
    return True


def _validate_leniently(raw: dict[str, Any], max_rounds: int = 8) -> tuple[SluiceConfig | None, list[str], list[tuple[Any, ...]]]:
    """Validate the schema (cross-references deferred) and, where it fails, leave the failing values out and
    validate the rest again, so that the checks that need a whole config (cross-references, files) still run
    in the same pass. Returns the config without the failing values (None when a required value failed and
    nothing above it can be left out), the schema's problem lines, and the paths left out. A value that is
    missing only because it was left out is not a problem of its own (its container is left out instead)."""
    data = copy.deepcopy(raw)
    lines: list[str] = []
    pruned: list[tuple[Any, ...]] = []
    for _ in range(max_rounds):
        try:
            return SluiceConfig.model_validate(data, context={DEFER_REFERENCES: True}), lines, pruned
        except ValidationError as error:
            cut = set()
            for item in error.errors():
                path = _data_path(tuple(item["loc"]))
                if any(path[: len(p)] == p for p in pruned):  # left out already: it or its container fails for that
                    if item["type"] == "missing" and path in pruned:
                        cut.add(path[:-1])  # a required value: leave out what holds it
                    continue
                lines += _error_line(item)
                cut.add(path)
            cut.discard(())
            # Deepest and last list items first, so that removing one does not shift the next one's index.
            done = [path for path in sorted(cut, key=lambda p: (len(p), [str(x).zfill(8) for x in p]), reverse=True) if _prune(data, path)]
            if not done:
                return None, lines, pruned
            pruned += done
    return None, lines, pruned


def config_problems(raw: Any, base_dir: Path | None = None) -> tuple[SluiceConfig | None, list[str]]:
    """Every problem of a parsed YAML document, one `key: problem; fix: ...` line each (literal secrets,
    schema and cross-references together), and the config without its failing values (what the checks of
    the files and locations it names read, sluice/runtime/preflight.py; None when too little of it is valid). Relative
    paths resolve against `base_dir` (default: the current directory)."""
    if not isinstance(raw, dict):
        return None, [f"(top level): must be a mapping, got {type(raw).__name__}; fix: write the config's sections as `key: value` lines"]
    raw = copy.deepcopy(raw)
    problems = []
    for path in _literal_secrets(raw):
        problems.append(
            f"{_format_location(path, None)}: secrets do not belong in the config file; fix: remove it and set it in the "
            "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_PROFILE) instead"
        )
        _prune(raw, path)
    raw = _resolve_paths(raw, base_dir or Path.cwd())
    config, schema, pruned = _validate_leniently(raw)
    problems += schema
    if config is not None:
        # Left-out sources are still names the file defines; a section emptied by leaving items out is not empty.
        known = [s["name"] for s in raw.get("sources") or [] if isinstance(s, dict) and isinstance(s.get("name"), str)]
        references = config.reference_problems(known if any(p[0] == "sources" for p in pruned) else None)
        touched = {p[0] for p in pruned}
        problems += [line for line in references if not (line.split(":")[0] in touched and "at least one" in line)]
    return config, problems


def format_problems(origin: str, problems: list[str]) -> str:
    """The one message of a config's problems: `file: problem` when there is one, else a header and one
    indented line per problem."""
    if len(problems) == 1:
        return f"{origin}: {problems[0]}"
    return f"{origin}: invalid config, {len(problems)} problems\n  " + "\n  ".join(problems)


def parse_config(raw: Any, origin: str = "<config>", base_dir: Path | None = None) -> SluiceConfig:
    """Validate an already-parsed YAML document; one `ConfigError` lists every problem (`config_problems`),
    each naming its key and what is allowed."""
    config, problems = config_problems(raw, base_dir)
    if problems or config is None:
        raise ConfigError(format_problems(origin, problems)) from None
    return config


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


def read_config_document(config_path: Path) -> Any:
    """The parsed YAML document of the config file (a copy the caller may change), or a ConfigError saying
    that the file does not exist or is not YAML."""
    try:
        text = config_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"config file {config_path} does not exist (set {CONFIG_ENV_VAR} to the path of your sluice.yaml)"
        ) from None
    try:
        return copy.deepcopy(_parsed_yaml(text))
    except yaml.YAMLError as error:
        raise ConfigError(f"{config_path}: not valid YAML: {error}") from None


def load_config(path: str | os.PathLike[str] | None = None) -> SluiceConfig:
    """Load and validate the YAML config at `path` (default: `$SLUICE_CONFIG`, else ./sluice.yaml)."""
    config_path = Path(path).expanduser().resolve() if path else config_path_from_env()
    return parse_config(read_config_document(config_path), origin=str(config_path), base_dir=config_path.parent)
