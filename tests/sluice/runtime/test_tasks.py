"""Completion records (sluice.runtime.tasks): records of tasks a run no longer has are removed when its manifest is
published, the others stay; a record is reused only with the same digest and verified outputs."""

from __future__ import annotations

from sluice.io.layout import PartitionRef, write_manifest
from sluice.io.storage import open_store
from sluice.runtime.tasks import record_listing, records_prefix


def test_publishing_removes_orphaned_records_and_keeps_listed_ones(tmp_path):
    store = open_store(str(tmp_path))
    ref = PartitionRef("web", "2026-02")
    folder = records_prefix("raw_documents", ref)
    for part in range(5):  # a killed run of a partition that had 5 input files
        store.write_bytes(f"{folder}/task-{part:05d}.json", b"{}")
    store.write_bytes(f"{folder}/.tmp-task-00009.json.0123abcd.999999.abcd1234", b"{")  # a torn write of a dead host's process
    manifest = {"files": [], "task_records": record_listing("raw_documents", ref, range(3))}  # now 3 files
    write_manifest(store, "raw_documents/source=web/snapshot=2026-02", manifest)
    assert sorted(p.name for p in (tmp_path / folder).iterdir()) == [
        ".tmp-task-00009.json.0123abcd.999999.abcd1234",  # another host's: left until it is old (sluice cleanup)
        "task-00000.json",
        "task-00001.json",
        "task-00002.json",
    ]
