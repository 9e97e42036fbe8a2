"""Verification pairs of a test set of any size (pfd/card/pairs.py)."""

import numpy as np
import pytest
import torch

from pfd.card.pairs import adaptive_pairs, pair_identities
from pfd.data.faceset import TensorFaces
from pfd.errors import PfdError


def _faces(sizes: list[int]) -> TensorFaces:
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return TensorFaces(torch.zeros(len(labels), 3, 4, 4), labels)


def test_adaptive_pairs_takes_all_genuine_when_few():
    faces = _faces([3, 2, 4, 1])  # 3 + 1 + 6 + 0 = 10 genuine pairs
    pairs, info = adaptive_pairs(faces, num_pairs=500, seed=0)
    assert info["used"] == 10 and info["all_genuine"] and info["genuine_available"] == 10
    gen = {tuple(sorted(p)) for p in zip(pairs.left[pairs.issame], pairs.right[pairs.issame])}
    every = {(i, j) for i in range(len(faces)) for j in range(i + 1, len(faces)) if faces.labels[i] == faces.labels[j]}
    assert gen == every
    assert (~pairs.issame).sum() == 10
    li, ri = pair_identities(pairs)
    assert np.array_equal(li == ri, pairs.issame)


def test_adaptive_pairs_draws_when_plenty_and_refuses_tiny():
    faces = _faces([10] * 6)
    pairs, info = adaptive_pairs(faces, num_pairs=50, seed=1)
    assert info["used"] == 50 and not info["all_genuine"] and len(pairs) == 100
    with pytest.raises(PfdError, match="too few"):
        adaptive_pairs(_faces([2, 1]), num_pairs=50)


def test_too_few_pairs_requested_names_the_flag_not_the_data():
    """Issue 34: `--pairs 1` said "36 genuine and 240 impostor pairs exist, too few", blaming the data."""
    with pytest.raises(PfdError, match=r"^--pairs 1 gives 2 pairs, too few for 10-fold verification; pass --pairs 5 or more"):
        adaptive_pairs(_faces([4] * 6), num_pairs=1, seed=0, folds=10)
    pairs, info = adaptive_pairs(_faces([4] * 6), num_pairs=5, seed=0, folds=10)
    assert info["used"] == 5
