"""A bad config value fails at load with the file, the key and the allowed values."""

from __future__ import annotations

import pytest
import yaml

from sluice.config import ConfigError, load_config
from tests.conftest import PROJECT_ROOT, base_config, write_config


def write(tmp_path, raw) -> str:
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_project_config_loads():
    config = load_config(PROJECT_ROOT / "sluice.yaml")
    assert config.source_names == ["web", "reference"]
    assert config.source("web").location == str(PROJECT_ROOT / "sample_data" / "web")
    assert "default" in config.mixes


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda raw: raw["sources"][0].update(format="csv"), ["sources[0].format", "'warc', 'jsonl' or 'parquet'", "'csv'"]),
        (lambda raw: raw["compute"].update(backend="spark"), ["compute.backend", "'local' or 'ray'", "'spark'"]),
        (lambda raw: raw["s3"].update(retry_mode="forever"), ["s3.retry_mode", "'standard', 'adaptive' or 'legacy'"]),
        (lambda raw: raw["cleaning"].update(min_language_score=2), ["cleaning.min_language_score", "less than or equal to 1", "invalid value (got 2)"]),
        (lambda raw: raw["cleaning"].update(min_chars="many"), ["cleaning.min_chars", "valid integer"]),
        (lambda raw: raw.update(colour="blue"), ["colour", "Extra inputs are not permitted"]),
        (lambda raw: raw["sources"][1]["options"].update(text_feild="body"), ["sources[1]", "text_feild"]),
        (lambda raw: raw["mixes"]["default"]["weights"].update(forum=0.1), ["unknown source 'forum'"]),
        (lambda raw: raw["sources"][0].update(name="Web/../x"), ["sources[0].name", "must match"]),
        (lambda raw: raw["mixes"]["default"].pop("token_budget"), ["mixes.default.token_budget", "Field required"]),
        (lambda raw: raw["mixes"]["default"]["weights"].update({"web:EN": 0.1}), ["mixes.default.weights", "lid.176 code"]),
        (lambda raw: raw["mixes"]["default"]["weights"].update({"web:en": 0.1}), ["mixes.default.weights", "both whole and by language"]),
        (lambda raw: raw["mixes"]["default"].update(validation_share=0.9), ["mixes.default.validation_share", "less than or equal to 0.5"]),
        (lambda raw: raw["tokenizer"].update(max_shard_tokens=10), ["tokenizer.max_shard_tokens", "greater than or equal to 1024"]),
    ],
)
def test_bad_value_names_key_and_allowed_values(tmp_path, mutate, expected):
    raw = base_config(str(tmp_path / "data"))
    mutate(raw)
    path = write(tmp_path, raw)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert path in message
    for fragment in expected:
        assert fragment in message


def test_literal_secret_is_refused(tmp_path):
    raw = base_config(str(tmp_path / "data"))
    raw["s3"]["aws_secret_access_key"] = "hunter2"
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, raw))
    assert "s3.aws_secret_access_key" in str(error.value)
    assert "environment" in str(error.value)
    assert "hunter2" not in str(error.value)


def test_missing_file_names_the_env_var(tmp_path):
    with pytest.raises(ConfigError, match="SLUICE_CONFIG"):
        load_config(tmp_path / "nope.yaml")


def test_config_path_from_env(tmp_path, monkeypatch):
    raw = base_config(str(tmp_path / "data"))
    raw["mixes"]["default"]["seed"] = 99
    monkeypatch.setenv("SLUICE_CONFIG", write(tmp_path, raw))
    assert load_config().mixes["default"].seed == 99


def test_a_reloaded_config_reflects_the_file_and_shares_nothing_with_the_last(tmp_path):
    """The parsed YAML is reused while the file's text is the same (sluice.config.file._parsed_yaml): a changed file
    loads its new values, and one load's config shares no mutable value with the next."""
    raw = base_config(str(tmp_path / "data"))
    path = write(tmp_path, raw)
    first = load_config(path)
    first.mixes["default"].weights["web"] = 123.0  # a frozen model's dict can still be changed in place
    assert load_config(path).mixes["default"].weights["web"] != 123.0
    raw["compute"]["max_workers"] = first.compute.max_workers + 1
    write(tmp_path, raw)
    assert load_config(path).compute.max_workers == first.compute.max_workers + 1


def test_every_cross_reference_problem_is_reported_at_once_one_line_each(tmp_path):
    """A copied config with several wrong names: one load names all of them (not one per attempt)."""
    raw = base_config(str(tmp_path / "data"))
    raw["mixes"]["default"]["weights"]["forum"] = 0.1
    raw["cleaning"] = {"per_source": {"blog": {}}}
    raw["quality_model"] = {"positive_source": "curated"}
    raw["perplexity_model"] = {"reference_source": "wiki"}
    raw["tokenizer"]["train_sources"] = ["news"]
    path = write_config(tmp_path / "sluice.yaml", raw)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    lines = str(error.value).splitlines()[1:]
    assert [line.strip().split(": names unknown source ")[0] for line in lines] == [
        "mixes.default.weights", "cleaning.per_source", "quality_model.positive_source", "perplexity_model", "tokenizer.train_sources",
    ]
    assert all(name in text for name, text in zip(["'forum'", "'blog'", "'curated'", "'wiki'", "'news'"], lines, strict=True))
