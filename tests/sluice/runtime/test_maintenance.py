"""What a crashed writer leaves is removed by the next run / `sluice cleanup`, and only that: temp files and
scratch folders of live processes (a concurrent run) stay."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from sluice.config import load_config
from sluice.io import storage
from sluice.io.layout import write_manifest
from sluice.io.storage import open_store, remove_stale_scratch
from sluice.runtime.maintenance import cleanup
from tests.conftest import base_config, write_config


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temp_files_and_scratch_of_dead_processes_are_removed(tmp_path, monkeypatch):
    root = tmp_path / "data"
    folder = root / "raw_documents" / "source=web" / "snapshot=s"
    folder.mkdir(parents=True)
    host = storage._host_tag()
    dead, alive = dead_pid(), os.getpid()
    (folder / f".tmp-part-00000.parquet.{host}.{dead}.abcd1234").write_bytes(b"partial")
    (folder / f".tmp-part-00001.parquet.{host}.{alive}.abcd1234").write_bytes(b"being written")
    other_host = folder / f".tmp-part-00002.parquet.0123abcd.{dead}.abcd1234"
    other_host.write_bytes(b"another machine's")
    old = folder / f".tmp-part-00003.parquet.0123abcd.{dead}.ffff0000"
    old.write_bytes(b"ancient")
    os.utime(old, (time.time() - 2 * storage.STALE_TEMP_AGE_S, time.time() - 2 * storage.STALE_TEMP_AGE_S))

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (scratch / f"sluice-{host}-{dead}-x1").mkdir()
    (scratch / f"sluice-{host}-{alive}-x2").mkdir()
    (scratch / "sluice-unrelated").mkdir()

    store = open_store(str(root))
    write_manifest(store, "raw_documents/source=web/snapshot=s", {"files": []})  # the next run of the stage
    assert sorted(p.name for p in folder.iterdir()) == [
        f".tmp-part-00001.parquet.{host}.{alive}.abcd1234",
        f".tmp-part-00002.parquet.0123abcd.{dead}.abcd1234",
        "_manifest.json",
    ]
    assert remove_stale_scratch(str(scratch)) == [str(scratch / f"sluice-{host}-{dead}-x1")]
    assert sorted(p.name for p in scratch.iterdir()) == [f"sluice-{host}-{alive}-x2", "sluice-unrelated"]

    monkeypatch.setenv("TMPDIR", str(scratch))
    config = load_config(write_config(tmp_path / "sluice.yaml", base_config(str(root))))
    report = cleanup(config)
    assert report["temp_files"] == [] and report["aborted_uploads"] == []  # nothing stale left to remove
