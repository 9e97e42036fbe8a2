"""Identity-bootstrap intervals of the privacy-utility benchmark (benchmarks/pu/stats.py)."""

from __future__ import annotations


import numpy as np


from pfd.card.stats import (
    auc_difference,
    identity_bootstrap_weights,
    paired_difference,
    weighted_auc,
    weighted_kfold_accuracy,
    weighted_tar_at_far,
)

from pfd.attacks.metrics import auc
from pfd.verify import kfold_accuracy, tar_at_far


def _pairs(n_ids: int, per: int, rng: np.random.Generator, *, effect: float = 1.0, id_sd: float = 0.5):
    """Alternating genuine / impostor pairs of ``n_ids`` identities with identity-level random effects."""
    left, right = [], []
    for k in range(n_ids):
        for _ in range(per):
            left += [k, k]
            right += [k, int((k + rng.integers(1, n_ids)) % n_ids)]
    left, right = np.array(left), np.array(right)
    same = left == right
    u = rng.normal(0, id_sd, n_ids)  # identity effect: correlates an identity's pairs
    scores = rng.normal(0, 1, len(left)) + effect * same + u[left] + np.where(same, 0, u[right])
    return scores, same, left, right


def test_unit_weights_equal_the_unweighted_metrics():
    rng = np.random.default_rng(0)
    s, y, _, _ = _pairs(30, 20, rng)
    ones = np.ones((1, s.size))
    assert np.isclose(weighted_kfold_accuracy(s, y, ones, folds=10)[0], kfold_accuracy(s, y, folds=10)[0])
    for far in (1e-2, 0.1):
        assert np.isclose(weighted_tar_at_far(s, y, ones.astype(int), far)[0], tar_at_far(s, y, far)[0])


def test_integer_weights_equal_repeated_pairs_for_tar():
    rng = np.random.default_rng(1)
    s, y, _, _ = _pairs(20, 10, rng)
    w = rng.integers(0, 4, size=(5, s.size))
    for b in range(5):
        ref = tar_at_far(np.repeat(s, w[b]), np.repeat(y, w[b]), 0.05)[0]
        assert np.isclose(weighted_tar_at_far(s, y, w[b : b + 1], 0.05)[0], ref, equal_nan=True)


def test_bootstrap_weights_count_identity_draws():
    left, right = np.array([0, 0, 1, 2, 2]), np.array([0, 1, 1, 0, 2])
    w = identity_bootstrap_weights(left, right, replicates=200, seed=0)
    assert w.shape == (200, 5)
    c0, c1, c2 = w[:, 0], w[:, 2], w[:, 4]  # genuine pair of identity k: c_k
    assert (c0 + c1 + c2 == 3).all()  # 3 identities drawn 3 times
    assert np.array_equal(w[:, 1], c0 * c1) and np.array_equal(w[:, 3], c2 * c0)  # impostors: c_k c_l
    assert abs(c0.mean() - 1.0) < 0.25 and len(np.unique(c0)) > 2


def test_weighted_auc_matches_plain_auc():
    rng = np.random.default_rng(2)
    m, n = rng.normal(0.3, 1, 15), rng.normal(0, 1, 12)
    assert np.isclose(weighted_auc(m, n, np.ones((1, 15)), np.ones((1, 12)))[0], auc(m, n))
    wm, wn = rng.integers(0, 3, (1, 15)), rng.integers(1, 3, (1, 12))
    wm[0, 0] = 1
    assert np.isclose(weighted_auc(m, n, wm, wn)[0], auc(np.repeat(m, wm[0]), np.repeat(n, wn[0])))


def test_intervals_cover_zero_under_the_null():
    """Two models whose scores differ only by noise: the 95 % difference interval should contain 0
    in most trials (error rate near 5 %; the bound here is wide for a small simulation)."""
    rng = np.random.default_rng(3)
    miss_u = miss_m = 0
    trials = 40
    for t in range(trials):
        s, y, left, right = _pairs(24, 8, rng)
        w = identity_bootstrap_weights(left, right, replicates=200, seed=t)
        # same identity effects in both "models" (shared test set), independent pair noise
        other = s + rng.normal(0, 0.3, s.size)
        d = paired_difference(lambda sc, ww: weighted_kfold_accuracy(sc, y, ww, folds=10), [s], [other], w)
        miss_u += not d["ci95"][0] <= 0 <= d["ci95"][1]
        mem, non = rng.normal(0, 1, 20), rng.normal(0, 1, 20)
        a = auc_difference([(mem + rng.normal(0, 0.5, 20), non + rng.normal(0, 0.5, 20))], (mem, non),
                           replicates=300, seed=t)
        miss_m += not a["ci95"][0] <= 0 <= a["ci95"][1]
    assert miss_u <= 0.2 * trials and miss_m <= 0.2 * trials


def test_intervals_detect_a_real_difference():
    rng = np.random.default_rng(4)
    s, y, left, right = _pairs(40, 10, rng, effect=1.0)
    better = s + 1.5 * y  # genuine pairs score much higher
    w = identity_bootstrap_weights(left, right, replicates=200, seed=0)
    d = paired_difference(lambda sc, ww: weighted_kfold_accuracy(sc, y, ww, folds=10), [better, better], [s], w)
    assert d["diff"] > 0.1 and d["ci95"][0] > 0 and d["row_sd"] == 0.0
    mem, non = rng.normal(0, 1, 30), rng.normal(0, 1, 30)
    a = auc_difference([(mem + 3, non)], (mem, non), replicates=300)
    assert a["diff"] > 0.3 and a["ci95"][0] > 0


def test_bias_corrected_interval():
    from pfd.card.stats import bc_interval

    boot = np.random.default_rng(5).normal(0.0, 1.0, 4001)
    med = float(np.median(boot))
    lo, hi = bc_interval(boot, med)  # median-unbiased: the plain percentile interval
    assert np.allclose([lo, hi], np.percentile(boot, [2.5, 97.5]))
    lo2, hi2 = bc_interval(boot, med + 0.5)  # replicates run low: the interval moves up, around the estimate
    assert lo2 > lo and hi2 > hi and lo2 < med + 0.5 < hi2
    assert all(np.isnan(bc_interval(np.array([np.nan]), 0.0)))


def test_seed_noise_widens_the_difference_interval():
    rng = np.random.default_rng(6)
    s, y, left, right = _pairs(40, 10, rng)
    w = identity_bootstrap_weights(left, right, replicates=300, seed=0)
    acc = lambda sc, ww: weighted_kfold_accuracy(sc, y, ww, folds=10)  # noqa: E731
    calm = [s + 0.3 * y + rng.normal(0, 0.05, s.size) for _ in range(3)]
    noisy = [s + g * y for g in (-0.4, 0.3, 1.0)]  # seeds that disagree a lot, same mean gain
    d_calm, d_noisy = paired_difference(acc, calm, [s], w), paired_difference(acc, noisy, [s], w)
    width = lambda d: d["ci95"][1] - d["ci95"][0]  # noqa: E731
    assert d_noisy["row_sd"] > 5 * d_calm["row_sd"] and width(d_noisy) > 1.5 * width(d_calm)
