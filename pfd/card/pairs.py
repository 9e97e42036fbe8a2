"""Verification pairs of a test set of any size, and the identities of each pair.

The card's (and the privacy-utility benchmark's) utility is verification accuracy and TAR@FAR on
pairs of the held-out test people: ``num_pairs`` genuine and as many impostor pairs
(:func:`pfd.data.pairs.generate_pairs`), or, when a small test set has fewer distinct genuine
pairs, *all* of them and as many impostors, so that a publisher's small test set still gets a
figure. :func:`pair_identities` gives the identity of each side, which the identity bootstrap
(:mod:`pfd.card.stats`) resamples.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from pfd.data.faceset import FaceSet
from pfd.data.pairs import VerificationPairs, generate_pairs
from pfd.errors import PfdError

__all__ = ["adaptive_pairs", "pair_identities", "PairsInfo"]


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
    (:func:`~pfd.data.pairs.generate_pairs` with a full allocation draws each identity's all), and
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
