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
    x = torch.rand(2, 3, 16, 16)
    plain = net(x)
    bn = BNStatistics(net)
    assert bn.active and "forward" in vars(net.bn1) and "forward" in vars(net.bn2)
    with pytest.raises(PfdError, match="already replaced"):
        BNStatistics(net)
    assert "forward" in vars(net.bn1)  # the refused second instance left the first one alone
    with bn:
        assert torch.equal(net(x), plain)  # the recording forward gives the layer's own output
    assert not bn.active
    assert not any("forward" in vars(m) for m in net.modules())
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in net.modules()) == 0
    net(torch.rand(2, 3, 16, 16))
    with pytest.raises(RuntimeError, match="did not run"):
        bn.loss()


def _reference_terms(net, x):
    """Eq. 6 the slow, obvious way: plain forward hooks, float64 mean/var, one norm per distance."""
    inputs = []
    handles = [m.register_forward_hook(lambda m, i, o: inputs.append((m, i[0]))) for m in (net.bn1, net.bn2)]
    try:
        out = net(x)
    finally:
        for h in handles:
            h.remove()
    terms = []
    for m, a in inputs:
        a = a.double()
        mean, var = a.mean((0, 2, 3)), a.var((0, 2, 3), correction=0)
        terms.append(torch.linalg.vector_norm(mean - m.running_mean.double())
                     + torch.linalg.vector_norm(var - m.running_var.double()))
    return out, terms


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_fused_statistics_equal_the_reference_in_value_and_gradient(frozen, layout):
    """Output, L_bn and the gradients (pixels, and BN affine parameters when trainable) equal the reference."""
    net = calibrated_net(16, 8).requires_grad_(not frozen)
    net = net.to(memory_format=layout)
    x0 = (torch.rand(6, 3, 16, 16, generator=torch.Generator().manual_seed(3)) * 0.8 + 0.1).contiguous(memory_format=layout)
    w_out = torch.randn(8, generator=torch.Generator().manual_seed(4))

    x = x0.clone().requires_grad_(True)
    out_ref, terms_ref = _reference_terms(net, x)
    loss_ref = (out_ref @ w_out).sum() + 0.5 * (10.0 * terms_ref[0] + terms_ref[1]).float()
    loss_ref.backward()
    grads_ref = {n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None}
    net.zero_grad(set_to_none=True)

    xf = x0.clone().requires_grad_(True)
    with BNStatistics(net, first_multiplier=10.0) as bn:
        out = net(xf)
        assert type(bn._stats[0][0].grad_fn).__name__ == "_EvalBNWithSumsBackward"  # the fused path ran
        terms = bn.terms()
        loss = (out @ w_out).sum() + 0.5 * bn.loss()
    assert torch.equal(out, out_ref)
    for t, r in zip(terms, terms_ref):
        torch.testing.assert_close(t.double(), r.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss, loss_ref.detach(), atol=1e-4, rtol=1e-5)
    loss.backward()
    torch.testing.assert_close(xf.grad, x.grad, atol=1e-5, rtol=1e-4)
    grads = {n: p.grad for n, p in net.named_parameters() if p.grad is not None}
    assert grads.keys() == grads_ref.keys() and (frozen == (not grads))
    for n in grads:
        torch.testing.assert_close(grads[n], grads_ref[n], atol=1e-4, rtol=1e-4, msg=n)


def test_moments_keep_their_precision_far_from_zero_and_in_training_mode():
    """Raw sums at a mean 10 standard deviations from zero, and the training-mode fallback."""
    net = calibrated_net(16, 8)
    layer = nn.BatchNorm2d(4).eval()
    layer.running_mean.fill_(10.0)
    with BNStatistics(nn.Sequential(layer)) as bn:
        a = torch.randn(8, 4, 5, 5, dtype=torch.float64) + 10.0
        bn.layers[0](a.float())
        mean, var = bn.moments[0]
        torch.testing.assert_close(mean.double(), a.mean((0, 2, 3)), atol=1e-5, rtol=0)
        torch.testing.assert_close(var.double(), a.var((0, 2, 3), correction=0), atol=0, rtol=1e-4)
    net.train()
    x = torch.rand(6, 3, 16, 16)
    with BNStatistics(net) as bn, torch.no_grad():
        before = net.bn1.running_mean.clone()
        net(x)
        assert not torch.equal(net.bn1.running_mean, before)  # training mode: the layer's own forward
        mean, var = bn.moments[0]
        a1 = net.conv1((x - 0.5) / 0.5)  # bn1's input
        torch.testing.assert_close(mean, a1.mean((0, 2, 3)), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(var, a1.var((0, 2, 3), correction=0), atol=1e-5, rtol=1e-5)
    assert bn.moments == [None, None]  # cleared on exit


def test_exactly_matched_layer_has_a_finite_gradient():
    layer = nn.BatchNorm2d(3).eval()
    a = torch.randn(4, 3, 2, 2)
    layer.running_mean.copy_(a.mean((0, 2, 3)))
    layer.running_var.copy_(a.var((0, 2, 3), correction=0))
    x = a.clone().requires_grad_(True)
    with BNStatistics(nn.Sequential(layer)) as bn:
        bn.layers[0](x)
        loss = bn.loss()
        loss.backward()
    assert float(loss.detach()) < 1e-5 and torch.isfinite(x.grad).all()


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


def test_set_moments_are_the_exact_bn_input_statistics_and_replace_the_running_ones_as_targets():
    """bn_input_moments over several batches = the moments of the whole set; loss(targets) matches them instead of eq. 6's."""
    from pfd.nn.bn_hooks import bn_input_moments

    net = calibrated_net(16, 8)
    x = torch.rand(10, 3, 16, 16, generator=torch.Generator().manual_seed(5))
    got = bn_input_moments(net, [x[:4], x[4:7], x[7:]])  # uneven batches: sums, not a mean of means
    want = _direct_moments(net, x)
    assert len(got) == len(want)
    for (m, v), (wm, wv) in zip(got, want):
        torch.testing.assert_close(m.double(), wm.double(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v.double(), wv.double(), atol=1e-5, rtol=1e-4)
    with BNStatistics(net, first_multiplier=10.0) as bn, torch.no_grad():
        net(x)
        assert bn.loss(got).item() < 1e-3  # the batch is the set: its own moments are matched
        assert bn.loss(got).item() < 0.01 * bn.loss().item()
        running = [(m.running_mean, m.running_var) for m in bn.layers]
        assert bn.loss(running).item() == pytest.approx(bn.loss().item(), rel=1e-6)  # the running stats as targets = eq. 6
        with pytest.raises(PfdError, match="do not fit the model's"):
            bn.loss(got[:-1])
    with pytest.raises(PfdError, match="no images"):
        bn_input_moments(net, [])
