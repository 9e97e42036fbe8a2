"""The intervals and chance levels every row of the audit states (the verdict reads them).

* :func:`wilson_interval`: a binomial proportion's Wilson score interval;
* :func:`clopper_pearson`: the exact interval, for real-valued (effective) counts too;
* :func:`clustered_interval`: a rate whose trials cluster by source identity (design effect,
  effective count, Clopper-Pearson on it);
* :func:`composition_chance`: a nearest-neighbour rate's chance level from the gallery's composition.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import numpy as np
from scipy.stats import beta

from pfd.errors import PfdError

__all__ = ["wilson_interval", "clopper_pearson", "MIN_CLUSTERS_FOR_DEFF", "clustered_interval", "ClusteredInterval",
           "composition_chance"]


class ClusteredInterval(TypedDict):
    """:func:`clustered_interval`: the interval, the effective trials, the design effect and the clusters."""

    ci95: tuple[float, float]
    n_eff: float
    design_effect: float
    clusters: int


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


def clustered_interval(success: Any, cluster: Any, *, alpha: float = 0.05) -> ClusteredInterval:
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
        The :class:`ClusteredInterval` (``ci95`` as ``(low, high)``).

    Raises:
        PfdError: If the lengths differ.
    """
    s = np.asarray(success, dtype=np.float64).ravel()
    c = np.asarray(cluster).ravel()
    if s.size != c.size:
        raise PfdError(f"clustered_interval: {s.size} outcomes but {c.size} cluster ids; pass one per trial")
    n = s.size
    if n == 0:
        return ClusteredInterval(ci95=(0.0, 1.0), n_eff=0.0, design_effect=1.0, clusters=0)
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
    return ClusteredInterval(ci95=(lo, hi), n_eff=float(n_eff), design_effect=float(deff), clusters=int(n_clusters))


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
