"""A copied config's problems come in one list before anything runs (sluice.runtime.preflight.check_config_file):
schema, cross-references and the files and folders it names together, each line naming its key and a fix."""

from __future__ import annotations

import pytest

from sluice.config import ConfigError
from sluice.runtime.preflight import check_config_file
from tests.conftest import base_config, write_config


def copied_config(tmp_path) -> dict:
    """The sample config moved to another folder with one problem of each kind."""
    raw = base_config(str(tmp_path / "data"))
    raw["cleaning"]["min_char"] = 50  # typo of min_chars (schema)
    raw["tokenizer"]["train_sources"] = ["news"]  # not a source (cross-reference)
    raw["mixes"]["default"]["weights"]["forum"] = 0.1  # not a source (cross-reference)
    raw["cleaning"]["url_blocklist"] = str(tmp_path / "lists" / "blocked-domains.txt")  # a file that is not there
    raw["sources"][1]["location"] = str(tmp_path / "crawl" / "reference")  # a folder that is not there
    return raw


def test_every_kind_of_problem_is_reported_at_once_each_with_its_key_and_fix(tmp_path):
    path = write_config(tmp_path / "sluice.yaml", copied_config(tmp_path))
    with pytest.raises(ConfigError) as error:
        check_config_file(path)
    header, *lines = str(error.value).splitlines()
    assert header == f"{path}: invalid config, 5 problems"
    keys = [line.strip().split(": ")[0] for line in lines]
    assert keys == [
        "cleaning.min_char",
        "mixes.default.weights",
        "tokenizer.train_sources",
        "sources[1].location (source 'reference')",
        "cleaning.url_blocklist",
    ]
    assert all("; fix: " in line for line in lines), lines
    assert "rename it to 'min_chars'" in lines[0]
    assert "'forum'" in lines[1] and "'news'" in lines[2]
    assert "does not exist" in lines[3] and "does not exist" in lines[4]


def test_a_fixed_config_loads(tmp_path):
    raw = copied_config(tmp_path)
    del raw["cleaning"]["min_char"]
    raw["tokenizer"]["train_sources"] = ["web"]
    del raw["mixes"]["default"]["weights"]["forum"]
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "blocked-domains.txt").write_text("example.com\n")
    (tmp_path / "crawl" / "reference").mkdir(parents=True)
    config = check_config_file(write_config(tmp_path / "sluice.yaml", raw))
    assert config.cleaning.url_blocklist == str(tmp_path / "lists" / "blocked-domains.txt")


def test_a_bad_required_value_still_lets_the_rest_be_checked(tmp_path):
    """A mix whose weights fail is left out to check the rest: the unknown train source is still named,
    and the mix is not reported again as missing or as leaving the config with no mix."""
    raw = copied_config(tmp_path)
    raw["mixes"]["default"]["weights"]["web"] = -1
    raw["secret_token_value"] = "hunter2"
    path = write_config(tmp_path / "sluice.yaml", raw)
    with pytest.raises(ConfigError) as error:
        check_config_file(path)
    message = str(error.value)
    keys = [line.strip().split(": ")[0] for line in message.splitlines()[1:]]
    assert keys == [
        "secret_token_value", "cleaning.min_char", "mixes.default.weights", "tokenizer.train_sources",
        "sources[1].location (source 'reference')", "cleaning.url_blocklist",
    ]
    assert "must be >= 0" in message and "hunter2" not in message
    assert "Field required" not in message and "at least one mix" not in message


def test_the_validators_own_lines_carry_their_key_and_a_fix(tmp_path):
    """Problems the config's validators find (not pydantic's type rules) come in the same list, each line
    `key: problem; fix: ...` with a fix of its own (not the generic one), next to a did-you-mean typo, an
    unknown train source close to a real one, a mix weight naming an unknown source and a missing file."""
    raw = copied_config(tmp_path)
    raw["tokenizer"]["train_sources"] = ["refrence"]  # close to 'reference'
    raw["s3"] = {"endpoint_url": "ftp://127.0.0.1:8333"}
    raw["sources"].append({"name": "Web Forum!", "location": str(tmp_path), "format": "jsonl"})
    raw["dedup"] = {"index_shards": 15}
    raw["cleaning"]["drop_rate_bounds"] = [0.5, 0.1]
    raw["perplexity_model"] = {**raw.get("perplexity_model", {}), "languages": ["english"]}
    path = write_config(tmp_path / "sluice.yaml", raw)
    with pytest.raises(ConfigError) as error:
        check_config_file(path)
    lines = [line.strip() for line in str(error.value).splitlines()[1:]]
    by_key = {line.split(": ")[0]: line for line in lines}
    assert len(by_key) == len(lines), lines  # one line per problem
    expected = {
        "cleaning.min_char": "rename it to 'min_chars'",
        "s3.endpoint_url": "fix: e.g. http://127.0.0.1:8333",
        "sources[2].name": "fix: rename it, e.g. to 'web-forum'",
        "dedup.index_shards": "fix: use 16",
        "cleaning.drop_rate_bounds": "fix: e.g. [0.0, 0.9]",
        "perplexity_model.languages": "language 'english' is not a lid.176 language code; fix: use one such as en",
        "tokenizer.train_sources": "(did you mean 'reference'?); fix: rename it to 'reference'",
        "mixes.default.weights": "names unknown source 'forum'; fix: use one of the sources",
        "cleaning.url_blocklist": "does not exist; fix:",
        "sources[1].location (source 'reference')": "does not exist; fix:",
    }
    for key, fix in expected.items():
        assert key in by_key and fix in by_key[key], (key, lines)
    assert all("; fix: " in line and "as the message says" not in line for line in lines), lines
