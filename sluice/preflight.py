"""Checks of a config's locations before any work starts: one line per problem naming the file, the key,
the path (and how a relative one was resolved) and the fix.

`location_problems(config, config_path)` checks every source location (exists, is a folder or a readable
S3 prefix), the storage root (can be created and written) and every local file the config names (lists,
models, the tokenizer, evaluation sets); `source_problem` checks one source (the
`raw_documents` asset calls it before reading). Dagster-free: `sluice materialize`/`demo` print these and
stop with exit code 2, the asset fails with the same line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from sluice.config import SluiceConfig, did_you_mean
from sluice.storage import StorageError, open_store

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
    """One line saying why source `name`'s location cannot be read, or None when it can."""
    index = config.source_names.index(name)
    source = config.sources[index]
    written = _written_locations(config_path).get(name)
    where = f"{config_path or 'config'}: sources[{index}].location (source {name!r})"
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
    """Why the storage root cannot be written (local roots only; an S3 root is checked by its first write)."""
    root = config.storage.root
    if root.startswith("s3://"):
        return None
    note = _resolved_note(_written_locations(config_path).get("storage.root"), root, config_path)
    where = f"{config_path or 'config'}: storage.root"
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
    """Every local file the config names that cannot be read, one line each (S3 objects are read, and
    checked, when their step starts)."""
    problems = []
    for key, location in named_files(config):
        if location.startswith("s3://"):
            continue
        path = Path(location)
        where = f"{config_path or 'config'}: {key}: {location}"
        if not path.exists():
            problems.append(f"{where} {_missing_file(path)}; fix: correct the path (relative paths resolve against the config file's folder) or remove the key")
        elif not path.is_file():
            problems.append(f"{where} is a folder, not a file; fix: name the file")
        elif not os.access(path, os.R_OK):
            problems.append(f"{where} is not readable by this user; fix: grant read access")
    return problems


def _missing_file(path: Path) -> str:
    siblings = sorted(entry.name for entry in path.parent.iterdir() if entry.is_file()) if path.parent.is_dir() else []
    return f"does not exist{did_you_mean(path.name, siblings)}"


def location_problems(config: SluiceConfig, config_path: str | None = None) -> list[str]:
    """Every source location, the storage root and every file the config names, checked; one line per problem."""
    problems = [source_problem(config, name, config_path) for name in config.source_names]
    problems.append(storage_problem(config, config_path))
    return [problem for problem in problems if problem] + file_problems(config, config_path)
