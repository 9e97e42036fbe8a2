"""Identity-level geometric membership inference (Öztürk & Marcel 2026, §3).

An auditor queries a face-recognition model with ``k >= 2`` images of an identity and gets the
L2-normalised embeddings ``e_1..e_k`` (§3.1). Four per-identity statistics of that cluster
(§3.2) carry membership information because angular-margin training pulls *training*
identities into tighter clusters; each is oriented a priori so that higher = member:

* **PairCos**  ``s̄ = C(k,2)^{-1} Σ_{i<j} cos(e_i, e_j)``
* **vMF κ**    ``κ̂₀ = R̄ (d − R̄²) / (1 − R̄²)``, ``R̄ = ‖k^{-1} Σ e_i‖`` (Banerjee et al. 2005);
  ``d`` is the embedding dimension of the data (512 in the paper).
* **PenLogit** ``ℓ̄ = k^{-1} Σ_i s·g(cos∠(e_i, ŵ_{\\i}), m)`` with the leave-one-out prototype
  ``ŵ_{\\i}`` = normalised mean of the other ``k−1`` embeddings and ``g`` the head's
  penalisation (:mod:`pfd.nn.heads`).
* **ProtoCE**  ``−L_y`` with prototypes ``ŵ_y = μ_y/‖μ_y‖`` and every other identity of the
  evaluation set as a negative class.

**Reading of ProtoCE.** §3.2 calls ``L_y`` "a surrogate of the training loss" and writes it with
``cos θ_y`` and ``cos θ_j`` without saying from which vector θ is measured. Measuring it from the
identity's own mean embedding would make ``cos θ_y = cos∠(μ_y, ŵ_y) = 1`` for every identity,
so the statistic would ignore the cluster's own spread; the training loss it stands in for is
a per-sample cross-entropy. We therefore measure θ from each *sample*:
``θ_y = ∠(e_i, ŵ_y)``, ``θ_j = ∠(e_i, ŵ_j)``, and ``L_y`` is the mean of the per-sample
cross-entropies over the identity's ``k`` images (the prototype ``ŵ_y`` includes ``e_i``, as
written in the paper; only PenLogit is leave-one-out).

Embeddings are unit vectors, so the norm-dependent heads lose their norm input: AdaFace's g is
used with ẑ = 0 (average quality, i.e. the CosFace form) and MagFace's with the fixed ``margin``
passed in (the paper trains MagFace with m ∈ [0.45, 0.8]; pass the value to audit at).

The AUC helpers :func:`~pfd.attacks.metrics.oriented_auc` and
:func:`~pfd.attacks.metrics.tpr_at_fpr` live in :mod:`pfd.attacks.metrics`, shared with the other
attacks.

All statistics are computed in float64 with segment sums (``index_add``/``bincount``), with
no Python loop over identities; ProtoCE is streamed over rows so that memory is
``chunk × C`` for ``C`` identities.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from pfd.attacks.membership.fusion import fusion_cv
from pfd.attacks.metrics import auc, auc_standard_error, oriented_auc, roc_points, tpr_at_fpr
from pfd.attacks.membership.permutation import max_auc_permutation_test
from pfd.errors import PfdError
from pfd.nn.heads import penalty
from pfd.attacks.membership.reference import group_separation

__all__ = [
    "STATISTICS",
    "pair_cos",
    "vmf_kappa",
    "pen_logit",
    "proto_ce",
    "identity_statistics",
    "membership_report",
]

#: Statistic names, in the order used for the fusion features.
STATISTICS: tuple[str, ...] = ("pair_cos", "vmf_kappa", "pen_logit", "proto_ce")

#: Floor for ``1 − R̄²`` in κ̂ and for prototype norms: a cluster of identical embeddings gets a
#: huge but finite κ (≈ d·1e18) instead of inf, so that standardisation and AUC still work.
_TINY = 1e-18

Penalty = Callable[..., torch.Tensor]


def _name(label: Any, names: Sequence[str] | None) -> str:
    """Identity name of a label for error messages (the label itself when unknown)."""
    try:
        return str(names[int(label)]) if names is not None else str(label)
    except (IndexError, TypeError, ValueError):
        return str(label)


class _Clusters:
    """Embeddings grouped by identity: the shared preprocessing of every statistic.

    Attributes:
        e: ``(n, D)`` float64 embeddings, re-normalised (removes float32 rounding of the norm).
        inv: ``(n,)`` int64 identity index of each row, in ``np.unique(labels)`` order.
        k: ``(C,)`` images per identity (float64).
        s: ``(C, D)`` per-identity sums ``Σ e_i``.
    """

    def __init__(self, emb: Any, labels: Any, names: Sequence[str] | None) -> None:
        e = torch.as_tensor(np.asarray(emb) if not torch.is_tensor(emb) else emb).detach()
        e = e.to(torch.float64).cpu()
        lab = np.asarray(labels.cpu() if torch.is_tensor(labels) else labels).ravel()
        if e.ndim != 2 or e.shape[0] != lab.shape[0]:
            raise PfdError(
                f"embeddings {tuple(e.shape)} and labels ({lab.shape[0]},) do not match; "
                "pass emb of shape (n, D) and one label per row"
            )
        if not torch.isfinite(e).all():
            raise PfdError("embeddings contain NaN or inf; re-run the embedder (check the model and images)")
        norm = e.norm(dim=1, keepdim=True)  # (n, 1)
        if (norm == 0).any():
            raise PfdError(f"embedding row {int((norm[:, 0] == 0).nonzero()[0])} is all zeros; check that image")
        uniq, inv, counts = np.unique(lab, return_inverse=True, return_counts=True)
        if (counts < 2).any():
            bad = uniq[int(np.argmin(counts))]
            name = _name(bad, names)
            raise PfdError(
                f"identity {name!r} has {int(counts.min())} image(s); the membership statistics need "
                "k >= 2 images per identity: add images or drop that identity"
            )
        self.uniq = uniq
        self.e = e / norm
        self.inv = torch.as_tensor(inv, dtype=torch.int64)
        self.k = torch.as_tensor(counts, dtype=torch.float64)
        self.s = torch.zeros(len(uniq), e.shape[1], dtype=torch.float64).index_add_(0, self.inv, self.e)

    @property
    def dim(self) -> int:
        return int(self.e.shape[1])

    def segment_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Per-identity mean of a per-row quantity ``x (n,)`` -> ``(C,)``."""
        return torch.zeros(len(self.k), dtype=torch.float64).index_add_(0, self.inv, x) / self.k


def _resolve_g(g: Penalty | str) -> Penalty:
    if not isinstance(g, str):
        return g
    try:
        return penalty(g)
    except ValueError as err:  # unknown head name: user input, so a PfdError
        raise PfdError(f"{err} (--head)") from None


def _pair_cos(c: _Clusters) -> torch.Tensor:
    # Σ_{i<j} cos(e_i, e_j) = (‖Σ e_i‖² − Σ‖e_i‖²) / 2 and Σ‖e_i‖² = k for unit vectors.
    return ((c.s * c.s).sum(1) - c.k) / (c.k * (c.k - 1))


def _vmf_kappa(c: _Clusters) -> torch.Tensor:
    r_bar = c.s.norm(dim=1) / c.k  # (C,)
    # 1 − R̄² equals the inertia k^{-1} Σ‖e_i − μ‖² for unit vectors; computing it from the
    # residuals avoids the cancellation of 1 − R̄² when R̄ → 1 (tight clusters).
    resid = c.e - (c.s / c.k[:, None])[c.inv]  # (n, D)
    inertia = c.segment_mean((resid * resid).sum(1))  # (C,)
    d = c.dim
    return r_bar * (d - r_bar * r_bar) / inertia.clamp_min(_TINY)


def _pen_logit(c: _Clusters, g: Penalty, scale: float, margin: float) -> torch.Tensor:
    loo = c.s[c.inv] - c.e  # (n, D) sum of the other k−1 embeddings
    cos = (c.e * loo).sum(1) / loo.norm(dim=1).clamp_min(_TINY)  # (n,)
    return c.segment_mean(scale * g(cos, margin))


def _proto_ce(
    c: _Clusters, g: Penalty, scale: float, margin: float, chunk: int, device: str | torch.device | None = None
) -> torch.Tensor:
    if chunk < 1:
        raise PfdError(f"chunk must be >= 1, got {chunk}")
    dev = torch.device(device) if device is not None else torch.device("cpu")
    w = (c.s / c.s.norm(dim=1, keepdim=True).clamp_min(_TINY)).to(dev)  # (C, D) prototypes ŵ_y
    loss = torch.empty(c.e.shape[0], dtype=torch.float64)  # (n,) per-sample CE
    for lo in range(0, c.e.shape[0], chunk):
        rows = slice(lo, lo + chunk)
        y = c.inv[rows, None].to(dev)  # (b, 1)
        cos = c.e[rows].to(dev) @ w.T  # (b, C) cos θ_c
        target = scale * g(cos.gather(1, y), margin)  # (b, 1) s·g(cos θ_y, m)
        logits = (scale * cos).scatter_(1, y, target)  # (b, C)
        loss[rows] = (torch.logsumexp(logits, dim=1) - target[:, 0]).cpu()
    return -c.segment_mean(loss)


def pair_cos(emb: Any, labels: Any, *, names: Sequence[str] | None = None) -> np.ndarray:
    """PairCos: mean pairwise cosine within each identity (geometric MIA §3.2).

    ``s̄_y = C(k,2)^{-1} Σ_{i<j} cos(e_i, e_j)``, computed as ``(‖Σe_i‖² − k) / (k(k−1))``.

    Args:
        emb: ``(n, D)`` embeddings (re-normalised internally), numpy or torch.
        labels: ``(n,)`` identity labels.
        names: Optional label -> identity name, used in error messages.

    Returns:
        ``(C,)`` float64, one value per identity in ``np.unique(labels)`` order.

    Raises:
        PfdError: If shapes mismatch, values are not finite, or an identity has k < 2.
    """
    return _pair_cos(_Clusters(emb, labels, names)).numpy()


def vmf_kappa(emb: Any, labels: Any, *, names: Sequence[str] | None = None) -> np.ndarray:
    """vMF concentration κ̂₀ (Banerjee et al. closed form; geometric MIA §3.2).

    ``κ̂₀ = R̄(d − R̄²)/(1 − R̄²)``, ``R̄ = ‖k^{-1}Σe_i‖``, with ``d = emb.shape[1]`` and
    ``1 − R̄²`` computed as the cluster inertia ``k^{-1}Σ‖e_i − μ‖²`` (same value, no
    cancellation as ``R̄ → 1``; floored at 1e-18). κ̂₀ is strictly decreasing in the inertia,
    so both rank identities identically (the paper's remark).

    Args:
        emb: ``(n, D)`` embeddings.
        labels: ``(n,)`` identity labels.
        names: Optional label -> identity name for error messages.

    Returns:
        ``(C,)`` float64 in ``np.unique(labels)`` order.

    Raises:
        PfdError: As :func:`pair_cos`.
    """
    return _vmf_kappa(_Clusters(emb, labels, names)).numpy()


def pen_logit(
    emb: Any,
    labels: Any,
    *,
    g: Penalty | str = "arcface",
    scale: float = 64.0,
    margin: float = 0.5,
    names: Sequence[str] | None = None,
) -> np.ndarray:
    """PenLogit: mean leave-one-out margin-penalised logit (geometric MIA §3.2).

    ``ℓ_i = s·g(cos∠(e_i, ŵ_{\\i}), m)``, ``ŵ_{\\i} = ē_{\\i}/‖ē_{\\i}‖`` the normalised mean of the
    other ``k−1`` embeddings of the identity; the statistic is ``ℓ̄ = k^{-1}Σ_i ℓ_i``.

    Args:
        emb: ``(n, D)`` embeddings.
        labels: ``(n,)`` identity labels.
        g: Penalisation ``g(cos, m)`` or a head name for :func:`pfd.nn.heads.penalty`.
        scale: Loss-head scale ``s``.
        margin: Loss-head margin ``m``.
        names: Optional label -> identity name for error messages.

    Returns:
        ``(C,)`` float64 in ``np.unique(labels)`` order.

    Raises:
        PfdError: As :func:`pair_cos`.
    """
    return _pen_logit(_Clusters(emb, labels, names), _resolve_g(g), scale, margin).numpy()


def proto_ce(
    emb: Any,
    labels: Any,
    *,
    g: Penalty | str = "arcface",
    scale: float = 64.0,
    margin: float = 0.5,
    chunk: int = 1024,
    device: str | torch.device | None = None,
    names: Sequence[str] | None = None,
) -> np.ndarray:
    """ProtoCE: negative prototype softmax cross-entropy (geometric MIA §3.2), reported as ``−L_y``.

    With prototypes ``ŵ_c = μ_c/‖μ_c‖`` of every identity in the evaluation set, for each
    embedding ``e_i`` of identity ``y``::

        L(e_i) = −log  exp(s·g(cos θ_y, m)) / (exp(s·g(cos θ_y, m)) + Σ_{j≠y} exp(s·cos θ_j)),
        cos θ_c = ⟨e_i, ŵ_c⟩,                 L_y = k^{-1} Σ_i L(e_i)

    (θ measured from each sample; see the module docstring for why). Rows are streamed in
    chunks, so memory is ``chunk × C``. The value depends on the identity pool, so compare
    members and non-members within one pool.

    Args:
        emb: ``(n, D)`` embeddings.
        labels: ``(n,)`` identity labels; all identities present form the pool.
        g: Penalisation or head name.
        scale: ``s``.
        margin: ``m``.
        chunk: Rows per block of the ``(chunk, C)`` cosine matrix.
        device: Where the ``O(n·C·D)`` products run (default CPU), e.g. ``"cuda"``.
        names: Optional label -> identity name for error messages.

    Returns:
        ``(C,)`` float64 ``−L_y`` in ``np.unique(labels)`` order (higher = member).

    Raises:
        PfdError: As :func:`pair_cos`, or if ``chunk < 1``.
    """
    return _proto_ce(_Clusters(emb, labels, names), _resolve_g(g), scale, margin, chunk, device).numpy()


def identity_statistics(
    emb: Any,
    labels: Any,
    *,
    head: Penalty | str = "arcface",
    scale: float = 64.0,
    margin: float = 0.5,
    chunk: int = 1024,
    device: str | torch.device | None = None,
    names: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """All four statistics of §3.2 for every identity, sharing one preprocessing pass.

    Args:
        emb: ``(n, D)`` L2-normalised embeddings (numpy or torch; re-normalised in float64).
        labels: ``(n,)`` identity labels; every identity needs ``k >= 2`` rows.
        head: Head name (``arcface``, ``cosface``, ``adaface``, ``magface``) or a ``g(cos, m)``.
        scale: Head scale ``s`` (paper: 64).
        margin: Head margin ``m`` (ArcFace 0.5, CosFace 0.4).
        chunk: Row chunk of ProtoCE (memory ``chunk × C`` float64).
        device: Device of ProtoCE's products (default CPU); the rest is ``O(n·D)``.
        names: Optional label -> identity name for error messages.

    Returns:
        ``{name: (C,) float64}`` for ``name in STATISTICS``, identities in
        ``np.unique(labels)`` order.

    Raises:
        PfdError: If shapes mismatch, values are not finite, or an identity has k < 2.
    """
    c = _Clusters(emb, labels, names)
    g = _resolve_g(head)
    out = {
        "pair_cos": _pair_cos(c),
        "vmf_kappa": _vmf_kappa(c),
        "pen_logit": _pen_logit(c, g, scale, margin),
        "proto_ce": _proto_ce(c, g, scale, margin, chunk, device),
    }
    return {k: v.numpy() for k, v in out.items()}


def _statistic_summary(mem: np.ndarray, non: np.ndarray) -> dict[str, Any]:
    a = auc(mem, non)
    a_or, direction = oriented_auc(mem, non)
    se = auc_standard_error(a_or, mem.size, non.size)
    roc = roc_points(mem, non, direction=direction)
    return {
        "auc": a_or,
        "direction": direction,
        "auc_a_priori": a,
        "auc_se": se,
        "auc_ci95": (max(0.0, a_or - 1.96 * se), min(1.0, a_or + 1.96 * se)),
        "auc_kind": "oriented max(A, 1-A): description, not a test (see verdict)",
        "chance": 0.5,
        "tpr_at_1pct_fpr": tpr_at_fpr(mem, non, 0.01, direction=direction),
        "tpr_at_0.1pct_fpr": tpr_at_fpr(mem, non, 0.001, direction=direction),
        "tpr_a_priori": {"1%": tpr_at_fpr(mem, non, 0.01), "0.1%": tpr_at_fpr(mem, non, 0.001)},
        "roc": {k: v.tolist() for k, v in roc.items()},
    }


def membership_report(
    member_emb: Any,
    member_labels: Any,
    nonmember_emb: Any,
    nonmember_labels: Any,
    *,
    head: Penalty | str = "arcface",
    scale: float = 64.0,
    margin: float = 0.5,
    folds: int = 5,
    seed: int = 0,
    permutations: int = 2000,
    chunk: int = 1024,
    device: str | torch.device | None = None,
    member_names: Sequence[str] | None = None,
    nonmember_names: Sequence[str] | None = None,
    reference_member_emb: Any = None,
    reference_nonmember_emb: Any = None,
) -> dict[str, Any]:
    """Identity-level geometric MIA: four statistics, their AUCs and TPRs, and the fused classifier.

    Statistics are computed on the *joint* pool of member and non-member identities, so that
    ProtoCE's negatives are the same set for both groups (the pool-composition confound noted
    in §3.2 then cancels). PairCos, κ and PenLogit do not depend on the pool.

    **Verdict** (``verdict``): :func:`pfd.attacks.membership.permutation.max_auc_permutation_test` over the
    four statistics in their a-priori direction (higher = member) and the fused classifier's
    out-of-fold score, with ``permutations`` label permutations; LEAKS iff ``p <= 0.05``. Its
    false-LEAKS rate under the null is at most 5 % (tested by simulation). It also carries TPR at
    1 % and 0.1 % FPR of the selected score (a-priori direction).

    **Reference check** (``reference``, when the same images embedded by a reference model that
    trained on neither group are given): :func:`pfd.attacks.membership.reference.group_separation` on the
    reference's statistics. When the reference already separates the groups, they are not
    exchangeable and a LEAKS verdict is reported as inconclusive (``leaks`` False,
    ``inconclusive`` True, ``unadjusted_leaks`` True); see :mod:`pfd.attacks.membership.reference` for what
    the check can and cannot catch.

    **Description** (not tests): for each statistic ``auc`` is *oriented* (``max(A, 1 − A)``, as
    in the paper's tables) with its ``direction``, beside the a-priori ``auc_a_priori`` (< 0.5
    means members were *looser*, usually a domain mismatch of the non-members), a Hanley-McNeil
    interval of the oriented value, TPR at 1 % and 0.1 % FPR in the oriented direction (with the
    ``resolvable`` flag) and in the a-priori one, and ROC points. The oriented figures are chosen
    after looking at the data, so they are biased upward under the null. The fusion block (§5.4)
    is :func:`pfd.attacks.membership.fusion.fusion_cv`; it is skipped, with a reason, when either group has
    fewer identities than ``folds + 1``.

    Args:
        member_emb: ``(n_m, D)`` embeddings of member identities.
        member_labels: ``(n_m,)`` their identity labels.
        nonmember_emb: ``(n_n, D)`` embeddings of non-member identities (same D).
        nonmember_labels: ``(n_n,)`` their labels (label values may overlap the members').
        head: Head name or ``g``; ``scale``, ``margin``: head hyper-parameters.
        folds: Cross-validation folds of the fusion classifier.
        seed: Seed of the fusion classifier, its fold split and the permutations.
        permutations: Label permutations of the verdict's null.
        chunk: Row chunk of ProtoCE.
        device: Device of ProtoCE's products (default CPU).
        member_names: Optional label -> name for members (error messages).
        nonmember_names: Optional label -> name for non-members.
        reference_member_emb: Optional ``(n_m, D')`` embeddings of the same member images (same
            order) by a reference model that trained on neither group.
        reference_nonmember_emb: The same for the non-member images (required with the former).

    Returns:
        A JSON-ready dict: ``counts``, ``config``, ``statistics`` (per statistic as above),
        ``scores`` (per statistic ``{"members": [...], "nonmembers": [...]}`` for density
        plots), ``best_single`` (oriented, description), ``fusion``, ``verdict`` and, with a
        reference model, ``reference``.

    Raises:
        PfdError: For mismatched dimensions, an identity with fewer than 2 images, or reference
            embeddings of other images than the audited ones.
    """
    mem = _Clusters(member_emb, member_labels, member_names)
    non = _Clusters(nonmember_emb, nonmember_labels, nonmember_names)
    if mem.dim != non.dim:
        raise PfdError(f"member embeddings have D={mem.dim} but non-members D={non.dim}; embed both with the same model")
    n_m, n_n = len(mem.uniq), len(non.uniq)
    # Joint pool: non-member identity indices follow the member ones.
    emb = torch.cat([mem.e, non.e])
    lab = torch.cat([mem.inv, non.inv + n_m]).numpy()
    stats = identity_statistics(emb, lab, head=head, scale=scale, margin=margin, chunk=chunk, device=device)
    is_member = np.r_[np.ones(n_m, dtype=bool), np.zeros(n_n, dtype=bool)]

    per_stat = {name: _statistic_summary(v[is_member], v[~is_member]) for name, v in stats.items()}
    best = max(STATISTICS, key=lambda s: per_stat[s]["auc"])
    if min(n_m, n_n) > folds:
        features = np.stack([stats[s] for s in STATISTICS], axis=1)  # (C, 4)
        fusion: dict[str, Any] = fusion_cv(features, is_member, folds=folds, seed=seed, feature_names=STATISTICS)
    else:
        fusion = {"skipped": f"fusion needs more than {folds} member and non-member identities (have {n_m}, {n_n})"}
    tested = {name: stats[name] for name in STATISTICS}
    if "oof_score" in fusion:
        tested["fusion"] = np.asarray(fusion["oof_score"])
    test = max_auc_permutation_test(tested, is_member, permutations=permutations, seed=seed)
    chosen = tested[test["statistic"]]
    test["tpr_at_1pct_fpr"] = tpr_at_fpr(chosen[is_member], chosen[~is_member], 0.01)
    test["tpr_at_0.1pct_fpr"] = tpr_at_fpr(chosen[is_member], chosen[~is_member], 0.001)
    test["reversed"] = [n for n in STATISTICS if per_stat[n]["auc_a_priori"] < 0.5 - 1e-12]
    reference = None
    if (reference_member_emb is None) != (reference_nonmember_emb is None):
        raise PfdError("reference model: pass the embeddings of both the member and the non-member images")
    if reference_member_emb is not None:
        reference = _reference_check(reference_member_emb, reference_nonmember_emb, mem, non, is_member, head=head,
                                     scale=scale, margin=margin, chunk=chunk, device=device, seed=seed,
                                     permutations=permutations)
        if reference["separates"]:
            test["unadjusted_leaks"] = test["leaks"]
            test["inconclusive"] = bool(test["leaks"])
            test["leaks"] = False
    out = {
        "counts": {
            "members": n_m,
            "nonmembers": n_n,
            "member_images": int(mem.e.shape[0]),
            "nonmember_images": int(non.e.shape[0]),
            "dim": mem.dim,
        },
        "config": {"head": head if isinstance(head, str) else getattr(head, "__name__", "custom"),
                   "scale": scale, "margin": margin, "folds": folds, "seed": seed, "permutations": permutations,
                   "pool": "joint"},
        "statistics": per_stat,
        "scores": {s: {"members": v[is_member].tolist(), "nonmembers": v[~is_member].tolist()} for s, v in stats.items()},
        "best_single": {"statistic": best, "auc": per_stat[best]["auc"]},
        "fusion": fusion,
        "verdict": test,
    }
    if reference is not None:
        out["reference"] = reference
    return out


def _reference_check(ref_m: Any, ref_n: Any, mem: _Clusters, non: _Clusters, is_member: np.ndarray, *,
                     head: Penalty | str, scale: float, margin: float, chunk: int, device: Any, seed: int,
                     permutations: int) -> dict[str, Any]:
    """Statistics of the same images in the reference model and :func:`group_separation` on them."""
    for which, r, a in (("member", ref_m, mem), ("non-member", ref_n, non)):
        if len(r) != a.e.shape[0]:
            raise PfdError(f"reference model: {len(r)} {which} embeddings but the audited model has "
                           f"{a.e.shape[0]}; embed the same images with both models")
    # Same images in the same order: the audited model's identity index of each row applies.
    rm = _Clusters(ref_m, mem.inv.numpy(), None)
    rn = _Clusters(ref_n, non.inv.numpy(), None)
    if rm.dim != rn.dim:
        raise PfdError(f"reference model: member embeddings have D={rm.dim} but non-members D={rn.dim}")
    n_m = len(mem.uniq)
    emb = torch.cat([rm.e, rn.e])
    lab = torch.cat([rm.inv, rn.inv + n_m]).numpy()
    stats = identity_statistics(emb, lab, head=head, scale=scale, margin=margin, chunk=chunk, device=device)
    return group_separation(stats, is_member, permutations=permutations, seed=seed)
