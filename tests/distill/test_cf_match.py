"""Characteristic-function matching (the ``ncfm`` baseline): NCFM's discrepancy, its min-max sampler, its batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pfd.distill.cf_match import CFTarget, cf_discrepancy
from pfd.errors import PfdError


def _clusters(n: int, dim: int, centre: torch.Tensor, spread: float, gen: torch.Generator) -> torch.Tensor:
    return F.normalize(centre + spread * torch.randn(n, dim, generator=gen), dim=1)


def test_the_discrepancy_with_unit_weights_is_the_distance_between_characteristic_functions():
    gen = torch.Generator().manual_seed(0)
    real, synth, t = (torch.randn(n, 5, generator=gen, dtype=torch.float64) for n in (7, 4, 32))
    phi_r = torch.exp(1j * (t @ real.T)).mean(1)  # (F,) complex, straight from the definition
    phi_s = torch.exp(1j * (t @ synth.T)).mean(1)
    want = (phi_r - phi_s).abs().mean()
    got = cf_discrepancy(real, synth, t, alpha=1.0, beta=1.0)
    assert got.item() == pytest.approx(want.item(), rel=1e-9)
    # NCFM's weights (0.5, 0.5) halve the squared distance: sqrt(0.5) times it at every frequency
    half = cf_discrepancy(real, synth, t)
    assert half.item() == pytest.approx(want.item() / np.sqrt(2), rel=1e-9)


def test_the_discrepancy_is_zero_for_one_set_and_grows_with_the_shift_between_sets():
    gen = torch.Generator().manual_seed(1)
    d = 16
    a = F.normalize(torch.randn(d, generator=gen), dim=0)
    real = _clusters(40, d, 3 * a, 1.0, gen)
    t = torch.randn(512, d, generator=gen)
    assert cf_discrepancy(real.double(), real.double(), t.double()).item() < 1e-5  # the clamp: sqrt(0.5e-12)
    near = _clusters(40, d, 3 * a, 1.0, gen)
    far = _clusters(40, d, -3 * a, 1.0, gen)
    assert cf_discrepancy(real, near, t).item() < 0.5 * cf_discrepancy(real, far, t).item()


def test_minimising_it_with_the_min_max_sampler_moves_proxies_onto_their_own_class():
    """Free points on the sphere stand in for proxies: NCFM's loop must pull each class's points to its private features."""
    gen = torch.Generator().manual_seed(2)
    d, n_ids = 16, 3
    centres = F.normalize(torch.randn(n_ids, d, generator=gen), dim=1) * 3
    gallery = torch.cat([_clusters(20, d, centres[c], 1.0, gen) for c in range(n_ids)])  # (60, D)
    labels = np.repeat(np.arange(n_ids), 20)
    sources = np.repeat(np.arange(n_ids), 4)  # 4 proxies per identity
    x = torch.randn(len(sources), d, generator=gen).requires_grad_(True)
    target = CFTarget(gallery, labels, frequencies=256, sampler_lr=1e-3, seed=0)
    batch = target.batch(sources, batch_index=0)
    opt = torch.optim.Adam([x], lr=0.05)
    first = None
    for _ in range(150):
        loss = batch.loss(F.normalize(x, dim=1))
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
        batch.step()
    emb = F.normalize(x.detach(), dim=1)
    means = F.normalize(torch.stack([gallery[labels == c].mean(0) for c in range(n_ids)]), dim=1)
    nearest = (emb @ means.T).argmax(1).numpy()
    assert (nearest == sources).all()  # every proxy ends nearest its own identity's features
    assert batch.loss(emb).item() < 0.5 * first


def test_the_sampler_ascends_the_loss_the_proxies_descend():
    gen = torch.Generator().manual_seed(3)
    gallery, labels = F.normalize(torch.randn(10, 8, generator=gen), dim=1), np.repeat([0, 1], 5)
    emb = F.normalize(torch.randn(4, 8, generator=gen), dim=1)
    batch = CFTarget(gallery, labels, frequencies=64, seed=0).batch(np.array([0, 0, 1, 1]), batch_index=3)
    state = batch.generator.get_state()
    batch.loss(emb).backward()
    reversed_grads = [p.grad.clone() for p in batch.sampler.parameters()]
    batch.sampler.zero_grad()
    batch.generator.set_state(state)  # the same noise, the loss without the reversal
    t = batch.sampler()
    plain = torch.stack([cf_discrepancy(r, emb[i], t) for r, i in zip(batch.real, batch.members)]).mean()
    grads = torch.autograd.grad(plain, list(batch.sampler.parameters()))
    for g_rev, g in zip(reversed_grads, grads):
        assert torch.allclose(g_rev, -g, atol=1e-6)


def test_batches_draw_their_own_reproducible_frequencies():
    gallery, labels = F.normalize(torch.randn(6, 4), dim=1), np.repeat([0, 1, 2], 2)
    target = CFTarget(gallery, labels, frequencies=32, sampler_lr=0.0, seed=5)
    t0 = target.batch(np.array([0, 1]), batch_index=0).frequencies()
    assert torch.equal(t0, target.batch(np.array([0, 1]), batch_index=0).frequencies())
    assert not torch.equal(t0, target.batch(np.array([0, 1]), batch_index=1).frequencies())
    a = CFTarget(gallery, labels, frequencies=32, seed=5).batch(np.array([0, 1]), batch_index=0).sampler
    b = CFTarget(gallery, labels, frequencies=32, seed=5).batch(np.array([0, 1]), batch_index=0).sampler
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    state = torch.get_rng_state()
    CFTarget(gallery, labels, seed=6).batch(np.array([0]), batch_index=0)
    assert torch.equal(state, torch.get_rng_state())  # building a sampler leaves the global generator alone


def test_an_identity_without_private_features_and_no_frequencies_are_refused():
    gallery, labels = F.normalize(torch.randn(4, 4), dim=1), np.array([0, 0, 1, 1])
    with pytest.raises(PfdError, match="identity 2 has no private embeddings"):
        CFTarget(gallery, labels).batch(np.array([0, 2]), batch_index=0)
    with pytest.raises(PfdError, match="cf_frequencies = 0"):
        CFTarget(gallery, labels, frequencies=0)
