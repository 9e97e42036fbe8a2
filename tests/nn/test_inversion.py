"""The image-inversion loop (pfd.nn.inversion): a term through another model taken first."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pfd.errors import PfdError
from pfd.nn.inversion import ImageInversion


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.PReLU(8), nn.AdaptiveAvgPool2d(2),
                      nn.Flatten(), nn.Linear(32, 16)).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def test_a_term_through_another_model_taken_first_gives_the_same_proxies_as_one_backward_pass():
    main, other = _net(0), _net(1)
    target = torch.randn(4, 16, generator=torch.Generator().manual_seed(2))

    def other_term(x: torch.Tensor) -> torch.Tensor:
        return 3.0 * (other(x) - target).square().mean()

    def engine() -> ImageInversion:
        return ImageInversion(main, size=12, iterations=15, lr=0.1, lambda_bn=1.0, crop_scale=(0.7, 1.0), flip=True,
                              shift=1, frozen=[other], seed=5)

    def together(x, feats, bn):
        main_part = feats.square().mean() + 0.01 * bn.loss()
        return main_part + other_term(x), {"main": main_part.detach()}

    def apart(x, feats, bn):
        main_part = feats.square().mean() + 0.01 * bn.loss()
        return main_part, {"main": main_part.detach()}

    one, two = engine(), engine()
    a = one.invert(together, n=4, batch_index=3).detach()
    b = two.invert(apart, n=4, batch_index=3, first=other_term).detach()
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    assert not torch.allclose(a, engine().invert(apart, n=4, batch_index=3).detach(), atol=1e-3)  # the term matters
    # The recorded total is the whole loss, the other model's term included.
    assert torch.allclose(torch.tensor(one.history["total"]), torch.tensor(two.history["total"]), rtol=1e-4)


def _band_energy(x: torch.Tensor, low: int) -> float:
    """Share of the images' (mean-removed) spectral energy above the ``low``-pixel grid's Nyquist frequency."""
    f = torch.fft.fft2(x - x.mean(dim=(-2, -1), keepdim=True)).abs().square()  # (n, 3, H, W)
    h = x.shape[-1]
    k = torch.fft.fftfreq(h).abs() * h  # cycles per image
    high = (k[:, None] > low / 2) | (k[None, :] > low / 2)  # (H, W)
    return float(f[..., high].sum() / f.sum())


def test_a_downsampled_parameterisation_optimises_a_low_resolution_image_and_upsamples_it():
    """IDC's parameterisation: what the model sees is the optimised 6x6 tensor upsampled to 12x12,
    so it holds (almost) no energy above the 6-pixel grid, where full-resolution pixels hold plenty."""
    net = _net(0)
    target = torch.randn(4, 16, generator=torch.Generator().manual_seed(2))
    seen: list[torch.Tensor] = []  # every batch the model saw

    def loss(x, feats, bn):
        seen.append(x.detach())
        return (feats - target).square().mean(), {}

    full = ImageInversion(net, size=12, iterations=20, lr=0.1).invert(loss, n=4, batch_index=0).detach()
    seen.clear()
    eng = ImageInversion(net, size=12, iterations=20, lr=0.1, downsample=2)
    low = eng.invert(loss, n=4, batch_index=0).detach()
    assert low.shape == full.shape == (4, 3, 12, 12) and 0 <= float(low.min()) and float(low.max()) <= 1
    # Each image the model saw is the bilinear upsampling of a 6x6 image, the returned one too: it lies
    # in the range of the upsampling's 144 x 36 matrix U (its projection U U+ leaves it unchanged).
    U = eng.render(torch.eye(36).reshape(36, 1, 6, 6)).reshape(36, 144).T  # (144, 36)
    project = U @ torch.linalg.pinv(U)  # (144, 144)
    for x in (seen[0], seen[-1], low, full):
        v = x.reshape(-1, 144).T  # (144, n*3)
        residual = float((project @ v - v).abs().max())
        assert (residual < 1e-5) == (x is not full), residual
    assert _band_energy(low, 6) < 0.5 * _band_energy(full, 6)  # measured 0.06 vs 0.24 (bilinear images leak some)
    # A start given at full size is averaged down to the grid first; a size the factor does not divide is refused.
    start = torch.full((4, 3, 12, 12), 0.5)
    flat = ImageInversion(net, size=12, iterations=0, lr=0.1, downsample=3).invert(loss, n=4, batch_index=0, start=start)
    assert torch.allclose(flat, start)
    with pytest.raises(PfdError, match="downsample 5 must be a whole number >= 1 that divides the image size 12x12"):
        ImageInversion(net, size=12, iterations=1, lr=0.1, downsample=5)
