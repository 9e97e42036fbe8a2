"""How tight classes are, in the null simulation's units (pfd.attacks.linkability.spread)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from pfd.attacks.linkability.spread import SIM_DIM, class_spread, simulation_sigma
from pfd.attacks.null import _view
from pfd.errors import PfdError


@pytest.mark.parametrize("sigma", [0.02, 0.05, 0.1, 0.5])
def test_recovers_the_simulations_own_spread(sigma):
    """A simulated release measures back to the sigma it was drawn with (proxies and photos)."""
    n, k, imgs = 200, 10, 20
    view = _view(torch.Generator().manual_seed(1), n, k, imgs, SIM_DIM, sigma, 0.0, torch.zeros(n, dtype=torch.bool))
    proxies = class_spread(view["proxies"], np.repeat(np.arange(n), k))
    photos = class_spread(view["private"], np.repeat(np.arange(n), imgs))
    for s in (proxies, photos):
        assert s["sigma"] == pytest.approx(sigma, rel=0.06)
        assert abs(s["between"]) < 0.01  # random unit centres: strangers at cos 0
    assert proxies["classes"] == n


def test_matches_the_pairwise_definition_with_uneven_classes():
    rng = np.random.default_rng(0)
    labels = np.array([0, 0, 1, 1, 1, 2, 3, 3, 3, 3])  # class 2 has one member: it counts only as a stranger
    x = rng.normal(size=(len(labels), 5)) + 0.7  # anisotropic: strangers share a direction
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = u @ u.T
    within = np.mean([np.mean([cos[i, j] for i, j in itertools.permutations(np.flatnonzero(labels == c), 2)])
                      for c in (0, 1, 3)])
    between = np.mean([cos[i, j] for i, j in itertools.product(range(len(u)), repeat=2) if labels[i] != labels[j]])
    s = class_spread(x, labels)
    assert s["within"] == pytest.approx(within, abs=1e-12)
    assert s["between"] == pytest.approx(between, abs=1e-12)
    assert s["excess"] == pytest.approx((within - between) / (1 - between), abs=1e-12)
    assert s["classes"] == 3


def test_ends_of_the_scale():
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(30, 16))
    same = np.repeat(centres, 4, axis=0)  # every class one point
    s = class_spread(same, np.repeat(np.arange(30), 4))
    assert s["excess"] == pytest.approx(1.0) and s["sigma"] == pytest.approx(0.0, abs=1e-6)
    noise = rng.normal(size=(2000, 16))  # labels that mean nothing: no closer than strangers
    s = class_spread(noise, rng.integers(0, 100, size=2000))
    assert abs(s["excess"]) < 0.02
    assert simulation_sigma(0.0) == math.inf and simulation_sigma(-0.1) == math.inf
    assert simulation_sigma(1 / (1 + 0.25 * SIM_DIM)) == pytest.approx(0.5)


@pytest.mark.parametrize("emb, labels", [
    (np.ones((4, 3)), np.zeros(4)),  # one class: no strangers
    (np.eye(3), np.arange(3)),  # one member a class (K = 1): no pair within a class
])
def test_nothing_to_measure_is_none(emb, labels):
    assert class_spread(emb, labels) is None


@pytest.mark.parametrize("emb, labels, match", [
    (np.array([[1.0, np.nan], [0.0, 1.0]]), np.array([0, 1]), "NaN or inf"),
    (np.eye(3), np.arange(2), "one label per row"),
    (np.ones(3), np.arange(3), r"\(n, D\) matrix"),
])
def test_refuses_bad_input_with_the_fix(emb, labels, match):
    with pytest.raises(PfdError, match=match):
        class_spread(emb, labels)


def test_the_class_level_check_leaves_out_a_part_with_nothing_to_measure():
    """One proxy per identity: the check still runs, its spread has the photos only and its page says so."""
    from types import SimpleNamespace

    from pfd.attacks.linkability.attacks import ClassLinkAttack, ClassLinkConfig
    from pfd.audit.contract import AuditInputs

    n, imgs = 30, 4
    models = [SimpleNamespace(role="public", distance="cosine")]
    inputs = AuditInputs(cfg=SimpleNamespace(seed=0), state=None, sets=None, attackers=models,
                         source=np.arange(n), labels=np.repeat(np.arange(n), imgs), private_spec="simulated",
                         progress=False)
    inputs._emb["public"] = _view(torch.Generator().manual_seed(0), n, 1, imgs, SIM_DIM, 0.1, 0.0,
                                  torch.zeros(n, dtype=torch.bool))
    result = ClassLinkAttack(ClassLinkConfig(permutations=200)).run(inputs)
    spread = result.tests[0]["spread"]
    assert set(spread) == {"private"} and spread["private"]["sigma"] == pytest.approx(0.1, rel=0.15)
    assert "| public | – | – | – |" in "\n".join(result.markdown())
