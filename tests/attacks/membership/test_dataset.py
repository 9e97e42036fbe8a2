"""Tests for pfd.attacks.membership.dataset (dataset membership paper, Algorithm 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pfd.attacks.membership.dataset import (
    dataset_membership,
    identity_templates,
    most_likely,
    probe_centroid_similarity,
    robust_z,
)
from pfd.errors import PfdError


def _dataset(rng, *, ids, imgs, dim, bias, bias_dir):
    """Identities whose directions lean towards a shared ``bias_dir`` by ``bias`` (0 = uniform)."""
    centres = rng.standard_normal((ids, dim)) / math.sqrt(dim) + bias * bias_dir
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = np.repeat(np.arange(ids), imgs)
    e = centres[labels] + 0.3 * rng.standard_normal((labels.size, dim)) / math.sqrt(dim)
    return e / np.linalg.norm(e, axis=1, keepdims=True), labels


def test_robust_z_hand_computed():
    z, scale = robust_z([1.0, 2.0, 3.0, 4.0, 10.0])
    # t=0: others 2,3,4,10 -> median 3.5, |dev| 1.5,.5,.5,6.5 -> MAD 1.0
    assert z[0] == pytest.approx(0.6745 * (1 - 3.5) / 1.0)
    # t=2: others 1,2,4,10 -> median 3, |dev| 2,1,1,7 -> MAD 1.5, x = median -> 0
    assert z[2] == pytest.approx(0.0)
    # t=4: others 1..4 -> median 2.5, MAD 1.0
    assert z[4] == pytest.approx(0.6745 * 7.5)
    assert scale == ["mad"] * 5


def test_robust_z_mad_zero_falls_back():
    z, scale = robust_z([1.0, 1.0, 2.0, 5.0])
    # t=3: others 1,1,2 -> median 1, |dev| 0,0,1 -> MAD 0, MeanAD 1/3
    assert scale[3] == "meanad" and z[3] == pytest.approx((5 - 1) / (1.253314 / 3))
    # t=0: others 1,2,5 -> median 2, MAD 1
    assert scale[0] == "mad" and z[0] == pytest.approx(-0.6745)
    z, scale = robust_z([3.0, 3.0, 3.0, 7.0])
    # t=3: others all 3 -> degenerate, +inf; t=0: others 3,3,7 -> MAD 0, MeanAD 4/3, x = median -> 0
    assert scale[3] == "degenerate" and z[3] == np.inf
    assert z[0] == 0.0 and np.isfinite(z).sum() == 3
    with pytest.raises(PfdError, match="at least 3"):
        robust_z([1.0, 2.0])


def test_probe_centroid_similarity_by_hand():
    gallery = np.array([[1.0, 0.0], [0.0, 1.0]])  # centroid (1, 1)/√2
    assert probe_centroid_similarity(gallery, np.array([[2.0, 0.0], [0.0, -1.0]])) == pytest.approx(0.0)
    assert probe_centroid_similarity(gallery, np.array([[3.0, 3.0]])) == pytest.approx(1.0)


def test_identity_templates_modes():
    emb = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0], [0.0, -1.0]])
    labels = np.array([7, 7, 3, 3])
    mean = identity_templates(emb, labels)
    np.testing.assert_allclose(mean[1], [1 / math.sqrt(2), 1 / math.sqrt(2)])  # label 7 sorts second
    np.testing.assert_allclose(mean[0], [0.0, 0.0])  # opposite images cancel: a zero template stays zero
    one = identity_templates(emb, labels, per_identity="sample", rng=np.random.default_rng(0))
    assert any(np.allclose(one[1], e) for e in emb[:2]) and abs(abs(one[0][1]) - 1) < 1e-12
    with pytest.raises(PfdError):
        identity_templates(emb, labels, per_identity="median")


def test_planted_training_set_ranks_first():
    rng = np.random.default_rng(0)
    dim = 32
    bias_dir = np.zeros(dim)
    bias_dir[0] = 1.0
    # Four "unseen" datasets crowd towards a common direction; the planted training set spreads out.
    cands = {f"other{i}": _dataset(rng, ids=60 + 10 * i, imgs=3, dim=dim, bias=0.25, bias_dir=bias_dir) for i in range(4)}
    cands["trained"] = _dataset(rng, ids=50, imgs=3, dim=dim, bias=0.05, bias_dir=bias_dir)
    rows = dataset_membership(cands, n=500, seed=0)
    assert most_likely(rows) == "trained" and rows[0]["rank"] == 1
    assert rows[0]["z"] < -2 and all(r["z"] > rows[0]["z"] for r in rows[1:])
    assert {r["n"] for r in rows} == {25}  # min(500, 50 // 2), shared by every candidate
    assert [r["rank"] for r in rows] == [1, 2, 3, 4, 5]
    again = dataset_membership(dict(reversed(list(cands.items()))), n=500, seed=0)
    assert {r["name"]: r["x"] for r in again} == {r["name"]: r["x"] for r in rows}  # order-independent
    other_seed = dataset_membership(cands, n=500, seed=1)
    assert {r["name"]: r["x"] for r in other_seed} != {r["name"]: r["x"] for r in rows}
    assert most_likely(dataset_membership(cands, n=10, seed=2, per_identity="sample")) == "trained"


def test_dataset_membership_errors():
    rng = np.random.default_rng(1)
    e, l = _dataset(rng, ids=6, imgs=2, dim=8, bias=0.0, bias_dir=np.ones(8))
    with pytest.raises(PfdError, match="at least 3"):
        dataset_membership({"a": (e, l), "b": (e, l)})
    with pytest.raises(PfdError, match="'tiny'.*>= 2"):
        dataset_membership({"a": (e, l), "b": (e, l), "tiny": (e[:2], np.zeros(2))})
    with pytest.raises(PfdError, match="dimensions"):
        dataset_membership({"a": (e, l), "b": (e, l), "c": (e[:, :4], l)})
    with pytest.raises(PfdError, match="'c'.*do not match"):
        dataset_membership({"a": (e, l), "b": (e, l), "c": (e, l[:3])})


def test_byte_identical_candidates_score_identically_and_are_flagged():
    """Issue 27: `--candidates A A_copy B` gave A and its copy different scores (the sample was
    seeded by the name) and named the copy the training set at z = -7.24."""
    from pfd.attacks.membership.dataset import dataset_caveats

    rng = np.random.default_rng(4)
    bias_dir = np.eye(16)[0]
    a = _dataset(rng, ids=40, imgs=3, dim=16, bias=0.2, bias_dir=bias_dir)
    b = _dataset(rng, ids=40, imgs=3, dim=16, bias=0.2, bias_dir=bias_dir)
    rows = dataset_membership({"A": a, "A_copy": (a[0].copy(), a[1].copy()), "B": b}, n=500, seed=0)
    by = {r["name"]: r for r in rows}
    assert by["A"]["x"] == by["A_copy"]["x"] and by["A"]["z"] == by["A_copy"]["z"]
    assert by["A"]["duplicate_of"] == "A_copy" and by["B"]["duplicate_of"] is None
    caveats = dataset_caveats(rows)
    assert any("A and A_copy hold identical embeddings" in c for c in caveats)
    assert any("only 3 candidates" in c for c in caveats)
    # A renamed candidate keeps its score: the sample follows the data, not the name.
    renamed = dataset_membership({"first": a, "second": b, "third": _dataset(rng, ids=40, imgs=3, dim=16, bias=0.2,
                                                                           bias_dir=bias_dir)}, n=500, seed=0)
    assert {r["name"]: r["x"] for r in renamed}["first"] == by["A"]["x"]
    five = {f"c{i}": _dataset(rng, ids=30, imgs=3, dim=16, bias=0.2, bias_dir=bias_dir) for i in range(5)}
    assert dataset_caveats(dataset_membership(five, n=500)) == []
