"""The quality report drawn from partitions' manifests: the figures it reads, its PNG and HTML."""

from __future__ import annotations

import io

import pytest

from sluice.io.layout import PartitionRef, partition_prefix, read_manifest, write_manifest
from sluice.io.storage import open_store
from sluice.report import collect, render_html, render_png, sketch_svg, source_totals, write_report

pytest.importorskip("matplotlib")


def publish(store, ref: PartitionRef, raw: int, cleaned: int, deduped: int, tokens: int, within: int, earlier: dict[str, int]) -> None:
    """Manifests shaped as the stages write them (only the fields the report reads, plus a few others)."""
    write_manifest(store, partition_prefix("raw_documents", ref), {
        "documents": raw, "side_files": [{"key": "quarantine-00000.parquet", "rows": 1, "prefix": f"raw_quarantine/x/{ref.key}"}],
    })
    dropped = raw - cleaned
    write_manifest(store, partition_prefix("cleaned_documents", ref), {
        "documents": cleaned,
        "drops": {"too_short": dropped - 1, "language<script>": 1},
        "stats": {"documents_in": raw, "funnel": [["extract", raw, 1], ["gopher", raw - 1, dropped - 1]], "languages": {"en": cleaned - 1, "fr": 1}},
    })
    write_manifest(store, partition_prefix("deduped_documents", ref), {
        "documents": deduped,
        "stats": {"removed_within_partition": within, "removed_against": earlier},
    })
    write_manifest(store, partition_prefix("tokenized_shards", ref), {"documents": deduped, "tokens": tokens})


@pytest.fixture
def store(tmp_path):
    store = open_store(str(tmp_path))
    publish(store, PartitionRef("web", "2026-01"), 10, 7, 6, 600, 1, {})
    publish(store, PartitionRef("web", "2026-02"), 12, 9, 5, 500, 0, {"web/2026-01": 3, "reference/2026-01": 1})
    publish(store, PartitionRef("reference", "2026-01"), 5, 5, 5, 900, 0, {})
    return store


def test_figures_come_from_each_stages_manifest(store):
    refs = [PartitionRef(s, n) for s in ("web", "reference", "books") for n in ("2026-02", "2026-01")]
    rows = collect(store, refs)
    # global order, and a partition no stage wrote (books) left out
    assert [row.label for row in rows] == ["reference/2026-01", "web/2026-01", "web/2026-02"]
    web2 = rows[2]
    assert (web2.raw, web2.quarantined, web2.cleaned, web2.deduped, web2.tokens) == (12, 1, 9, 5, 500)
    assert web2.removed_within == 0 and web2.removed_earlier == 4
    assert web2.funnel == [("extract", 12, 1), ("gopher", 11, 2)]
    assert web2.drops == {"too_short": 2, "language<script>": 1} and web2.languages == {"en": 8, "fr": 1}


def test_partition_with_only_some_stages_is_drawn_with_gaps(store):
    ref = PartitionRef("reference", "2026-02")
    write_manifest(store, partition_prefix("raw_documents", ref), {"documents": 3})
    [row] = [row for row in collect(store, [ref])]
    assert (row.raw, row.cleaned, row.deduped, row.tokens) == (3, None, None, None)
    assert render_png([row]).startswith(b"\x89PNG")


def test_png_is_a_picture_of_every_chart_and_deterministic(store):
    import matplotlib.image

    rows = collect(store, [PartitionRef("web", "2026-01"), PartitionRef("web", "2026-02"), PartitionRef("reference", "2026-01")])
    png = render_png(rows)
    assert png == render_png(rows)  # no timestamp in the file
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    height, width = pixels.shape[:2]
    assert width > 500 and height > 4 * 300  # five charts stacked
    assert pixels.std() > 0.05  # something is drawn, not a blank page


def test_html_names_every_partition_escapes_text_and_points_at_the_picture(store):
    rows = collect(store, [PartitionRef("web", "2026-01"), PartitionRef("web", "2026-02"), PartitionRef("reference", "2026-01")])
    page = render_html(rows)
    for label in ("web/2026-01", "web/2026-02", "reference/2026-01"):
        assert f"<h2>{label}</h2>" in page
    assert 'src="report.png"' in page
    assert "language&lt;script&gt;" in page and "<script>" not in page


def test_write_report_publishes_png_html_and_manifest(store):
    rows = collect(store, [PartitionRef("web", "2026-01")])
    manifest = write_report(store, rows)
    assert read_manifest(store, "quality_report") == manifest
    assert manifest["partitions"] == ["web/2026-01"]
    assert store.read_bytes("quality_report/report.png").startswith(b"\x89PNG")
    assert b"web/2026-01" in store.read_bytes("quality_report/index.html")
    assert sorted(store.list_files("quality_report")) == ["quality_report/_manifest.json", "quality_report/index.html", "quality_report/report.png"]


def test_source_totals_sum_each_sources_funnel_over_its_snapshots(store):
    rows = collect(store, [PartitionRef("web", "2026-01"), PartitionRef("web", "2026-02"), PartitionRef("reference", "2026-01")])
    totals = {total.source: total for total in source_totals(rows)}
    assert list(totals) == ["reference", "web"]
    # the fixture's figures: web 10 + 12 raw, 7 + 9 cleaned, 6 + 5 deduped, 600 + 500 tokens, one quarantined file each
    web = totals["web"]
    assert (web.snapshots, web.raw, web.quarantined, web.cleaned, web.deduped, web.tokens) == (2, 22, 2, 16, 11, 1100)
    assert web.drop_rate == 1 - 16 / 22
    reference = totals["reference"]
    assert (reference.snapshots, reference.raw, reference.cleaned, reference.deduped, reference.tokens) == (1, 5, 5, 5, 900)
    assert reference.drop_rate == 0.0


def test_sketch_fits_dagsters_inline_markdown_with_its_axes(store):
    """Dagster's UI shows markdown metadata inline only under 1,000 characters (MetadataEntry.tsx): the sketch
    fits, and draws one line per source over the snapshots, the largest kept count and 0 on its axis, the first
    and last snapshot under it."""
    import base64
    import re

    rows = collect(store, [PartitionRef("web", "2026-01"), PartitionRef("web", "2026-02"), PartitionRef("reference", "2026-01")])
    text = sketch_svg(rows)
    assert 0 < len(text) < 1000
    svg = base64.b64decode(re.fullmatch(r"!\[[^\]]*\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", text).group(1)).decode()
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert labels == ["6", "0", "2026-02", "2026-01", "reference", "web"]  # the largest kept count is web/2026-01's 6
    lines = re.findall(r'<polyline points="([^"]*)"', svg)
    # reference has one snapshot (a dot: the point twice, round caps), web two
    assert [points.split() for points in lines] == [["34,15", "34,15"], ["34,6", "230,15"]]  # y = 62 - 56 * kept / 6
    many = [row for row in rows] + [
        type(rows[0])(f"s{i}", "2026-01", raw=1, cleaned=1, deduped=1) for i in range(4)
    ]
    assert sketch_svg(many) == ""  # past three sources nothing legible fits: the funnel table carries them
