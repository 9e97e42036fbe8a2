"""Verification pairs drawn from a face set (pfd/data/pair_sampling.py)."""

import numpy as np
import pytest
import torch

from pfd.data.faceset import TensorFaces
from pfd.data.pair_sampling import _triu_pair, adaptive_pairs, generate_pairs, pair_identities
from pfd.errors import PfdError


def faces_of(sizes: list[int]) -> TensorFaces:
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return TensorFaces(torch.zeros(len(labels), 3, 2, 2), labels)


def test_generate_pairs_balanced_distinct_and_seeded():
    faces = faces_of([4, 4, 4, 4, 4])  # 6 genuine pairs per identity
    p = generate_pairs(faces, num_pairs=10, seed=3)
    assert len(p) == 20 and p.issame.sum() == 10
    np.testing.assert_array_equal(p.issame, np.tile([True, False], 10))  # alternating: balanced folds
    lab = faces.labels
    np.testing.assert_array_equal(lab[p.left] == lab[p.right], p.issame)
    keys = {(min(a, b), max(a, b)) for a, b in zip(p.left, p.right)}
    assert len(keys) == 20 and all(a != b for a, b in keys)
    np.testing.assert_array_equal(np.bincount(lab[p.left[p.issame]], minlength=5), [2] * 5)  # spread evenly
    q = generate_pairs(faces, num_pairs=10, seed=3)
    assert np.array_equal(q.left, p.left) and np.array_equal(q.right, p.right)
    r = generate_pairs(faces, num_pairs=10, seed=4)
    assert not (np.array_equal(r.left, p.left) and np.array_equal(r.right, p.right))


def test_generate_pairs_can_take_every_pair():
    faces = faces_of([3, 2])  # genuine: 3 + 1; impostor: 6
    p = generate_pairs(faces, num_pairs=4, seed=0)
    keys = {(int(a), int(b)) for a, b in zip(p.left, p.right)}
    assert len(keys) == 8
    genuine = set(zip(p.left[p.issame].tolist(), p.right[p.issame].tolist()))
    assert genuine == {(0, 1), (0, 2), (1, 2), (3, 4)}


@pytest.mark.parametrize("sizes,n,match", [
    ([1, 1, 1], 1, r"only 0 distinct genuine pairs exist \(0 identities with 2\+ images\)"),
    ([5], 2, "only 0 distinct impostor pairs"),
    ([2, 2], 3, "only 2 distinct genuine pairs"),
])
def test_generate_pairs_impossible_requests(sizes, n, match):
    with pytest.raises(PfdError, match=match):
        generate_pairs(faces_of(sizes), num_pairs=n, seed=0)


@pytest.mark.parametrize("m", [2, 3, 17, 3001])
def test_triu_pair_matches_numpy(m):
    i, j = np.triu_indices(m, 1)
    t = np.arange(len(i)) if m < 100 else np.random.default_rng(0).choice(len(i), 5000, replace=False)
    a, b = _triu_pair(t, m)
    np.testing.assert_array_equal(a, i[t])
    np.testing.assert_array_equal(b, j[t])


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
