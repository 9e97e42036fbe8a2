"""Lighting that stays in the release: lighting clusters of the private set (pfd's lever, not in the paper).

Eq. 6 matches each BatchNorm layer's statistics to the adapted model's running statistics: one
domain-level mean over every light direction of the private set, the statistics of a shadow-free
average face. A lighting domain (Extended Yale B: one light source swept around each face) is the
spread of those directions, which a single average does not describe. With
``rta.lighting_clusters = C`` pfd instead

1. describes the lighting of each private image by where its luminance falls
   (:func:`lighting_descriptor`: the ``grid × grid`` mean luminance, centred and normalised, so the
   direction of the shading counts and not the exposure);
2. clusters the private set by that descriptor into at most ``C`` **domain-level** groups
   (:func:`lighting_clusters`), each pooled over at least ``min_identities`` identities (5 by default):
   a cluster is a lighting condition shared by many people, never the statistics of one person;
3. draws each class's K prototypes so that its proxies span the lighting conditions of its
   source's images (:func:`allocate_proxies`, then per-(identity, cluster) K-means in
   :func:`pfd.distill.prototypes.lighting_prototypes`);
4. distils each proxy against the BatchNorm statistics of its own cluster (the moments of every BN
   layer's input over the cluster's private images in the adapted model,
   :func:`pfd.nn.bn_hooks.bn_input_moments`; and the spatial statistics of the cluster when
   ``rta.lambda_spatial > 0``): RTA's batches hold one cluster each (:func:`cluster_batches`), so
   eq. 6 keeps its form and its cost, only its targets change per batch.

The cluster statistics are private state, like the running statistics they refine (the
prototypes file).
"""

from __future__ import annotations

import warnings
from typing import Iterable

import numpy as np
import torch
import torch.nn.functional as F

from pfd.errors import PfdError

__all__ = ["lighting_descriptor", "lighting_clusters", "allocate_proxies", "cluster_batches"]

#: ITU-R BT.601 luma weights.
_LUMA = (0.299, 0.587, 0.114)


def lighting_descriptor(images: torch.Tensor, *, grid: int = 4) -> np.ndarray:
    """Where the light falls on each image: its ``grid × grid`` mean luminance, centred and L2-normalised.

    Args:
        images: ``(n, 3, H, W)`` in [0, 1].
        grid: Regions per side.

    Returns:
        ``(n, grid²)`` float64; an evenly lit image (no shading) gives the zero vector, a face lit
        from the left one whose left regions are positive.
    """
    if images.ndim != 4 or images.shape[1] != 3:
        raise PfdError(f"lighting descriptor: expected (n, 3, H, W) images, got {tuple(images.shape)}")
    w = torch.tensor(_LUMA, dtype=torch.float64).view(1, 3, 1, 1)
    lum = (images.double() * w).sum(1, keepdim=True)  # (n, 1, H, W)
    d = F.adaptive_avg_pool2d(lum, grid).flatten(1)  # (n, G²)
    d = d - d.mean(1, keepdim=True)
    norm = d.norm(dim=1, keepdim=True)
    return (d / norm.clamp_min(1e-6) * (norm > 1e-6)).numpy()


def lighting_clusters(descriptors: np.ndarray, labels: np.ndarray, *, clusters: int, min_identities: int = 5,
                      seed: int = 0) -> np.ndarray:
    """Domain-level lighting groups of a private set: K-means on the descriptors, then small groups merged.

    A group that pools fewer than ``min_identities`` distinct identities is merged into the group
    whose centre is nearest to its own (the smallest first, until none is left or one group
    remains), so that no group's statistics are those of a few people.

    Args:
        descriptors: ``(n, G²)`` from :func:`lighting_descriptor`.
        labels: ``(n,)`` identity of each image.
        clusters: At most this many groups (the lever's ``rta.lighting_clusters``).
        min_identities: Identities every group pools at least (when the set has that many).
        seed: K-means seed.

    Returns:
        ``(n,)`` int64 group of each image in ``[0, C')``, groups numbered by size (largest first,
        ties by their first image), so the numbering depends only on the data and the seed.
    """
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    x = np.asarray(descriptors, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if clusters < 1:
        raise PfdError(f"rta.lighting_clusters = {clusters}: must be at least 1 (0 turns the lighting lever off)")
    c = min(int(clusters), len(np.unique(x, axis=0)))
    with warnings.catch_warnings(), threadpool_limits(1):  # one thread: the same groups on any core count
        warnings.simplefilter("ignore")
        assign = KMeans(n_clusters=max(c, 1), n_init=10, random_state=seed).fit(x).labels_.astype(np.int64)
    while True:
        groups = np.unique(assign)
        if len(groups) < 2:
            break
        ids = np.array([len(np.unique(y[assign == g])) for g in groups])
        small = np.flatnonzero(ids < min_identities)
        if not small.size:
            break
        g = groups[small[np.argmin(ids[small])]]  # the group with the fewest identities goes first
        centres = {h: x[assign == h].mean(0) for h in groups}
        others = [h for h in groups if h != g]
        nearest = min(others, key=lambda h: (float(np.sum((centres[h] - centres[g]) ** 2)), h))
        assign[assign == g] = nearest
    groups = np.unique(assign)
    size = np.array([(assign == g).sum() for g in groups])
    first = np.array([np.flatnonzero(assign == g).min() for g in groups])
    order = groups[np.lexsort((first, -size))]
    out = np.empty_like(assign)
    for new, g in enumerate(order):
        out[assign == g] = new
    return out


def allocate_proxies(counts: np.ndarray, k: int) -> np.ndarray:
    """How many of an identity's K proxies go to each lighting group: proportional to its images there.

    Largest remainders, never more proxies in a group than the identity has images in it (K-means
    needs as many points as centres); ties go to the lower group number.

    Args:
        counts: ``(C,)`` the identity's images per group (their sum at least ``k``).
        k: Proxies per identity K.

    Returns:
        ``(C,)`` int64 summing to ``k``.

    Raises:
        ValueError: If the identity has fewer than ``k`` images.
    """
    counts = np.asarray(counts, dtype=np.int64)
    if counts.sum() < k:
        raise ValueError(f"{counts.sum()} images for K = {k} proxies")
    quota = k * counts / counts.sum()  # (C,)
    out = np.minimum(np.floor(quota).astype(np.int64), counts)
    for _ in range(int(k - out.sum())):  # one proxy at a time to the group furthest below its quota
        gap = np.where(out < counts, quota - out, -np.inf)
        out[int(np.argmax(gap))] += 1  # the first maximum: the lower group on ties
    return out


def cluster_batches(proto_cluster: Iterable[int] | torch.Tensor | np.ndarray, batch_size: int) -> list[np.ndarray]:
    """RTA's proxy batches with the lighting lever: each holds the prototype rows of one group only.

    Rows of one group in ascending order, cut into batches of at most ``batch_size``; groups in
    ascending order. Every row is in exactly one batch.

    Args:
        proto_cluster: ``(NK,)`` lighting group of each prototype row.
        batch_size: Proxies optimised together.

    Returns:
        The rows of each batch.
    """
    pc = np.asarray(proto_cluster.numpy() if isinstance(proto_cluster, torch.Tensor) else list(proto_cluster),
                    dtype=np.int64)
    out: list[np.ndarray] = []
    for g in np.unique(pc):
        rows = np.flatnonzero(pc == g)
        out += [rows[s:s + batch_size] for s in range(0, len(rows), batch_size)]
    return out
