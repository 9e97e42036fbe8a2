"""Scores shared by the attacks: AUC, ROC points, TPR at a fixed FPR (the intervals every row states are
:mod:`pfd.audit.intervals`).

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
from sklearn.metrics import roc_auc_score, roc_curve

from pfd.errors import PfdError

__all__ = ["auc", "oriented_auc", "roc_points", "tpr_at_fpr", "auc_standard_error"]


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
