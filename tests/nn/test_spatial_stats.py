"""Spatial feature statistics: region moments against a direct computation, domain-level targets, the loss."""

from __future__ import annotations

import pytest
import torch

from pfd.errors import PfdError
from pfd.nn.backbones import create_backbone
from pfd.nn.spatial_stats import SpatialStatistics, patch_moments, spatial_targets


def _direct(x: torch.Tensor, grid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each region's mean and biased variance over (batch, channels, pixels), region by region."""
    h, w = x.shape[-2:]
    means, vars_ = [], []
    for i in range(grid):
        for j in range(grid):
            # adaptive pooling's regions: [floor(i h / G), ceil((i + 1) h / G))
            r = x[..., (i * h) // grid : -((-(i + 1) * h) // grid), (j * w) // grid : -((-(j + 1) * w) // grid)]
            means.append(r.double().mean())
            vars_.append(r.double().var(unbiased=False))
    return torch.stack(means).float(), torch.stack(vars_).float()


@pytest.mark.parametrize("hw, grid", [((8, 8), 4), ((14, 12), 4), ((7, 6), 3)])
def test_patch_moments_are_the_regions_mean_and_variance(hw, grid):
    x = torch.randn(3, 5, *hw, generator=torch.Generator().manual_seed(1)) * 2 + 1
    m, v = patch_moments(x, grid)
    rm, rv = _direct(x, grid)
    torch.testing.assert_close(m, rm, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v, rv, atol=1e-4, rtol=1e-4)


def _model() -> torch.nn.Module:
    m = create_backbone("ir18", width=0.125, size=32, embedding_dim=16).train()
    with torch.no_grad():  # running statistics of a few batches, as a trained model has
        for _ in range(3):
            m(torch.rand(16, 3, 32, 32))
    return m.eval().requires_grad_(False)


def test_domain_targets_pool_every_image_and_the_loss_vanishes_on_the_set_itself():
    model = _model()
    data = torch.rand(24, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    t = spatial_targets(model, [data[:10], data[10:]], grid=4)
    whole = spatial_targets(model, [data], grid=4)
    assert t["grid"] == 4 and set(t["layers"]) == set(whole["layers"]) and len(t["layers"]) > 0
    for name in t["layers"]:  # batches pooled exactly, whatever the split
        torch.testing.assert_close(t["layers"][name]["mean"], whole["layers"][name]["mean"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(t["layers"][name]["var"], whole["layers"][name]["var"], atol=1e-5, rtol=1e-4)
    x = data.clone().requires_grad_(True)
    with SpatialStatistics(model, whole) as sp:
        model(x)
        same = sp.loss()
        same.backward()
    assert float(same.detach()) < 1e-3 and torch.isfinite(x.grad).all()  # at the targets: zero, and no NaN gradient
    noise = (0.5 + 0.3 * torch.randn(24, 3, 32, 32, generator=torch.Generator().manual_seed(3))).clamp(0, 1)
    with SpatialStatistics(model, whole) as sp:
        model(noise)
        assert float(sp.loss()) > 100 * float(same.detach()) + 1e-3
    assert not any(m._forward_pre_hooks for m in model.modules())  # hooks removed


def test_targets_of_another_model_are_refused():
    model = _model()
    t = spatial_targets(model, [torch.rand(4, 3, 32, 32)], grid=4)
    t["layers"]["no.such.layer"] = next(iter(t["layers"].values()))
    with pytest.raises(PfdError, match="no layer 'no.such.layer'"):
        SpatialStatistics(model, t)
    with pytest.raises(PfdError, match="lower rta.spatial_grid"):
        spatial_targets(model, [torch.rand(2, 3, 32, 32)], grid=64)
