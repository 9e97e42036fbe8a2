"""BN-prior inversion: moves images towards their targets, is seeded, leaves the model as it was."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pfd.attacks.linkability.reconstruction import BNInversion, check_reconstructions
from pfd.errors import PfdError
from tests.distill_stubs import calibrated_net, one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def _targets(net, n=6, size=16):
    with torch.no_grad():
        return F.normalize(net(torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(9))), dim=1)


def test_inversion_matches_its_targets_better_than_noise_and_restores_the_model():
    net = calibrated_net(16, 16)
    net.train()  # the inverter must use eval mode and then restore this
    net.conv1.weight.requires_grad_(True)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    t = _targets(net.eval())
    net.train()
    inv = BNInversion(net, size=16, iterations=40, batch_size=4, lr=0.1, seed=1)
    x = inv(t)
    assert x.shape == (6, 3, 16, 16) and x.min() >= 0 and x.max() <= 1
    net.eval()
    with torch.no_grad():
        cos = (F.normalize(net(x), dim=1) * t).sum(1)  # (6,)
        noise = (F.normalize(net(torch.rand(6, 3, 16, 16)), dim=1) * t).sum(1)
    assert cos.mean() > noise.mean() + 0.2
    assert len(inv.history) == 2  # two batches (4 + 2)
    assert inv.history[0]["cosine"] == pytest.approx(float(cos[:4].mean()), abs=1e-5)
    # Weights and BN buffers untouched; training flags and requires_grad restored.
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    net.train()
    x2 = BNInversion(net, size=16, iterations=40, batch_size=4, lr=0.1, seed=1)(t)
    assert net.training and net.bn1.training and net.conv1.weight.requires_grad
    assert torch.equal(x, x2)  # seeded: the same images again
    x3 = BNInversion(net, size=16, iterations=40, batch_size=4, lr=0.1, seed=2)(t)
    assert not torch.equal(x, x3)


def test_bn_prior_lowers_the_batchnorm_distance():
    from pfd.nn.bn_hooks import BNStatistics

    net = calibrated_net(16, 16)
    t = _targets(net)
    with_bn = BNInversion(net, size=16, iterations=60, batch_size=6, lambda_bn=0.1, seed=0)(t)
    without = BNInversion(net, size=16, iterations=60, batch_size=6, lambda_bn=0.0, seed=0)(t)
    with BNStatistics(net) as hooks, torch.no_grad():
        net(with_bn)
        l_with = float(hooks.loss())
        net(without)
        l_without = float(hooks.loss())
    assert l_with < l_without


def test_bad_inputs_and_reconstructor_outputs():
    net = calibrated_net(16, 16)
    with pytest.raises(PfdError, match="non-empty"):
        BNInversion(net, size=16, iterations=2)(torch.zeros(0, 16))
    with pytest.raises(PfdError, match="no BatchNorm"):
        BNInversion(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(768, 4)), size=16)
    assert check_reconstructions(torch.rand(3, 3, 8, 8), 3).shape == (3, 3, 8, 8)
    assert check_reconstructions(torch.rand(3, 3, 16, 8), 3).shape == (3, 3, 16, 8)  # H x W faces (MobileFaceNet)
    with pytest.raises(PfdError, match="expected \\(3, 3, H, W\\)"):
        check_reconstructions(torch.rand(2, 3, 8, 8), 3)
    with pytest.raises(PfdError, match="outside \\[0, 1\\]"):
        check_reconstructions(torch.rand(3, 3, 8, 8) * 255, 3)
    with pytest.raises(PfdError, match="returned a ndarray"):
        check_reconstructions(torch.rand(3, 3, 8, 8).numpy(), 3)


def test_progress_counts_every_step_and_history_keeps_each_batch_time(caplog):
    import logging

    net = calibrated_net(16, 16)
    t = _targets(net, n=5)
    inv = BNInversion(net, size=16, iterations=7, batch_size=2, seed=0, progress=True)
    with caplog.at_level(logging.INFO, logger="pfd.progress"):
        inv(t)  # stderr is not a terminal under pytest: no bar, one line when done
    assert "reconstruct 5 images: 21/21 done" in caplog.text  # 3 batches x 7 steps, one bar
    assert [h["images"] for h in inv.history] == [2, 2, 1]
    assert all(h["seconds"] > 0 for h in inv.history)
