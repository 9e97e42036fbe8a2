"""Verification pairs drawn from a face set: a fixed number, or as many as a test set of any size gives.

:func:`generate_pairs` draws ``num_pairs`` genuine and as many impostor pairs, seeded, spread as
evenly over identities as their image counts allow. :func:`adaptive_pairs` is what the card (and
the privacy-utility benchmark) uses on held-out test people: ``num_pairs`` of each kind, or, when a
small test set has fewer distinct genuine pairs, *all* of them and as many impostors, so that a
publisher's small test set still gets a figure. :func:`pair_identities` gives the identity of each
side, which the identity bootstrap (:mod:`pfd.card.stats`) resamples.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from pfd.data.faceset import FaceSet
from pfd.data.pairs import VerificationPairs
from pfd.errors import PfdError

__all__ = ["generate_pairs", "adaptive_pairs", "pair_identities", "PairsInfo"]


def _triu_pair(t: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-major index ``t`` of the strict upper triangle of an ``m x m`` matrix -> ``(i, j)``, i < j."""
    t = np.asarray(t, dtype=np.int64)
    start = lambda i: i * (2 * m - i - 1) // 2  # noqa: E731 - first index of row i
    i = np.floor(((2 * m - 1) - np.sqrt((2.0 * m - 1) ** 2 - 8.0 * t)) / 2).astype(np.int64)
    i = np.clip(i, 0, m - 2)
    i -= start(i) > t  # float rounding: step back or forward one row where needed
    i += start(i + 1) <= t
    return i, t - start(i) + i + 1


def _allocate(caps: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Spread ``n`` draws over groups as evenly as their capacities allow (water filling)."""
    lo, hi = 0, int(caps.max(initial=0))  # smallest level with sum(min(caps, level)) >= n
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if np.minimum(caps, mid).sum() < n else (lo, mid)
    alloc = np.minimum(caps, max(lo - 1, 0))
    extra = n - int(alloc.sum())
    if extra:  # the groups that can take one more at this level; pick which ones at random
        alloc[rng.choice(np.flatnonzero(caps >= lo), size=extra, replace=False)] += 1
    return alloc


def generate_pairs(faces: FaceSet, *, num_pairs: int, seed: int = 0) -> VerificationPairs:
    """Draw ``num_pairs`` genuine and ``num_pairs`` impostor pairs (``2 * num_pairs`` in all), seeded.

    Genuine pairs are spread as evenly over identities as their image counts allow; impostor pairs
    take two distinct identities uniformly, then one image of each. No pair (unordered) repeats.
    The result alternates genuine and impostor pairs, so every consecutive fold is balanced.

    Args:
        faces: The dataset.
        num_pairs: Genuine pairs to draw; the same number of impostors is added
            (``EvalConfig.num_pairs``).
        seed: Sampling seed.

    Raises:
        PfdError: Not enough distinct genuine or impostor pairs exist (says how many do).
    """
    if num_pairs < 1:
        raise ValueError("num_pairs must be >= 1")
    rng = np.random.default_rng(seed)
    groups = [faces.indices_of(k) for k in range(faces.num_classes)]
    sizes = np.array([len(g) for g in groups], dtype=np.int64)
    caps = sizes * (sizes - 1) // 2
    if caps.sum() < num_pairs:
        raise PfdError(f"{faces.describe()}: only {int(caps.sum())} distinct genuine pairs exist "
                       f"({int((sizes >= 2).sum())} identities with 2+ images) but {num_pairs} were asked for; "
                       "lower the number of pairs or add images")
    total = len(faces) * (len(faces) - 1) // 2 - int(caps.sum())
    if total < num_pairs:
        raise PfdError(f"{faces.describe()}: only {total} distinct impostor pairs exist but {num_pairs} were asked "
                       "for; impostors need several identities: lower the number of pairs or add identities")

    gl, gr = [], []
    for k, take in enumerate(_allocate(caps, num_pairs, rng)):
        if take:
            i, j = _triu_pair(rng.choice(int(caps[k]), size=int(take), replace=False), int(sizes[k]))
            gl.append(groups[k][i])
            gr.append(groups[k][j])
    genuine = np.stack([np.concatenate(gl), np.concatenate(gr)], axis=1)[rng.permutation(num_pairs)]
    impostor = _impostors(faces, groups, sizes, num_pairs, total, rng)

    pairs = np.empty((2 * num_pairs, 2), dtype=np.int64)
    pairs[0::2], pairs[1::2] = genuine, impostor
    issame = np.zeros(2 * num_pairs, dtype=bool)
    issame[0::2] = True
    return VerificationPairs(faces, pairs[:, 0], pairs[:, 1], issame)


def _impostors(faces: FaceSet, groups: list[np.ndarray], sizes: np.ndarray, n: int, total: int,
               rng: np.random.Generator) -> np.ndarray:
    """``n`` distinct cross-identity pairs ``(n, 2)``, smaller index first."""
    order = np.concatenate(groups)  # sample indices grouped by identity
    offset = np.concatenate([[0], np.cumsum(sizes)])
    if 2 * n > total:  # dense request: enumerate every impostor pair (there are < 2n) and pick
        parts = []
        for k in range(len(groups) - 1):
            a, b = np.meshgrid(groups[k], order[offset[k + 1]:], indexing="ij")
            parts.append(np.stack([a.ravel(), b.ravel()], axis=1))
        cross = np.concatenate(parts)
        out = cross[rng.choice(len(cross), size=n, replace=False)]
        return np.sort(out, axis=1)
    active = np.flatnonzero(sizes > 0)
    seen: set[tuple[int, int]] = set()
    out_list: list[tuple[int, int]] = []
    while len(out_list) < n:  # rejection; at most half the pairs are wanted, so acceptance >= 1/2
        m = 2 * (n - len(out_list)) + 16
        ka = rng.integers(len(active), size=m)
        kb = rng.integers(len(active) - 1, size=m)
        kb += kb >= ka  # a second identity, distinct from the first, uniformly
        ka, kb = active[ka], active[kb]
        a = order[offset[ka] + (rng.random(m) * sizes[ka]).astype(np.int64)]
        b = order[offset[kb] + (rng.random(m) * sizes[kb]).astype(np.int64)]
        for x, y in zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist()):
            if (x, y) not in seen:
                seen.add((x, y))
                out_list.append((x, y))
                if len(out_list) == n:
                    break
    return np.asarray(out_list, dtype=np.int64)


class PairsInfo(TypedDict):
    """How many verification pairs a test set gave (``card.json``'s ``utility.pairs``).

    Attributes:
        requested: Genuine pairs asked for (and as many impostors).
        genuine_available: Distinct genuine pairs the set has; ``impostor_available`` impostor ones.
        used: Pairs of each kind used.
        all_genuine: Whether every genuine pair is in.
    """

    requested: int
    genuine_available: int
    impostor_available: int
    used: int
    all_genuine: bool


def adaptive_pairs(faces: FaceSet, *, num_pairs: int, seed: int = 0, folds: int = 10) -> tuple[VerificationPairs, PairsInfo]:
    """Verification pairs of a test set of any size: ``min(num_pairs, available)`` of each kind.

    When the set has fewer distinct genuine pairs than ``num_pairs`` every one of them is used
    (:func:`generate_pairs` with a full allocation draws each identity's all), and
    the same number of impostors; likewise when impostor pairs are the scarcer kind.

    Args:
        faces: The test identities.
        num_pairs: Genuine pairs wanted (and as many impostors).
        seed: Sampling seed.
        folds: Folds of the accuracy; at least this many pairs are needed.

    Returns:
        ``(pairs, info)`` (:class:`PairsInfo`).

    Raises:
        PfdError: Too few identities or images for ``folds`` folds of both kinds.
    """
    sizes = faces.counts().astype(np.int64)
    genuine = int((sizes * (sizes - 1) // 2).sum())
    impostor = len(faces) * (len(faces) - 1) // 2 - genuine
    n = min(int(num_pairs), genuine, impostor)
    need = -(-max(folds, 2) // 2)  # genuine pairs (and as many impostors) for `folds` folds
    if n < need <= min(genuine, impostor):  # the data would do; the requested number is what is short
        raise PfdError(f"--pairs {num_pairs} gives {2 * n} pairs, too few for {folds}-fold verification; pass "
                       f"--pairs {need} or more ({faces.describe()} has {genuine} genuine pairs)")
    if 2 * n < max(folds, 2):
        raise PfdError(f"{faces.describe()}: {genuine} genuine and {impostor} impostor pairs exist, too few for "
                       f"{folds}-fold verification; the test set needs 2+ identities with 2+ images each")
    pairs = generate_pairs(faces, num_pairs=n, seed=seed)
    return pairs, PairsInfo(requested=int(num_pairs), genuine_available=genuine, impostor_available=int(impostor),
                            used=n, all_genuine=n == genuine)


def pair_identities(pairs: VerificationPairs) -> tuple[np.ndarray, np.ndarray]:
    """``(left, right)`` identity label of each pair's two images, shape ``(P,)`` each."""
    labels = np.asarray(pairs.faces.labels)
    return labels[pairs.left], labels[pairs.right]
