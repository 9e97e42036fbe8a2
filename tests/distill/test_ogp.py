"""OGP (eq. 1-5): the rotation stays in SO(D), never starts at I, and the losses match their formulas."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pfd.distill.ogp import (
    OGPStep,
    Rotation,
    det_sign,
    isometry_loss,
    ogp_classification_inputs,
    ogp_loss,
    ogp_param_groups,
    orthogonality_error,
    repulsion_loss,
    rotate,
)
from tests.distill_stubs import CosineHead, calibrated_net, one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_rotation_is_in_so_d_and_not_identity_at_init():
    M = Rotation(64, seed=0)()
    assert M.shape == (64, 64)
    assert orthogonality_error(M) < 1e-4
    sign, logabs = torch.linalg.slogdet(M.detach().double())
    assert sign.item() == 1.0 and abs(logabs.item()) < 1e-4
    assert torch.linalg.matrix_norm(M.detach() - torch.eye(64)) > 1.0


def test_rotation_equals_expm_of_a_minus_a_transpose():
    rot = Rotation(16, seed=3)
    a = rot.generator.detach()
    omega = a.tril(-1) - a.tril(-1).T
    torch.testing.assert_close(rot.skew().detach(), omega)
    torch.testing.assert_close(rot().detach(), torch.linalg.matrix_exp(omega), atol=1e-6, rtol=0)


def test_det_is_plus_one_for_twenty_seeds():
    signs = [det_sign(Rotation(64, seed=s)()) for s in range(20)]
    assert signs == [1] * 20


@pytest.mark.slow
def test_det_is_plus_one_at_d512_where_geotorch_init_fails():
    # geotorch's own Haar initialisation fixes the sign with torch.det, which underflows to 0
    # at D = 512 in float32, so about half its draws have det -1; ours must not.
    M = Rotation(512, seed=0)().detach()
    assert orthogonality_error(M) < 1e-4
    assert [det_sign(Rotation(512, seed=s)()) for s in range(1, 6)] + [det_sign(M)] == [1] * 6


def test_rotation_seed_reproducible_and_distinct():
    a, b, c = Rotation(8, seed=1)(), Rotation(8, seed=1)(), Rotation(8, seed=2)()
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError):
        Rotation(8, init_scale=0.0)


def test_stays_in_so_d_through_sgd_and_gradient_reaches_a():
    torch.manual_seed(0)
    rot = Rotation(64, seed=0, init_scale=0.05)
    target = torch.randn(64, 64)
    opt = torch.optim.SGD(rot.parameters(), lr=0.05, momentum=0.9)
    M0 = rot().detach().clone()
    for _ in range(50):
        M = rot()
        loss = ((M - target) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        assert rot.generator.grad is not None and rot.generator.grad.abs().sum() > 0
        opt.step()
    M = rot().detach()
    assert torch.linalg.matrix_norm(M - M0) > 0.1  # it moved
    assert orthogonality_error(M) < 1e-4
    assert det_sign(M) == 1


def test_rotate_is_row_convention_and_preserves_geometry():
    M = Rotation(32, seed=0)().detach()
    e = F.normalize(torch.randn(10, 32), dim=1)
    e_ort = rotate(e, M)
    torch.testing.assert_close(e_ort, (M @ e.T).T)  # eq. 1 for column vectors
    torch.testing.assert_close(e_ort @ e_ort.T, e @ e.T, atol=1e-5, rtol=0)
    torch.testing.assert_close(e_ort.norm(dim=1), torch.ones(10), atol=1e-5, rtol=0)


def test_classification_inputs_concatenate_and_shift_labels():
    M = Rotation(8, seed=0)().detach()
    f = torch.randn(4, 8) * 3
    y = torch.tensor([0, 2, 1, 2])
    f2, y2 = ogp_classification_inputs(f, M, y, 3)
    assert f2.shape == (8, 8) and y2.tolist() == [0, 2, 1, 2, 3, 5, 4, 5]
    torch.testing.assert_close(f2[:4], f)
    torch.testing.assert_close(F.normalize(f2[4:], dim=1), rotate(F.normalize(f, dim=1), M))
    torch.testing.assert_close(f2[4:].norm(dim=1), f.norm(dim=1))  # raw norms kept for AdaFace


def test_repulsion_loss_matches_formula_and_is_zero_below_margin():
    e = F.normalize(torch.randn(6, 5), dim=1)
    e_ort = F.normalize(torch.randn(6, 5), dim=1)
    cos = (e * e_ort).sum(1)
    expected = torch.clamp(cos.abs() - 0.1, min=0).mean()
    torch.testing.assert_close(repulsion_loss(e, e_ort, 0.1), expected)
    # Orthogonal pairs: |cos| = 0 < m.
    a = torch.eye(4)[:2]
    b = torch.eye(4)[2:]
    assert repulsion_loss(a, b, 0.2).item() == 0.0
    assert repulsion_loss(a, -a, 0.2).item() == pytest.approx(0.8)


def test_isometry_loss_formula_and_zero_when_prototypes_rotated():
    n, d = 5, 12
    M = Rotation(d, seed=0)().detach()
    w_real = torch.randn(n, d)
    exact = torch.cat([w_real, rotate(w_real, M) * 2.5], 0)  # scale must not matter
    assert isometry_loss(exact, M, n).item() == pytest.approx(0.0, abs=1e-6)
    w = torch.randn(2 * n, d)
    wn = F.normalize(w, dim=1)
    expected = torch.stack([1 - F.cosine_similarity(wn[n + i], M @ wn[i], dim=0) for i in range(n)]).mean()
    torch.testing.assert_close(isometry_loss(w, M, n), expected)
    with pytest.raises(ValueError, match="2N"):
        isometry_loss(torch.randn(7, d), M, n)


def test_ogp_loss_combines_eq5():
    torch.manual_seed(1)
    n, d, b = 3, 8, 4
    M = Rotation(d, seed=0)().detach()
    e = F.normalize(torch.randn(b, d), dim=1)
    e_ort = rotate(e, M)
    y2 = torch.tensor([0, 1, 2, 0, 3, 4, 5, 3])
    logits = torch.randn(2 * b, 2 * n)
    w = torch.randn(2 * n, d)
    total, comps = ogp_loss(logits, y2, e, e_ort, w, M, n, rep_margin=0.1, lambda_rep=2.0, lambda_iso=0.5)
    expected = F.cross_entropy(logits, y2) + 2.0 * repulsion_loss(e, e_ort, 0.1) + 0.5 * isometry_loss(w, M, n)
    torch.testing.assert_close(total, expected)
    assert set(comps) == {"cls", "rep", "iso"}


def test_ogp_step_trains_backbone_head_and_rotation_and_lowers_cos():
    torch.manual_seed(0)
    n, d, size = 4, 16, 16
    net = calibrated_net(size, d).train()
    head = CosineHead(d, 2 * n)
    rot = Rotation(d, seed=0, init_scale=0.02)  # starts close to I: |cos(Me, e)| high
    step = OGPStep(net, head, rot, num_identities=n, rep_margin=0.2, lambda_rep=1.0, lambda_iso=1.0)
    opt = torch.optim.SGD(ogp_param_groups(net, head, rot, lr=0.05, rotation_lr=0.2), lr=0.05, momentum=0.9)
    x = torch.rand(8, 3, size, size)
    y = torch.arange(8) % n
    first = step(x, y)
    assert first.M.requires_grad
    first.loss.backward()
    assert rot.generator.grad.abs().sum() > 0 and net.conv1.weight.grad.abs().sum() > 0
    assert head.weight.grad.abs().sum() > 0
    opt.zero_grad()
    for _ in range(15):
        out = step(x, y)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    assert out.components["cos_abs"] < first.components["cos_abs"]
    # M starts near I (all |cos(Me, e)| > m); after 15 steps most are below m (measured: 8/8).
    assert first.components["below_margin"] == 0.0 and out.components["below_margin"] > 0.5
    assert {p for p in step.parameters()} == set(net.parameters()) | set(head.parameters()) | {rot.generator}
    M = rot().detach()
    assert orthogonality_error(M) < 1e-4 and det_sign(M) == 1
