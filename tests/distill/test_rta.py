"""RTA (eq. 6-10): prototypes, the row-decomposed L_RTA, eq. 10, augmentation and the proxy loop."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pfd.config import RTAConfig
from pfd.nn.augment import augment_proxies
from pfd.distill.ogp import Rotation, rotate
from pfd.distill.rta import (
    ProxyDistiller,
    distill_loss,
    proxy_batches,
    rta_loss,
    rta_loss_full,
)
from pfd.distill.prototypes import kmeans_prototypes
from pfd.errors import PfdError
from pfd.nn.inversion import batch_generator, cosine_lr
from tests.distill_stubs import CosineHead, calibrated_net, one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

N, K, S, D = 4, 2, 16, 16


@pytest.fixture(scope="module")
def setup():
    """A tiny frozen model, rotated K-means prototypes of 'private' images and a 2N-class head."""
    torch.manual_seed(0)
    net = calibrated_net(S, D)
    # Two appearance modes per identity (3 images each), so the K = 2 prototypes are distinct.
    base = torch.rand(N * 2, 3, S, S)
    x = (base.repeat_interleave(3, 0) + 0.1 * torch.randn(N * 6, 3, S, S)).clamp(0, 1)
    y = torch.arange(N).repeat_interleave(6)
    with torch.no_grad():
        e = F.normalize(net(x), dim=1)
    M = Rotation(D, seed=0)().detach()
    P, pid = kmeans_prototypes(rotate(e, M), y, k=K, seed=0, n_init=3)
    head = CosineHead(D, 2 * N)
    with torch.no_grad():  # proxy classes N..2N-1 point at their identity's prototypes
        head.weight[N:] = F.normalize(P.view(N, K, D).mean(1), dim=1)
    return net, head, P, pid


def _cfg(**kw):
    base = dict(iterations=60, batch_size=8, lr=0.1, lambda_rta=1.0, lambda_bn=0.01, shift=1, seed=0)
    base.update(kw)
    return RTAConfig(**base)


# -- prototypes (eq. 8) ---------------------------------------------------------------------


def test_kmeans_prototypes_order_normalisation_and_determinism():
    rng = np.random.default_rng(0)
    # identity 0: 3 points near a, 1 near b; identity 1: 2 near c, 2 near d (tie: first member)
    a, b, c, d = np.eye(4)
    pts = [a, a, b, a, c, d, d, c]
    x = np.stack(pts) + 0.01 * rng.standard_normal((8, 4))
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    P, pid = kmeans_prototypes(torch.tensor(x, dtype=torch.float32), torch.tensor(y), k=2, seed=0)
    assert P.shape == (4, 4) and pid.tolist() == [0, 0, 1, 1]
    torch.testing.assert_close(P.norm(dim=1), torch.ones(4))
    assert P[0].argmax() == 0 and P[1].argmax() == 1  # bigger cluster (3 x a) first
    assert P[2].argmax() == 2 and P[3].argmax() == 3  # tie in size: cluster of sample 4 (c) first
    P2, _ = kmeans_prototypes(torch.tensor(x, dtype=torch.float32), torch.tensor(y), k=2, seed=0)
    assert torch.equal(P, P2)


def test_kmeans_identity_with_fewer_than_k_images_is_named():
    x = torch.randn(5, 4)
    y = torch.tensor([0, 0, 0, 1, 1])
    with pytest.raises(PfdError, match=r"identity 1 \('bob'\): 2 images, fewer than K = 3"):
        kmeans_prototypes(x, y, k=3, seed=0, identities=["alice", "bob"])
    with pytest.raises(PfdError, match="identity 2: 0 images"):
        kmeans_prototypes(x, y, k=1, seed=0, num_identities=3)


# -- eq. 9 / eq. 10 -------------------------------------------------------------------------


def test_rta_loss_rows_partition_sums_to_eq9():
    torch.manual_seed(0)
    nk, d = 7, 5
    P = F.normalize(torch.randn(nk, d), dim=1)
    E = F.normalize(torch.randn(nk, d), dim=1)
    full = rta_loss_full(E, P)
    # direct elementwise formula of eq. 9
    diff = (E @ P.T - P @ P.T).abs()
    direct = diff.diag().sum() / nk + (diff.sum() - diff.diag().sum()) / (nk * (nk - 1))
    torch.testing.assert_close(full, direct)
    perm = torch.randperm(nk)
    parts = [perm[:3], perm[3:5], perm[5:]]
    total = sum(rta_loss(E[r], r, P) for r in parts)
    torch.testing.assert_close(total, full)
    assert rta_loss(P, torch.arange(nk), P).item() == pytest.approx(0.0, abs=1e-6)


def test_distill_loss_combines_eq10():
    torch.manual_seed(0)
    P = F.normalize(torch.randn(6, 4), dim=1)
    emb = F.normalize(torch.randn(3, 4), dim=1)
    rows = torch.tensor([0, 4, 5])
    logits, targets = torch.randn(3, 8), torch.tensor([1, 7, 2])
    bn = torch.tensor(2.5)
    total, comps = distill_loss(emb, logits=logits, targets=targets, rows=rows, P=P, bn=bn, lambda_rta=3.0, lambda_bn=0.1)
    expected = F.cross_entropy(logits, targets) + 3.0 * rta_loss(emb, rows, P) + 0.1 * bn
    torch.testing.assert_close(total, expected)
    assert comps["bn"].item() == 2.5
    only_cls, c2 = distill_loss(emb, logits=logits, targets=targets)  # the sre2l-style subset
    torch.testing.assert_close(only_cls, F.cross_entropy(logits, targets))
    assert c2["rta"].item() == 0.0


def test_cosine_lr_and_batches():
    assert cosine_lr(0.25, 0, 100) == 0.25
    assert cosine_lr(0.25, 50, 100) == pytest.approx(0.125)
    assert cosine_lr(0.25, 100, 100) == pytest.approx(0.0)
    b = proxy_batches(10, 4)
    assert [x.tolist() for x in b] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


# -- augmentation ---------------------------------------------------------------------------


def test_augment_identity_flip_and_shift():
    x = torch.rand(3, 3, 8, 8)
    g = torch.Generator().manual_seed(0)
    same = augment_proxies(x, generator=g, crop_scale=(1.0, 1.0), flip=False, shift=0)
    torch.testing.assert_close(same, x, atol=1e-6, rtol=0)
    flipped = augment_proxies(x, generator=torch.Generator().manual_seed(1), crop_scale=(1.0, 1.0), flip=True)
    for i in range(3):
        assert torch.allclose(flipped[i], x[i], atol=1e-6) or torch.allclose(flipped[i], x[i].flip(-1), atol=1e-6)
    shifted = augment_proxies(x, generator=g, crop_scale=(1.0, 1.0), flip=False, shift=2)
    for i in range(3):
        rolls = [torch.roll(x[i], (dy, dx), (1, 2)) for dy in range(-2, 3) for dx in range(-2, 3)]
        assert any(torch.equal(shifted[i], r) for r in rolls)


def test_augment_is_seeded_per_image_and_differentiable():
    x = torch.rand(4, 3, 16, 16, requires_grad=True)
    a = augment_proxies(x, generator=torch.Generator().manual_seed(5), shift=2)
    b = augment_proxies(x, generator=torch.Generator().manual_seed(5), shift=2)
    assert torch.equal(a, b)
    c = augment_proxies(x, generator=torch.Generator().manual_seed(6), shift=2)
    assert not torch.equal(a, c)
    a.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


# -- the loop -------------------------------------------------------------------------------


def test_distill_lowers_rta_and_proxies_find_their_own_prototype(setup):
    net, head, P, pid = setup
    d = ProxyDistiller(net, head, P, size=S, cfg=_cfg())
    res = d.distill_batch(torch.arange(N * K), N + pid, batch_index=0)
    assert res.proxies.shape == (N * K, 3, S, S)
    assert res.proxies.min() >= 0 and res.proxies.max() <= 1
    assert res.last("rta") < 0.8 * res.first("rta")
    assert res.last("cls") < res.first("cls")
    sim = d.embed(res.proxies) @ P.T  # (NK, NK)
    own = (sim.argmax(1) == torch.arange(N * K)).float().mean().item()
    # measured: 8/8 (100%) on this setup; 'most' is the acceptance criterion
    assert own > 0.5, f"only {own:.0%} of proxies are closest to their own prototype"


def test_distill_is_deterministic_and_batches_independent(setup):
    net, head, P, pid = setup
    cfg = _cfg(iterations=6)
    d = ProxyDistiller(net, head, P, size=S, cfg=cfg)
    rows = torch.arange(4, 8)
    a = d.distill_batch(rows, N + pid[rows], batch_index=1)
    d.distill_batch(torch.arange(4), N + pid[:4], batch_index=0)  # other work in between
    b = ProxyDistiller(net, head, P, size=S, cfg=cfg).distill_batch(rows, N + pid[rows], batch_index=1)
    assert torch.equal(a.proxies, b.proxies) and a.history == b.history
    c = d.distill_batch(rows, N + pid[rows], batch_index=2)
    assert not torch.equal(a.proxies, c.proxies)
    assert batch_generator(0, 1).initial_seed() == batch_generator(0, 1).initial_seed()
    assert len({batch_generator(s, b).initial_seed() for s in (0, 1) for b in (0, 1, 2)}) == 6


def test_nan_loss_stops_with_error_naming_the_batch(setup):
    net, head, P, pid = setup

    def bad_head(features, labels):
        return head(features, labels) * float("nan")

    d = ProxyDistiller(net, bad_head, P, size=S, cfg=_cfg(iterations=3))
    with pytest.raises(PfdError, match="RTA batch 7: loss became nan at iteration 0"):
        d.distill_batch(torch.arange(4), N + pid[:4], batch_index=7)
    # hooks are gone after the failure
    assert sum(len(m._forward_hooks) for m in net.modules()) == 0


def test_frozen_model_is_not_modified(setup):
    net, head, P, pid = setup
    before = {k: v.clone() for k, v in net.state_dict().items()}
    ProxyDistiller(net, head, P, size=S, cfg=_cfg(iterations=3)).distill_batch(torch.arange(4), N + pid[:4], batch_index=0)
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())
    assert not any(p.requires_grad for p in net.parameters())


def test_sre2l_mode_without_prototypes(setup):
    net, head, _, pid = setup
    cfg = dataclasses.replace(_cfg(iterations=4), lambda_rta=0.0)
    res = ProxyDistiller(net, head, None, size=S, cfg=cfg).distill_batch(None, pid[:4], batch_index=0)
    assert res.proxies.shape == (4, 3, S, S) and all(v == 0.0 for v in res.history["rta"])


# -- issue 26: a start from public faces, spatial statistics, the frozen-slope PReLU ----------------


def test_a_public_start_begins_at_the_pool_photos(setup):
    from pfd.data.faceset import TensorFaces
    from pfd.distill.init_pool import InitPool

    net, head, P, pid = setup
    photos = torch.rand(N * K * 2, 3, S, S, generator=torch.Generator().manual_seed(4))
    pool = InitPool(TensorFaces(photos, np.repeat(np.arange(N * 2), K)), n_ids=N, k=K, seed=0)
    cfg = _cfg(iterations=1, lr=1e-9, init="public", init_data="pool")  # one step that moves nothing
    rows = torch.arange(N * K)
    res = ProxyDistiller(net, head, P, size=S, cfg=cfg, init_pool=pool).distill_batch(rows, N + pid, batch_index=0)
    torch.testing.assert_close(res.proxies, pool.images(rows.numpy()), atol=1e-6, rtol=0)
    with pytest.raises(PfdError, match="needs the pool"):
        ProxyDistiller(net, head, P, size=S, cfg=cfg)


def test_spatial_statistics_join_eq10_and_fall(setup):
    from pfd.nn.spatial_stats import spatial_targets

    net, head, P, pid = setup
    targets = spatial_targets(net, [torch.rand(16, 3, S, S, generator=torch.Generator().manual_seed(5))], grid=2)
    cfg = _cfg(iterations=30, lambda_spatial=1.0)
    res = ProxyDistiller(net, head, P, size=S, cfg=cfg, spatial=targets).distill_batch(
        torch.arange(N * K), N + pid, batch_index=0)
    assert len(res.history["spatial"]) == 30 and res.last("spatial") < res.first("spatial")
    with pytest.raises(PfdError, match="spatial statistics"):
        ProxyDistiller(net, head, P, size=S, cfg=cfg)


def test_the_frozen_prelu_path_distills_the_same_proxies_bit_for_bit():
    from pfd.nn.backbones import create_backbone

    torch.manual_seed(1)
    net = create_backbone("mobilefacenet", width=0.125, size=32, embedding_dim=D).train()
    with torch.no_grad():
        for _ in range(2):
            net(torch.rand(8, 3, 32, 32))
    net.eval()
    P = F.normalize(torch.randn(4, D), dim=1)
    cfg = _cfg(iterations=5)
    rows = torch.arange(4)
    fast = ProxyDistiller(net, None, P, size=32, cfg=cfg).distill_batch(rows, None, batch_index=0)
    aten = ProxyDistiller(net, None, P, size=32, cfg=cfg, fast_prelu=False).distill_batch(rows, None, batch_index=0)
    assert torch.equal(fast.proxies, aten.proxies) and fast.history == aten.history


def test_a_term_that_drowns_eq10_is_refused_at_the_first_step(setup):
    """Issue 34: --lambda-spatial 1e30 left every loss unchanged and the gate passed pure noise."""
    from pfd.distill.rta import DOMINANCE, dominant_term
    from pfd.nn.spatial_stats import spatial_targets

    assert dominant_term({"cls": 30.0, "rta": 0.6, "bn": 1450.0}, {"bn": 0.01}, lambda_rta=50.0) is None  # the demo's
    name, ratio = dominant_term({"cls": 1.0, "rta": 0.0, "spatial": 2.0, "bn": 1.0}, {"spatial": 1e6, "bn": 0.01},
                                lambda_rta=50.0)
    assert name == "spatial" and ratio == pytest.approx(2e6)
    assert dominant_term({"cls": 1.0, "spatial": 2.0}, {"spatial": DOMINANCE / 2.0}, lambda_rta=1.0) is None  # at the bar
    net, head, P, pid = setup
    targets = spatial_targets(net, [torch.rand(16, 3, S, S, generator=torch.Generator().manual_seed(5))], grid=2)
    with pytest.raises(PfdError, match=r"^rta\.lambda_spatial \(--lambda-spatial\) = 1e\+30 makes its term .* times eq\. "
                                       r"10's class terms at the first step of RTA batch 0: .*lower it to at most "):
        ProxyDistiller(net, head, P, size=S, cfg=_cfg(iterations=3, lambda_spatial=1e30), spatial=targets).distill_batch(
            torch.arange(N * K), N + pid, batch_index=0)


def test_the_total_variation_prior_joins_eq10_and_smooths_the_proxies(setup):
    net, head, P, pid = setup
    rows = torch.arange(N * K)
    plain = ProxyDistiller(net, head, P, size=S, cfg=_cfg(iterations=30)).distill_batch(rows, N + pid, batch_index=0)
    res = ProxyDistiller(net, head, P, size=S, cfg=_cfg(iterations=30, lambda_tv=100.0)).distill_batch(rows, N + pid, batch_index=0)
    assert "tv" not in plain.history and len(res.history["tv"]) == 30 and res.last("tv") < res.first("tv")
    from pfd.nn.image_prior import total_variation

    assert float(total_variation(res.proxies)) < 0.7 * float(total_variation(plain.proxies))  # measured 0.16 vs 0.31
    with pytest.raises(PfdError, match=r"^rta\.lambda_tv \(--lambda-tv\) = 1e\+30 makes its term"):
        ProxyDistiller(net, head, P, size=S, cfg=_cfg(iterations=3, lambda_tv=1e30)).distill_batch(rows, N + pid, batch_index=0)


def test_a_noise_start_is_drawn_on_the_downsampled_grid_with_its_full_spread(setup):
    """rta.downsample: the noise is drawn at H/f x W/f, not drawn at H x W and averaged down (which
    would start at a quarter of init_std for f = 4)."""
    net, head, P, pid = setup
    d = ProxyDistiller(net, head, P, size=S, cfg=_cfg(downsample=4, init_std=0.1))
    x = d.init_noise(64, torch.Generator().manual_seed(0))
    assert x.shape == (64, 3, S // 4, S // 4)
    assert 0.09 < float(x.std()) < 0.11
