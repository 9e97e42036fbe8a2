"""Scores shared by the attacks: Wilson intervals, AUC, ROC points, TPR at a fixed FPR.

Conventions (used by every attack so that the scorecard reads the same everywhere):

* A *score* is "higher = member / match". A threshold classifier calls a sample positive when
  ``score >= τ``; tied scores always fall on the same side of τ (no randomised splitting).
* AUC is the Mann-Whitney probability ``P(s_member > s_nonmember) + ½ P(s_member = s_nonmember)``,
  i.e. the area under the step ROC curve with ties drawn as diagonal segments.
* ``TPR@FPR = max{ TPR(τ) : FPR(τ) <= fpr }`` over all thresholds, without interpolation. With
  ``n`` non-members the achievable FPRs are multiples of ``1/n``; when ``n < 1/fpr`` the only
  admissible FPR is 0, so the figure is really TPR@FPR=0 and is flagged ``resolvable=False``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import beta
from sklearn.metrics import roc_auc_score, roc_curve

from pfd.errors import PfdError

__all__ = [
    "wilson_interval",
    "auc",
    "oriented_auc",
    "roc_points",
    "tpr_at_fpr",
    "auc_standard_error",
    "clopper_pearson",
    "clustered_interval",
    "composition_chance",
]


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``k / n``.

    .. math::
        \\frac{\\hat p + z^2/2n \\pm z\\sqrt{\\hat p(1-\\hat p)/n + z^2/4n^2}}{1 + z^2/n}

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not degenerate at
    ``k = 0`` or ``k = n``, which is exactly where attack success rates near chance live.

    Args:
        k: Successes, ``0 <= k <= n``.
        n: Trials. ``n = 0`` gives the uninformative interval ``(0, 1)``.
        z: Standard-normal quantile (1.96 for 95 %).

    Returns:
        ``(low, high)``.

    Raises:
        PfdError: If ``k`` is outside ``[0, n]``.
    """
    if n < 0 or k < 0 or k > n:
        raise PfdError(f"wilson_interval: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At k = 0 / k = n the bound is exactly 0 / 1; set it so rounding does not leave 0.9999999.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def _two_groups(pos: Any, neg: Any) -> tuple[np.ndarray, np.ndarray]:
    pos = np.asarray(pos, dtype=np.float64).ravel()
    neg = np.asarray(neg, dtype=np.float64).ravel()
    if pos.size == 0 or neg.size == 0:
        raise PfdError(
            f"need at least one member and one non-member score (got {pos.size} and {neg.size}); "
            "check the member/non-member sets"
        )
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise PfdError("scores contain NaN or inf; check the embeddings for degenerate identities")
    return pos, neg


def _stack(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    return y, np.concatenate([pos, neg])


def auc(member_scores: Any, nonmember_scores: Any) -> float:
    """Threshold-classifier AUC with the a-priori direction "higher = member".

    ``AUC = P(s_m > s_n) + ½ P(s_m = s_n)`` (geometric MIA paper §3.1). Values below 0.5 mean
    members score *lower* than non-members.

    Args:
        member_scores: ``(n_m,)`` scores of members.
        nonmember_scores: ``(n_n,)`` scores of non-members.

    Returns:
        The AUC in [0, 1].

    Raises:
        PfdError: If a group is empty or a score is not finite.
    """
    pos, neg = _two_groups(member_scores, nonmember_scores)
    y, s = _stack(pos, neg)
    return float(roc_auc_score(y, s))


def oriented_auc(member_scores: Any, nonmember_scores: Any) -> tuple[float, str]:
    """AUC oriented so that > 0.5 means separation, and the direction that achieves it.

    ``oriented = max(AUC, 1 − AUC)``; the direction is ``"higher"`` when members score higher
    (the a-priori direction of every geometric statistic) and ``"lower"`` when the AUC had to
    be flipped. Choosing the direction after looking at the data biases the oriented AUC upward
    under the null (``E[max(A, 1−A)] > 0.5``), so reports keep the a-priori :func:`auc` beside it.

    Args:
        member_scores: ``(n_m,)`` member scores.
        nonmember_scores: ``(n_n,)`` non-member scores.

    Returns:
        ``(auc_oriented, direction)`` with direction in ``{"higher", "lower"}``.
    """
    a = auc(member_scores, nonmember_scores)
    return (a, "higher") if a >= 0.5 else (1.0 - a, "lower")


def roc_points(member_scores: Any, nonmember_scores: Any, *, direction: str = "higher") -> dict[str, np.ndarray]:
    """Full step ROC curve (every distinct threshold), for plotting.

    Args:
        member_scores: ``(n_m,)`` member scores.
        nonmember_scores: ``(n_n,)`` non-member scores.
        direction: ``"higher"`` (score >= τ is a member) or ``"lower"`` (score <= τ).

    Returns:
        ``{"fpr": (T,), "tpr": (T,), "threshold": (T,)}``, starting at (0, 0) with τ = +inf
        (in the oriented score) and ending at (1, 1).
    """
    pos, neg = _two_groups(member_scores, nonmember_scores)
    sign = _sign(direction)
    y, s = _stack(pos, neg)
    fpr, tpr, thr = roc_curve(y, sign * s, drop_intermediate=False)
    return {"fpr": fpr, "tpr": tpr, "threshold": sign * thr}


def _sign(direction: str) -> float:
    if direction not in ("higher", "lower"):
        raise PfdError(f"direction must be 'higher' or 'lower', got {direction!r}")
    return 1.0 if direction == "higher" else -1.0


def tpr_at_fpr(
    member_scores: Any, nonmember_scores: Any, fpr: float, *, direction: str = "higher"
) -> dict[str, Any]:
    """True-positive rate at a false-positive rate, with the exact (non-interpolated) convention.

    ``TPR@FPR = max{ TPR(τ) : FPR(τ) <= fpr }`` over thresholds of the classifier
    "member iff score >= τ" (``direction="higher"``) or "score <= τ" (``"lower"``).

    Args:
        member_scores: ``(n_m,)`` member scores.
        nonmember_scores: ``(n_n,)`` non-member scores.
        fpr: Target false-positive rate in (0, 1), e.g. 0.01 or 0.001.
        direction: Orientation of the score.

    Returns:
        ``{"fpr": fpr, "tpr": float, "achieved_fpr": float, "threshold": float,
        "n_nonmembers": int, "resolvable": bool}``; ``resolvable`` is False when there are fewer
        than ``1/fpr`` non-members, so that no threshold can reach a non-zero FPR <= ``fpr``.

    Raises:
        PfdError: If ``fpr`` is not in (0, 1).
    """
    if not 0.0 < fpr < 1.0:
        raise PfdError(f"fpr must lie in (0, 1), got {fpr}")
    roc = roc_points(member_scores, nonmember_scores, direction=direction)
    ok = roc["fpr"] <= fpr + 1e-12  # (T,) admissible thresholds; the first (τ=inf) always is
    best = int(np.flatnonzero(ok)[np.argmax(roc["tpr"][ok])])
    n_neg = int(np.asarray(nonmember_scores).size)
    return {
        "fpr": float(fpr),
        "tpr": float(roc["tpr"][best]),
        "achieved_fpr": float(roc["fpr"][best]),
        "threshold": float(roc["threshold"][best]),
        "n_nonmembers": n_neg,
        "resolvable": bool(n_neg * fpr >= 1.0 - 1e-9),
    }


def auc_standard_error(auc_value: float, n_pos: int, n_neg: int) -> float:
    """Hanley & McNeil (1982) standard error of an AUC estimate.

    .. math::
        SE^2 = \\frac{A(1-A) + (n_p-1)(Q_1-A^2) + (n_n-1)(Q_2-A^2)}{n_p n_n},\\quad
        Q_1 = \\frac{A}{2-A},\\ Q_2 = \\frac{2A^2}{1+A}

    At ``A = 0.5`` it is close to the exact null value ``sqrt((n_p+n_n+1)/(12 n_p n_n))``.

    Args:
        auc_value: The AUC ``A``.
        n_pos: Number of positives (members).
        n_neg: Number of negatives (non-members).

    Returns:
        The standard error (>= 0).
    """
    a = float(auc_value)
    q1 = a / (2.0 - a)
    q2 = 2.0 * a * a / (1.0 + a)
    var = (a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a)) / (n_pos * n_neg)
    return math.sqrt(max(var, 0.0))


def clopper_pearson(k: float, n: float, *, alpha: float = 0.05) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a binomial proportion, for real-valued ``k`` and ``n``.

    ``low = B⁻¹(α/2; k, n−k+1)``, ``high = B⁻¹(1−α/2; k+1, n−k)`` with ``B`` the beta CDF.
    Real ``k``, ``n`` (an *effective* count, :func:`clustered_interval`) interpolate the integer
    case. Its coverage is at least ``1 − α`` for every true proportion, which the Wilson interval
    does not guarantee near 0 — exactly where linkability rates near chance live.

    Args:
        k: Successes, ``0 <= k <= n``.
        n: Trials; ``n = 0`` gives ``(0, 1)``.
        alpha: 1 − confidence.

    Returns:
        ``(low, high)``.

    Raises:
        PfdError: If ``k`` is outside ``[0, n]``.
    """
    if n < 0 or k < 0 or k > n + 1e-9:
        raise PfdError(f"clopper_pearson: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    k = min(float(k), float(n))
    low = 0.0 if k <= 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k >= n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


#: Clusters that must hold a success (a failure) before the design effect is estimated from them.
MIN_CLUSTERS_FOR_DEFF = 5


def clustered_interval(success: Any, cluster: Any, *, alpha: float = 0.05) -> dict[str, Any]:
    """Interval of a success rate whose trials come in clusters (the K proxies of one source).

    Proxies of one source identity share that identity and its prototypes, so their successes
    are correlated and ``n`` proxies carry less information than ``n`` independent trials. The
    rate ``p̂ = Σ_c k_c / Σ_c n_c`` gets the cluster-robust (ratio-estimator) variance

    .. math::
        \\hat V = \\frac{C}{C-1} \\sum_c (k_c - \\hat p\\, n_c)^2 / n^2,

    the design effect ``deff = V̂ / (p̂(1−p̂)/n)``, clamped to ``[1, Σ n_c² / n]`` (the upper end is
    the design effect of perfectly correlated clusters; it is also used when ``p̂`` is 0 or 1,
    where ``V̂`` says nothing), the effective sample size ``n_eff = n / deff`` and the exact
    :func:`clopper_pearson` interval of ``p̂ n_eff`` successes in ``n_eff`` trials. With one
    proxy per cluster this is the plain exact binomial interval.

    A first success does not narrow the interval: with no success at all nothing is known about
    the clustering, so the upper end is that of perfectly correlated clusters (``n_eff = n /
    deff_max``); with successes in only one or a few clusters ``V̂`` says "independent" (deff ≈ 1)
    on almost no evidence, which would put the upper end *below* the zero-success one (0 of 300
    proxies at K = 10: up to 11.6 %; 1 of 300: up to 1.8 %). So while fewer than
    :data:`MIN_CLUSTERS_FOR_DEFF` clusters hold a success, the upper end is never below the
    zero-success upper end of the same design (and, mirrored, while fewer than that hold a
    failure, the lower end never above the all-success one). A floor of what the audit could say
    with no success at all only widens the interval, so coverage is at least that of either.

    Args:
        success: ``(n,)`` bool, one per trial.
        cluster: ``(n,)`` cluster id of each trial (the proxy's source identity).
        alpha: 1 − confidence.

    Returns:
        ``{"ci95": (low, high), "n_eff": float, "design_effect": float, "clusters": int}``.

    Raises:
        PfdError: If the lengths differ.
    """
    s = np.asarray(success, dtype=np.float64).ravel()
    c = np.asarray(cluster).ravel()
    if s.size != c.size:
        raise PfdError(f"clustered_interval: {s.size} outcomes but {c.size} cluster ids; pass one per trial")
    n = s.size
    if n == 0:
        return {"ci95": (0.0, 1.0), "n_eff": 0.0, "design_effect": 1.0, "clusters": 0}
    _, inv = np.unique(c, return_inverse=True)
    n_c = np.bincount(inv).astype(np.float64)  # (C,) trials per cluster
    k_c = np.bincount(inv, weights=s)  # (C,) successes per cluster
    n_clusters = n_c.size
    p = float(k_c.sum() / n)
    deff_max = float((n_c * n_c).sum() / n)
    if 0.0 < p < 1.0 and n_clusters > 1:
        v = n_clusters / (n_clusters - 1) * float(((k_c - p * n_c) ** 2).sum()) / (n * n)
        deff = min(max(v / (p * (1 - p) / n), 1.0), deff_max)
    else:
        deff = deff_max
    n_eff = n / deff
    lo, hi = clopper_pearson(p * n_eff, n_eff, alpha=alpha)
    n_min = n / deff_max  # the effective size of perfectly correlated clusters
    if np.count_nonzero(k_c) < MIN_CLUSTERS_FOR_DEFF:
        hi = max(hi, clopper_pearson(0.0, n_min, alpha=alpha)[1])
    if np.count_nonzero(n_c - k_c) < MIN_CLUSTERS_FOR_DEFF:
        lo = min(lo, clopper_pearson(n_min, n_min, alpha=alpha)[0])
    return {"ci95": (lo, hi), "n_eff": float(n_eff), "design_effect": float(deff), "clusters": int(n_clusters)}


def composition_chance(query_labels: Any, gallery_labels: Any) -> float:
    """Success rate of random assignment: ``Σ_c (share of queries of c) × (share of gallery rows of c)``.

    A linkability attack that ignores the proxy picks gallery row ``j`` with probability
    ``1/|gallery|``, so it names identity ``c`` with probability ``g_c`` = its share of the gallery
    (images for VisMatch; one template per identity, ``1/N``, for Re-ID), and a proxy of source
    ``c`` succeeds with that probability. With ``q_c`` the share of proxies whose source is ``c``,
    chance is ``Σ_c q_c g_c``; it equals ``1/N`` only when one of the two is uniform.

    Args:
        query_labels: ``(q,)`` source identity of each proxy.
        gallery_labels: ``(g,)`` identity of each gallery row.

    Returns:
        The chance level in [0, 1].
    """
    q = np.asarray(query_labels).ravel()
    g = np.asarray(gallery_labels).ravel()
    if q.size == 0 or g.size == 0:
        return 0.0
    ids, g_count = np.unique(g, return_counts=True)
    qi, q_count = np.unique(q, return_counts=True)
    pos = np.searchsorted(ids, qi)
    ok = (pos < ids.size) & (ids[np.minimum(pos, ids.size - 1)] == qi)
    return float((q_count[ok] / q.size * g_count[pos[ok]] / g.size).sum())
