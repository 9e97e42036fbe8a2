"""benchmarks/distill_speed.py's ratio interval: covers the true ratio at its nominal rate under a null."""

from __future__ import annotations


import numpy as np
import pytest

@pytest.fixture(scope="module")
def distill_speed(bench):
    return bench("distill_speed")


def test_ratio_interval_covers_the_true_median_ratio(distill_speed):
    """15 pairs whose ratio is 1.05 times log-normal noise (median 1): the 95 % interval covers 1.05 in most runs."""
    rng = np.random.default_rng(0)
    hits, trials = 0, 200
    for _ in range(trials):
        b = 0.1 * np.exp(rng.normal(0, 0.2, 15))  # shared load moves both members of a pair
        a = 1.05 * b * np.exp(rng.normal(0, 0.05, 15))
        m, lo, hi = distill_speed.ratio_interval(list(a), list(b), draws=500, seed=int(rng.integers(1 << 30)))
        assert lo <= m <= hi
        hits += lo <= 1.05 <= hi
    # The percentile bootstrap of a median from 15 pairs is a little liberal; far from 0.95 means broken.
    assert hits / trials > 0.85


def test_ratio_interval_is_exact_for_constant_ratios(distill_speed):
    m, lo, hi = distill_speed.ratio_interval([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert m == lo == hi == pytest.approx(2.0)
