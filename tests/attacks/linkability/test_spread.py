"""How tight classes are, in the null simulation's units (pfd.attacks.linkability.spread)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from pfd.attacks.linkability.spread import SIM_DIM, class_spread, simulation_sigma
from pfd.attacks.null import _view


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


@pytest.mark.parametrize("emb, labels, match", [
    (np.ones((4, 3)), np.zeros(4), "two classes"),
    (np.eye(3), np.arange(3), "two members"),
    (np.array([[1.0, np.nan], [0.0, 1.0]]), np.array([0, 1]), "finite"),
    (np.eye(3), np.arange(2), "labels"),
])
def test_refuses_what_has_no_spread(emb, labels, match):
    with pytest.raises(ValueError, match=match):
        class_spread(emb, labels)
