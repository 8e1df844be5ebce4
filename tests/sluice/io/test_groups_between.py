"""groups_between (the row groups of a sorted Parquet file that can hold a value range) against a scan of
every group's statistics, on files cut at random: empty answers, ranges before, inside and past the file,
a value on a group boundary, several groups of one value, and a file whose statistics are off."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sluice.io.layout import groups_between


def scanned(metadata: pq.FileMetaData, low: int, high: int) -> list[int]:
    found = []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(0).statistics
        if stats is None or not stats.has_min_max or (stats.max >= low and stats.min <= high):
            found.append(group)
    return found


def sorted_file(path, rng: random.Random, statistics: bool = True) -> tuple[pq.FileMetaData, np.ndarray]:
    keys = np.sort(np.array([rng.randrange(0, 500) for _ in range(rng.randrange(1, 400))], np.uint64))
    with pq.ParquetWriter(path, pa.schema([("key", pa.uint64())]), write_statistics=statistics) as writer:
        start = 0
        while start < len(keys):
            size = rng.randrange(1, 40)
            writer.write_table(pa.table({"key": keys[start:start + size]}))
            start += size
    return pq.ParquetFile(path).metadata, keys


def test_groups_between_equals_a_scan_of_every_group(tmp_path):
    rng = random.Random(7)
    for round_ in range(60):
        metadata, keys = sorted_file(tmp_path / f"f{round_}.parquet", rng)
        probes = [int(k) for k in rng.sample(list(keys), min(5, len(keys)))] + [0, 499, 600, rng.randrange(0, 500)]
        for low in probes:
            for high in (low, low + rng.randrange(0, 80)):
                assert groups_between(metadata, low, high) == scanned(metadata, low, high), (round_, low, high)


def test_a_file_without_statistics_reads_every_group(tmp_path):
    metadata, _ = sorted_file(tmp_path / "plain.parquet", random.Random(3), statistics=False)
    assert groups_between(metadata, 10, 20) == list(range(metadata.num_row_groups))
