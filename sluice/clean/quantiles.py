"""A fixed-size, mergeable summary of a distribution of non-negative values: count, sum, min, max, and
quantiles within a relative error of `RELATIVE_ACCURACY` (1 %).

Why: a partition's document sizes and scores are summarized by tasks and folded in the run process; a list
per document would grow with the partition (3×10⁹ pages is hundreds of GB), a summary does not. The bins are
logarithmic, as DDSketch's (Masson, Rim and Lee, VLDB 2019): value v > 0 falls in bin ⌈log_γ v⌉ with
γ = (1 + α) / (1 − α), and the bin's representative 2γⁱ / (γ + 1) is within α of every value in it. Values
under `ZERO_BELOW` count as zero. From 10⁻⁹ to 10¹⁵ that is at most ~2,800 bins whatever the count; sizes
of web pages (1 to 10⁸ bytes) use under 1,000, scores in (0, 1] a few hundred.

Merging adds bins and an integer sum (values in units of 2⁻³² are summed exactly), so summaries merged in
any order and grouping are equal, bit for bit: a stage may fold its tasks' summaries as they finish, in
whatever order the workers end them, and publish the same metadata.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

RELATIVE_ACCURACY = 0.01
GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(GAMMA)
ZERO_BELOW = 1e-9
SCALE = 2**32  # the sum is kept in units of 1 / SCALE, as an exact integer


@dataclass
class Quantiles:
    """The summary of one measure (e.g. kept documents' characters): `add` values, `merge` another's
    `as_dict()`, read `mean` and `quantile`."""

    count: int = 0
    scaled_total: int = 0  # the sum of the values times SCALE, each value rounded to 1 / SCALE
    low: float | None = None
    high: float | None = None
    zeros: int = 0
    bins: Counter[int] = field(default_factory=Counter)

    def add(self, value: float) -> None:
        if not value >= 0:  # also rejects NaN
            raise ValueError(f"a summarized value must be >= 0, got {value!r}")
        self.count += 1
        self.scaled_total += value * SCALE if isinstance(value, int) else round(value * SCALE)
        self.low = value if self.low is None else min(self.low, value)
        self.high = value if self.high is None else max(self.high, value)
        if value < ZERO_BELOW:
            self.zeros += 1
        else:
            self.bins[math.ceil(math.log(value) / _LOG_GAMMA)] += 1

    def merge(self, other: dict[str, Any]) -> None:
        """Add another summary in its `as_dict()` form."""
        if not other["count"]:
            return
        self.count += other["count"]
        self.scaled_total += other["scaled_total"]
        self.low = other["low"] if self.low is None else min(self.low, other["low"])
        self.high = other["high"] if self.high is None else max(self.high, other["high"])
        self.zeros += other["zeros"]
        for index, count in other["bins"]:
            self.bins[index] += count

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-able values (bins as sorted [index, count] pairs): what a task records."""
        return {
            "count": self.count, "scaled_total": self.scaled_total, "low": self.low, "high": self.high, "zeros": self.zeros,
            "bins": [[index, self.bins[index]] for index in sorted(self.bins)],
        }

    @classmethod
    def of(cls, values: list[float]) -> Quantiles:
        summary = cls()
        for value in values:
            summary.add(value)
        return summary

    def sum(self) -> float:
        return self.scaled_total / SCALE

    def mean(self) -> float:
        return self.scaled_total / (SCALE * self.count) if self.count else 0.0

    def quantile(self, q: float) -> float:
        """The value of rank ⌊q·(count − 1)⌋ (the lower quantile: the median of 4 values is the 2nd),
        within `RELATIVE_ACCURACY` of it and inside [min, max]; 0.0 for an empty summary."""
        if not self.count:
            return 0.0
        if not 0 <= q <= 1:
            raise ValueError(f"a quantile lies in [0, 1], got {q}")
        rank = math.floor(q * (self.count - 1))
        if rank < self.zeros:
            return float(self.low)
        seen = self.zeros
        for index in sorted(self.bins):
            seen += self.bins[index]
            if seen > rank:
                value = 2 * GAMMA**index / (GAMMA + 1)
                return float(min(max(value, self.low), self.high))
        return float(self.high)  # not reached: the bins hold count - zeros values

    def median(self) -> float:
        return self.quantile(0.5)
