"""Frozen-slope PReLU: the same outputs and input gradients as aten's, bit for bit, without the slope's gradient."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pfd.nn.backbones import create_backbone
from pfd.nn.frozen_prelu import FrozenPReLU, frozen_prelu


@pytest.mark.parametrize("channels, shape", [(8, (4, 8, 5, 6)), (1, (3, 7, 4, 4)), (6, (5, 6))])
def test_frozen_prelu_matches_aten_bit_for_bit(channels, shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    x.view(-1)[:7] = 0.0  # exact zeros take the slope branch in aten (x > 0 is false)
    w = torch.randn(channels, generator=g)  # negative slopes included
    grad = torch.randn(shape, generator=g)
    a = x.clone().requires_grad_(True)
    y_ref = torch.prelu(a, w)
    y_ref.backward(grad)
    b = x.clone().requires_grad_(True)
    y = frozen_prelu(b, w)
    y.backward(grad)
    assert torch.equal(y, y_ref) and torch.equal(b.grad, a.grad)


def test_frozen_prelu_patches_only_frozen_layers_and_gives_them_back():
    model = create_backbone("mobilefacenet", width=0.125, size=(32, 32), embedding_dim=16).eval()
    x = torch.rand(4, 3, 32, 32)
    model.requires_grad_(False)
    xa = x.clone().requires_grad_(True)
    ref = model(xa)
    ref.sum().backward()
    with FrozenPReLU(model) as fp:
        assert len(fp) == sum(isinstance(m, nn.PReLU) for m in model.modules()) > 0
        xb = x.clone().requires_grad_(True)
        out = model(xb)
        out.sum().backward()
    assert torch.equal(out, ref) and torch.equal(xb.grad, xa.grad)  # the whole network, bit for bit
    assert not any("forward" in m.__dict__ for m in model.modules())  # every forward given back
    model.requires_grad_(True)  # a trainable slope keeps aten's PReLU (its gradient is wanted)
    assert len(FrozenPReLU(model)) == 0
