"""The membership verdict: a max-T permutation test over the a-priori AUCs of several scores.

Taking the best of several statistics, each oriented after looking at the data
(``max(A, 1 − A)``), and putting an uncorrected interval around it says LEAKS far more often than
5 % when members and non-members are drawn from the same people (≈ 17 % for 28 vs 28 identities
and four statistics). The verdict here is a test whose null accounts for that selection:

* every score is used in its **a-priori direction** (higher = member: training tightens a
  member's cluster, geometric MIA §3.2), so a reversed separation (members *looser*) never counts
  as leakage — it usually means that the non-members come from another domain;
* the test statistic is ``T = max_j AUC_j`` over the scores (the four cluster statistics and,
  when present, the fused classifier's out-of-fold score);
* its null distribution comes from permuting the member / non-member labels of the identities
  (jointly for all scores, so that their correlation is kept): ``p = (1 + #{T_b >= T}) / (1 + B)``.
  The per-identity statistics are computed on the joint pool, so they do not depend on the labels
  and the permutation null is exact under exchangeability of the identities.

The fused classifier's out-of-fold scores are treated as fixed scores. Under the null they are
out-of-sample predictions; cross-validation biases their AUC slightly *below* 0.5 under the null,
so including them keeps the test conservative (no refitting per permutation is needed).

AUCs are computed from mid-ranks, ``AUC = (Σ_{members} rank − n_m(n_m+1)/2) / (n_m n_n)``, the
Mann-Whitney form with ties counted ½ (as :func:`pfd.attacks.metrics.auc`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from scipy.stats import rankdata

from pfd.errors import PfdError

__all__ = ["max_auc_permutation_test"]


def max_auc_permutation_test(
    scores: Mapping[str, Any],
    is_member: Any,
    *,
    permutations: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """One-sided max-T permutation test of "members score higher" over several scores.

    Args:
        scores: ``{name: (C,) per-identity score}``, each oriented a priori (higher = member).
        is_member: ``(C,)`` bool.
        permutations: Label permutations ``B`` of the null.
        seed: Seed of the permutations.
        alpha: Level of the verdict.

    Returns:
        ``{"statistic": name of the largest AUC, "auc": T, "aucs": {name: AUC}, "p": p-value,
        "null95": 95 % quantile of the null of T (the AUC a leak must exceed), "null_mean",
        "leaks": p <= alpha, "alpha", "permutations", "seed", "scores": [names]}``.

    Raises:
        PfdError: If a group is empty, lengths differ, a score is not finite or ``permutations < 1``.
    """
    y = np.asarray(is_member).astype(bool).ravel()
    names = list(scores)
    if not names:
        raise PfdError("membership test: no scores given")
    x = np.stack([np.asarray(scores[n], dtype=np.float64).ravel() for n in names], axis=1)  # (C, F)
    if x.shape[0] != y.size:
        raise PfdError(f"membership test: {x.shape[0]} scores per statistic but {y.size} membership flags")
    if not np.isfinite(x).all():
        raise PfdError("membership test: scores contain NaN or inf; check the per-identity statistics")
    n_m, n_n = int(y.sum()), int((~y).sum())
    if n_m == 0 or n_n == 0:
        raise PfdError(f"membership test needs members and non-members (have {n_m} and {n_n})")
    if permutations < 1:
        raise PfdError(f"permutations must be >= 1, got {permutations}")
    ranks = rankdata(x, axis=0)  # (C, F) mid-ranks, ties averaged
    offset, denom = n_m * (n_m + 1) / 2.0, float(n_m * n_n)
    aucs = (ranks[y].sum(0) - offset) / denom  # (F,)
    t_obs = float(aucs.max())

    rng = np.random.default_rng([seed, 11])
    c = y.size
    block = max(1, 4_000_000 // (c * x.shape[1]))  # bound the (block, C) and (block, F) work
    null = np.empty(permutations)
    for lo in range(0, permutations, block):
        b = min(block, permutations - lo)
        order = np.argsort(rng.random((b, c)), axis=1)[:, :n_m]  # (b, n_m) members of each draw
        mask = np.zeros((b, c))
        np.put_along_axis(mask, order, 1.0, axis=1)
        null[lo:lo + b] = ((mask @ ranks - offset) / denom).max(axis=1)  # (b,)
    p = float((1 + np.sum(null >= t_obs - 1e-12)) / (1 + permutations))
    best = names[int(np.argmax(aucs))]
    return {
        "statistic": best,
        "auc": t_obs,
        "aucs": {n: float(a) for n, a in zip(names, aucs)},
        "p": p,
        "null95": float(np.quantile(null, 0.95)),
        "null_mean": float(null.mean()),
        "leaks": bool(p <= alpha),
        "alpha": float(alpha),
        "permutations": int(permutations),
        "seed": int(seed),
        "scores": names,
    }
