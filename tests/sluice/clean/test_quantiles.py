"""The fixed-size distribution summary (sluice.clean.quantiles) against numpy's exact quantiles, its merge, its size
bound, and CleaningStats folding summaries (and task records written before them)."""

import json
import math

import numpy as np
import pytest

from sluice.clean import CleaningStats
from sluice.clean.quantiles import RELATIVE_ACCURACY, Quantiles

QS = (0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)


def _distributions() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "page_bytes": np.round(rng.lognormal(9, 1.5, 20_000)).astype(np.int64),  # integers, heavy tail
        "scores": rng.beta(2, 5, 20_000),  # in (0, 1)
        "shares_with_zeros": np.where(rng.random(20_000) < 0.3, 0.0, rng.random(20_000)),
        "perplexities": rng.gamma(2, 300, 5_000),
        "few": np.array([3, 1, 4, 1]),
    }


@pytest.mark.parametrize("name", list(_distributions()))
def test_quantiles_lie_within_the_relative_accuracy_of_numpys_exact_ones(name: str) -> None:
    values = _distributions()[name]
    summary = Quantiles.of(values.tolist())
    for q in QS:
        exact = float(np.quantile(values, q, method="lower"))
        assert abs(summary.quantile(q) - exact) <= RELATIVE_ACCURACY * exact + 1e-12, (q, exact, summary.quantile(q))
    assert summary.count == len(values) and summary.low == values.min() and summary.high == values.max()
    assert math.isclose(summary.mean(), float(values.mean()), rel_tol=1e-9)


def test_the_median_of_an_even_count_is_the_lower_one() -> None:
    assert Quantiles.of([10, 20, 30, 40]).median() == pytest.approx(20, rel=RELATIVE_ACCURACY)
    assert Quantiles().median() == 0.0 and Quantiles().mean() == 0.0


def test_sums_are_exact_and_do_not_depend_on_the_order() -> None:
    assert Quantiles.of([2**40 + 1, 3, 5]).sum() == 2**40 + 9
    floats = np.random.default_rng(3).random(10_000).tolist()
    forward, backward = Quantiles.of(floats), Quantiles.of(floats[::-1])
    assert forward.as_dict() == backward.as_dict()  # a float sum would differ in its last bits
    assert forward.mean() == pytest.approx(float(np.mean(floats)), rel=1e-12)


def test_merging_in_any_grouping_equals_one_summary_of_all() -> None:
    values = _distributions()["page_bytes"].tolist()
    whole = Quantiles.of(values).as_dict()
    for pieces in (2, 7, 100):
        merged = Quantiles()
        for chunk in np.array_split(np.array(values), pieces):
            merged.merge(json.loads(json.dumps(Quantiles.of(chunk.tolist()).as_dict())))  # through a task record
        assert merged.as_dict() == whole
    reordered = Quantiles()
    for chunk in reversed(np.array_split(np.array(values), 7)):
        reordered.merge(Quantiles.of(chunk.tolist()).as_dict())
    assert reordered.as_dict() == whole
    empty = Quantiles()
    empty.merge(Quantiles().as_dict())
    assert empty.as_dict() == Quantiles().as_dict()


def test_the_summary_does_not_grow_with_the_count() -> None:
    rng = np.random.default_rng(1)
    sizes = {}
    for count in (1_000, 100_000):
        summary = Quantiles.of(np.round(rng.lognormal(8, 2, count)).astype(np.int64).tolist())
        sizes[count] = len(summary.bins)
    # Bins are bounded by the range of values (here ~1 to 10^8 bytes: ln(1e8) / ln(γ) ≈ 921), not the count.
    assert sizes[100_000] <= math.ceil(math.log(1e8) / math.log((1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY))) + 1
    assert sizes[100_000] < 2 * sizes[1_000]


@pytest.mark.parametrize("bad", [-1, -0.5, float("nan")])
def test_a_negative_or_nan_value_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match=">= 0"):
        Quantiles().add(bad)


def test_cleaning_stats_fold_summaries_and_old_records_with_lists() -> None:
    """A task record written before the summaries holds a list per document; merged, it gives the same summary
    as the values added one by one (so a finished task's record is still reused)."""
    first, second = CleaningStats(), CleaningStats()
    for size in (100, 250, 4000):
        first.input_bytes.add(size)
    second.input_bytes.add(7)
    legacy = {**second.as_dict(), "input_bytes": [7, 9], "output_chars": [5]}
    total = CleaningStats()
    total.merge(first.as_dict())
    total.merge(legacy)
    assert total.input_bytes.as_dict() == Quantiles.of([100, 250, 4000, 7, 9]).as_dict()
    assert total.output_chars.as_dict() == Quantiles.of([5]).as_dict()
    json.dumps(total.as_dict())  # what a task records stays JSON
