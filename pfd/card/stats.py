"""Intervals of ``privacy_utility.py``: identity bootstrap of utility and membership differences.

Utility and membership figures are averages over *identities*: the test identities' pairs, the
member and non-member identities of the MIA. Pairs of one identity are not independent, so the
intervals resample identities, not pairs (a cluster bootstrap):

* **Replicate weights** (:func:`identity_bootstrap_weights`): each replicate draws the ``C`` test
  identities with replacement, ``c_k`` = how often identity ``k`` was drawn; a genuine pair of
  ``k`` gets weight ``c_k``, an impostor pair of ``(k, l)`` weight ``c_k · c_l`` (the pairs a
  resampled set would hold; replicate 0 of nothing, all weights 1, is the observed set).
* **Weighted metrics**: :func:`weighted_kfold_accuracy` is :func:`pfd.verify.kfold_accuracy` with
  integer pair weights (the pairs keep their fold; a fold's threshold is the best on the other
  folds among midpoints of their scores, ties to the strictest), and :func:`weighted_tar_at_far`
  is :func:`pfd.verify.tar_at_far` on the weighted multiset. With all weights 1 both equal the
  unweighted functions (tested).
* **Paired differences** (:func:`paired_difference`): the *same* replicates are applied to both
  models (same pairs, same identities); within each replicate each side's seeds are also drawn
  with replacement (so that training noise widens the interval, not only the choice of test
  people), the difference of the seed-averaged metrics is taken per replicate, and the 95 %
  interval is the bias-corrected percentile interval of those differences (:func:`bc_interval`).
  The seeds' spread is also reported as an sd.
* **Membership** (:func:`auc_difference`): members and non-members are resampled separately
  (stratified), the a-priori AUC (higher statistic = member) of each model is computed on the
  weighted identities (the row's seeds drawn with replacement per replicate, as above), and the
  difference row − base gets a bias-corrected percentile interval.
"""

from __future__ import annotations

import warnings
from statistics import NormalDist
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["identity_bootstrap_weights", "weighted_kfold_accuracy", "weighted_tar_at_far", "paired_difference",
           "weighted_auc", "auc_difference", "bc_interval"]


def identity_bootstrap_weights(left: np.ndarray, right: np.ndarray, *, replicates: int, seed: int = 0) -> np.ndarray:
    """Pair weights ``(B, P)`` of ``replicates`` identity-bootstrap resamples (module docstring).

    Args:
        left: ``(P,)`` identity label of each pair's first image; ``right``: of its second.
        replicates: Number of resamples ``B``.
        seed: Seed of the draws.

    Returns:
        ``int64 (B, P)``: ``c_left`` for genuine pairs, ``c_left * c_right`` for impostor pairs.
    """
    left, right = np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)
    ids = np.unique(np.concatenate([left, right]))
    li, ri = np.searchsorted(ids, left), np.searchsorted(ids, right)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(ids), size=(replicates, len(ids)))
    counts = np.zeros((replicates, len(ids)), dtype=np.int64)
    np.add.at(counts, (np.arange(replicates)[:, None], draws), 1)
    same = li == ri
    return np.where(same[None, :], counts[:, li], counts[:, li] * counts[:, ri])


def _fold_bounds(n: int, folds: int) -> list[tuple[int, int]]:
    sizes = np.full(folds, n // folds, dtype=np.int64)
    sizes[: n % folds] += 1
    ends = np.cumsum(sizes)
    return [(int(e - z), int(e)) for z, e in zip(sizes, ends)]


def weighted_kfold_accuracy(scores: np.ndarray, issame: np.ndarray, weights: np.ndarray, *, folds: int = 10) -> np.ndarray:
    """k-fold verification accuracy per row of pair weights (see the module docstring).

    Args:
        scores: ``(P,)`` pair scores in file order; ``issame``: ``(P,)`` genuine flags.
        weights: ``(B, P)`` non-negative pair weights (one replicate per row).
        folds: Contiguous folds, as :func:`pfd.verify.kfold_accuracy`.

    Returns:
        ``(B,)`` mean held-out accuracy over the folds that keep any weight.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(issame, dtype=bool)
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    accs, used = np.zeros(w.shape[0]), np.zeros(w.shape[0])
    for lo, hi in _fold_bounds(s.size, folds):
        test = np.zeros(s.size, dtype=bool)
        test[lo:hi] = True
        train = ~test if folds > 1 else test
        order = np.argsort(s[train], kind="stable")
        st, yt, wt = s[train][order], y[train][order], w[:, train][:, order]  # ascending scores
        # Split j accepts sorted positions >= j: correct = impostors below + genuine at/above.
        imp_below = np.concatenate([np.zeros((w.shape[0], 1)), np.cumsum(wt * ~yt, axis=1)], axis=1)
        gen = wt * yt
        gen_above = gen.sum(1, keepdims=True) - np.concatenate([np.zeros((w.shape[0], 1)), np.cumsum(gen, axis=1)], axis=1)
        correct = imp_below + gen_above  # (B, n+1)
        valid = np.r_[True, st[1:] > st[:-1], True]  # only between distinct scores (and the two ends)
        correct[:, ~valid] = -np.inf
        j = correct.shape[1] - 1 - np.argmax(correct[:, ::-1], axis=1)  # the last maximum: strictest
        cand = np.r_[st[0] - 1.0, (st[1:] + st[:-1]) / 2, st[-1]]
        t = cand[j]  # (B,)
        wte = w[:, test]
        ok = ((s[test][None, :] > t[:, None]) == y[test][None, :]) * wte
        tot = wte.sum(1)
        has = tot > 0
        accs[has] += ok.sum(1)[has] / tot[has]
        used += has
    return accs / np.maximum(used, 1)


def weighted_tar_at_far(scores: np.ndarray, issame: np.ndarray, weights: np.ndarray, far: float) -> np.ndarray:
    """TAR at FAR <= ``far`` per row of integer pair weights (:func:`pfd.verify.tar_at_far` on the
    multiset that repeats each pair its weight's times); ``nan`` where not resolvable.

    Returns:
        ``(B,)`` TARs.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(issame, dtype=bool)
    w = np.atleast_2d(np.asarray(weights, dtype=np.int64))
    imp_order = np.argsort(-s[~y], kind="stable")
    imp_s = s[~y][imp_order]  # descending
    out = np.full(w.shape[0], np.nan)
    for b in range(w.shape[0]):
        wi = w[b, ~y][imp_order]
        n_imp = int(wi.sum())
        k = int(np.floor(far * n_imp + 1e-9))
        wg = w[b, y]
        if k < 1 or wg.sum() == 0:
            continue
        if k >= n_imp:
            out[b] = 1.0
            continue
        t = imp_s[int(np.searchsorted(np.cumsum(wi), k, side="right"))]  # the (k+1)-th largest, repeats counted
        out[b] = float((wg * (s[y] > t)).sum() / wg.sum())
    return out


def paired_difference(metric: Callable[[np.ndarray, np.ndarray], np.ndarray], row_scores: Sequence[np.ndarray],
                      ref_scores: Sequence[np.ndarray], weights: np.ndarray, *, seed: int = 0) -> dict[str, Any]:
    """Difference of a seed-averaged metric, row − reference, with a 95 % identity-bootstrap interval.

    Args:
        metric: ``metric(scores (P,), weights (B, P)) -> (B,)``.
        row_scores: One ``(P,)`` score vector per seed of the row.
        ref_scores: One per seed of the reference (``public-ft``).
        weights: ``(B, P)`` replicate weights (:func:`identity_bootstrap_weights`).
        seed: Seed of the per-replicate draw of seeds.

    Returns:
        ``{"diff", "ci95", "row_mean", "row_sd", "ref_mean", "ref_sd", "per_seed", "replicates"}``
        (sd over seeds, ``ddof=1``; 0 for one seed).
    """
    with warnings.catch_warnings():  # an unresolvable TAR is nan in every replicate: the result is nan, quietly
        warnings.simplefilter("ignore", RuntimeWarning)
        return _paired_difference(metric, row_scores, ref_scores, weights, seed)


def _seed_mean(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``(S, B)`` per-seed replicate values -> ``(B,)`` means over seeds drawn with replacement per
    replicate (the seeds' spread enters the interval; one seed: that seed's values)."""
    s, b = values.shape
    if s == 1:
        return values[0]
    pick = rng.integers(0, s, size=(b, s))  # (B, S)
    with np.errstate(invalid="ignore"):
        return np.nanmean(values[pick, np.arange(b)[:, None]], axis=1)


def _paired_difference(metric: Callable[[np.ndarray, np.ndarray], np.ndarray], row_scores: Sequence[np.ndarray],
                       ref_scores: Sequence[np.ndarray], weights: np.ndarray, seed: int) -> dict[str, Any]:
    ones = np.ones((1, weights.shape[1]))
    row = np.array([metric(s, ones)[0] for s in row_scores])
    ref = np.array([metric(s, ones)[0] for s in ref_scores])
    rng = np.random.default_rng(seed)
    boot = _seed_mean(np.array([metric(s, weights) for s in row_scores]), rng) - _seed_mean(
        np.array([metric(s, weights) for s in ref_scores]), rng)
    boot = boot[np.isfinite(boot)]
    diff = float(np.nanmean(row) - np.nanmean(ref))
    lo, hi = bc_interval(boot, diff)
    sd = lambda v: float(np.std(v, ddof=1)) if len(v) > 1 else 0.0  # noqa: E731
    return {"diff": diff, "ci95": [lo, hi], "row_mean": float(np.nanmean(row)),
            "row_sd": sd(row), "ref_mean": float(np.nanmean(ref)), "ref_sd": sd(ref), "per_seed": row.tolist(),
            "replicates": int(boot.size)}


def bc_interval(boot: np.ndarray, estimate: float, level: float = 0.95) -> tuple[float, float]:
    """Bias-corrected percentile interval (Efron 1981): percentiles ``Φ(2 z0 ± z)`` of the
    replicates, ``z0 = Φ⁻¹(share of replicates below the estimate)``. k-fold accuracy is not a
    smooth statistic: resampled identities make its replicates run a little low, and the plain
    percentile interval would sit off-centre; with a median-unbiased bootstrap it is the plain one.

    Returns:
        ``(lo, hi)``; ``(nan, nan)`` without finite replicates.
    """
    boot = np.asarray(boot, dtype=np.float64)
    boot = boot[np.isfinite(boot)]
    if not boot.size or not np.isfinite(estimate):
        return float("nan"), float("nan")
    below = (np.sum(boot < estimate) + 0.5 * np.sum(boot == estimate)) / boot.size
    nd = NormalDist()
    z0 = nd.inv_cdf(min(max(below, 0.5 / boot.size), 1 - 0.5 / boot.size))
    z = nd.inv_cdf(0.5 + level / 2)
    q = [100 * nd.cdf(2 * z0 - z), 100 * nd.cdf(2 * z0 + z)]
    lo, hi = np.percentile(boot, q)
    return float(lo), float(hi)


def weighted_auc(members: np.ndarray, nonmembers: np.ndarray, wm: np.ndarray, wn: np.ndarray) -> np.ndarray:
    """A-priori AUC ``P(member > non-member) + ½ P(tie)`` per row of identity weights.

    Args:
        members: ``(m,)`` statistic per member identity; ``nonmembers``: ``(n,)``.
        wm: ``(B, m)`` member weights; ``wn``: ``(B, n)`` non-member weights.

    Returns:
        ``(B,)`` AUCs.
    """
    d = np.asarray(members, dtype=np.float64)[:, None] - np.asarray(nonmembers, dtype=np.float64)[None, :]
    win = (d > 0) + 0.5 * (d == 0)  # (m, n)
    wm, wn = np.atleast_2d(wm).astype(np.float64), np.atleast_2d(wn).astype(np.float64)
    return np.einsum("bm,mn,bn->b", wm, win, wn) / (wm.sum(1) * wn.sum(1))


def _resample(n: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    counts = np.zeros((replicates, n), dtype=np.int64)
    np.add.at(counts, (np.arange(replicates)[:, None], rng.integers(0, n, size=(replicates, n))), 1)
    return counts


def auc_difference(row: Sequence[tuple[np.ndarray, np.ndarray]], base: tuple[np.ndarray, np.ndarray], *,
                   replicates: int = 1000, seed: int = 0) -> dict[str, Any]:
    """A-priori membership AUC of a row (seed-averaged) against ``base``'s, stratified identity bootstrap.

    Args:
        row: Per seed ``(member statistics (m,), non-member statistics (n,))``, identities in the
            same order as ``base``'s.
        base: ``base``'s ``(members, nonmembers)``.
        replicates: Bootstrap replicates; ``seed``: their seed.

    Returns:
        ``{"auc", "auc_sd", "base_auc", "diff", "ci95", "auc_ci95"}``: the row's AUC (mean over
        seeds) with its own percentile interval, and the difference to base with its interval.
    """
    m, n = len(base[0]), len(base[1])
    rng = np.random.default_rng(seed)
    wm, wn = _resample(m, replicates, rng), _resample(n, replicates, rng)
    one_m, one_n = np.ones((1, m)), np.ones((1, n))
    aucs = np.array([weighted_auc(a, b, one_m, one_n)[0] for a, b in row])
    boot_row = _seed_mean(np.array([weighted_auc(a, b, wm, wn) for a, b in row]), rng)
    boot_base = weighted_auc(base[0], base[1], wm, wn)
    base_auc = float(weighted_auc(base[0], base[1], one_m, one_n)[0])
    return {"auc": float(aucs.mean()), "auc_sd": float(np.std(aucs, ddof=1)) if len(aucs) > 1 else 0.0,
            "auc_ci95": list(bc_interval(boot_row, float(aucs.mean()))), "base_auc": base_auc,
            "diff": float(aucs.mean() - base_auc), "ci95": list(bc_interval(boot_row - boot_base, float(aucs.mean() - base_auc))),
            "replicates": int(replicates)}
