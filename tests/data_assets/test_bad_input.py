"""Bad input through Dagster: damaged files and records are quarantined with a reason (in the metadata and
in the raw_quarantine dataset), the partition still succeeds, no good document is lost; a missing source location
fails the run naming it; the blocking quarantine check fails when most files are unreadable."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from dagster import materialize
from warcio.archiveiterator import ArchiveIterator

from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import SNAPSHOTS, multi_key
from data_assets.raw import QUARANTINE_CHECK

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
WARC_FILES = sorted((SAMPLE / "web" / "2026-01").glob("*.warc.gz"))
JSONL_GZ = SAMPLE / "reference" / "2026-01" / "debian-reference.jsonl.gz"
SNAPSHOT = "2026-01"
JSONL_OPTIONS = {"text_field": "text", "id_field": "id", "url_field": "url", "date_field": "date"}


def warc_members(data: bytes) -> list[bytes]:
    """The gzip members (one record each) of a sample WARC, split by warcio."""
    iterator = ArchiveIterator(io.BytesIO(data))
    spans = []
    for record in iterator:
        iterator.read_to_end(record)
        spans.append((iterator.get_record_offset(), iterator.get_record_length()))
    return [data[offset : offset + length] for offset, length in spans]


def response_urls(data: bytes) -> list[str]:
    return [r.rec_headers.get_header("WARC-Target-URI") for r in ArchiveIterator(io.BytesIO(data)) if r.rec_type == "response"]


def sources(web: Path, reference: Path) -> list[dict]:
    return [
        {"name": "web", "location": str(web), "format": "warc"},
        {"name": "reference", "location": str(reference), "format": "jsonl", "options": JSONL_OPTIONS},
    ]


def run(instance, config_path: str, source: str, selection=("raw_documents", "cleaned_documents")):
    return materialize(
        ASSETS,
        selection=list(selection),
        partition_key=multi_key(source, SNAPSHOT),
        instance=instance,
        resources=build_resources(config_path),
        raise_on_error=False,
    )


def metadata(result, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: getattr(v, "value", v) for k, v in event.event_specific_data.materialization.metadata.items()}


def quarantine_check(result):
    [check] = [c for c in result.get_asset_check_evaluations() if c.asset_key.to_user_string() == "raw_documents"]
    assert check.check_name == QUARANTINE_CHECK
    return check


def raw_partition(storage: Path, source: str) -> Path:
    return storage / "raw_documents" / f"source={source}" / f"snapshot={SNAPSHOT}"


def quarantine_rows(storage: Path, source: str) -> list[dict]:
    """One partition of the raw_quarantine dataset, read as a Hive-partitioned dataset (files in task order)."""
    dataset = ds.dataset(storage / "raw_quarantine", format="parquet", partitioning="hive")
    table = dataset.to_table(filter=(ds.field("source") == source) & (ds.field("snapshot") == SNAPSHOT))
    return table.to_pylist()


@pytest.fixture
def damaged_sources(tmp_path):
    """web/2026-01: a good WARC, a truncated one, one with a broken record, an empty one;
    reference/2026-01: JSONL with a malformed line and two invalid-UTF-8 lines between good lines."""
    web = tmp_path / "web" / SNAPSHOT
    web.mkdir(parents=True)
    good, truncated, broken = (path.read_bytes() for path in WARC_FILES[:3])
    (web / "a-good.warc.gz").write_bytes(good)

    truncated_members = warc_members(truncated)
    cut_member = 6
    cut_offset = sum(map(len, truncated_members[:cut_member]))
    (web / "b-truncated.warc.gz").write_bytes(truncated[: cut_offset + len(truncated_members[cut_member]) // 2])

    broken_members = warc_members(broken)
    broken_offset = sum(map(len, broken_members[:2]))
    garbled = gzip.decompress(broken_members[2]).replace(b"WARC/1.0", b"WARC/X.Y-broken", 1)
    (web / "c-broken.warc.gz").write_bytes(b"".join(broken_members[:2]) + gzip.compress(garbled) + b"".join(broken_members[3:]))

    (web / "d-empty.warc.gz").write_bytes(b"")

    reference = tmp_path / "reference" / SNAPSHOT
    reference.mkdir(parents=True)
    lines = gzip.decompress(JSONL_GZ.read_bytes()).splitlines(keepends=True)
    damaged = (
        lines[:3]
        + [b'{"id": "cut", "text": "no closing brace"\n']  # line 4
        + lines[3:6]
        + [b'{"id": "x", "text": "\xff\xfe"}\n']  # line 8: bytes that are not UTF-8
        + lines[6:8]
        + [b'{"id": "y", "text": "escaped lone surrogate \\udc80"}\n']  # line 11: no valid text either
        + lines[8:]
    )
    (reference / "docs.jsonl.gz").write_bytes(gzip.compress(b"".join(damaged)))

    return {
        "web": tmp_path / "web",
        "reference": tmp_path / "reference",
        "expected_urls": {
            f"{SNAPSHOT}/a-good.warc.gz": response_urls(good),
            f"{SNAPSHOT}/b-truncated.warc.gz": response_urls(truncated)[:cut_member],
            f"{SNAPSHOT}/c-broken.warc.gz": [u for i, u in enumerate(response_urls(broken)) if i != 2],
        },
        "quarantine": {
            (f"{SNAPSHOT}/b-truncated.warc.gz", f"record {cut_member} @ byte {cut_offset}", "truncated_gzip"),
            (f"{SNAPSHOT}/c-broken.warc.gz", f"record 2 @ byte {broken_offset}", "bad_warc_record"),
            (f"{SNAPSHOT}/d-empty.warc.gz", "file", "empty_file"),
        },
        "reference_ids": [json.loads(line)["id"] for line in lines],
    }


def test_damaged_web_snapshot_succeeds_with_everything_good_kept(make_config, dagster_instance, damaged_sources, tmp_path):
    storage = tmp_path / "storage"
    config = make_config(
        storage_root=str(storage),
        sources=sources(damaged_sources["web"], damaged_sources["reference"]),
        compute={"backend": "local", "max_workers": 1},
        checks={"max_quarantined_file_share": 0.5},
    )
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, [SNAPSHOT])

    result = run(dagster_instance, config, "web")

    assert result.success
    expected_urls = damaged_sources["expected_urls"]
    good_documents = sum(len(urls) for urls in expected_urls.values())
    raw = metadata(result, "raw_documents")
    assert raw["input_files"] == 4
    assert raw["documents_out"] == good_documents
    assert raw["quarantined_records"] == 3
    assert raw["quarantined_files"] == 1  # only the empty file could not be read at all
    assert {k: v for k, v in raw.items() if k.startswith("quarantine/")} == {
        "quarantine/bad_warc_record": 1,
        "quarantine/empty_file": 1,
        "quarantine/truncated_gzip": 1,
    }
    check = quarantine_check(result)
    assert check.passed is True
    assert check.metadata["quarantined_file_share"].value == 0.25

    partition = raw_partition(storage, "web")
    quarantine = quarantine_rows(storage, "web")
    assert {(row["file"], row["location"], row["reason"]) for row in quarantine} == damaged_sources["quarantine"]
    assert len(quarantine) == 3
    # The raw_quarantine dataset: its partition column comes from the Hive folders, not from the files.
    assert all(row["source"] == "web" and row["snapshot"] == SNAPSHOT and row["detail"] for row in quarantine)

    # Nothing lost: per input file, exactly the URLs an undamaged read gives, minus the damaged records.
    by_file: dict[str, list[str]] = {}
    for part in sorted(partition.glob("part-*.parquet")):
        for row in pq.ParquetFile(part).read(columns=["file", "url"]).to_pylist():
            by_file.setdefault(row["file"], []).append(row["url"])
    assert by_file == expected_urls
    manifest = json.loads((partition / "_manifest.json").read_text())
    assert manifest["quarantined_files"] == [f"{SNAPSHOT}/d-empty.warc.gz"]

    cleaned = metadata(result, "cleaned_documents")
    assert cleaned["documents_in"] == good_documents


def test_damaged_jsonl_snapshot_succeeds_with_every_good_line_kept(make_config, dagster_instance, damaged_sources, tmp_path):
    storage = tmp_path / "storage"
    config = make_config(
        storage_root=str(storage),
        sources=sources(damaged_sources["web"], damaged_sources["reference"]),
        compute={"backend": "local", "max_workers": 1},
    )
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, [SNAPSHOT])

    result = run(dagster_instance, config, "reference")

    assert result.success
    raw = metadata(result, "raw_documents")
    expected_ids = damaged_sources["reference_ids"]
    assert raw["documents_out"] == len(expected_ids)
    assert raw["quarantined_records"] == 3 and raw["quarantined_files"] == 0
    assert raw["quarantine/malformed_json"] == 1 and raw["quarantine/invalid_utf8"] == 2
    partition = raw_partition(storage, "reference")
    quarantine = quarantine_rows(storage, "reference")
    file = f"{SNAPSHOT}/docs.jsonl.gz"
    assert [(row["file"], row["location"], row["reason"]) for row in quarantine] == [
        (file, "line 4", "malformed_json"),
        (file, "line 8", "invalid_utf8"),
        (file, "line 11", "invalid_utf8"),
    ]
    assert quarantine[1]["payload"] == b'{"id": "x", "text": "\xff\xfe"}'
    documents = pq.ParquetFile(partition / "part-00000.parquet").read(columns=["source_id"])
    assert documents["source_id"].to_pylist() == expected_ids
    assert metadata(result, "cleaned_documents")["documents_in"] == len(expected_ids)


def test_missing_source_location_fails_the_run_naming_it(make_config, dagster_instance, tmp_path):
    missing = tmp_path / "no-such-crawl"
    config = make_config(sources=sources(missing, SAMPLE / "reference"), compute={"backend": "local", "max_workers": 1})
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, [SNAPSHOT])

    result = run(dagster_instance, config, "web", selection=["raw_documents"])

    assert not result.success
    [failure] = result.get_step_failure_events()
    assert str(missing) in failure.step_failure_data.error.to_string()
    assert "does not exist" in failure.step_failure_data.error.to_string()
    assert result.get_asset_materialization_events() == []


@pytest.mark.parametrize(("empty_files", "bound", "passes"), [(3, 0.1, False), (1, 0.5, True), (1, 0.4, False)])
def test_quarantined_file_share_check_blocks_when_too_many_files_are_unreadable(
    make_config, dagster_instance, tmp_path, empty_files, bound, passes
):
    web = tmp_path / "web" / SNAPSHOT
    web.mkdir(parents=True)
    shutil.copy(WARC_FILES[0], web / "good.warc.gz")
    for index in range(empty_files):
        (web / f"empty-{index}.warc.gz").write_bytes(b"")
    config = make_config(
        sources=sources(tmp_path / "web", SAMPLE / "reference"),
        compute={"backend": "local", "max_workers": 1},
        checks={"max_quarantined_file_share": bound},
    )
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, [SNAPSHOT])

    result = run(dagster_instance, config, "web")

    check = quarantine_check(result)
    assert check.passed is passes
    assert check.metadata["quarantined_file_share"].value == pytest.approx(empty_files / (empty_files + 1), rel=5e-4)  # 4 significant digits
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    # A failed blocking check fails its partition (data_assets/batch.py): the check's evaluation is recorded,
    # the partition is not materialized, and nothing downstream reads it.
    assert result.success is passes
    assert materialized == ({"raw_documents", "cleaned_documents"} if passes else set())

    # The command's summary shows the partition's real counts either way, and why it failed.
    from data_assets import summary
    from sluice.config import load_config
    from sluice.io.layout import PartitionRef

    lines: list[str] = []
    summary.print_partitions(summary.collect(dagster_instance, load_config(config), [PartitionRef("web", SNAPSHOT)]), out=lines.append)
    documents = len(response_urls(WARC_FILES[0].read_bytes()))
    total = next(line for line in lines if line.startswith("  total: "))
    assert total.startswith(f"  total: raw {documents}, quarantined {empty_files}, ")
    failure = [line for line in lines if line.startswith("  failed partition ")]
    if passes:
        assert failure == []
    else:
        assert failure == [
            f"  failed partition web/{SNAPSHOT}: raw_documents blocking check quarantined_file_share_below_bound failed: "
            f"{empty_files} of {empty_files + 1} files unreadable (bound {bound:.0%})"
        ]
        assert any(line.startswith(f"  web/{SNAPSHOT} (failed)  {documents}") for line in lines)


def test_arc_files_are_read_and_files_of_no_known_suffix_are_listed(make_config, dagster_instance, tmp_path):
    """A folder as old crawls leave it: ARC files (plain, gzip), a WARC copy cut in its last gzip trailer, and
    files whose names match no WARC/ARC suffix: those are named in the metadata and manifest, not dropped silently."""
    warcio_data = Path(__file__).resolve().parents[1] / "data" / "warcio"
    web = tmp_path / "web" / SNAPSHOT
    web.mkdir(parents=True)
    shutil.copy(warcio_data / "example.arc", web / "a.arc")
    shutil.copy(warcio_data / "example.arc.gz", web / "b.arc.gz")
    good = WARC_FILES[0].read_bytes()
    (web / "c-cut.warc.gz").write_bytes(good[:-4])  # the last member's trailer lacks 4 of its 8 bytes
    (web / "crawl.cdx").write_bytes(b" CDX N b a m s k r M S V g\n")
    (web / "d.warc.gz.open").write_bytes(good)
    config = make_config(
        storage_root=str(tmp_path / "storage"),
        sources=sources(tmp_path / "web", tmp_path / "reference"),
        compute={"backend": "local", "max_workers": 1},
    )
    dagster_instance.add_dynamic_partitions(SNAPSHOTS, [SNAPSHOT])

    result = run(dagster_instance, config, "web", selection=("raw_documents",))

    assert result.success
    raw = metadata(result, "raw_documents")
    assert raw["input_files"] == 3
    assert raw["documents_out"] == 2 + len(response_urls(good))
    assert raw["quarantined_records"] == 0
    assert raw["unrecognized_files"] == 2
    assert raw["unrecognized_file_names"] == [f"{SNAPSHOT}/crawl.cdx", f"{SNAPSHOT}/d.warc.gz.open"]
    assert raw["recovered_records"] == 1 and raw["recovered/truncated_gzip_trailer"] == 1
    manifest = json.loads((raw_partition(tmp_path / "storage", "web") / "_manifest.json").read_text())
    assert manifest["unrecognized_files"] == [f"{SNAPSHOT}/crawl.cdx", f"{SNAPSHOT}/d.warc.gz.open"]
    assert manifest["input_files"] == [f"{SNAPSHOT}/a.arc", f"{SNAPSHOT}/b.arc.gz", f"{SNAPSHOT}/c-cut.warc.gz"]

    from data_assets import summary
    from sluice.config import load_config
    from sluice.io.layout import PartitionRef

    lines: list[str] = []
    summary.print_partitions(summary.collect(dagster_instance, load_config(config), [PartitionRef("web", SNAPSHOT)]), out=lines.append)
    assert f"  files not read (no known suffix for their source's format): 2: {SNAPSHOT}/crawl.cdx, {SNAPSHOT}/d.warc.gz.open" in lines
    assert "  records recovered from gzip members cut in their trailer: 1" in lines
