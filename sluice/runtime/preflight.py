"""Checks of a config's locations before any work starts: one line per problem naming the key, the path
(and how a relative one was resolved) and the fix.

`check_config_file(path)` is the whole check before a run: the file's schema and cross-references
(sluice.config) and its locations, in one `ConfigError` listing every problem. `location_issues(config)`
checks every source location (exists, is a folder or a listable S3 prefix), the storage root (can be
created and written; an S3 root's bucket can be listed) and every file the config names (lists, models, the
tokenizer, evaluation sets; on S3 one HEAD each); `source_problem` checks one source (the `raw_documents`
asset calls it before reading). Dagster-free: `sluice materialize`/`demo` print these and stop with exit
code 2, the asset fails with the same line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from sluice.config import (
    ConfigError,
    SluiceConfig,
    config_problems,
    did_you_mean,
    format_problems,
    read_config_document,
)
from sluice.io.storage import StorageError, open_store

S3_FIX = "check the bucket and prefix, s3.endpoint_url and the credentials (AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"


def _written_locations(config_path: str | None) -> dict[str, Any]:
    """What the file itself says (before relative paths were resolved): source name -> location, and the
    storage root under the key `storage.root`."""
    if not config_path:
        return {}
    try:
        raw = yaml.safe_load(Path(config_path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
    written: dict[str, Any] = {}
    for source in raw.get("sources") or []:
        if isinstance(source, dict) and isinstance(source.get("name"), str):
            written[source["name"]] = source.get("location")
    if isinstance(raw.get("storage"), dict):
        written["storage.root"] = raw["storage"].get("root")
    return written


def _resolved_note(written: Any, resolved: str, config_path: str | None) -> str:
    if isinstance(written, str) and written != resolved and config_path:
        return f" ({written!r} resolved against {Path(config_path).resolve().parent})"
    return ""


def _missing_local(path: str) -> str:
    """Why a local path cannot be used, with the closest existing sibling when it looks like a typo."""
    target = Path(path)
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    siblings = sorted(entry.name for entry in parent.iterdir() if entry.is_dir()) if parent.is_dir() else []
    missing = target.relative_to(parent).parts[0] if target.is_relative_to(parent) and target != parent else target.name
    hint = did_you_mean(missing, siblings)
    return f"does not exist{hint}"


def source_problem(config: SluiceConfig, name: str, config_path: str | None = None) -> str | None:
    """One line saying why source `name`'s location cannot be read (naming the file), or None when it can."""
    problem = source_issue(config, name, config_path)
    return f"{config_path or 'config'}: {problem}" if problem else None


def source_issue(config: SluiceConfig, name: str, config_path: str | None = None) -> str | None:
    """`sources[i].location (source 'x'): why it cannot be read; fix: ...`, or None when it can."""
    index = config.source_names.index(name)
    source = config.sources[index]
    written = _written_locations(config_path).get(name)
    where = f"sources[{index}].location (source {name!r})"
    location = source.location
    note = _resolved_note(written, location, config_path)
    if location.startswith("s3://"):
        try:
            open_store(location, config.s3).check_access()
        except StorageError as error:
            return f"{where}: {location} cannot be listed: {error}; fix: {S3_FIX}"
        return None
    path = Path(location)
    if not path.exists():
        return (
            f"{where}: {location}{note} {_missing_local(location)}; fix: set it to the folder holding the "
            f"source's snapshot folders (relative paths resolve against the config file's folder) or remove the source"
        )
    if not path.is_dir():
        return f"{where}: {location}{note} is a file, not a folder; fix: set it to the folder holding the source's snapshot folders"
    if not os.access(path, os.R_OK | os.X_OK):
        return f"{where}: {location}{note} is not readable by this user; fix: grant read access (chmod/chown) or run as its owner"
    return None


def storage_problem(config: SluiceConfig, config_path: str | None = None) -> str | None:
    """Why the storage root cannot be written: a local root that cannot be created or written, an S3 root
    whose bucket cannot be listed (one request, the s3 section's timeouts; its prefix may not exist yet)."""
    root = config.storage.root
    where = "storage.root"
    if root.startswith("s3://"):
        bucket = root[len("s3://") :].partition("/")[0]
        try:
            open_store(f"s3://{bucket}", config.s3).check_access()
        except StorageError as error:
            return f"{where}: {root}: bucket {bucket!r} cannot be listed: {error}; fix: {S3_FIX}"
        return None
    note = _resolved_note(_written_locations(config_path).get("storage.root"), root, config_path)
    path = Path(root)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return f"{where}: {root}{note}: {existing} is a file; fix: point storage.root at a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{where}: {root}{note}: {existing} is not writable by this user; fix: choose a writable folder or grant write access"
    return None


def named_files(config: SluiceConfig) -> list[tuple[str, str]]:
    """(key, path) of every file the config names: the cleaning chain's lists and model (globally and per
    source), the tokenizer, the training blocklist, each mix's evaluation sets."""
    files = []
    for key in ("url_blocklist", "blocklist", "langid_model"):
        if getattr(config.cleaning, key):
            files.append((f"cleaning.{key}", getattr(config.cleaning, key)))
        for source, override in config.cleaning.per_source.items():
            if isinstance(override.get(key), str):
                files.append((f"cleaning.per_source.{source}.{key}", override[key]))
    if config.tokenizer.path:
        files.append(("tokenizer.path", config.tokenizer.path))
    if config.blocklist.path:
        files.append(("blocklist.path", config.blocklist.path))
    for name, mix in config.mixes.items():
        files += [(f"mixes.{name}.eval_sets[{index}]", path) for index, path in enumerate(mix.eval_sets)]
    return files


def file_problems(config: SluiceConfig, config_path: str | None = None) -> list[str]:
    """Every file the config names that cannot be read, one line each (an S3 object: one HEAD request)."""
    problems = []
    for key, location in named_files(config):
        if location.startswith("s3://"):
            problems += [f"{key}: {location} {problem}"] if (problem := _s3_file_problem(config, location)) else []
            continue
        path = Path(location)
        where = f"{key}: {location}"
        if not path.exists():
            problems.append(f"{where} {_missing_file(path)}; fix: correct the path (relative paths resolve against the config file's folder) or remove the key")
        elif not path.is_file():
            problems.append(f"{where} is a folder, not a file; fix: name the file")
        elif not os.access(path, os.R_OK):
            problems.append(f"{where} is not readable by this user; fix: grant read access")
    return problems


def _s3_file_problem(config: SluiceConfig, location: str) -> str | None:
    folder, _, name = location.rpartition("/")
    try:
        if not open_store(folder, config.s3).exists(name):
            return "does not exist; fix: correct the key or remove it"
    except StorageError as error:
        return f"cannot be read: {error}; fix: {S3_FIX}"
    return None


def _missing_file(path: Path) -> str:
    siblings = sorted(entry.name for entry in path.parent.iterdir() if entry.is_file()) if path.parent.is_dir() else []
    return f"does not exist{did_you_mean(path.name, siblings)}"


def location_issues(config: SluiceConfig, config_path: str | None = None) -> list[str]:
    """Every source location, the storage root and every file the config names, checked; one
    `key: problem; fix: ...` line per problem."""
    problems = [source_issue(config, name, config_path) for name in config.source_names]
    problems.append(storage_problem(config, config_path))
    return [problem for problem in problems if problem] + file_problems(config, config_path)


def location_problems(config: SluiceConfig, config_path: str | None = None) -> list[str]:
    """`location_issues`, each line naming the config file first."""
    return [f"{config_path or 'config'}: {problem}" for problem in location_issues(config, config_path)]


def check_config_file(path: str | os.PathLike[str]) -> SluiceConfig:
    """The config at `path`, or one `ConfigError` listing every problem it has before anything runs: its
    schema, its cross-references (sluice.config.file.config_problems), then the locations and files it
    names (`location_issues`, on the config without its failing values), one `key: problem; fix: ...` line
    each, so that a copied config is fixed in one pass."""
    config_path = Path(path).expanduser().resolve()
    config, problems = config_problems(read_config_document(config_path), config_path.parent)
    if config is not None:
        problems += location_issues(_quick_s3(config), str(config_path))
    if problems or config is None:
        raise ConfigError(format_problems(str(config_path), problems))
    return config


def _quick_s3(config: SluiceConfig) -> SluiceConfig:
    """The config with S3 requests cut short (2 attempts, 3 s to connect, 10 s to read): a check before the
    run says soon that an endpoint cannot be reached; the run itself keeps the s3 section's retries."""
    s3 = config.s3
    quick = s3.model_copy(update={"max_attempts": min(s3.max_attempts, 2), "connect_timeout_s": min(s3.connect_timeout_s, 3.0), "read_timeout_s": min(s3.read_timeout_s, 10.0)})
    return config.model_copy(update={"s3": quick})
