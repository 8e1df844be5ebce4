"""benchmarks/stage_costs.py: the scratch copy a stage runs on (the graph's data, less what the stage writes),
and the byte comparison that proves the stage alone did the graph's work. (The whole measurement runs in the
slow test of benchmarks/end_to_end.py on a tiny crawl.)"""

from __future__ import annotations

from pathlib import Path

from benchmarks.stage_costs import OUTPUTS, differing_outputs, prepare


def graph_data(root: Path) -> Path:
    for name in ("raw_documents", "raw_documents_tasks", "cleaned_documents", "cleaned_dropped", "dedup_signatures"):
        folder = root / name / "source=web" / "snapshot=2026-01"
        folder.mkdir(parents=True)
        (folder / "part-00000.parquet").write_bytes(name.encode())
    return root


def test_the_scratch_copy_holds_the_inputs_linked_and_none_of_the_stages_outputs(tmp_path):
    data = graph_data(tmp_path / "graph")
    scratch = tmp_path / "scratch"
    prepare("cleaned", data, scratch)
    present = sorted(p.name for p in scratch.iterdir())
    assert present == ["dedup_signatures", "raw_documents"]  # no cleaned outputs, no task records
    part = Path("raw_documents/source=web/snapshot=2026-01/part-00000.parquet")
    assert (scratch / part).stat().st_ino == (data / part).stat().st_ino  # linked, not copied
    assert set(OUTPUTS["cleaned"]) >= {"cleaned_documents", "cleaned_dropped"}


def test_a_stage_output_that_differs_from_the_graphs_is_named(tmp_path):
    data = graph_data(tmp_path / "graph")
    scratch = tmp_path / "scratch"
    prepare("cleaned", data, scratch)
    for name, content in (("cleaned_documents", b"cleaned_documents"), ("cleaned_dropped", b"other bytes")):
        folder = scratch / name / "source=web" / "snapshot=2026-01"
        folder.mkdir(parents=True)
        (folder / "part-00000.parquet").write_bytes(content)
    compared, differing = differing_outputs("cleaned", data, scratch)
    assert compared == 2
    assert differing == ["cleaned_dropped/source=web/snapshot=2026-01/part-00000.parquet"]
