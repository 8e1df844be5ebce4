"""The daemon reloads its code location only when what it is built from changed (data_assets/daemon.py):
Dagster's own daemon replaces its code server every 60 s, each replacement importing Dagster and the code
location again.

- `code_fingerprint` changes with a Python source of the code location's packages, the config file and a
  file the config names, and not with another file.
- The patched controller check calls Dagster's reload only for a changed fingerprint or an unhealthy code
  server, and not before the check interval.
- A real daemon (slow): its code server lives on while nothing changes, is replaced after the config file
  changes, and is restarted when it dies.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import data_assets.instance
from data_assets import daemon
from data_assets.instance import DAGSTER_YAML
from tests.conftest import base_config, write_config
from tests.support.daemon import environment, processes_of, start_daemon, stop, wait_for


@pytest.fixture
def code_tree(tmp_path, monkeypatch):
    """A project root with the code location's three packages, a config naming a URL blocklist, and an
    unrelated data file."""
    root = tmp_path / "project"
    for package in daemon.CODE_PACKAGES:
        (root / package / "sub").mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        (root / package / "sub" / "module.py").write_text("x = 1\n")
    (root / "data.parquet").write_bytes(b"rows")
    blocklist = tmp_path / "urls.txt"
    blocklist.write_text("bad.example\n")
    config = write_config(tmp_path / "sluice.yaml", {**base_config(str(tmp_path / "data")), "cleaning": {"url_blocklist": str(blocklist)}})
    monkeypatch.setattr(data_assets.instance, "PROJECT_ROOT", root)
    monkeypatch.setenv("SLUICE_CONFIG", config)
    return SimpleNamespace(root=root, config=Path(config), blocklist=blocklist)


def _bump(path: Path) -> None:
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))


def test_fingerprint_follows_sources_config_and_named_files(code_tree):
    before = daemon.code_fingerprint()
    assert str(code_tree.blocklist) in {entry[0] for entry in before}
    _bump(code_tree.root / "data.parquet")
    (code_tree.root / "notes.md").write_text("not code")
    assert daemon.code_fingerprint() == before
    for changed in (code_tree.root / "sluice" / "sub" / "module.py", code_tree.config, code_tree.blocklist):
        _bump(changed)
        after = daemon.code_fingerprint()
        assert after != before, changed
        before = after
    (code_tree.root / "resources" / "new.py").write_text("")
    assert daemon.code_fingerprint() != before


def test_fingerprint_of_an_invalid_config_still_follows_its_file(code_tree):
    code_tree.config.write_text("storage: [unclosed\n")
    before = daemon.code_fingerprint()
    _bump(code_tree.config)
    assert daemon.code_fingerprint() != before


class _Controller:
    """Dagster's controller as far as the check uses it: the reload it wraps and the server registry."""

    def __init__(self, registry):
        self._grpc_server_registry = registry
        self.reloads = 0

    def check_workspace_freshness(self, last_workspace_update_time: float) -> float:
        self.reloads += 1
        return 12345.0


def _registry(*exit_codes):
    def entry(code):
        return SimpleNamespace(process=SimpleNamespace(server_process=SimpleNamespace(poll=lambda: code)))

    return SimpleNamespace(_active_entries={f"origin{i}": entry(code) for i, code in enumerate(exit_codes)})


def test_the_check_reloads_only_for_a_change_or_an_unhealthy_server(code_tree, monkeypatch):
    import dagster._daemon.controller as controller

    monkeypatch.setattr(controller, "RELOAD_WORKSPACE_INTERVAL", 60.0)
    cls = type("Controller", (_Controller,), {})
    daemon.reload_only_on_change(cls)
    alive = cls(_registry(None))
    assert alive.check_workspace_freshness(0.0) > 0 and alive.reloads == 0  # nothing changed
    _bump(code_tree.config)
    assert alive.check_workspace_freshness(0.0) == 12345.0 and alive.reloads == 1  # Dagster's reload ran
    assert alive.check_workspace_freshness(0.0) != 12345.0 and alive.reloads == 1  # the change was seen once
    dead = cls(_registry(None, -9))
    assert dead.check_workspace_freshness(0.0) == 12345.0 and dead.reloads == 1
    failed = cls(SimpleNamespace(_active_entries={"origin": SimpleNamespace(error="load failed")}))
    assert failed.check_workspace_freshness(0.0) == 12345.0 and failed.reloads == 1
    _bump(code_tree.config)
    recent = cls(_registry(None))
    assert recent.check_workspace_freshness(time.time()) != 12345.0 and recent.reloads == 0  # not yet due


def _code_servers(home: Path) -> set[int]:
    return {pid for pid, command in processes_of(home) if "api grpc" in command}


@pytest.mark.slow
def test_a_real_daemon_keeps_its_code_server_until_something_changes(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    config = write_config(tmp_path / "sluice.yaml", base_config(str(tmp_path / "data")))
    process = start_daemon(environment(home, config, SLUICE_WORKSPACE_CHECK_S="1"), tmp_path / "daemon.log")
    try:
        first = wait_for(lambda: _code_servers(home), 120, "the daemon's code server")
        # Dagster's controller checks every 5 s: four checks past the 1 s interval, no reload.
        time.sleep(21)
        assert _code_servers(home) == first
        _bump(Path(config))
        wait_for(lambda: _code_servers(home) - first, 30, "a new code server after the config changed")
        wait_for(lambda: not _code_servers(home) & first, 60, "the old code server to end")
        second = _code_servers(home)
        for pid in second:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _code_servers(home) - second, 30, "a code server replacing the killed one")
    finally:
        stop(process)
