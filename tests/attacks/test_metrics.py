"""Tests for pfd.attacks.metrics: Wilson interval, AUC, TPR@FPR conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pfd.attacks.metrics import auc, auc_standard_error, oriented_auc, roc_points, tpr_at_fpr

from pfd.audit.intervals import wilson_interval
from pfd.errors import PfdError


@pytest.mark.parametrize(
    "k,n,low,high",
    [
        (5, 10, 0.2366, 0.7634),  # textbook values
        (0, 10, 0.0, 0.2775),  # z²/(n+z²) = 3.8416/13.8416
        (10, 10, 0.7225, 1.0),
        (1, 10, 0.0179, 0.4042),
    ],
)
def test_wilson_known_values(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-4)
    assert hi == pytest.approx(high, abs=1e-4)


def test_wilson_contains_p_and_narrows():
    lo1, hi1 = wilson_interval(30, 100)
    lo2, hi2 = wilson_interval(300, 1000)
    assert lo1 < 0.3 < hi1 and lo2 < 0.3 < hi2
    assert hi2 - lo2 < hi1 - lo1
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(PfdError):
        wilson_interval(3, 2)


def _auc_bruteforce(pos, neg):
    return np.mean([1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg])


def test_auc_matches_pairwise_definition_with_ties():
    rng = np.random.default_rng(1)
    pos = rng.integers(0, 6, 40).astype(float)  # many ties
    neg = rng.integers(0, 5, 30).astype(float)
    assert auc(pos, neg) == pytest.approx(_auc_bruteforce(pos, neg), abs=1e-12)


def test_oriented_auc_flips_and_says_so():
    assert oriented_auc([3, 4], [1, 2]) == (1.0, "higher")
    a, d = oriented_auc([1, 2, 2.5], [2.2, 3, 4])
    assert d == "lower" and a == pytest.approx(1 - auc([1, 2, 2.5], [2.2, 3, 4]))


def test_auc_errors():
    with pytest.raises(PfdError):
        auc([], [1.0])
    with pytest.raises(PfdError):
        auc([np.nan], [1.0])


def test_auc_standard_error_null_matches_exact_variance():
    n1, n2 = 37, 55
    exact = math.sqrt((n1 + n2 + 1) / (12 * n1 * n2))
    assert auc_standard_error(0.5, n1, n2) == pytest.approx(exact, rel=1e-12)
    assert auc_standard_error(0.95, n1, n2) < exact


def _tpr_bruteforce(pos, neg, fpr):
    best = 0.0
    for t in np.unique(np.r_[pos, neg, np.inf]):
        if np.mean(neg >= t) <= fpr:
            best = max(best, np.mean(pos >= t))
    return best


@pytest.mark.parametrize("fpr", [0.01, 0.05, 0.2])
def test_tpr_at_fpr_matches_bruteforce(fpr):
    rng = np.random.default_rng(2)
    pos = np.round(rng.normal(1.0, 1.0, 80), 1)  # rounding creates ties
    neg = np.round(rng.normal(0.0, 1.0, 150), 1)
    r = tpr_at_fpr(pos, neg, fpr)
    assert r["tpr"] == pytest.approx(_tpr_bruteforce(pos, neg, fpr))
    assert r["achieved_fpr"] <= fpr
    assert r["resolvable"] == (150 * fpr >= 1)


def test_tpr_at_fpr_hand_example_and_direction():
    pos = np.array([0.9, 0.8, 0.7, 0.1])
    neg = np.linspace(0.0, 0.75, 100)
    r = tpr_at_fpr(pos, neg, 0.01)
    # τ = 0.8 already gives TPR 0.5 with no false positive; the lowest-FPR such point is reported.
    assert r["tpr"] == 0.5 and r["achieved_fpr"] == 0.0 and r["resolvable"]
    # Same data negated, scored in the "lower" direction: identical operating point.
    assert tpr_at_fpr(-pos, -neg, 0.01, direction="lower")["tpr"] == 0.5
    assert not tpr_at_fpr(pos, neg, 0.001)["resolvable"]


def test_roc_points_span_corners():
    roc = roc_points([1, 2, 3], [0, 2.5])
    assert roc["fpr"][0] == 0 and roc["tpr"][0] == 0
    assert roc["fpr"][-1] == 1 and roc["tpr"][-1] == 1
    assert np.all(np.diff(roc["fpr"]) >= 0) and np.all(np.diff(roc["tpr"]) >= 0)


def test_clopper_pearson_matches_the_beta_quantiles_and_covers():
    from scipy.stats import binom

    from pfd.audit.intervals import clopper_pearson

    lo, hi = clopper_pearson(3, 28)
    # By definition P(X >= 3 | lo) = 0.025 and P(X <= 3 | hi) = 0.025.
    assert binom.sf(2, 28, lo) == pytest.approx(0.025, rel=1e-6)
    assert binom.cdf(3, 28, hi) == pytest.approx(0.025, rel=1e-6)
    assert clopper_pearson(0, 10) == (0.0, pytest.approx(1 - 0.025 ** 0.1))
    assert clopper_pearson(0, 0) == (0.0, 1.0)


def test_clustered_interval_widens_with_correlated_clusters_and_not_without():
    from pfd.audit.intervals import clopper_pearson, clustered_interval

    cluster = np.repeat(np.arange(40), 5)
    together = np.repeat(np.arange(40) < 10, 5)  # whole clusters succeed: deff = K = 5
    r = clustered_interval(together, cluster)
    assert r["design_effect"] == pytest.approx(5.0) and r["n_eff"] == pytest.approx(40.0)
    assert r["ci95"] == pytest.approx(clopper_pearson(10, 40))
    spread = np.zeros(200, dtype=bool)
    spread[np.arange(40) * 5] = True  # one success in every cluster: less variable than binomial
    r1 = clustered_interval(spread, cluster)
    assert r1["design_effect"] == 1.0 and r1["ci95"] == pytest.approx(clopper_pearson(40, 200))
    assert clustered_interval(np.zeros(200, bool), cluster)["n_eff"] == pytest.approx(40.0)  # p̂ = 0: worst case


def test_composition_chance_weights_gallery_shares_by_proxy_shares():
    from pfd.audit.intervals import composition_chance

    gallery = np.array([0] * 8 + [1] * 2)  # identity 0 holds 80 % of the images
    assert composition_chance([0, 0, 1, 1], gallery) == pytest.approx(0.5 * 0.8 + 0.5 * 0.2)
    assert composition_chance([0, 0, 0], gallery) == pytest.approx(0.8)
    assert composition_chance([1], [0, 1, 2, 3]) == pytest.approx(0.25)


def test_a_first_success_never_narrows_the_clustered_interval():
    """Issue 27: 0 of 300 proxies (K = 10) gave [0, 11.6 %] and 1 of 300 gave [0, 1.8 %]."""
    from pfd.audit.intervals import MIN_CLUSTERS_FOR_DEFF, clustered_interval

    for n_ids, k in ((30, 10), (24, 5), (150, 10), (10, 3)):
        cluster = np.repeat(np.arange(n_ids), k)
        zero = clustered_interval(np.zeros(n_ids * k, bool), cluster)["ci95"][1]
        for linked in range(1, MIN_CLUSTERS_FOR_DEFF):
            s = np.zeros(n_ids * k, bool)
            s[np.arange(linked) * k] = True  # one proxy each of `linked` sources: deff estimates ~1
            assert clustered_interval(s, cluster)["ci95"][1] >= zero, (n_ids, k, linked)
    # Successes spread over many sources are evidence against clustering: the estimate is used.
    cluster = np.repeat(np.arange(30), 10)
    spread = np.zeros(300, bool)
    spread[np.arange(20) * 10] = True
    assert clustered_interval(spread, cluster)["ci95"][1] < clustered_interval(np.zeros(300, bool), cluster)["ci95"][1]


def test_clustered_interval_covers_small_clustered_rates():
    """Null simulation at small counts: sources linked whole or in part with a small probability.

    Each of 30 sources (K = 10) is "linkable" with probability q; a linkable source's proxies link
    with probability 0.6 each. The true rate is 0.6 q; the 95 % upper end must cover it in >= 95 %
    of audits for every q, the few-success audits included.
    """
    from pfd.audit.intervals import clustered_interval

    rng = np.random.default_rng(27)
    cluster = np.repeat(np.arange(30), 10)
    for q in (0.01, 0.03, 0.1, 0.3):
        covered = 0
        for _ in range(400):
            linkable = np.repeat(rng.random(30) < q, 10)
            s = linkable & (rng.random(300) < 0.6)
            covered += clustered_interval(s, cluster)["ci95"][1] >= 0.6 * q
        assert covered / 400 >= 0.95, (q, covered)
