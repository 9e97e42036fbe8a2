"""Tests for pfd.attacks.membership.statistics (geometric MIA §3.2) and pfd.attacks.membership.fusion (§5.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pfd.attacks.membership.fusion import fusion_cv
from pfd.attacks.membership.statistics import (
    STATISTICS,
    identity_statistics,
    membership_report,
    pair_cos,
    pen_logit,
    proto_ce,
    vmf_kappa,
)
from pfd.errors import PfdError


def _clusters(counts, dim, sigma, rng, *, label_offset=0):
    """Unit embeddings around random centres: identity c has counts[c] rows, spread ~ sigma."""
    c = rng.standard_normal((len(counts), dim))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    labels = np.repeat(np.arange(len(counts)), counts)
    sig = np.broadcast_to(np.asarray(sigma, dtype=float), (len(counts),))[labels, None]
    e = c[labels] + sig * rng.standard_normal((labels.size, dim)) / np.sqrt(dim)
    return e / np.linalg.norm(e, axis=1, keepdims=True), labels + label_offset


# --- naive references: one identity at a time, written plainly ------------------------------


def _ref_arcface(c, m):
    return math.cos(math.acos(c) + m)


def _ref_cosface(c, m):
    return c - m


def _reference(emb, labels, g, s, m):
    ids = sorted(set(labels.tolist()))
    groups = [emb[labels == y] for y in ids]
    protos = [x.sum(0) / np.linalg.norm(x.sum(0)) for x in groups]
    out = {k: [] for k in STATISTICS}
    d = emb.shape[1]
    for y, x in enumerate(groups):
        k = len(x)
        pairs = [float(x[i] @ x[j]) for i in range(k) for j in range(i + 1, k)]
        out["pair_cos"].append(sum(pairs) / len(pairs))
        r = np.linalg.norm(x.mean(0))
        out["vmf_kappa"].append(r * (d - r * r) / (1 - r * r))
        logits = []
        for i in range(k):
            others = np.delete(x, i, axis=0).mean(0)
            w = others / np.linalg.norm(others)
            logits.append(s * g(float(x[i] @ w), m))
        out["pen_logit"].append(sum(logits) / k)
        losses = []
        for i in range(k):
            target = math.exp(s * g(float(x[i] @ protos[y]), m))
            neg = sum(math.exp(s * float(x[i] @ protos[j])) for j in range(len(groups)) if j != y)
            losses.append(-math.log(target / (target + neg)))
        out["proto_ce"].append(-sum(losses) / k)
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize(
    "dim,head,g,s,m",
    [(3, "arcface", _ref_arcface, 64.0, 0.5), (16, "cosface", _ref_cosface, 30.0, 0.35), (130, "arcface", _ref_arcface, 8.0, 0.2)],
)
def test_statistics_equal_naive_reference(dim, head, g, s, m):
    rng = np.random.default_rng(dim)
    counts = rng.integers(2, 8, size=9)  # various k, including k = 2
    emb, labels = _clusters(counts, dim, 0.7, rng)
    # Shuffle rows and use non-contiguous labels: the result must follow np.unique(labels) order.
    perm = rng.permutation(len(labels))
    emb, labels = emb[perm], labels[perm] * 3 + 5
    emb32 = emb.astype(np.float32)  # what an embedder returns; computed in float64 inside
    got = identity_statistics(emb32, labels, head=head, scale=s, margin=m, chunk=4)
    ref = _reference(emb, labels, g, s, m)
    for name in STATISTICS:
        np.testing.assert_allclose(got[name], ref[name], rtol=2e-5, atol=1e-6, err_msg=name)
    # The single-statistic functions agree with the combined one, torch input works too.
    t = torch.as_tensor(emb32)
    np.testing.assert_allclose(pair_cos(t, labels), got["pair_cos"], rtol=1e-12)
    np.testing.assert_allclose(vmf_kappa(emb32, labels), got["vmf_kappa"], rtol=1e-12)
    np.testing.assert_allclose(pen_logit(emb32, labels, g=head, scale=s, margin=m), got["pen_logit"], rtol=1e-12)
    np.testing.assert_allclose(proto_ce(emb32, labels, g=head, scale=s, margin=m, chunk=3), got["proto_ce"], rtol=1e-10)


def test_penalty_may_be_any_callable():
    rng = np.random.default_rng(3)
    emb, labels = _clusters([3, 4, 5], 8, 0.5, rng)
    custom = pen_logit(emb, labels, g=lambda c, m: c * 0 + m, scale=2.0, margin=0.25)
    np.testing.assert_allclose(custom, 0.5)


def test_proto_ce_chunk_invariant():
    rng = np.random.default_rng(4)
    emb, labels = _clusters(rng.integers(2, 6, 12), 10, 0.8, rng)
    full = proto_ce(emb, labels, chunk=10**6)
    for chunk in (1, 7, 33):
        np.testing.assert_allclose(proto_ce(emb, labels, chunk=chunk), full, rtol=1e-12)


def test_kappa_ranks_like_inertia():
    rng = np.random.default_rng(5)
    counts = rng.integers(2, 10, 60)
    emb, labels = _clusters(counts, 32, rng.uniform(0.2, 2.0, 60), rng)
    kappa = vmf_kappa(emb, labels)
    inertia = np.array([np.mean(np.sum((x - x.mean(0)) ** 2, 1)) for x in (emb[labels == y] for y in range(60))])
    assert np.array_equal(np.argsort(kappa), np.argsort(-inertia))


def test_kappa_stable_as_resultant_length_approaches_one():
    # e_i = norm(c + δ u_i): inertia ∝ δ², so κ·δ² must stay constant down to δ = 1e-8, where
    # the naive 1 − R̄² (≈ 1e-16) would be lost to rounding.
    rng = np.random.default_rng(6)
    dim, k = 24, 5
    c = rng.standard_normal(dim)
    c /= np.linalg.norm(c)
    u = rng.standard_normal((k, dim))
    vals = []
    for delta in (1e-3, 1e-5, 1e-7, 1e-8):
        e = c + delta * u
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        vals.append(vmf_kappa(e, np.zeros(k, dtype=int))[0] * delta**2)
    assert np.all(np.isfinite(vals))
    np.testing.assert_allclose(vals, vals[0], rtol=1e-2)
    same = np.tile(c, (3, 1))
    assert np.isfinite(vmf_kappa(same, np.zeros(3, dtype=int))[0])


def test_singleton_identity_is_named():
    emb = np.eye(4)[[0, 1, 2, 3, 3]].astype(float)
    with pytest.raises(PfdError, match="'bob'.*k >= 2"):
        identity_statistics(emb, np.array([0, 0, 1, 2, 2]), names=["alice", "bob", "carol"])
    with pytest.raises(PfdError, match="do not match"):
        pair_cos(emb, np.array([0, 0]))
    with pytest.raises(PfdError, match="NaN"):
        pair_cos(np.full((2, 3), np.nan), np.array([0, 0]))
    with pytest.raises(PfdError, match="unknown head 'sphereface'"):
        pen_logit(np.eye(3)[[0, 1, 1, 2]], np.array([0, 0, 1, 1]), g="sphereface")


def test_report_separates_tight_members_and_fusion_keeps_up():
    rng = np.random.default_rng(7)
    mem, ml = _clusters(rng.integers(3, 8, 50), 32, 0.75, rng)
    non, nl = _clusters(rng.integers(3, 8, 50), 32, 0.95, rng)
    r = membership_report(mem, ml, non, nl, seed=0)
    assert r["counts"]["members"] == 50 and r["counts"]["nonmembers"] == 50
    for name in ("pair_cos", "vmf_kappa", "pen_logit"):
        st = r["statistics"][name]
        assert st["direction"] == "higher" and st["auc"] > 0.8, name
        assert st["auc_ci95"][0] < st["auc"] <= st["auc_ci95"][1]
    fusion = r["fusion"]
    assert fusion["auc_mean"] >= fusion["best_single"]["auc_mean"] - 0.05
    assert len(fusion["fold_auc"]) == 5 and len(fusion["oof_score"]) == 100
    assert len(r["scores"]["pair_cos"]["members"]) == 50


def test_report_at_chance_for_identically_distributed_groups():
    rng = np.random.default_rng(8)
    n = 100
    mem, ml = _clusters(rng.integers(2, 6, n), 32, 0.8, rng)
    non, nl = _clusters(rng.integers(2, 6, n), 32, 0.8, rng)
    r = membership_report(mem, ml, non, nl, seed=1)
    # Under the null the Mann-Whitney AUC has sd sqrt((n+n+1)/(12 n n)) ≈ 0.041: allow 4 sd.
    tol = 4 * math.sqrt((2 * n + 1) / (12 * n * n))
    for name, st in r["statistics"].items():
        assert abs(st["auc_a_priori"] - 0.5) < tol, name
    assert abs(r["fusion"]["auc_mean"] - 0.5) < 0.15
    tpr = r["statistics"]["pair_cos"]
    assert tpr["tpr_at_1pct_fpr"]["resolvable"] and not tpr["tpr_at_0.1pct_fpr"]["resolvable"]


def test_fusion_deterministic_and_validates():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((40, 4))
    y = np.r_[np.ones(20), np.zeros(20)].astype(bool)
    x[y, 0] += 1.5
    a = fusion_cv(x, y, folds=3, seed=3, max_epochs=30)
    b = fusion_cv(x, y, folds=3, seed=3, max_epochs=30)
    assert a["fold_auc"] == b["fold_auc"]
    assert a["single"]["f0"]["auc_mean"] > 0.75
    with pytest.raises(PfdError, match="more than 5"):
        fusion_cv(x[:25], np.r_[np.ones(4), np.zeros(21)].astype(bool))
    small = membership_report(x[:8, :3], np.repeat(np.arange(4), 2), x[8:16, :3], np.repeat(np.arange(4), 2))
    assert "skipped" in small["fusion"]


def test_permutation_test_matches_the_exact_mann_whitney_tail_for_one_score():
    from scipy.stats import mannwhitneyu

    from pfd.attacks.membership.permutation import max_auc_permutation_test

    rng = np.random.default_rng(4)
    x = np.r_[rng.normal(0.5, 1, 12), rng.normal(0, 1, 10)]
    y = np.r_[np.ones(12), np.zeros(10)].astype(bool)
    r = max_auc_permutation_test({"s": x}, y, permutations=20000, seed=1)
    exact = mannwhitneyu(x[y], x[~y], alternative="greater", method="exact").pvalue
    assert r["auc"] == pytest.approx(float((x[y][:, None] > x[~y][None, :]).mean()))
    assert abs(r["p"] - exact) < 4 * math.sqrt(exact * (1 - exact) / 20000) + 1e-4
    # A second, independent score can only raise p (the max of two AUCs is larger under the null).
    r2 = max_auc_permutation_test({"s": x, "noise": rng.normal(size=22)}, y, permutations=20000, seed=1)
    assert r2["p"] >= r["p"] - 0.01 and r2["null95"] > r["null95"]
    # Reversed separation is not a leak in the a-priori direction.
    assert max_auc_permutation_test({"s": -x - 3 * y}, y, permutations=500)["p"] > 0.5
    with pytest.raises(PfdError, match="members and non-members"):
        max_auc_permutation_test({"s": x}, np.ones(22, bool))
