"""The reference-model check of the membership verdict (pfd.attacks.membership.reference)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pfd.attacks.membership.statistics import membership_report
from pfd.attacks.membership.reference import group_separation
from pfd.errors import PfdError


def world(rng: np.random.Generator, *, n_m: int = 28, n_n: int = 10, k: int = 8, d: int = 32, member_spread: float = 0.6,
          nonmember_spread: float = 0.6, tighten: float = 1.0) -> tuple[np.ndarray, ...]:
    """Two fixed groups of people in a reference model and in an audited model that fine-tuned it.

    Each person's images scatter around a centre with a person-level spread drawn around their
    group's value (``member_spread`` vs ``nonmember_spread``: a difference *before* training).
    The audited model sees the same images through a near-identity map and a squash, which
    changes every cluster alike; ``tighten < 1`` shrinks only the members' scatter (membership).
    Returns ``(target members, target non-members, reference members, reference non-members,
    member labels, non-member labels)``.
    """
    c = n_m + n_n
    centres = rng.normal(size=(c, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    spread = np.r_[member_spread * rng.uniform(0.7, 1.3, n_m), nonmember_spread * rng.uniform(0.7, 1.3, n_n)]
    noise = rng.normal(size=(c, k, d)) / np.sqrt(d)  # (C, k, D) the images, shared by both models
    ref = centres[:, None] + spread[:, None, None] * noise
    a = np.eye(d) + 0.3 * rng.normal(size=(d, d)) / np.sqrt(d)
    shrink = np.r_[np.full(n_m, tighten), np.ones(n_n)][:, None, None]
    tgt = np.tanh((centres[:, None] + 1.2 * spread[:, None, None] ** 1.5 * shrink * noise) @ a)
    tgt = tgt + 0.05 * rng.normal(size=tgt.shape) / np.sqrt(d)
    flat = lambda x: x.reshape(c * k, d)  # noqa: E731
    lab = np.repeat(np.arange(c), k)
    t, r = flat(tgt), flat(ref)
    split = n_m * k
    return t[:split], t[split:], r[:split], r[split:], lab[:split], lab[split:]


def audit(rng: np.random.Generator, seed: int, **kw: float) -> dict:
    tm, tn, rm, rn, lm, ln = world(rng, **kw)
    # folds=10 > 10 non-members: no fusion MLP, so that a simulation of many audits stays fast.
    return membership_report(tm, lm, tn, ln, scale=32.0, margin=0.4, folds=10, seed=seed, permutations=300,
                             reference_member_emb=rm, reference_nonmember_emb=rn)


def test_group_separation_is_calibrated_on_exchangeable_groups_and_sees_both_directions():
    rng = np.random.default_rng(0)
    cov = 0.5 * np.ones((4, 4)) + 0.5 * np.eye(4)  # four correlated statistics, like the real ones
    y = np.r_[np.ones(28, bool), np.zeros(10, bool)]
    fired = 0
    for i in range(300):
        x = rng.multivariate_normal(np.zeros(4), cov, size=38)
        fired += group_separation({f"s{j}": x[:, j] for j in range(4)}, y, permutations=200, seed=i)["separates"]
    assert fired / 300 <= 0.10  # level 0.05 (measured 0.07); binomial sd 1.3 points
    x = rng.multivariate_normal(np.zeros(4), cov, size=38)
    for sign, name in ((1.0, "s0"), (-1.0, "-s0")):  # members tighter, then looser, a priori
        shifted = {f"s{j}": x[:, j] + sign * 2.5 * y * (j == 0) for j in range(4)}
        r = group_separation(shifted, y, permutations=2000, seed=1)
        assert r["separates"] and r["statistic"] == name and r["p"] < 0.01
        assert (r["aucs_a_priori"]["s0"] > 0.8) == (sign > 0)


def test_a_population_difference_makes_the_verdict_inconclusive_not_leaks():
    rng = np.random.default_rng(1)
    reps = [audit(rng, i, member_spread=0.45, nonmember_spread=0.7) for i in range(20)]
    unadjusted = [r["verdict"].get("unadjusted_leaks", r["verdict"]["leaks"]) for r in reps]
    assert np.mean(unadjusted) >= 0.8  # the bug: a model that never saw the members "leaks" them
    assert sum(r["verdict"]["leaks"] for r in reps) == 0
    assert all(r["reference"]["separates"] for r in reps)
    assert all(r["verdict"]["inconclusive"] == u for r, u in zip(reps, unadjusted))


def test_the_check_keeps_the_verdict_on_exchangeable_groups_both_with_and_without_membership():
    rng = np.random.default_rng(2)
    null = [audit(rng, i) for i in range(60)]
    assert np.mean([r["verdict"]["leaks"] for r in null]) <= 0.12  # level 0.05; sd 2.8 points over 60
    leaked = [audit(rng, i, tighten=0.6) for i in range(20)]
    assert np.mean([r["verdict"]["leaks"] for r in leaked]) >= 0.7  # membership is still found
    assert np.mean([r["reference"]["separates"] for r in leaked]) <= 0.2


def test_reference_embeddings_must_be_of_the_same_images():
    rng = np.random.default_rng(3)
    tm, tn, rm, rn, lm, ln = world(rng)
    with pytest.raises(PfdError, match="same images"):
        membership_report(tm, lm, tn, ln, folds=10, reference_member_emb=rm[:-1], reference_nonmember_emb=rn)
    with pytest.raises(PfdError, match="both the member and the non-member"):
        membership_report(tm, lm, tn, ln, folds=10, reference_member_emb=rm)
    # A reference of another width is fine (another architecture); torch tensors too.
    rep = membership_report(tm, lm, tn, ln, folds=10, permutations=50, reference_member_emb=torch.from_numpy(rm[:, :16]),
                            reference_nonmember_emb=torch.from_numpy(rn[:, :16]))
    assert set(rep["reference"]["aucs_a_priori"]) == {"pair_cos", "vmf_kappa", "pen_logit", "proto_ce"}
