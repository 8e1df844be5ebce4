"""raw_documents' per-file table stays bounded whatever the partition's file count: the files with the most
quarantined records (then the largest) in file order, and one row counting the rest."""

from __future__ import annotations

from data_assets.raw import MAX_FILES_SHOWN, _files_shown


def _result(index: int, quarantined: int, size: int) -> dict:
    return {"file": f"s/f{index:05d}.warc.gz", "records": 10, "quarantine_reasons": {"truncated": quarantined} if quarantined else {}, "content_bytes": size}


def test_a_partition_of_many_files_shows_the_worst_and_counts_the_rest():
    results = [_result(i, quarantined=(5 if i % 97 == 0 else 0), size=1000 + i) for i in range(3000)]
    rows = _files_shown(results)
    assert len(rows) == MAX_FILES_SHOWN + 1
    damaged = [r["file"] for r in results if r["quarantine_reasons"]]  # 31 files, equally damaged: the largest 20 shown
    expected = sorted(sorted(damaged, key=lambda name: -int(name[3:8]))[:MAX_FILES_SHOWN])
    assert [row[0] for row in rows[:-1]] == expected
    rest = rows[-1]
    assert rest[0].startswith(f"... {3000 - MAX_FILES_SHOWN} more files")
    assert rest[1] == 10 * (3000 - MAX_FILES_SHOWN) and rest[2] == 5 * (len(damaged) - MAX_FILES_SHOWN)
    assert sum(row[1] for row in rows) == 10 * 3000


def test_a_small_partition_shows_every_file():
    results = [_result(i, 0, 10) for i in range(5)]
    assert [row[0] for row in _files_shown(results)] == [r["file"] for r in results]
