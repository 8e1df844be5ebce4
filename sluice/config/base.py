"""What every config section builds on: the strict base model, the config error, and the checks of names,
snapshots, locations and language codes that several sections share."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

CONFIG_ENV_VAR = "SLUICE_CONFIG"
DEFAULT_CONFIG_NAME = "sluice.yaml"

# Names become partition keys, folder names and S3 key parts: keep them to a safe alphabet.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
SNAPSHOT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file, the key and what is allowed."""


def check_name(value: str, what: str) -> str:
    if not NAME_PATTERN.match(value):
        suggestion = re.sub(r"[^a-z0-9_-]+", "-", value.lower()).strip("-_")[:63] or "name"
        raise ValueError(
            f"{what} {value!r} must match {NAME_PATTERN.pattern} (lowercase letters, digits, '_' or '-'); "
            f"fix: rename it, e.g. to {suggestion!r}"
        )
    return value


def check_snapshot_name(value: str) -> str:
    """A snapshot folder's name is a partition key (and part of storage keys): refused with the fix."""
    if not SNAPSHOT_PATTERN.match(value) or ".." in value:
        suggestion = re.sub(r"[^A-Za-z0-9._-]+", "-", value.replace("..", "-")).strip("-._")[:128] or "2026-01"
        raise ValueError(
            f"snapshot folder {value!r} cannot be a partition key (it must match {SNAPSHOT_PATTERN.pattern}, no '..'); "
            f"fix: rename it, e.g. to {suggestion!r}; its files are not read until then"
        )
    return value


# S3 bucket names (the DNS-compatible rules) and the characters a key part may hold without quoting.
S3_BUCKET_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
S3_KEY_PART_PATTERN = re.compile(r"^[A-Za-z0-9._=+-]+$")


def check_location(value: str, what: str) -> str:
    """A local path or s3://bucket/prefix whose parts are safe: no `..`/`.`/empty segments, no control
    characters, and in S3 only characters that need no quoting in keys (`A-Za-z0-9._=+-`)."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"{what} {value!r} contains control characters; fix: remove them")
    if value.startswith("s3://"):
        bucket, _, prefix = value[len("s3://") :].partition("/")
        if not S3_BUCKET_PATTERN.match(bucket) or ".." in bucket:
            raise ValueError(
                f"{what} {value!r}: bucket {bucket!r} is not a valid S3 bucket name "
                "(3-63 characters: lowercase letters, digits, '.', '-'); fix: use the bucket's real name"
            )
        parts = prefix.rstrip("/").split("/") if prefix.rstrip("/") else []
        for part in parts:
            if part in ("", ".", "..") or not S3_KEY_PART_PATTERN.match(part):
                raise ValueError(
                    f"{what} {value!r}: key part {part!r} is not allowed "
                    "(no empty, '.' or '..' parts; characters A-Z a-z 0-9 . _ = + - only); fix: use a prefix of such parts"
                )
        return value
    if "://" in value:
        raise ValueError(f"{what} {value!r}: unsupported URL scheme; fix: use a local path or s3://bucket/prefix")
    return value  # local paths are resolved against the config file's folder (`..` is fine there)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_language(value: str, what: str) -> str:
    if value not in LID176_LANGUAGES:
        raise ValueError(f"{what} {value!r} is not a lid.176 language code; fix: use one such as en, de, zh, pt (see sluice/clean/models/langid.py)")
    return value


# The languages fastText's lid.176 model names (sluice.clean.models.langid): a language code the config
# names must be one of them.
LID176_LANGUAGES = frozenset(
    ["af", "als", "am", "an", "ar", "arz", "as", "ast", "av", "az", "azb", "ba", "bar", "bcl", "be", "bg", "bh", "bn", "bo", "bpy", "br", "bs", "bxr", "ca", "cbk", "ce", "ceb", "ckb", "co", "cs", "cv", "cy", "da", "de", "diq", "dsb", "dty", "dv", "el", "eml", "en", "eo", "es", "et", "eu", "fa", "fi", "fr", "frr", "fy", "ga", "gd", "gl", "gn", "gom", "gu", "gv", "he", "hi", "hif", "hr", "hsb", "ht", "hu", "hy", "ia", "id", "ie", "ilo", "io", "is", "it", "ja", "jbo", "jv", "ka", "kk", "km", "kn", "ko", "krc", "ku", "kv", "kw", "ky", "la", "lb", "lez", "li", "lmo", "lo", "lrc", "lt", "lv", "mai", "mg", "mhr", "min", "mk", "ml", "mn", "mr", "mrj", "ms", "mt", "mwl", "my", "myv", "mzn", "nah", "nap", "nds", "ne", "new", "nl", "nn", "no", "oc", "or", "os", "pa", "pam", "pfl", "pl", "pms", "pnb", "ps", "pt", "qu", "rm", "ro", "ru", "rue", "sa", "sah", "sc", "scn", "sco", "sd", "sh", "si", "sk", "sl", "so", "sq", "sr", "su", "sv", "sw", "ta", "te", "tg", "th", "tk", "tl", "tr", "tt", "tyv", "ug", "uk", "ur", "uz", "vec", "vep", "vi", "vls", "vo", "wa", "war", "wuu", "xal", "xmf", "yi", "yo", "yue", "zh"]
)
