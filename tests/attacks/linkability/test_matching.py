"""Tests for pfd.attacks.linkability.matching: streamed top-1, VisMatch and Rank-1 Re-ID."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pfd.attacks.linkability.matching import CPU_BLOCK, DEVICE_BLOCK, block_sizes, rank1_reid, streamed_top1, visual_matching
from pfd.errors import PfdError


def _gallery(rng, ids, imgs, dim, spread=0.3):
    centres = rng.standard_normal((ids, dim))
    labels = np.repeat(np.arange(ids), imgs)
    emb = centres[labels] / math.sqrt(dim) * 3 + spread * rng.standard_normal((labels.size, dim)) / math.sqrt(dim)
    return emb / np.linalg.norm(emb, axis=1, keepdims=True), labels


@pytest.mark.parametrize("chunk", [1, 3, 17, 50, 51, 1000])
def test_streamed_top1_equals_full_argmax(chunk):
    rng = np.random.default_rng(0)
    q, g = rng.standard_normal((23, 8)), rng.standard_normal((50, 8))
    idx, score = streamed_top1(q, g, chunk=chunk, query_chunk=5)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    s = qn @ (g / np.linalg.norm(g, axis=1, keepdims=True)).T
    np.testing.assert_array_equal(idx, s.argmax(1))
    np.testing.assert_allclose(score, s.max(1), rtol=1e-12)


@pytest.mark.parametrize("chunk", [1, 2, 4, 7, 100])
def test_streamed_top1_ties_go_to_lowest_index(chunk):
    # Entries ±0.5 in 4-D: exact unit vectors and exact dot products, so ties are exact.
    rng = np.random.default_rng(1)
    base = rng.choice([-0.5, 0.5], size=(6, 4))
    gallery = base[[0, 1, 2, 1, 3, 0, 4, 5, 2, 0]]  # duplicates at 0/5/9, 1/3, 2/8
    queries = base[rng.integers(0, 6, 30)]
    idx, _ = streamed_top1(torch.as_tensor(queries, dtype=torch.float32), gallery.astype(np.float32), chunk=chunk)
    full = (queries @ gallery.T).argmax(1)  # numpy argmax: first maximum
    np.testing.assert_array_equal(idx, full)


def test_the_default_blocks_by_device_and_a_tie_across_their_boundaries():
    """The CPU's small blocks and a GPU's large ones give the same matches, the first maximum: gallery rows
    of entries ±0.5 in 4-D hold 16 distinct vectors, so every query's best score ties across blocks."""
    assert block_sizes(torch.device("cpu")) == CPU_BLOCK and block_sizes(torch.device("meta")) == DEVICE_BLOCK
    assert block_sizes(torch.device("cpu"), 5, 7) == (5, 7)
    with pytest.raises(PfdError, match=">= 1"):
        block_sizes(torch.device("cpu"), 0, None)
    rng = np.random.default_rng(3)
    base = rng.choice([-0.5, 0.5], size=(2600, 4)).astype(np.float32)  # exact dot products: exact ties
    queries = rng.choice([-0.5, 0.5], size=(1200, 4)).astype(np.float32)
    small = streamed_top1(queries, base)
    large = streamed_top1(queries, base, query_chunk=DEVICE_BLOCK[0], chunk=DEVICE_BLOCK[1])
    np.testing.assert_array_equal(small[0], large[0])
    np.testing.assert_array_equal(small[0], (queries @ base.T).argmax(1))


def test_streamed_top1_errors():
    with pytest.raises(PfdError, match="same model"):
        streamed_top1(np.ones((2, 3)), np.ones((4, 5)))
    with pytest.raises(PfdError, match="empty"):
        streamed_top1(np.ones((2, 3)), np.ones((0, 3)))
    with pytest.raises(PfdError, match="NaN"):
        streamed_top1(np.full((2, 3), np.nan), np.ones((4, 3)))


def test_leaked_private_images_link_perfectly():
    rng = np.random.default_rng(2)
    emb, labels = _gallery(rng, ids=30, imgs=4, dim=32)
    pick = rng.choice(len(labels), 60, replace=False)
    vm = visual_matching(emb[pick], labels[pick], emb, labels, chunk=7)
    assert vm.rate == 1.0 and vm.count == 60 and vm.n_identities == 30
    assert vm.chance == pytest.approx(1 / 30)
    np.testing.assert_array_equal(vm.match_index, pick)  # each proxy finds itself
    # 60/60 successes: the exact interval's lower end at the effective sample size (p̂ = 1 gives
    # the perfectly-correlated design effect Σ n_c² / n).
    sizes = np.bincount(labels[pick])
    assert vm.design_effect == pytest.approx((sizes**2).sum() / 60)
    assert vm.ci95[0] == pytest.approx(0.025 ** (1 / vm.n_eff)) and vm.ci95[1] == 1.0 and vm.ci95[0] > 0.8
    reid = rank1_reid(emb[pick], labels[pick], emb, labels, chunk=7)
    assert reid.rate == 1.0 and reid.attack == "reid"
    d = reid.as_dict()
    assert d["rate"] == 1.0 and "predicted" not in d and len(reid.as_dict(per_proxy=True)["predicted"]) == 60


def test_unrelated_embeddings_stay_at_chance():
    # Sources are uniform and independent of the proxy embeddings, so every link succeeds with
    # probability exactly 1/N: the 95 % interval of 2000 trials must contain chance.
    rng = np.random.default_rng(3)
    emb, labels = _gallery(rng, ids=20, imgs=5, dim=64)
    proxies = rng.standard_normal((2000, 64))
    source = rng.integers(0, 20, 2000)
    for attack in (visual_matching, rank1_reid):
        r = attack(proxies, source, emb, labels, chunk=16)
        assert r.ci95[0] <= r.chance <= r.ci95[1], (attack.__name__, r.rate)
        assert r.ci95[1] - r.ci95[0] < 0.025  # tight enough that a leak of a few % would show


def test_chunk_invariance_of_attacks():
    rng = np.random.default_rng(4)
    emb, labels = _gallery(rng, ids=15, imgs=3, dim=16, spread=2.0)
    proxies = emb[::2] + 0.5 * rng.standard_normal((len(emb[::2]), 16))
    src = labels[::2]
    for attack in (visual_matching, rank1_reid):
        ref = attack(proxies, src, emb, labels, chunk=10**6)
        for chunk in (1, 4, 15):
            r = attack(proxies, src, emb, labels, chunk=chunk)
            np.testing.assert_array_equal(r.predicted, ref.predicted)
            assert r.count == ref.count


def test_linkability_errors():
    rng = np.random.default_rng(5)
    emb, labels = _gallery(rng, ids=3, imgs=2, dim=4)
    with pytest.raises(PfdError, match="source identity 9"):
        visual_matching(emb[:2], np.array([0, 9]), emb, labels)
    with pytest.raises(PfdError, match="one per proxy"):
        rank1_reid(emb[:2], np.array([0]), emb, labels)
    with pytest.raises(PfdError, match="one per image"):
        visual_matching(emb[:2], np.array([0, 1]), emb, labels[:3])
