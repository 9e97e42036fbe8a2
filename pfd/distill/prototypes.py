"""Eq. 8's prototypes: per-identity K-means of the (rotated) private embeddings, and the raw images nearest them.

* :func:`kmeans_prototypes`: ``P`` (NK × D) on ``E_ort = E Mᵀ``, which RTA's proxies are distilled
  towards (eq. 8-9);
* :func:`uniform_source_ranks`: pfd's correction of P (not in the paper) that puts each
  prototype's source at a random rank among the identity templates, so that the adapted model
  (the insider) sees each proxy's source rank like any identity's;
* :func:`raw_selection`: for the methods that release real images (``raw`` and the baselines),
  the K images of each identity nearest its K prototypes, each image once.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import torch

from pfd.distill.delink import rank_target
from pfd.errors import PfdError
from pfd.distill.lighting import allocate_proxies

__all__ = ["kmeans_prototypes", "lighting_prototypes", "uniform_source_ranks", "raw_selection"]


def kmeans_prototypes(
    emb_rot: torch.Tensor | np.ndarray,
    labels: torch.Tensor | np.ndarray,
    *,
    k: int,
    seed: int = 0,
    n_init: int = 10,
    num_identities: int | None = None,
    identities: Sequence[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-identity K-means prototypes of the rotated embeddings (eq. 8's P).

    For each identity i, ``sklearn.cluster.KMeans(n_clusters=k, n_init=n_init,
    random_state=seed)`` runs on that identity's rows of ``E_ort = E Mᵀ`` (float64); the
    centres are L2-normalised. Rows of P are identity-major (identity 0's K prototypes, then
    identity 1's, ...). Within an identity the K centres are ordered by cluster size
    (largest first), ties broken by the smallest sample index in the cluster, so the order
    depends only on the data and the seed, never on K-means' arbitrary cluster numbering.

    Args:
        emb_rot: Rotated normalised embeddings ``(n, D)``.
        labels: Identity labels ``(n,)`` in ``[0, N)``.
        k: Prototypes per identity K (= proxy images per class).
        seed: K-means seed.
        n_init: K-means restarts.
        num_identities: N (default ``labels.max() + 1``).
        identities: Identity names, only for error messages.

    Returns:
        ``(P (N·K, D) float32 normalised, proto_identity (N·K,) int64)``.

    Raises:
        PfdError: If an identity has fewer than K images.
    """
    x, y, n_id = _prepare(emb_rot, labels, k, num_identities, identities)
    protos = np.empty((n_id * k, x.shape[1]), dtype=np.float64)
    for i in range(n_id):
        idx = np.flatnonzero(y == i)  # ascending sample indices
        protos[i * k : (i + 1) * k] = _centres(x, idx, k, seed=seed, n_init=n_init)
    proto_identity = torch.arange(n_id, dtype=torch.int64).repeat_interleave(k)
    return _normalised(protos), proto_identity


def lighting_prototypes(
    emb_rot: torch.Tensor | np.ndarray,
    labels: torch.Tensor | np.ndarray,
    groups: np.ndarray,
    *,
    k: int,
    seed: int = 0,
    n_init: int = 10,
    num_identities: int | None = None,
    identities: Sequence[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 8's per-identity prototypes spread over lighting groups (pfd's lighting lever, :mod:`pfd.distill.lighting`).

    Each identity's K prototypes are shared among the lighting groups of its images in proportion
    to its images in each (:func:`pfd.distill.lighting.allocate_proxies`), and the ``k_g``
    prototypes of group g are the K-means centres of the identity's rows of ``E_ort`` in that group
    (ordered as in :func:`kmeans_prototypes`): its proxies span the lighting conditions of its
    source's images instead of following the identity's dominant ones. P stays identity-major
    (identity 0's K rows, then identity 1's, ...); within an identity, groups in ascending order.

    Args:
        emb_rot: Rotated normalised embeddings ``(n, D)``.
        labels: Identity labels ``(n,)`` in ``[0, N)``.
        groups: Lighting group of each image ``(n,)`` (:func:`pfd.distill.lighting.lighting_clusters`).
        k: Prototypes per identity K.
        seed: K-means seed.
        n_init: K-means restarts.
        num_identities: N (default ``labels.max() + 1``).
        identities: Identity names, only for error messages.

    Returns:
        ``(P (N·K, D), proto_identity (N·K,), proto_group (N·K,))``.

    Raises:
        PfdError: If an identity has fewer than K images.
    """
    x, y, n_id = _prepare(emb_rot, labels, k, num_identities, identities)
    g = np.asarray(groups, dtype=np.int64)
    n_groups = int(g.max()) + 1 if g.size else 1
    protos = np.empty((n_id * k, x.shape[1]), dtype=np.float64)
    proto_group = np.empty(n_id * k, dtype=np.int64)
    for i in range(n_id):
        idx = np.flatnonzero(y == i)
        share = allocate_proxies(np.bincount(g[idx], minlength=n_groups), k)  # (C,)
        row = i * k
        for c in np.flatnonzero(share):
            protos[row : row + share[c]] = _centres(x, idx[g[idx] == c], int(share[c]), seed=seed, n_init=n_init)
            proto_group[row : row + share[c]] = c
            row += int(share[c])
    proto_identity = torch.arange(n_id, dtype=torch.int64).repeat_interleave(k)
    return _normalised(protos), proto_identity, torch.from_numpy(proto_group)


def _prepare(emb_rot: torch.Tensor | np.ndarray, labels: torch.Tensor | np.ndarray, k: int, num_identities: int | None,
             identities: Sequence[str] | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Embeddings as float64, labels as int64 and N, after checking that every identity has K images."""
    x = emb_rot.detach().cpu().double().numpy() if isinstance(emb_rot, torch.Tensor) else np.asarray(emb_rot, np.float64)
    y = labels.cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    y = y.astype(np.int64)
    n_id = int(num_identities) if num_identities is not None else int(y.max()) + 1
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    counts = np.bincount(y, minlength=n_id)
    for i in range(n_id):
        if counts[i] < k:
            who = f"identity {i}" + (f" ({identities[i]!r})" if identities is not None else "")
            raise PfdError(
                f"{who}: {counts[i]} images, fewer than K = {k} proxies per class; "
                f"drop identities with fewer than {k} images (min_images = {k}) or lower rta.ipc"
            )
    return x, y, n_id


def _centres(x: np.ndarray, idx: np.ndarray, k: int, *, seed: int, n_init: int) -> np.ndarray:
    """K-means centres ``(k, D)`` of the rows ``idx`` (ascending) of ``x``: by cluster size, then first member."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    # One identity is a few dozen points: OpenMP/BLAS threads only add start-up cost
    # (~6x slower here) and one thread makes the result independent of the core count.
    with warnings.catch_warnings(), threadpool_limits(1):
        # Duplicate embeddings give fewer distinct clusters than K; the centres still exist.
        warnings.simplefilter("ignore")
        km = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(x[idx])
    assign = km.labels_
    size = np.bincount(assign, minlength=k)
    first = np.array([idx[assign == c].min() if size[c] else np.iinfo(np.int64).max for c in range(k)])
    order = np.lexsort((first, -size))  # size descending, then first member ascending
    return km.cluster_centers_[order]


def _normalised(protos: np.ndarray) -> torch.Tensor:
    norms = np.linalg.norm(protos, axis=1, keepdims=True)
    return torch.from_numpy(protos / np.maximum(norms, 1e-12)).float()


def uniform_source_ranks(
    P: torch.Tensor, proto_identity: torch.Tensor, templates: torch.Tensor, ranks: torch.Tensor,
    jitter: torch.Tensor | None = None, *, iterations: int = 8,
) -> torch.Tensor:
    """Move each prototype so that its own identity's template ranks at a random place among all templates.

    Why (not in the paper). OGP's eq. 3 drives ``|cos(M e, e)|`` below its margin for every
    private embedding, while the cosines of ``M e`` to *other* identities keep their natural
    spread; RTA's proxies follow the prototypes, so under the adapted model a proxy's source is the
    identity most orthogonal to it (an attacker naming the identity of smallest ``|cos|`` links it,
    and the source's rank is not uniform). Here each prototype row ``p`` (identity ``i``) gets
    its class's target rank ``r`` (the de-linking term's design, :func:`pfd.distill.delink.target_ranks`:
    one rank per identity, each rank K times) and a jitter draw ``z``; its cosine to ``i``'s template
    ``t_i`` is set to :func:`pfd.distill.delink.rank_target`'s value (between the ``ρ``-th and
    ``(ρ+1)``-th largest of its cosines to the other ``N − 1`` templates, where ``ρ`` is ``r``
    moved by ``z`` times the spread other identities' ranks show across ``i``'s K prototypes,
    reflected at the ends: :func:`pfd.distill.delink.jittered_rank`) by moving ``p`` along
    ``t_i`` and renormalising (repeated ``iterations`` times, as templates are not orthogonal).
    The own cosine then *is* a draw from the other identities' cosines, signed and absolute: the
    source ranks near ``r``, uniform on ``{0, …, N − 1}`` over the identities, and varies across
    its K prototypes as another identity does (a class-level attacker reading the spread of ranks
    finds nothing, :mod:`pfd.attacks.linkability.classes`). Every other cosine moves by
    ``(target − own)·cos(t_i, t_j)``, and nothing about the identity's K-means modes changes but
    that one coordinate.

    Args:
        P: ``(NK, D)`` normalised prototypes (rotated space).
        proto_identity: ``(NK,)`` identity of each row.
        templates: ``(N, D)`` identity templates in the original space (the adapted model's class
            centres: what an insider compares proxies with).
        ranks: ``(NK,)`` target rank of each row in ``[0, N)`` (0 = the most similar).
        jitter: ``(NK,)`` standard normal draws (:func:`pfd.distill.delink.rank_jitter`); ``None``
            pins each row at its exact rank.
        iterations: Fixed-point passes.

    Returns:
        ``(NK, D)`` float32 normalised prototypes.
    """
    T = torch.nn.functional.normalize(templates.double(), dim=1)  # (N, D)
    n_id = T.shape[0]
    X = torch.nn.functional.normalize(P.double(), dim=1).clone()  # (NK, D)
    if n_id < 2:
        return X.float()
    pid = proto_identity.long()
    rows = torch.arange(len(X))
    r = ranks.long().clamp(0, n_id - 1)
    for _ in range(max(1, int(iterations))):
        cos = X @ T.T  # (NK, N)
        target = rank_target(cos, pid, r, jitter)  # (NK,)
        X = torch.nn.functional.normalize(X + (target - cos[rows, pid])[:, None] * T[pid], dim=1)
    return X.float()


def raw_selection(emb: torch.Tensor, labels: np.ndarray, P: torch.Tensor, proto_identity: torch.Tensor) -> np.ndarray:
    """For each prototype row, the sample of its identity nearest to it, each sample used once.

    Rows are served in order (an identity's largest cluster first), so the K images of an
    identity are distinct and follow its K-means modes.

    Args:
        emb: Normalised embeddings ``(n, D)`` in the space P lives in.
        labels: Identity of each sample ``(n,)``.
        P: Prototypes ``(NK, D)``.
        proto_identity: Identity of each prototype row ``(NK,)``.

    Returns:
        Sample index of each prototype row ``(NK,)``.
    """
    labels = np.asarray(labels)
    out = np.empty(len(P), dtype=np.int64)
    used: set[int] = set()
    for r in range(len(P)):
        idx = np.flatnonzero(labels == int(proto_identity[r]))
        sims = (emb[idx].double() @ P[r].double()).numpy()
        for j in np.argsort(-sims, kind="stable"):
            if int(idx[j]) not in used:
                out[r] = idx[j]
                used.add(int(idx[j]))
                break
    return out
