"""benchmarks/dedup_quality.py judges what dedup removed against exact Jaccard, so its goals can fail."""

from __future__ import annotations

import polars as pl
import pytest

from benchmarks.dedup_quality import judge_removals


def pairs(*rows: tuple[int, int, float]) -> pl.DataFrame:
    return pl.DataFrame({"doc": [r[0] for r in rows], "doc_b": [r[1] for r in rows], "jaccard": [r[2] for r in rows]})


def removed(*rows: tuple[int, int]) -> pl.DataFrame:
    return pl.DataFrame({"doc_id": [f"d{r[0]}" for r in rows], "kind": ["fuzzy"] * len(rows), "duplicate_of": [f"d{r[1]}" for r in rows]})


CHAIN = pairs((0, 1, 0.9), (1, 2, 0.85), (0, 2, 0.7), (3, 4, 0.5))


def test_removing_exactly_the_documents_with_an_earlier_near_copy_scores_one():
    verdict = judge_removals(removed((1, 0), (2, 0)), CHAIN, documents=5, partitions=1)
    assert (verdict["should"], verdict["recall"], verdict["precision"]) == (2, 1.0, 1.0)
    assert verdict["keeper_precision"] == pytest.approx(0.5)  # d2 is only at J 0.7 to its named keeper d0


def test_a_removal_without_a_near_copy_lowers_precision_and_a_miss_lowers_recall():
    verdict = judge_removals(removed((1, 0), (2, 0), (4, 3)), CHAIN, documents=5, partitions=1)
    assert verdict["precision"] == pytest.approx(2 / 3) and verdict["wrong_best_jaccard"] == [0.5]
    verdict = judge_removals(removed((1, 0)), CHAIN, documents=5, partitions=1)
    assert verdict["recall"] == pytest.approx(0.5) and verdict["missed_best_jaccard"] == [0.85]


def test_earlier_means_dedup_order_partition_first():
    # 4 documents dealt round robin into 2 partitions: order d0, d2 (partition 0), then d1, d3.
    verdict = judge_removals(removed((1, 2)), pairs((1, 2, 0.9)), documents=4, partitions=2)
    assert verdict["recall"] == 1.0 and verdict["precision"] == 1.0
    verdict = judge_removals(removed((2, 1)), pairs((1, 2, 0.9)), documents=4, partitions=2)
    assert verdict["precision"] == 0.0 and verdict["recall"] == 0.0  # d2 comes first: it should stay
