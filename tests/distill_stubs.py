"""Tiny stand-ins for the backbone and margin head used by the distillation tests.

They follow the contracts of ``pfd.nn.backbones.create_backbone`` (``(B,3,S,S)`` in [0,1] ->
``(B,D)`` raw features, BatchNorm layers inside) and ``pfd.nn.heads.create_head``
(``head(features, labels) -> logits``, ``head.weight (C, D)``), at a size that runs in
milliseconds on a CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn


class TinyNet(nn.Module):
    """conv-BN-PReLU x2 -> flatten -> linear -> BatchNorm1d, like a miniature IResNet."""

    def __init__(self, size: int = 16, dim: int = 16, width: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.prelu = nn.PReLU(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width * (size // 2) ** 2, dim)
        self.features = nn.BatchNorm1d(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - 0.5) / 0.5
        x = self.prelu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.features(self.fc(x.flatten(1)))


def calibrated_net(size: int = 16, dim: int = 16, *, seed: int = 0, batches: int = 3) -> TinyNet:
    """A TinyNet whose BN running statistics come from a few batches of random images."""
    torch.manual_seed(seed)
    net = TinyNet(size, dim)
    net.train()
    for bn in (net.bn1, net.bn2, net.features):
        bn.momentum = None  # cumulative average
    with torch.no_grad():
        for _ in range(batches):
            net(torch.rand(32, 3, size, size))
    return net.eval()


class CosineHead(nn.Module):
    """Normalised-weight cosine head with an additive (CosFace) margin on the target class."""

    def __init__(self, dim: int, num_classes: int, *, scale: float = 16.0, margin: float = 0.2) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_classes, dim))
        self.scale = scale
        self.margin = margin

    def cosine(self, features: torch.Tensor) -> torch.Tensor:
        return F.normalize(features, dim=1) @ F.normalize(self.weight, dim=1).T

    def forward(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cos = self.cosine(features)
        return self.scale * (cos - self.margin * F.one_hot(labels, cos.shape[1]).to(cos.dtype))


@pytest.fixture
def one_thread():
    """Run a test with one intra-op thread, then restore the previous setting.

    These tensors are tiny: on a shared 2-core box a second OpenMP thread only adds barrier
    waits (measured ~7x slower for these tests under load), and one thread is bitwise stable.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
