"""The resume benchmark's input files (benchmarks/resume.py `make_crawl`): each is `concat` WARC files joined
end to end, still one readable WARC file, and with concat = M / 2 the files left after a kill at any even
count are the same work as the files done."""

from __future__ import annotations

import gzip
from pathlib import Path

from benchmarks.resume import make_crawl, record_parts
from sluice.config import WarcOptions
from sluice.ingest.readers import RawRecord, read_warc

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "web" / "2026-02"


def records_of(path: Path) -> list[str]:
    counters: dict[str, int] = {}
    with open(path, "rb") as stream:
        items = list(read_warc(stream, WarcOptions(), counters))
    assert all(isinstance(item, RawRecord) for item in items), items
    return [item.source_id for item in items]


def test_a_concatenated_input_file_is_one_warc_file_of_all_its_parts_records(tmp_path):
    originals = sorted(SAMPLE.glob("*.warc.gz"))
    crawl, sizes = make_crawl(SAMPLE, 2, tmp_path / "crawl", concat=len(originals))
    files = sorted((crawl / "2026-02").iterdir())
    assert len(files) == 2 and sizes == [path.stat().st_size for path in files]
    expected = [record for original in originals for record in records_of(original)]
    assert len(expected) > len(originals)
    assert records_of(files[0]) == expected
    assert (crawl / "2026-01").is_dir()  # global dedup orders the sample's web/2026-01 before web/2026-02


def test_with_half_the_originals_per_file_files_alternate_and_halves_hold_the_same_bytes(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    payloads = [bytes([65 + index]) * (100 * (index + 1) ** 2) for index in range(4)]  # unequal sizes
    for index, payload in enumerate(payloads):
        (source / f"{index}.warc.gz").write_bytes(gzip.compress(payload, mtime=0))
    crawl, sizes = make_crawl(source, 8, tmp_path / "crawl", concat=2)
    files = sorted((crawl / "2026-02").iterdir())
    assert [gzip.decompress(path.read_bytes()) for path in files] == [
        payloads[(2 * index) % 4] + payloads[(2 * index + 1) % 4] for index in range(8)
    ]
    assert len(set(sizes)) == 2
    for done in (2, 4, 6):  # any even kill point: the files left are the same mix as the files done
        assert sum(sizes[done:]) / (8 - done) == sum(sizes[:done]) / done


def test_record_parts_reads_task_numbers_of_completion_records_only(tmp_path):
    for name in ("task-00000.json", "task-00012.json", "task-00003.json.tmp-1", "_manifest.json"):
        (tmp_path / name).write_text("{}")
    assert record_parts(tmp_path) == {0, 12}
    assert record_parts(tmp_path / "missing") == set()
