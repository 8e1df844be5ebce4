"""The whole config file: `SluiceConfig` (every section, cross-checked), and `load_config` / `parse_config`,
which turn YAML into it or into one `ConfigError` naming the file, the key and what is allowed."""

from __future__ import annotations

import copy
import functools
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError, model_validator

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
    def _cross_references(self) -> SluiceConfig:
        """Every name the config refers to exists, and every optional model it uses can be trained; all
        problems at once (one per line), so a copied config is fixed in one pass."""
        problems = self._reference_problems()
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _reference_problems(self) -> list[str]:
        names = [source.name for source in self.sources]
        if not names:
            return ["at least one source is required"]
        if len(set(names)) != len(names):
            return [f"source names must be unique, got {names}"]
        problems = []
        if not self.mixes:
            problems.append("at least one mix is required")
        for mix_name, mix in self.mixes.items():
            try:
                check_name(mix_name, "mix name")
            except ValueError as error:
                problems.append(str(error))
            problems += [f"mixes.{mix_name}.weights names unknown source {s!r}; sources are {names}" for s in mix.sources if s not in names]
        problems += [f"cleaning.per_source names unknown source {s!r}; sources are {names}" for s in self.cleaning.per_source if s not in names]
        positive = self.quality_model.positive_source
        if positive and positive not in names:
            problems.append(f"quality_model.positive_source names unknown source {positive!r}; sources are {names}")
        referenced = sorted({self.perplexity_model.reference_source, *self.perplexity_model.sources.values()} - {None})
        problems += [f"perplexity_model names unknown source {s!r}; sources are {names}" for s in referenced if s not in names]
        problems += [f"tokenizer.train_sources names unknown source {s!r}; sources are {names}" for s in self.tokenizer.train_sources if s not in names]
        return problems + self._model_problems(names)

    def _model_problems(self, names: list[str]) -> list[str]:
        """Cleaning settings that need a model this config cannot train."""
        problems = []
        scored = [name for name in names if self.cleaning.for_source(name).uses_quality_model]
        unavailable = self.quality_model_unavailable()
        if scored and unavailable:
            problems.append(
                f"cleaning.quality_threshold is set (sources {scored}) but the quality model cannot be trained: "
                f"{unavailable}; remove the threshold or fix quality_model"
            )
        perplexity = [name for name in names if self.cleaning.for_source(name).uses_perplexity_model]
        if perplexity and not (self.perplexity_model.reference_source or self.perplexity_model.sources):
            problems.append(
                f"cleaning.perplexity is enabled (sources {perplexity}) but perplexity_model.reference_source is not set: "
                "no model can be trained; name the reference source or disable cleaning.perplexity"
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
            prefix = f"{where}: " if item["loc"] else ""  # the config's own cross-checks name their keys
            lines += [f"{prefix}{part}{shown}" for part in message.split("\n")]  # a validator's problems, one per line
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
