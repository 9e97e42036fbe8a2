"""MobileFaceNet (Chen et al. 2018, arXiv:1804.07573): a ~1 M-parameter face-recognition backbone.

The layout and key names are those of the public PyTorch MobileFaceNet whose CASIA-WebFace
weights sit in ``../shared/models/`` (``conv1, dw_conv1, blocks.0 … blocks.14, conv2, linear7,
linear1``), so that they load without remapping (:func:`pfd.nn.checkpoints.load_backbone`):

* ``conv1``: conv3x3 3 -> 64, stride 2, BN, PReLU; ``dw_conv1``: depthwise conv3x3, BN, PReLU;
* ``blocks``: inverted-residual bottlenecks from :data:`BOTTLENECKS` (expansion t, output
  channels c, repeats n, first stride s): ``conv`` = conv1x1 expand, BN, PReLU, depthwise
  conv3x3 (stride), BN, PReLU, conv1x1 linear projection, BN; a residual add when the stride is
  1 and the channels are equal;
* ``conv2``: conv1x1 128 -> 512, BN, PReLU;
* ``linear7``: the *global depthwise convolution* (GDC): a depthwise conv whose kernel covers the
  whole final ``H/16 x W/16`` map (7 x 6 for 112 x 96 faces), BN, no activation;
* ``linear1``: conv1x1 512 -> D, BN, no activation; flattened, the embedding.

Every conv is bias-free and followed by a BatchNorm with running statistics, so RTA's BN
regulariser (:mod:`pfd.nn.bn_hooks`) sees more than 50 layers, depthwise ones included.

Input: float RGB in ``[0, 1]``, ``(B, 3, H, W)`` with ``H`` and ``W`` multiples of 16 (the
network halves them four times); the model applies the weights' convention
``(pixel - 127.5) / 128`` inside ``forward``. The published weights take 112 high x 96 wide
crops (``size = [112, 96]``); 112 x 112 builds the same network with a 7 x 7 GDC. ``width``
scales every channel count for tiny CPU models (the tests); the embedding dimension is free.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
import torch
from torch import nn

from pfd.data.shape import canonical_size, image_hw, plain_size, size_text
from pfd.errors import PfdError
from pfd.nn.registry import Arch, BackboneFamily, FaceBackbone, register_backbone, register_family

__all__ = ["BOTTLENECKS", "MobileFaceNet", "mobilefacenet_channels"]

#: Bottleneck settings ``(t, c, n, s)`` of the published network (the paper's Table 1).
BOTTLENECKS: tuple[tuple[int, int, int, int], ...] = ((2, 64, 5, 2), (4, 128, 1, 2), (2, 128, 6, 1), (4, 128, 1, 2), (2, 128, 2, 1))
_STEM, _HEAD = 64, 512


class Channels(TypedDict):
    """MobileFaceNet's channel counts at a width: the stem, each bottleneck group's output, the head."""

    stem: int
    groups: list[int]
    head: int


def mobilefacenet_channels(width: float) -> Channels:
    """Channel counts at a width multiplier (``round``, at least 1): stem, per-group outputs, head."""
    if not width > 0:
        raise PfdError(f"backbone width must be > 0, got {width}; use e.g. 1.0 or 0.25")

    def scale(c: int) -> int:
        return max(1, int(round(c * width)))

    return Channels(stem=scale(_STEM), groups=[scale(c) for _, c, _, _ in BOTTLENECKS], head=scale(_HEAD))


def _check_size(size: Any) -> tuple[int, int]:
    h, w = image_hw(size, what="MobileFaceNet input size")
    if h % 16 or w % 16:
        raise PfdError(f"input size {size_text((h, w))} is not a multiple of 16 on both sides (MobileFaceNet halves "
                       "them four times before its global depthwise conv); use e.g. 112x96 or 112")
    return h, w


class ConvBlock(nn.Module):
    """Conv (bias-free), BN, then PReLU unless ``linear``; ``dw`` makes it depthwise."""

    def __init__(self, cin: int, cout: int, kernel: int | tuple[int, int], stride: int, padding: int, *,
                 dw: bool = False, linear: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, padding, groups=cin if dw else 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.linear = linear
        if not linear:
            self.prelu = nn.PReLU(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.conv(x))
        return x if self.linear else self.prelu(x)


class Bottleneck(nn.Module):
    """Inverted residual: expand (1x1), depthwise 3x3 (stride), project (1x1, linear)."""

    def __init__(self, cin: int, cout: int, stride: int, expansion: int) -> None:
        super().__init__()
        mid = cin * expansion
        self.connect = stride == 1 and cin == cout
        self.conv = nn.Sequential(
            nn.Conv2d(cin, mid, 1, 1, 0, bias=False), nn.BatchNorm2d(mid), nn.PReLU(mid),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.PReLU(mid),
            nn.Conv2d(mid, cout, 1, 1, 0, bias=False), nn.BatchNorm2d(cout),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return x + out if self.connect else out


class MobileFaceNet(FaceBackbone):
    """MobileFaceNet in the layout of the public PyTorch weights (see the module docstring).

    Args:
        arch: The rebuilding dict (``name``, ``width``, ``size`` ``[H, W]`` or ``S``,
            ``embedding_dim``, ``dropout``; dropout is unused: the network has none).
    """

    mean, std = 127.5, 128.0

    def __init__(self, arch: Arch) -> None:
        super().__init__(arch)
        h, w = _check_size(arch["size"])
        ch = mobilefacenet_channels(float(arch["width"]))
        self.conv1 = ConvBlock(3, ch["stem"], 3, 2, 1)
        self.dw_conv1 = ConvBlock(ch["stem"], ch["stem"], 3, 1, 1, dw=True)
        blocks: list[nn.Module] = []
        cin = ch["stem"]
        for (t, _, n, s), cout in zip(BOTTLENECKS, ch["groups"]):
            for i in range(n):
                blocks.append(Bottleneck(cin, cout, s if i == 0 else 1, t))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.conv2 = ConvBlock(cin, ch["head"], 1, 1, 0)
        self.linear7 = ConvBlock(ch["head"], ch["head"], (h // 16, w // 16), 1, 0, dw=True, linear=True)  # GDC
        self.linear1 = ConvBlock(ch["head"], self.embedding_dim, 1, 1, 0, linear=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming-normal convs (fan-out), BN weight 1 and bias 0, PReLU slopes 0.25."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 255.0 - self.mean) / self.std  # the weights' (pixel - 127.5) / 128

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, 3, H, W)`` RGB in [0, 1] -> raw features ``(B, D)``."""
        x = self.dw_conv1(self.conv1(self._prepare(x)))  # (B, C, H/2, W/2)
        x = self.conv2(self.blocks(x))  # (B, 512w, H/16, W/16)
        return self.linear1(self.linear7(x)).flatten(1)  # (B, D)


def _build(*, width: float = 1.0, size: Any = (112, 96), embedding_dim: int = 128, dropout: float = 0.0) -> nn.Module:
    """MobileFaceNet (Chen et al. 2018), 112 x 96 input and D = 128 by default, as published."""
    if int(embedding_dim) < 1:
        raise PfdError(f"embedding_dim must be >= 1, got {embedding_dim}")
    arch = Arch(name="mobilefacenet", width=float(width), size=plain_size(canonical_size(_check_size(size))),
                embedding_dim=int(embedding_dim), dropout=float(dropout))
    return MobileFaceNet(arch)


_build.__name__ = "mobilefacenet"


def _infer(sd: dict[str, torch.Tensor]) -> Arch | None:
    """``create_backbone`` arguments of a MobileFaceNet state dict: width from the stem, ``size`` ``[H, W]``
    from the global depthwise kernel (``H/16 x W/16``), D from ``linear1``; ``None`` for another layout."""
    if not ("dw_conv1.conv.weight" in sd and "linear7.conv.weight" in sd and "linear1.conv.weight" in sd):
        return None
    found_ids = {k[len("blocks.") :].split(".", 1)[0] for k in sd if k.startswith("blocks.")}
    n_blocks = len({int(i) for i in found_ids if i.isdigit()})
    expected = sum(n for _, _, n, _ in BOTTLENECKS)
    if n_blocks != expected:
        raise PfdError(f"MobileFaceNet weights with {n_blocks} bottlenecks match no known layout ({expected}: "
                       f"{list(BOTTLENECKS)}); pass arch=")
    firsts = np.cumsum([0] + [n for _, _, n, _ in BOTTLENECKS])[:-1]
    found = Channels(stem=int(sd["conv1.conv.weight"].shape[0]), head=int(sd["conv2.conv.weight"].shape[0]),
                     groups=[int(sd[f"blocks.{i}.conv.6.weight"].shape[0]) for i in firsts])
    bases = [_STEM, _HEAD, *(c for _, c, _, _ in BOTTLENECKS)]
    counts = [found["stem"], found["head"], *found["groups"]]
    width = next((w for w in sorted({c / b for c, b in zip(counts, bases)}) if mobilefacenet_channels(w) == found), None)
    if width is None:
        raise PfdError(f"MobileFaceNet channel counts {found} match no width multiplier; pass arch= with the model's settings")
    kh, kw = (int(k) for k in sd["linear7.conv.weight"].shape[-2:])
    return Arch(name="mobilefacenet", width=width, size=plain_size((16 * kh, 16 * kw)),
                embedding_dim=int(sd["linear1.conv.weight"].shape[0]), dropout=0.0)


def _unwrap(obj: Any) -> dict[str, torch.Tensor] | None:
    """The public MobileFaceNet training script's checkpoints: ``{"epoch": int, "net_state_dict": {...}}``."""
    return obj["net_state_dict"] if isinstance(obj, dict) and isinstance(obj.get("net_state_dict"), dict) else None


register_family(BackboneFamily("mobilefacenet", [112, 96], 128,
                               "MobileFaceNet (conv1, dw_conv1, blocks, conv2, linear7, linear1)", _infer, unwrap=_unwrap))
register_backbone("mobilefacenet", family="mobilefacenet")(_build)
