"""The mix's shard table: rows by shard id equal the whole table's, and a reader of some shards fetches only
the footer and the row groups holding them (counted around the store, against the file's own metadata)."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow.parquet as pq
import pytest

from sluice.io.storage import open_store
from sluice.mix import ShardTable
from sluice.mix.shard_table import write_shard_table
from tests.support.counting_store import CountingStore

ROWS, GROUP = 200_000, 5_000


@pytest.fixture(scope="module")
def table_store(tmp_path_factory):
    """One shard per partition, as with one shard per CommonCrawl part: every prefix distinct."""
    root = tmp_path_factory.mktemp("shard_table")
    shards = [
        {"id": i, "prefix": f"tokenized_shards/source=web/snapshot=CC-MAIN-{i // 90_000}-part{i:06d}", "binary_prefix": f"tokenized_binary/source=web/snapshot=p{i:06d}",
         "name": "shard-00000", "source": "web", "partition": f"web/p{i:06d}", "documents": 1000 + i % 7, "tokens": 500_000 + i, **({"part": i, "first_row": 0} if i % 2 else {})}
        for i in range(ROWS)
    ]
    (root / "mix").mkdir()
    write_shard_table(str(root / "mix" / "shards.parquet"), shards, GROUP)
    manifest = {"shard_table": {"key": "shards.parquet", "prefix": "mix", "rows": ROWS, "row_group": GROUP, "tokens": 0,
                                "bytes": (root / "mix" / "shards.parquet").stat().st_size}}
    return open_store(str(root)), manifest, shards


def test_rows_by_id_equal_the_written_entries(table_store):
    store, manifest, shards = table_store
    table = ShardTable(store, manifest)
    assert len(table) == ROWS
    for shard_id in (0, 1, GROUP - 1, GROUP, ROWS - 1, 123_457):
        assert table[shard_id] == shards[shard_id]
    with pytest.raises(IndexError):
        table[ROWS]
    assert pickle.loads(pickle.dumps(table))[77] == shards[77]


def test_a_reader_of_a_few_shards_fetches_only_their_row_groups(table_store):
    store, manifest, shards = table_store
    counting = CountingStore(store, local=False)
    table = ShardTable(counting, manifest)
    rng = np.random.default_rng(3)
    groups = [3, 17, 31]
    ids = np.concatenate([rng.integers(g * GROUP, (g + 1) * GROUP, size=20) for g in groups]).tolist()
    assert [table[i] for i in ids] == [shards[i] for i in ids]
    # The oracle: the file's own layout (pyarrow's metadata of the whole file).
    path = store.local_path("mix/shards.parquet")
    size = store.size("mix/shards.parquet")
    metadata = pq.ParquetFile(path).metadata
    spans = []
    for group in groups:
        columns = [metadata.row_group(group).column(c) for c in range(metadata.num_columns)]
        begin = min(c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in columns)
        spans.append((begin, max((c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset) + c.total_compressed_size for c in columns)))
    footer = size - metadata.serialized_size - 8
    reads = [(start, start + length) for key, start, length in counting.ranged if key == "mix/shards.parquet"]
    assert reads and not counting.whole
    assert all(start >= min(footer, size - (64 << 10)) or any(a <= start and end <= b for a, b in spans) for start, end in reads), reads
    fetched = sum(end - start for start, end in reads)
    needed = sum(b - a for a, b in spans) + (64 << 10)  # the row groups plus pyarrow's speculative footer read
    assert fetched <= needed and fetched < size / 8, (fetched, needed, size)
