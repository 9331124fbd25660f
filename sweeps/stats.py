"""The statistics of a comparison between two arms, by seed: a paired t-test with its interval
(Welch's test when too few seeds are shared), Holm's step-down correction, and the seeds a
difference would need. Every test, interval and power figure comes from ``scipy.stats``; only
Holm's step-down (an ordering over scipy's p-values) is written here. ``sweeps.effects`` builds
the ablation tables on these.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The confidence of every interval shown (two-sided).
CONFIDENCE = 0.95
#: The power ``seeds_needed`` plans for: the usual 80 %.
POWER = 0.8
#: Above this many seeds per arm the advice is "more than", not a number.
MAX_SEEDS = 10_000


@dataclass(frozen=True)
class Comparison:
    """One configuration against a reference, by seed: the difference (this minus reference),
    its interval and the raw p-value of the test named in ``test``."""

    n_pairs: int
    unpaired: tuple[Any, ...]  # seeds on one side only: left out of the paired test
    test: str  # "paired t", "Welch t" or "none"
    diff: float
    low: float
    high: float
    p: float
    spread: float  # sd of the paired differences (paired), else the pooled sd of the two arms

    def __post_init__(self) -> None:
        if self.test not in ("paired t", "Welch t", "none"):
            raise ValueError(f"test must be 'paired t', 'Welch t' or 'none', got {self.test!r}")
        if self.n_pairs < 0:
            raise ValueError(f"n_pairs must be >= 0, got {self.n_pairs}")
        if not (math.isnan(self.p) or 0.0 <= self.p <= 1.0):
            raise ValueError(f"p must be in [0, 1] or NaN, got {self.p}")


def compare(
    values: Mapping[Any, float], reference: Mapping[Any, float], confidence: float = CONFIDENCE
) -> Comparison:
    """``values`` against ``reference``, each by seed. Two or more shared seeds: a paired t-test
    (``scipy.stats.ttest_rel``) on the shared seeds. Otherwise, with two or more on each side,
    Welch's test (``ttest_ind(equal_var=False)``). Otherwise no test (NaN p and interval)."""
    from scipy import stats

    shared = [s for s in values if s in reference]
    unpaired = tuple(sorted({s for s in [*values, *reference] if s not in shared}, key=str))
    a = np.array([values[s] for s in shared], dtype=float)
    b = np.array([reference[s] for s in shared], dtype=float)
    if len(shared) >= 2:
        d = a - b
        if np.ptp(d) == 0.0:
            # Identical differences: t is 0/0, and no spread means nothing to test a
            # difference against (two seeds that moved alike say nothing of a third): no test.
            return Comparison(
                len(shared), unpaired, "none", float(d[0]), math.nan, math.nan, math.nan, 0.0
            )
        res = stats.ttest_rel(a, b)
        ci = res.confidence_interval(confidence_level=confidence)
        return Comparison(
            len(shared),
            unpaired,
            "paired t",
            float(d.mean()),
            float(ci.low),
            float(ci.high),
            float(res.pvalue),
            float(d.std(ddof=1)),
        )
    x = np.array(list(values.values()), dtype=float)
    y = np.array(list(reference.values()), dtype=float)
    diff = float(x.mean() - y.mean()) if len(x) and len(y) else math.nan
    if len(x) >= 2 and len(y) >= 2 and (np.ptp(x) > 0 or np.ptp(y) > 0):
        res = stats.ttest_ind(x, y, equal_var=False)
        ci = res.confidence_interval(confidence_level=confidence)
        pooled = math.sqrt((x.var(ddof=1) + y.var(ddof=1)) / 2)
        return Comparison(
            len(shared),
            tuple(sorted(set(values) | set(reference), key=str)),
            "Welch t",
            diff,
            float(ci.low),
            float(ci.high),
            float(res.pvalue),
            pooled,
        )
    return Comparison(len(shared), unpaired, "none", diff, math.nan, math.nan, math.nan, math.nan)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (NaN passes through and does not count): the i-th smallest
    of m p-values becomes max over j <= i of min(1, (m - j + 1) p_(j))."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m = len(order)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def seeds_needed(
    diff: float, spread: float, alpha: float, *, paired: bool, power: float = POWER
) -> int | None:
    """The seeds per arm a two-sided t-test at ``alpha`` needs to detect ``diff`` with
    ``power``, at the measured ``spread`` (paired: sd of the differences; unpaired: the arms'
    sd): the noncentral t distribution (``scipy.stats.nct``). None above ``MAX_SEEDS``."""
    from scipy import stats

    if not (math.isfinite(diff) and math.isfinite(spread)) or diff == 0.0:
        return None
    if spread == 0.0:
        return 2
    effect = abs(diff) / spread
    for n in range(2, MAX_SEEDS + 1):
        df = n - 1 if paired else 2 * n - 2
        nc = effect * math.sqrt(n if paired else n / 2)
        crit = stats.t.ppf(1 - alpha / 2, df)
        if stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc) >= power:
            return n
    return None
