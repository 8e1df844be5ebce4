"""Housekeeping after crashes: what a killed writer can leave behind, and the command that removes it.

Nothing a crash leaves is ever visible to readers (temporary names are skipped by listings, partitions
are read through their manifests, multipart uploads are invisible until completed), and the next run of
a stage removes its own partition's leftovers. `sluice cleanup` sweeps everything at once:
  - temporary files (`.tmp-*`) under a local storage root whose writer process is gone;
  - scratch folders (`$TMPDIR/sluice-<host>-<pid>-*`) of dead processes on this machine;
  - on S3, multipart uploads under the storage root older than `older_than_s`.
"""

from __future__ import annotations

from typing import Any

from sluice.config import SluiceConfig
from sluice.io.storage import STALE_TEMP_AGE_S, S3Store, open_store, remove_stale_scratch


def cleanup(config: SluiceConfig, older_than_s: float = STALE_TEMP_AGE_S) -> dict[str, Any]:
    store = open_store(config.storage.root, config.s3)
    report: dict[str, Any] = {
        "temp_files": store.remove_stale_temp(),
        "scratch_dirs": remove_stale_scratch(),
        "aborted_uploads": [],
    }
    if isinstance(store, S3Store):
        report["aborted_uploads"] = store.abort_stale_uploads(older_than_s)
    return report
