"""Names, keys and locations that could escape the storage root or break S3 keys are refused, and
credentials are never echoed in error messages."""

from __future__ import annotations

import pytest
import yaml

from sluice.config import ConfigError, load_config
from sluice.io.layout import PartitionRef, named_prefix
from sluice.io.storage import StorageError, open_store
from tests.conftest import base_config


def load_with(tmp_path, mutate) -> str:
    raw = base_config(str(tmp_path / "data"))
    mutate(raw)
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    return str(error.value)


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (lambda raw: raw["sources"][0].update(name="../etc"), ["sources[0].name", "must match"]),
        (lambda raw: raw["sources"][0].update(name="/abs"), ["sources[0].name", "must match"]),
        (lambda raw: raw["sources"][0].update(name="a b"), ["sources[0].name", "must match"]),
        (lambda raw: raw["sources"][0].update(location="s3://bucket/crawl/../other"), ["sources[0].location", "'..'"]),
        (lambda raw: raw["sources"][0].update(location="s3://bucket//crawl"), ["sources[0].location", "key part ''"]),
        (lambda raw: raw["sources"][0].update(location="s3://bucket/crawl web"), ["sources[0].location", "'crawl web'"]),
        (lambda raw: raw["sources"][0].update(location="s3://Bad_Bucket/x"), ["sources[0].location", "not a valid S3 bucket"]),
        (lambda raw: raw["sources"][0].update(location="ftp://host/x"), ["sources[0].location", "unsupported URL scheme"]),
        (lambda raw: raw["sources"][0].update(location="/data/crawl\nx"), ["sources[0].location", "control characters"]),
        (lambda raw: raw.update(storage={"root": "s3://bucket/out/../../x"}), ["storage.root", "'..'"]),
        (lambda raw: raw["mixes"].update({"../m": raw["mixes"]["default"]}), ["mix name '../m'", "must match"]),
    ],
)
def test_unsafe_names_and_locations_are_refused_at_load(tmp_path, mutate, fragments):
    message = load_with(tmp_path, mutate)
    for fragment in fragments:
        assert fragment in message, message


def test_endpoint_with_embedded_credentials_is_refused_without_echoing_them(tmp_path):
    message = load_with(tmp_path, lambda raw: raw["s3"].update(endpoint_url="http://AKIDEXAMPLE:sup3rs3cret@127.0.0.1:8333"))
    assert "s3.endpoint_url" in message and "AWS_SECRET_ACCESS_KEY" in message
    assert "sup3rs3cret" not in message and "AKIDEXAMPLE" not in message


@pytest.mark.parametrize("key", ["sup3rs3cret", "{\"a\": 1}"])
def test_literal_secret_anywhere_is_refused_without_echoing_it(tmp_path, key):
    message = load_with(tmp_path, lambda raw: raw["sources"][1]["options"].update(password=key))
    assert "sources[1].options.password" in message and "environment" in message
    assert key not in message


@pytest.mark.parametrize(("source", "snapshot"), [("web", ".."), ("web", "../x"), ("web", "a/b"), ("web", "/abs"), ("web", "a b"),
                                                  ("web", "x..y"), ("../web", "2026-01"), ("Web", "2026-01"), ("web", "a%2Fb")])
def test_partition_keys_that_break_paths_or_s3_keys_are_refused(source, snapshot):
    with pytest.raises(ValueError, match="must match"):
        PartitionRef(source, snapshot)


def test_named_partitions_are_checked():
    assert named_prefix("mixed_dataset", "mix", "default") == "mixed_dataset/mix=default"
    with pytest.raises(ValueError):
        named_prefix("mixed_dataset", "mix", "../../etc")


@pytest.mark.parametrize("key", ["../outside", "a/../../b", "/etc/passwd", "a/./b", "a\\b", "a\x00b"])
def test_store_keys_cannot_leave_the_root(tmp_path, key):
    local = open_store(str(tmp_path / "root"))
    (tmp_path / "outside").write_bytes(b"secret")
    with pytest.raises(StorageError, match="refusing storage key"):
        local.read_bytes(key)
    with pytest.raises(StorageError, match="refusing storage key"):
        local.write_bytes(key, b"x")
    s3 = open_store("s3://bucket/prefix")
    with pytest.raises(StorageError, match="refusing storage key"):
        s3._key(key)
    assert (tmp_path / "outside").read_bytes() == b"secret"
