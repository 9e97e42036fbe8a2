"""The image prior of model inversion (pfd.nn.image_prior)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pfd.nn.image_prior import total_variation


def test_total_variation_against_its_definition():
    x = torch.rand(2, 3, 5, 7, generator=torch.Generator().manual_seed(0))
    a = x.numpy()
    ref = 0.5 * (np.abs(np.diff(a, axis=2)).mean() + np.abs(np.diff(a, axis=3)).mean())
    assert float(total_variation(x)) == pytest.approx(ref, rel=1e-5)
    assert float(total_variation(torch.full((1, 3, 8, 8), 0.3))) == 0.0  # a flat image
    # i.i.d. noise of std s: E|a - b| = 2 s / sqrt(pi) for a, b ~ N(0, s^2)
    s = 0.2
    noise = s * torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    assert abs(float(total_variation(noise)) - 2 * s / math.sqrt(math.pi)) < 0.005

