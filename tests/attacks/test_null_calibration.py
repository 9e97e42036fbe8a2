"""Null calibration of every scorecard verdict: false LEAKS <= 7 % with no signal, >= 80 % with one.

Each test simulates many seeded audits at the level of embeddings or predictions (no training),
runs the verdict rule the scorecard uses, and counts how often it says LEAKS:

* membership: :func:`~pfd.attacks.membership.statistics.membership_report`'s permutation test, members and
  non-members drawn from the same people distribution (28 vs 28 identities);
* VisMatch / Re-ID: the clustered interval against the composition chance, with K proxies per
  source sharing one direction (clustered successes), unbalanced galleries and a source subset
  (where ``1/N`` would be the wrong chance);
* attributes: the identity-level permutation p-value, with clustered proxy labels.

A test at the 5 % level fires in 5 % of null audits in expectation; with these counts the
binomial sd is ~1.3-1.5 %, and the rules are conservative (exact intervals, discrete p-values),
so 7 % is a margin of ~2 sd above the nominal level. All draws are seeded, so the counts are
deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from pfd.attacks.attributes.recovery import attribute_recovery
from pfd.attacks.linkability.matching import rank1_reid, visual_matching
from pfd.attacks.membership.statistics import membership_report
from pfd.audit.contract import verdict

AUDITS = 240


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# -- membership ---------------------------------------------------------------------------------
def _identities(rng, n_ids, sigma, dim=16):
    """Unit embeddings: identity c has 3-6 images around a random centre, spread sigma_c."""
    k = rng.integers(3, 7, n_ids)
    labels = np.repeat(np.arange(n_ids), k)
    centre = _unit(rng.standard_normal((n_ids, dim)))
    s = np.asarray(sigma)[labels, None] if np.ndim(sigma) else sigma
    return _unit(centre[labels] + s * rng.standard_normal((labels.size, dim)) / np.sqrt(dim) * 2), labels


def _mia_leaks(seed: int, shift: float) -> bool:
    rng = np.random.default_rng([seed, 1])
    # Every identity has its own spread (people differ); members' are smaller by `shift`.
    sig_m = np.exp(0.25 * rng.standard_normal(28)) * (1.0 - shift)
    sig_n = np.exp(0.25 * rng.standard_normal(28))
    m, lm = _identities(rng, 28, sig_m)
    n, ln = _identities(rng, 28, sig_n)
    rep = membership_report(m, lm, n, ln, folds=30, permutations=200, seed=seed)  # folds > 28: no fusion
    return rep["verdict"]["leaks"]


def test_membership_verdict_is_calibrated_under_the_null_and_has_power():
    null = np.mean([_mia_leaks(s, 0.0) for s in range(AUDITS)])
    planted = np.mean([_mia_leaks(s, 0.3) for s in range(100)])
    print(f"membership: LEAKS under the null {null:.3f}, with a planted signal {planted:.3f}")
    assert null <= 0.07
    assert planted >= 0.8


# -- linkability --------------------------------------------------------------------------------
def _link_world(rng, signal: float, dim=16, n_ids=28, k=5):
    """Unbalanced iid gallery; the 14 identities with most images are sources of K proxies each."""
    counts = rng.integers(2, 21, n_ids)
    labels = np.repeat(np.arange(n_ids), counts)
    gallery = _unit(rng.standard_normal((labels.size, dim)))  # exchangeable rows: chance is exact
    sources = np.argsort(-counts, kind="stable")[:14]
    source = np.repeat(sources, k)
    # One shared direction per source (clustered proxies); with a signal it leans to the source's
    # template (Re-ID) or to one of its images (VisMatch).
    template = _unit(np.stack([gallery[labels == c].sum(0) for c in sources]))
    one_image = np.stack([gallery[np.flatnonzero(labels == c)[0]] for c in sources])
    shared = _unit(rng.standard_normal((sources.size, dim)))
    return gallery, labels, source, shared, template, one_image


def _link_leaks(seed: int, signal: float) -> tuple[bool, bool, float, float, bool]:
    rng = np.random.default_rng([seed, 2])
    gallery, labels, source, shared, template, one_image = _link_world(rng, signal)
    k = source.size // shared.shape[0]
    noise = 0.15 * rng.standard_normal((source.size, gallery.shape[1]))
    vis_q = np.repeat(_unit(shared + signal * 3 * one_image), k, 0) + noise
    reid_q = np.repeat(_unit(shared + signal * 3 * template), k, 0) + noise
    vm = visual_matching(vis_q, source, gallery, labels)
    ri = rank1_reid(reid_q, source, gallery, labels)
    return (verdict(vm.ci95, vm.chance) == "LEAKS", verdict(ri.ci95, ri.chance) == "LEAKS", vm.chance,
            ri.chance, verdict(vm.ci95, 1 / 28) == "LEAKS")


def test_linkability_verdicts_are_calibrated_under_the_null_and_have_power():
    null = np.array([_link_leaks(s, 0.0) for s in range(AUDITS)])
    planted = np.array([_link_leaks(s, 1.0) for s in range(100)])
    print(f"VisMatch: null {null[:, 0].mean():.3f}, planted {planted[:, 0].mean():.3f}; "
          f"Re-ID: null {null[:, 1].mean():.3f}, planted {planted[:, 1].mean():.3f}; "
          f"VisMatch chance {null[:, 2].mean():.4f} vs 1/28 = {1 / 28:.4f}")
    assert null[:, 0].mean() <= 0.07 and null[:, 1].mean() <= 0.07
    assert planted[:, 0].mean() >= 0.8 and planted[:, 1].mean() >= 0.8
    # The sources hold the most images, so VisMatch's chance is well above 1/N; Re-ID's is 1/N.
    assert null[:, 2].mean() > 1.3 / 28
    np.testing.assert_allclose(null[:, 3], 1 / 28)
    # Judged against 1/N instead, the same null audits would say LEAKS far more often.
    print(f"VisMatch against 1/N: null {null[:, 4].mean():.3f}")
    assert null[:, 4].mean() > 2 * null[:, 0].mean() + 0.02


# -- attributes ---------------------------------------------------------------------------------
def _attr_leaks(seed: int, signal: float) -> tuple[bool, bool]:
    rng = np.random.default_rng([seed, 3])
    n_ids, k, classes = 28, 5, 3
    true_attr = rng.integers(0, classes, n_ids)
    priv_ids = np.repeat(np.arange(n_ids), 4)
    priv_pred = true_attr[priv_ids]
    # The proxies of one source share a label (distilled from the same prototypes) 80 % of the time.
    shared = np.where(rng.random(n_ids) < signal, true_attr, rng.integers(0, classes, n_ids))
    source = np.repeat(np.arange(n_ids), k)
    proxy = np.where(rng.random(source.size) < 0.8, shared[source], rng.integers(0, classes, source.size))
    r = attribute_recovery(proxy, source, priv_pred, priv_ids, num_classes=classes, permutations=200, seed=seed)
    return (verdict(None, 0, p=r["p_balanced_accuracy"]) == "LEAKS", verdict(None, 0, p=r["p_macro_f1"]) == "LEAKS")


def test_attribute_verdicts_are_calibrated_under_the_null_and_have_power():
    null = np.array([_attr_leaks(s, 0.0) for s in range(AUDITS)])
    planted = np.array([_attr_leaks(s, 0.7) for s in range(100)])
    print(f"attributes: null {null.mean(0)}, planted {planted.mean(0)}")
    assert (null.mean(0) <= 0.07).all()
    assert (planted.mean(0) >= 0.8).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_reid_and_vismatch_disagree_when_the_nearest_image_is_not_the_nearest_template(seed):
    """Nearest single image of identity A, nearest template of identity B = the source.

    Source B has four images 25° around the proxy direction (template = the proxy direction);
    A has one image 10° from it and three far away. VisMatch links to A (fails), Re-ID to B
    (succeeds), so swapping one attack for the other fails this test.
    """
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((8, 8)))[0]  # random orientation of the construction
    e = basis.T
    a, b = np.deg2rad(25), np.deg2rad(10)
    b_imgs = np.stack([np.cos(a) * e[0] + s * np.sin(a) * e[j] for j in (1, 2) for s in (1, -1)])
    a_imgs = np.stack([np.cos(b) * e[0] + np.sin(b) * e[3], -e[0], e[4], -e[4]])
    gallery = np.concatenate([a_imgs, b_imgs])
    labels = np.array([0] * 4 + [1] * 4)
    proxy = e[:1]
    vm = visual_matching(proxy, [1], gallery, labels)
    ri = rank1_reid(proxy, [1], gallery, labels)
    assert vm.predicted.tolist() == [0] and not vm.success[0] and vm.match_index[0] == 0
    assert ri.predicted.tolist() == [1] and ri.success[0]
