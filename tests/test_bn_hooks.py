"""BatchNorm statistics hooks (eq. 6): same-pass statistics, the loss formula, no side effects."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pfd.errors import PfdError
from pfd.nn.bn_hooks import BNStatistics, batch_moments
from tests.distill_stubs import calibrated_net, one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def _direct_moments(net, x):
    """Inputs of bn1 and bn2 recomputed by hand."""
    h = (x - 0.5) / 0.5
    a1 = net.conv1(h)
    a2 = net.conv2(net.prelu(net.bn1(a1)))
    out = []
    for a in (a1, a2):
        mean = a.mean(dim=(0, 2, 3))
        var = a.permute(1, 0, 2, 3).reshape(a.shape[1], -1).var(1, unbiased=False)
        out.append((mean, var))
    return out


def test_hook_statistics_and_loss_equal_direct_computation():
    net = calibrated_net(16, 8)
    x = torch.rand(6, 3, 16, 16)
    with BNStatistics(net, first_multiplier=10.0) as bn:
        assert len(bn) == 2  # BatchNorm2d only; the BatchNorm1d `features` is not hooked
        net(x)
        direct = _direct_moments(net, x)
        for (m, v), (dm, dv) in zip(bn.moments, direct):
            torch.testing.assert_close(m, dm, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(v, dv, atol=1e-5, rtol=1e-5)
        terms = [
            torch.linalg.vector_norm(dm - layer.running_mean) + torch.linalg.vector_norm(dv - layer.running_var)
            for (dm, dv), layer in zip(direct, (net.bn1, net.bn2))
        ]
        torch.testing.assert_close(bn.loss(), 10.0 * terms[0] + terms[1], atol=1e-4, rtol=1e-5)


def test_include_bn1d_hooks_features_layer():
    net = calibrated_net(16, 8)
    with BNStatistics(net, include_bn1d=True) as bn:
        assert bn.layers[-1] is net.features
        x = torch.rand(5, 3, 16, 16)
        net(x)
        mean, var = bn.moments[-1]
        fc = net.fc(torch.relu(net.bn2(net.conv2(net.prelu(net.bn1(net.conv1((x - 0.5) / 0.5)))))).flatten(1))
        torch.testing.assert_close(mean, fc.mean(0), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(var, fc.var(0, unbiased=False), atol=1e-5, rtol=1e-5)


def test_loss_is_zero_when_batch_matches_running_stats():
    torch.manual_seed(0)
    net = calibrated_net(16, 8)
    x = torch.rand(8, 3, 16, 16)
    # Running stats := this batch's statistics (torch keeps an unbiased running variance, so
    # set the buffers from the biased batch values directly).
    # Layer by layer: bn2's input depends on how bn1 normalises.
    for i, layer in enumerate((net.bn1, net.bn2)):
        mean, var = _direct_moments(net, x)[i]
        layer.running_mean.copy_(mean.detach())
        layer.running_var.copy_(var.detach())
    with BNStatistics(net) as bn:
        net(x)
        assert bn.loss().item() == pytest.approx(0.0, abs=1e-4)
        net(torch.rand(8, 3, 16, 16) * 0.5)  # a different batch is not at zero
        assert bn.loss().item() > 1e-2


def test_running_stats_untouched_and_gradient_reaches_input():
    net = calibrated_net(16, 8)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.rand(4, 3, 16, 16, requires_grad=True)
    with BNStatistics(net) as bn:
        net(x)
        bn.loss().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_hooks_removed_cleanly():
    net = calibrated_net(16, 8)
    n_before = sum(len(m._forward_hooks) for m in net.modules())
    bn = BNStatistics(net)
    assert sum(len(m._forward_hooks) for m in net.modules()) == n_before + 2
    with bn:
        pass
    assert not bn.active
    assert sum(len(m._forward_hooks) for m in net.modules()) == n_before
    net(torch.rand(2, 3, 16, 16))
    with pytest.raises(RuntimeError, match="did not run"):
        bn.loss()


def test_model_without_batchnorm_is_a_clear_error():
    with pytest.raises(PfdError, match="lambda_bn"):
        BNStatistics(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()))


def test_batch_moments_shapes():
    m, v = batch_moments(torch.randn(4, 3, 5))
    assert m.shape == (3,) and v.shape == (3,)


def test_batch_moments_match_torch_var_and_its_gradient():
    x = (torch.randn(5, 3, 4, 6, dtype=torch.float64) * 2 + 1.5).requires_grad_(True)
    shift = torch.tensor([1.0, -2.0, 0.5])
    m, v = batch_moments(x, shift=shift)
    torch.testing.assert_close(m, x.mean((0, 2, 3)).float(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(v, x.var((0, 2, 3), correction=0).float(), atol=1e-5, rtol=1e-5)
    w1, w2 = torch.randn(3), torch.randn(3)
    (w1 @ m + w2 @ v).backward()
    ref = x.detach().clone().requires_grad_(True)
    (w1.double() @ ref.mean((0, 2, 3)) + w2.double() @ ref.var((0, 2, 3), correction=0)).backward()
    torch.testing.assert_close(x.grad, ref.grad, atol=1e-5, rtol=1e-5)
    # channels_last (the CUDA layout) takes the strided reduction: same values
    xc = x.detach().float().contiguous(memory_format=torch.channels_last)
    mc, vc = batch_moments(xc, shift=shift)
    torch.testing.assert_close(mc, m.detach(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(vc, v.detach(), atol=1e-5, rtol=1e-5)
    x2 = torch.randn(7, 4) + 3.0  # (N, C): BatchNorm1d inputs, no shift
    m2, v2 = batch_moments(x2)
    torch.testing.assert_close(m2, x2.mean(0))
    torch.testing.assert_close(v2, x2.var(0, correction=0), atol=1e-5, rtol=1e-5)
