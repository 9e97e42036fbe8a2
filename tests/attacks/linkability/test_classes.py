"""Class-level linking: each attack finds its planted pattern, the joint test is exact and calibrated under the null."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pfd.attacks.linkability.classes import CLASS_ATTACKS, class_groups, class_link_test, named_identities

N, IMGS, K, D = 24, 5, 8, 32


def _world(seed: int, *, spread: float = 0.05) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
    """Private images around identity centres; K proxies per class, tight around a centre that is
    independent of the class's source (a release at chance)."""
    g = torch.Generator().manual_seed(seed)
    c = F.normalize(torch.randn(N, D, generator=g), dim=1)
    labels, source = np.repeat(np.arange(N), IMGS), np.repeat(np.arange(N), K)
    private = F.normalize(c[labels] + 0.3 * torch.randn(N * IMGS, D, generator=g), dim=1)
    own = F.normalize(torch.randn(N, D, generator=g), dim=1).repeat_interleave(K, 0)
    proxies = F.normalize(own + spread * torch.randn(N * K, D, generator=g), dim=1)
    return proxies, private, labels, source


def _templates(private: torch.Tensor, labels: np.ndarray) -> torch.Tensor:
    return F.normalize(torch.stack([private[labels == i].sum(0) for i in range(N)]).double(), dim=1)


def _set_own_cos(proxies: torch.Tensor, t: torch.Tensor, source: np.ndarray, target: np.ndarray) -> torch.Tensor:
    """Move each proxy along its source's template until its cosine to it is ``target``."""
    x = proxies.double().clone()
    for _ in range(10):
        own = (x * t[source]).sum(1)
        x = F.normalize(x + (torch.as_tensor(target) - own)[:, None] * t[source], dim=1)
    return x.float()


def test_groups_are_the_sources_and_named_identities_follow_the_centroid():
    proxies, private, labels, source = _world(0)
    groups, where = class_groups(source)
    assert np.array_equal(groups, np.arange(N)) and np.array_equal(where, source)
    named, ids = named_identities(proxies, where, private, labels)
    assert named.shape == (len(CLASS_ATTACKS), N) and np.array_equal(ids, np.arange(N))
    t = _templates(private, labels)
    cos = F.normalize(torch.stack([F.normalize(proxies[source == c].double(), dim=1).sum(0) for c in range(N)]), dim=1) @ t.T
    assert np.array_equal(named[0], cos.argmax(1).numpy())  # nearest
    assert np.array_equal(named[1], cos.argmin(1).numpy())  # farthest
    assert np.array_equal(named[2], cos.abs().argmin(1).numpy())  # most orthogonal


@pytest.mark.parametrize("pattern, attack", [
    ("near", "centroid_nearest"), ("orthogonal", "centroid_orthogonal"),
    ("independent_ranks", "spread_most_cos"), ("one_exact_rank", "spread_least_cos"),
])
def test_each_attack_finds_its_planted_pattern(pattern, attack):
    # Pinned ranks show against others that vary (a wider class); independent ranks against others that keep still.
    proxies, private, labels, source = _world(1, spread=0.3 if pattern == "one_exact_rank" else 0.05)
    t = _templates(private, labels)
    rng = np.random.default_rng(0)
    cos = proxies.double() @ t.T  # (q, N)
    others = cos.clone()
    others[np.arange(len(source)), source] = float("nan")
    if pattern == "near":
        target = np.nanmax(others.numpy(), 1) + 0.05
    elif pattern == "orthogonal":  # eq. 3's hinge on its own
        target = np.zeros(len(source))
    elif pattern == "independent_ranks":  # the source anywhere among the others, drawn per proxy
        lo, hi = np.nanmin(others.numpy(), 1), np.nanmax(others.numpy(), 1)
        target = lo + rng.random(len(source)) * (hi - lo)
    else:  # every proxy's source pinned at rank N / 2: between its 12th and 13th other identity
        srt = np.sort(np.nan_to_num(others.numpy(), nan=np.inf), 1)[:, : N - 1]
        target = (srt[:, N // 2 - 1] + srt[:, N // 2]) / 2
    planted = _set_own_cos(proxies, t, source, target)
    out = class_link_test(planted, source, private, labels, permutations=2000)
    assert out["attacks"][attack]["count"] >= N // 2, out["attacks"]
    assert out["p"] <= 1 / 2001 + 1e-12
    assert out["chance"] == pytest.approx(1 / N) and out["classes"] == N


def test_the_p_value_is_exact_against_every_assignment():
    """4 identities, 4 classes: the permutation p-value against the 24 assignments, enumerated."""
    g = torch.Generator().manual_seed(3)
    private = F.normalize(torch.randn(12, 8, generator=g), dim=1)
    labels = np.repeat(np.arange(4), 3)
    proxies = F.normalize(torch.randn(12, 8, generator=g), dim=1)
    source = np.repeat(np.arange(4), 3)
    out = class_link_test(proxies, source, private, labels, permutations=40000, seed=5)
    named, _ = named_identities(proxies, source, private, labels, seed=5)
    best = (named == np.arange(4)[None, :]).sum(1).max()
    exact = np.mean([(named == np.array(p)[None, :]).sum(1).max() >= best for p in itertools.permutations(range(4))])
    assert out["count"] == best
    assert out["p"] == pytest.approx(exact, abs=0.01)
    assert out["data_floor"] == pytest.approx(1 / 24)


def test_at_chance_the_joint_test_refuses_at_its_level():
    """Releases at chance: the best of seven attacks refused at 10 % in about 10 % of audits, never far above."""
    ps = []
    for s in range(80):
        proxies, private, labels, source = _world(100 + s)
        ps.append(class_link_test(proxies, source, private, labels, permutations=500, seed=s)["p"])
    ps = np.array(ps)
    assert np.mean(ps <= 0.10) <= 0.2  # binomial(80, 0.1): P(>= 17) < 0.5 %
    assert np.mean(ps <= 0.5) >= 0.3  # not a test that never fires either
