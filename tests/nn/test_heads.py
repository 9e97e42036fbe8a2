"""Margin heads against hand-computed logits; the g functions against their formulas."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pfd.errors import PfdError
from pfd.nn.heads import (
    HEADS,
    AdaFaceHead,
    MagFaceHead,
    adaface_g,
    arcface_g,
    cosface_g,
    create_head,
    magface_g,
    penalty,
)

S = 64.0
DEG = math.pi / 180


def _head(kind: str, **kw) -> torch.nn.Module:
    """D = 3, two classes with prototypes e1 and e2 (scaled: the head normalises them)."""
    head = create_head(kind, embedding_dim=3, num_classes=2, **kw)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.5, 0.0]]))
    return head.eval()


def _feature(theta_deg: float, norm: float) -> torch.Tensor:
    """A feature at angle θ from e1 in the (e1, e3) plane: cos to class 1 (e2) is 0."""
    t = theta_deg * DEG
    return torch.tensor([[math.cos(t), 0.0, math.sin(t)]]) * norm


def _target(head, theta_deg: float, norm: float = 30.0) -> float:
    logits = head(_feature(theta_deg, norm), torch.tensor([0]))
    assert logits[0, 1].item() == pytest.approx(0.0, abs=1e-5)  # s · cos 90°
    return logits[0, 0].item()


# --- hand-computed logits -------------------------------------------------------------------


def test_arcface_logits():
    head = _head("arcface")
    assert _target(head, 60) == pytest.approx(S * math.cos(60 * DEG + 0.5), abs=1e-4)
    # θ + m > π: the linear continuation cos θ − m·sin m, not the rising cos(θ + m).
    assert _target(head, 170) == pytest.approx(S * (math.cos(170 * DEG) - 0.5 * math.sin(0.5)), abs=1e-4)
    easy = _head("arcface", easy_margin=True, margin=0.3, scale=10.0)
    assert _target(easy, 60) == pytest.approx(10 * math.cos(60 * DEG + 0.3), abs=1e-4)
    assert _target(easy, 120) == pytest.approx(10 * math.cos(120 * DEG), abs=1e-4)


def test_cosface_logits():
    head = _head("cosface")
    assert _target(head, 60) == pytest.approx(S * (0.5 - 0.4), abs=1e-4)
    assert _target(head, 170) == pytest.approx(S * (math.cos(170 * DEG) - 0.4), abs=1e-4)


def test_adaface_logits_follow_the_norm():
    head = _head("adaface")
    head.batch_mean.fill_(20.0)
    head.batch_std.fill_(10.0)
    m, h = 0.4, 0.333
    # Average norm: ẑ = 0, CosFace.
    assert _target(head, 60, norm=20.0) == pytest.approx(S * (0.5 - m), abs=1e-4)
    # High norm (clipped to ẑ = +1): negative angular margin, doubled additive one.
    assert _target(head, 60, norm=90.0) == pytest.approx(S * (math.cos(60 * DEG - m) - 2 * m), abs=1e-4)
    # Low norm: ẑ = h (1 − 20) / (10 + 0.001).
    z = h * (1.0 - 20.0) / 10.001
    expected = S * (math.cos(60 * DEG - m * z) - (m + m * z))
    assert _target(head, 60, norm=1.0) == pytest.approx(expected, abs=1e-4)
    assert head.norm_z(torch.tensor([1.0, 20.0, 90.0])).tolist() == pytest.approx([z, 0.0, 1.0], abs=1e-6)


def test_adaface_margin_direction():
    """ẑ = −1 is ArcFace, 0 CosFace, +1 cos(θ − m) − 2m; ẑ grows with the norm."""
    cos = torch.cos(torch.tensor([30.0, 60.0, 110.0]) * DEG)
    assert torch.allclose(adaface_g(cos, 0.4, norm_z=-1.0), arcface_g(cos, 0.4), atol=1e-6)
    assert torch.allclose(adaface_g(cos, 0.4, norm_z=0.0), cosface_g(cos, 0.4), atol=1e-6)
    assert torch.allclose(adaface_g(cos, 0.4), cosface_g(cos, 0.4), atol=1e-6)
    theta = torch.arccos(cos)
    assert torch.allclose(adaface_g(cos, 0.4, norm_z=1.0), torch.cos(theta - 0.4) - 0.8, atol=1e-6)
    # θ < m·ẑ: AdaFace clips the shifted angle at 0 rather than letting cos turn back down.
    assert adaface_g(torch.cos(torch.tensor(20.0 * DEG)), 0.4, norm_z=1.0).item() == pytest.approx(0.2, abs=1e-5)
    head = _head("adaface")
    z = head.norm_z(torch.tensor([5.0, 15.0, 25.0, 60.0, 100.0]))
    assert (z[1:] > z[:-1]).all()


def test_adaface_ema_updates_only_in_training():
    head = _head("adaface")
    feats = torch.cat([_feature(40, 10.0), _feature(70, 30.0), _feature(10, 500.0)])  # 500 clips to 100
    labels = torch.tensor([0, 0, 1])
    head(feats, labels)  # eval mode: statistics frozen
    assert head.batch_mean.item() == 20.0 and head.batch_std.item() == 100.0
    head.train()
    head(feats, labels)
    norms = torch.tensor([10.0, 30.0, 100.0])
    assert head.batch_mean.item() == pytest.approx(0.99 * 20 + 0.01 * norms.mean().item(), rel=1e-6)
    assert head.batch_std.item() == pytest.approx(0.99 * 100 + 0.01 * norms.std().item(), rel=1e-6)
    head(feats[:1], labels[:1])  # a single sample has no std: keep it
    assert head.batch_std.item() == pytest.approx(0.99 * 100 + 0.01 * norms.std().item(), rel=1e-6)
    assert set(dict(head.named_buffers())) == {"batch_mean", "batch_std"}


def test_magface_margin_range_and_logits():
    head = _head("magface")
    m = head.margin_for(torch.tensor([1.0, 10.0, 60.0, 110.0, 500.0]))
    assert m.tolist() == pytest.approx([0.45, 0.45, 0.625, 0.8, 0.8], abs=1e-6)
    assert _target(head, 60, norm=60.0) == pytest.approx(S * math.cos(60 * DEG + 0.625), abs=1e-4)
    # MagFace's easy margin: no margin for cos θ ≤ 0.
    assert _target(head, 120, norm=60.0) == pytest.approx(S * math.cos(120 * DEG), abs=1e-4)
    strict = _head("magface", easy_margin=False)
    assert _target(strict, 120, norm=110.0) == pytest.approx(S * math.cos(120 * DEG + 0.8), abs=1e-4)


def test_magface_margin_pushes_the_norm():
    """The margin depends on the (non-detached) norm: a larger norm lowers the target logit."""
    head = _head("magface")
    f = _feature(50, 40.0).requires_grad_()
    head(f, torch.tensor([0]))[0, 0].backward()
    radial = (f.grad * F.normalize(f.detach(), dim=1)).sum()
    assert radial < 0
    # AdaFace detaches the norm: no radial gradient.
    ada = _head("adaface")
    f2 = _feature(50, 40.0).requires_grad_()
    ada(f2, torch.tensor([0]))[0, 0].backward()
    assert abs((f2.grad * F.normalize(f2.detach(), dim=1)).sum().item()) < 1e-6


def test_magface_regularizer():
    head = _head("magface")
    feats = torch.cat([_feature(10, 10.0), _feature(10, 110.0), _feature(10, 500.0)])
    g = [1 / 10 + 10 / 110**2, 1 / 110 + 110 / 110**2, 1 / 110 + 110 / 110**2]  # 500 clips to 110
    assert head.regularizer(feats).item() == pytest.approx(35.0 * sum(g) / 3, rel=1e-6)
    for kind in ("arcface", "cosface", "adaface"):
        assert _head(kind).regularizer(feats).item() == 0.0


# --- shared behaviour -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_non_target_logits_are_scaled_cosines(kind):
    head = create_head(kind, embedding_dim=8, num_classes=6).train()
    feats = torch.randn(5, 8) * 30
    labels = torch.tensor([0, 3, 5, -1, 2])
    logits = head(feats, labels)
    cos = F.normalize(feats, dim=1) @ F.normalize(head.weight.detach(), dim=1).T
    assert logits.shape == (5, 6) and logits.dtype == torch.float32
    mask = F.one_hot(labels.clamp(min=0), 6).bool()
    mask[3] = False  # label −1: no margin anywhere in that row
    assert torch.allclose(logits[~mask], S * cos[~mask], atol=1e-4)
    assert torch.allclose(head.cosine(feats), cos, atol=1e-6)
    # ... while the target entries carry the margin.
    assert not torch.allclose(logits[mask], S * cos[mask], atol=1e-3)
    logits.logsumexp(1).sum().backward()
    assert torch.isfinite(head.weight.grad).all()


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_fp32_logits_under_bf16_autocast(kind):
    head = create_head(kind, embedding_dim=8, num_classes=4).eval()  # eval: AdaFace's EMA stays put
    feats = (torch.randn(6, 8) * 30).to(torch.bfloat16)
    labels = torch.tensor([0, 1, 2, 3, 0, 1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = head(feats, labels)
        cos = head.cosine(feats)
    assert logits.dtype == torch.float32 and cos.dtype == torch.float32
    # Identical to the computation without autocast: nothing was rounded to bf16 inside.
    assert torch.equal(logits, head(feats.float(), labels))


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_spec_rebuilds_the_head(kind):
    head = create_head(kind, embedding_dim=4, num_classes=3, scale=30.0)
    again = create_head(**head.spec())
    assert again.spec() == head.spec() and type(again) is type(head)
    assert head.weight.shape == (3, 4)


def test_defaults_and_weight_init():
    assert (_head("arcface").scale, _head("arcface").margin) == (64.0, 0.5)
    assert _head("cosface").margin == 0.4
    assert _head("adaface").margin == 0.4 and _head("adaface").opts == {"h": 0.333, "t_alpha": 0.01}
    assert _head("magface").opts["lambda_g"] == 35.0
    w = create_head("arcface", embedding_dim=128, num_classes=200).weight
    assert w.mean().abs() < 1e-3 and w.std().item() == pytest.approx(0.01, rel=0.05)


def test_bad_head_arguments():
    with pytest.raises(PfdError, match="arcface, cosface"):
        create_head("sphereface", embedding_dim=3, num_classes=2)
    with pytest.raises(PfdError, match="no option"):
        create_head("cosface", embedding_dim=3, num_classes=2, h=0.5)
    with pytest.raises(PfdError, match="l_m/u_m"):
        create_head("magface", embedding_dim=3, num_classes=2, margin=0.5)
    with pytest.raises(PfdError, match="scale"):
        create_head("arcface", embedding_dim=3, num_classes=2, scale=0.0)


# --- g functions ----------------------------------------------------------------------------


def test_g_functions_match_formulas():
    thetas = [5.0, 45.0, 89.0, 100.0, 150.0, 175.0]
    cos = torch.cos(torch.tensor(thetas, dtype=torch.float64) * DEG)
    m = 0.5
    arc = [math.cos(t * DEG + m) if t * DEG + m <= math.pi else math.cos(t * DEG) - m * math.sin(m) for t in thetas]
    assert arcface_g(cos, m).tolist() == pytest.approx(arc, abs=1e-9)
    easy = [math.cos(t * DEG + m) if t < 90 else math.cos(t * DEG) for t in thetas]
    assert arcface_g(cos, m, easy_margin=True).tolist() == pytest.approx(easy, abs=1e-9)
    assert magface_g(cos, m).tolist() == pytest.approx(easy, abs=1e-9)
    assert magface_g(cos, m, easy_margin=False).tolist() == pytest.approx(arc, abs=1e-9)
    assert cosface_g(cos, 0.4).tolist() == pytest.approx([math.cos(t * DEG) - 0.4 for t in thetas], abs=1e-12)
    # Per-sample margins broadcast.
    ms = torch.linspace(0.45, 0.8, len(thetas), dtype=torch.float64)
    assert magface_g(cos[:3], ms[:3]).tolist() == pytest.approx(
        [math.cos(t * DEG + mm) for t, mm in zip(thetas[:3], ms[:3].tolist())], abs=1e-9
    )
    # ArcFace's g is monotone decreasing in θ over the whole range (the point of the fallback).
    grid = torch.cos(torch.linspace(0.01, math.pi - 0.01, 500, dtype=torch.float64))
    assert (arcface_g(grid, m).diff() < 0).all()


def test_heads_use_the_module_g_and_penalty_lookup():
    cos = torch.tensor([0.9, 0.2, -0.5])
    assert torch.equal(_head("arcface").g(cos), arcface_g(cos, 0.5))
    assert torch.equal(_head("cosface").g(cos, 0.1), cosface_g(cos, 0.1))
    ada = _head("adaface")
    assert isinstance(ada, AdaFaceHead)
    z = torch.tensor([1.0, 0.0, -1.0])
    assert torch.equal(ada.g(cos, norm_z=z), adaface_g(cos, 0.4, norm_z=z))
    mag = _head("magface")
    assert isinstance(mag, MagFaceHead)
    assert torch.equal(mag.g(cos, 0.6), magface_g(cos, 0.6))
    with pytest.raises(ValueError, match="margin_for"):
        mag.g(cos)
    assert penalty("ArcFace") is arcface_g and penalty("magface") is magface_g
    with pytest.raises(ValueError, match="known heads"):
        penalty("nope")
