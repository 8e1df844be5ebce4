"""A copied config's problems come in one list before anything runs (sluice.preflight.check_config_file):
schema, cross-references and the files and folders it names together, each line naming its key and a fix."""

from __future__ import annotations

import pytest

from sluice.config import ConfigError
from sluice.preflight import check_config_file
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
