"""The image-inversion loop (pfd.nn.inversion): a term through another model taken first."""

from __future__ import annotations

import torch
from torch import nn

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
