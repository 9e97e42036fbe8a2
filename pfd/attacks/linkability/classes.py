"""Class-level linking: an attacker who reads each released class as a whole.

A release's labels group each class's ``K`` proxies, and all of them come from one source identity.
Every per-proxy attack (:mod:`~pfd.attacks.linkability.matching`, :mod:`~pfd.attacks.linkability.ranks`)
scores proxies one at a time; an attacker who looks at a class's ``K`` proxies together sees
patterns no single proxy shows. For each class and private identity this module computes two
profiles in one model's space, and each attack names one identity per class:

* the class **centroid** (the normalised mean of its proxies' unit embeddings) against the
  identity templates (``norm(Σ e)``, as Rank-1 Re-ID): the nearest, the farthest and the most
  orthogonal (smallest ``|cos|``) identity;
* the **rank spread**: the standard deviation, over the class's proxies, of the identity's rank
  among the ``N`` templates (by cosine and by ``|cos|``), and the identity whose rank varies the
  most or the least. A release that places each proxy's source at an independently drawn rank
  (the source jumps between ranks while every other identity, near a class's tight cluster of
  proxies, keeps its place) is linked by the most-varying rank; one that pins the source at one
  exact rank by the least-varying one.

:func:`class_link_test` scores the seven attacks (:data:`CLASS_ATTACKS`) and tests them together:
the statistic is the largest number of classes any of them links, and its null distribution is
exact by permutation (under the null the proxies carry nothing of their sources, so the class →
source assignment is a uniformly random injection into the ``N`` identities, and the named
identities, computed from the proxies alone, stay put). The family of seven is one figure of the
audit, so adding attacks here does not split the audit's level further.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import numpy as np
import torch

from pfd.attacks.linkability.matching import _as_tensor, _check_sources, _unit
from pfd.attacks.linkability.ranks import block_rows, identity_templates, injections, rank_blocks
from pfd.attacks.linkability.spread import ClassSpread
from pfd.errors import PfdError

__all__ = ["CLASS_ATTACKS", "class_groups", "named_identities", "class_link_test", "ClassAttackFigures", "ClassLinkTest",
           "AttackerClassLink"]


class ClassAttackFigures(TypedDict):
    """One class-level attack's classes linked, their share and its own permutation p-value."""

    count: int
    rate: float
    p: float


class ClassLinkTest(TypedDict):
    """:func:`class_link_test`, JSON-ready.

    Attributes:
        classes: Released classes; ``identities`` private identities; ``chance`` ``1 / identities``.
        attacks: Per attack (:data:`CLASS_ATTACKS`) its figures.
        best: The attack with the most classes linked; ``count`` and ``rate`` its figures.
        p: The p-value of the largest count (exact under the null); ``p_floor`` the smallest these
            draws reach, ``data_floor`` the smallest any number does; ``permutations`` the draws.
        null95: The null's 95th percentile of the best rate.
    """

    classes: int
    identities: int
    chance: float
    attacks: dict[str, ClassAttackFigures]
    best: str
    count: int
    rate: float
    p: float
    p_floor: float
    data_floor: float
    permutations: int
    null95: float


class AttackerClassLink(ClassLinkTest):
    """One attacker's :class:`ClassLinkTest` (``report.json``'s ``class_link`` entries), with how tight
    the released classes and the private identities are in its model
    (:func:`pfd.attacks.linkability.spread.class_spread`: ``proxies`` and ``private``)."""

    attacker: str
    spread: dict[str, ClassSpread]

#: The class-level attacks, in report order: ``name -> description``.
CLASS_ATTACKS: dict[str, str] = {
    "centroid_nearest": "the identity nearest the class centroid",
    "centroid_farthest": "the identity farthest from the class centroid",
    "centroid_orthogonal": "the identity most orthogonal to the class centroid",
    "spread_most_cos": "the identity whose rank (by cos) varies most across the class",
    "spread_least_cos": "the identity whose rank (by cos) varies least across the class",
    "spread_most_abs": "the identity whose rank (by |cos|) varies most across the class",
    "spread_least_abs": "the identity whose rank (by |cos|) varies least across the class",
}


def class_groups(proxy_source: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The released classes as the groups of proxies sharing a source (pfd writes one class per identity).

    Returns:
        ``(sources (G,), group of each proxy (q,))``.
    """
    return np.unique(np.asarray(proxy_source).ravel(), return_inverse=True)


def _pick(score: np.ndarray, rng: np.random.Generator, *, largest: bool) -> np.ndarray:
    """``(G, N)`` scores -> ``(G,)`` column of the largest (smallest) per row, ties broken at random."""
    s = score if largest else -score
    best = s.max(1, keepdims=True)
    tie = np.isclose(s, best, rtol=0.0, atol=1e-9)
    noise = rng.random(s.shape)  # a random order among the tied identities, not the identity order
    return np.argmax(np.where(tie, noise, -1.0), axis=1)


def named_identities(proxy_emb: Any, group: np.ndarray, private_emb: Any, private_labels: Any, *,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The identity each class-level attack names for each class.

    Args:
        proxy_emb: ``(q, D)`` proxy embeddings.
        group: ``(q,)`` class of each proxy in ``[0, G)``.
        private_emb: ``(g, D)`` private image embeddings.
        private_labels: ``(g,)`` their identities.
        seed: Seed of the tie-breaking.

    Returns:
        ``(named (V, G) column indices into identities, identities (N,))``, ``V`` in
        :data:`CLASS_ATTACKS` order.
    """
    group = np.asarray(group).ravel()
    lab = np.asarray(private_labels).ravel()
    templates, uniq = identity_templates(private_emb, lab)  # (N, D)
    q = _unit(_as_tensor(proxy_emb, "proxy embeddings").to(torch.float64))  # (q, D)
    n_groups = int(group.max()) + 1 if group.size else 0
    centroid = _unit(torch.zeros(n_groups, q.shape[1], dtype=q.dtype).index_add_(0, torch.as_tensor(group), q))  # (G, D)
    rows = np.argsort(group, kind="stable")  # proxies class by class, in their order
    bounds = np.searchsorted(group[rows], np.arange(n_groups + 1))  # (G + 1,) each class's slice of rows
    rng = np.random.default_rng([int(seed), 13])
    named = np.zeros((len(CLASS_ATTACKS), n_groups), dtype=np.int64)
    # Classes a block at a time, so that the (classes × identities) scores and the proxies' ranks
    # are never held whole (the tie-breaking draws follow the blocks).
    step = max(1, block_rows(len(uniq)) * max(n_groups, 1) // max(len(group), 1))
    for lo in range(0, n_groups, step):
        hi = min(n_groups, lo + step)
        cos = (centroid[lo:hi] @ templates.T).numpy()  # (c, N)
        mine = rows[bounds[lo] : bounds[hi]]
        spread = {}
        for by in ("cos", "abs"):
            ranks = next(rank_blocks(q[mine], templates, by=by, rows=max(len(mine), 1)), (0, np.zeros((0, len(uniq)), np.int64)))[1]
            s = np.zeros((hi - lo, len(uniq)))
            for g in range(lo, hi):
                s[g - lo] = ranks[bounds[g] - bounds[lo] : bounds[g + 1] - bounds[lo]].astype(np.float64).std(0)
            spread[by] = s
        named[:, lo:hi] = np.stack([
            _pick(cos, rng, largest=True), _pick(cos, rng, largest=False), _pick(-np.abs(cos), rng, largest=True),
            _pick(spread["cos"], rng, largest=True), _pick(spread["cos"], rng, largest=False),
            _pick(spread["abs"], rng, largest=True), _pick(spread["abs"], rng, largest=False),
        ])  # fmt: skip
    return named, uniq


def class_link_test(proxy_emb: Any, proxy_source: Any, private_emb: Any, private_labels: Any, *,
                    permutations: int = 20000, seed: int = 0) -> ClassLinkTest:
    """Score the class-level attacks and test them together (module docstring), JSON-ready.

    Args:
        proxy_emb: ``(q, D)`` proxy embeddings.
        proxy_source: ``(q,)`` each proxy's source identity (its class's source).
        private_emb: ``(g, D)`` private image embeddings.
        private_labels: ``(g,)`` their identities.
        permutations: Random class → identity injections of the null.
        seed: Seed of the tie-breaking and the permutations.

    Returns:
        The :class:`ClassLinkTest`.

    Raises:
        PfdError: Fewer than two identities, or sources outside the private labels.
    """
    src = np.asarray(proxy_source).ravel()
    lab = np.asarray(private_labels).ravel()
    _check_sources(src, lab, len(proxy_emb))
    sources, group = class_groups(src)
    named, uniq = named_identities(proxy_emb, group, private_emb, lab, seed=seed)
    n_ids, n_groups = len(uniq), len(sources)
    if n_ids < 2:
        raise PfdError(f"class-level linking needs at least 2 private identities, got {n_ids}")
    truth = np.searchsorted(uniq, sources)  # (G,)
    counts = (named == truth[None, :]).sum(1)  # (V,)
    all_inj = injections((int(seed), 17), n_ids, n_groups, permutations)  # (P, G) random injections
    exceed = np.zeros(len(counts) + 1, dtype=np.int64)  # per attack, then the best
    null_best = []
    done, chunk = 0, max(1, 1_000_000 // max(n_ids * len(counts), 1))
    while done < permutations:
        p_n = min(chunk, permutations - done)
        inj = all_inj[done : done + p_n]  # (P, G)
        c = (named[None, :, :] == inj[:, None, :]).sum(2)  # (P, V)
        exceed[:-1] += (c >= counts[None, :]).sum(0)
        exceed[-1] += int((c.max(1) >= counts.max()).sum())
        null_best.append(c.max(1))
        done += p_n
    p_all = (1 + exceed) / (1 + permutations)
    log_arr = math.lgamma(n_ids + 1) - math.lgamma(n_ids - n_groups + 1)
    best = int(np.argmax(counts))
    nb = np.concatenate(null_best) if null_best else np.zeros(1)
    return ClassLinkTest(
        classes=int(n_groups), identities=int(n_ids), chance=1.0 / n_ids,
        attacks={name: ClassAttackFigures(count=int(counts[v]), rate=float(counts[v] / n_groups), p=float(p_all[v]))
                 for v, name in enumerate(CLASS_ATTACKS)},
        best=list(CLASS_ATTACKS)[best], count=int(counts[best]), rate=float(counts[best] / n_groups),
        p=float(p_all[-1]), p_floor=1.0 / (1 + permutations),
        data_floor=math.exp(-log_arr) if log_arr < 700 else 0.0, permutations=int(permutations),
        null95=float(np.quantile(nb, 0.95) / n_groups),
    )  # fmt: skip
