"""The deduped_documents asset on planted cleaned partitions: metadata, side output, and its checks."""

from __future__ import annotations

from dagster import DagsterInstance, materialize

from data_assets.cli import _checks_of, _metadata_of
from data_assets.definitions import ASSETS, build_resources
from data_assets.partitions import SNAPSHOTS, multi_key
from sluice.storage import open_store
from tests.sluice.test_dedup import ORDER, planted  # noqa: F401 - the module-scoped fixture


def test_metadata_and_removed_share_check(planted, make_config, tmp_path):  # noqa: F811
    # The planted cleaned partitions are the storage root; only deduped_documents runs.
    config = make_config(storage={"root": planted.url}, dedup={"max_removed_share": 0.2}, compute={"backend": "local", "max_workers": 1})
    resources = build_resources(config)
    (tmp_path / "home").mkdir()
    metadata, checks = {}, {}
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions(SNAPSHOTS, ["2026-01", "2026-02"])
        for ref in ORDER:
            result = materialize(ASSETS, selection=["deduped_documents"], partition_key=multi_key(ref.source, ref.snapshot), instance=instance, resources=resources)
            metadata[ref.key] = _metadata_of(result)["deduped_documents"]
            checks[ref.key] = {name: passed for _, name, passed in _checks_of(result)}
    web_early = metadata["web/2026-01"]
    # Planted in web/2026-01: one exact and two near duplicates (the sample's w1-15 is an LSH candidate of
    # r1-3 below Jaccard 0.8, kept by the default verification; see tests/sluice/test_dedup.py).
    assert (web_early["documents_in"], web_early["removed_exact"], web_early["removed_fuzzy"]) == (12, 1, 2)
    assert web_early["removed_share_against/2026-01"] == 3 / 12
    assert "| 2 | 3 |" in web_early["cluster_sizes"]  # three clusters of two
    last = metadata["web/2026-02"]
    assert (last["removed_exact"], last["removed_fuzzy"]) == (1, 2)
    assert last["recomputed_band_indexes"] == []
    # 3 of 12 removed > 0.2 warns; 1 of 8 does not; no exact duplicate remains anywhere.
    assert checks["web/2026-01"] == {"no_exact_duplicates": True, "deduplicated_against_all_earlier_partitions": True, "removed_share_within_bounds": False}
    assert checks["reference/2026-02"]["removed_share_within_bounds"] is True
    assert all(c["no_exact_duplicates"] for c in checks.values())
    store = open_store(planted.url)
    assert store.exists("deduped_documents/source=web/snapshot=2026-02/clusters.parquet")
