"""IResNet face-recognition backbones with the state-dict layouts of public checkpoints.

Two layouts of the same "improved residual" network (BN - conv3x3 - BN - PReLU - conv3x3(stride)
- BN, plus a shortcut) are provided so that published weights load without key remapping:

* ``ir18 / ir34 / ir50 / ir100``: insightface ``arcface_torch`` (``conv1, bn1, prelu``,
  ``layer1..4`` of blocks ``bn1, conv1, bn2, prelu, conv2, bn3, downsample.0/1``, then
  ``bn2, dropout, fc, features``). ``features`` is an affine BatchNorm1d whose weight is frozen
  at 1 (only its bias trains), as insightface does.
* ``adaface_ir18 / 34 / 50 / 100``: AdaFace's ``net.py`` (``input_layer``, a flat ``body`` of
  ``BasicBlockIR`` with ``shortcut_layer`` = ``MaxPool2d(1, stride)`` when the channel count
  does not change, else conv1x1 + BN, and ``res_layer`` = BN, conv, BN, PReLU, conv(stride), BN;
  then ``output_layer`` = BN2d, Dropout, Flatten, Linear, BatchNorm1d without affine).
  AdaFace was trained on BGR input, so these models flip the channel order first.

Both take float RGB in ``[0, 1]`` of shape ``(B, 3, S, S)``, apply insightface's
``(x - 0.5) / 0.5`` inside ``forward`` and return raw, un-normalised features ``(B, D)``
(:class:`pfd.nn.registry.FaceBackbone`); :func:`pfd.nn.backbones.create_backbone` builds them by name.
``width`` scales every channel count (64, 128, 256, 512 at width 1) for tiny CPU models; any
``S`` divisible by 16 works (four stride-2 stages), the fc input being ``C4 · (S/16)²``.
BatchNorm layers are plain ``nn.BatchNorm2d/1d`` (eps 1e-5, momentum 0.1) so that BN-statistic
hooks (the RTA BatchNorm loss) see them.
"""

from __future__ import annotations

import math

from typing import Any, Callable

import torch
from torch import nn

from pfd.data.shape import image_hw, plain_size
from pfd.errors import PfdError
from pfd.nn.registry import Arch, BackboneFamily, FaceBackbone, register_backbone, register_family, strip_wrappers

__all__ = ["STAGE_BLOCKS", "IResNet", "AdaFaceIR", "stage_channels"]

#: Blocks per stage of each depth (insightface and AdaFace agree).
STAGE_BLOCKS: dict[int, tuple[int, int, int, int]] = {
    18: (2, 2, 2, 2),
    34: (3, 4, 6, 3),
    50: (3, 4, 14, 3),
    100: (3, 13, 30, 3),
}
_BASE_CHANNELS = (64, 128, 256, 512)
_BN_EPS = 1e-5


def stage_channels(width: float) -> tuple[int, int, int, int]:
    """Channel counts of the four stages at a width multiplier (``round``, at least 1)."""
    if not width > 0:
        raise PfdError(f"backbone width must be > 0, got {width}; use e.g. 1.0 or 0.25")
    return tuple(max(1, int(round(c * width))) for c in _BASE_CHANNELS)  # type: ignore[return-value]


def _check_size(size: Any) -> int | tuple[int, int]:
    """A side ``S`` (square faces, as insightface's checkpoints) or ``(H, W)``, each a multiple of 16.

    The fully connected layer takes ``C4 · (H/16) · (W/16)`` inputs, so a non-square size (a judge at
    a 112 x 96 release's size) is a different layer, not a resize; a square one stays an int so
    that square checkpoints keep their layout.
    """
    if isinstance(size, (list, tuple, str)):
        h, w = image_hw(size)
    elif isinstance(size, bool) or int(size) != size:
        raise PfdError(f"input size {size!r} is not a whole number of pixels; use e.g. 32, 64, 112 or 112x96")
    else:
        h = w = int(size)
    if h < 16 or w < 16 or h % 16 or w % 16:
        shown = str(h) if h == w else f"{h}x{w}"
        raise PfdError(f"input size {shown} is not a positive multiple of 16 on both sides (the backbone "
                       "halves it four times); use e.g. 32, 64, 112 or 112x96")
    return h if h == w else (h, w)


def _cells(size: int | tuple[int, int]) -> int:
    """Spatial cells of the last stage: ``(H/16) · (W/16)``."""
    h, w = image_hw(size)
    return (h // 16) * (w // 16)


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


# --- insightface arcface_torch layout -------------------------------------------------------


class IBasicBlock(nn.Module):
    """insightface's improved basic block: BN, conv3x3, BN, PReLU, conv3x3(stride), BN (+ shortcut)."""

    def __init__(self, cin: int, cout: int, stride: int, downsample: nn.Module | None) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin, eps=_BN_EPS)
        self.conv1 = _conv3x3(cin, cout)
        self.bn2 = nn.BatchNorm2d(cout, eps=_BN_EPS)
        self.prelu = nn.PReLU(cout)
        self.conv2 = _conv3x3(cout, cout, stride)
        self.bn3 = nn.BatchNorm2d(cout, eps=_BN_EPS)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
        shortcut = x if self.downsample is None else self.downsample(x)
        return out + shortcut


class IResNet(FaceBackbone):
    """IResNet in insightface ``arcface_torch`` layout.

    Args:
        arch: The rebuilding dict (``name``, ``width``, ``size``, ``embedding_dim``, ``dropout``).
        blocks: Blocks per stage, e.g. ``(2, 2, 2, 2)`` for IResNet-18.
    """

    def __init__(self, arch: Arch, blocks: tuple[int, int, int, int]) -> None:
        super().__init__(arch)
        chans = stage_channels(float(arch["width"]))
        size = _check_size(arch["size"])
        self.conv1 = _conv3x3(3, chans[0])
        self.bn1 = nn.BatchNorm2d(chans[0], eps=_BN_EPS)
        self.prelu = nn.PReLU(chans[0])
        cin = chans[0]
        for i, (cout, n) in enumerate(zip(chans, blocks), start=1):
            setattr(self, f"layer{i}", self._make_layer(cin, cout, n))
            cin = cout
        self.bn2 = nn.BatchNorm2d(cin, eps=_BN_EPS)
        self.dropout = nn.Dropout(p=float(arch["dropout"]))
        self.fc = nn.Linear(cin * _cells(size), self.embedding_dim)  # (C4·(H/16)·(W/16)) -> D
        self.features = nn.BatchNorm1d(self.embedding_dim, eps=_BN_EPS)
        # insightface freezes the scale of the final BN at 1 so that only its shift is learnt.
        self.features.weight.requires_grad = False
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """insightface's initialisation: conv N(0, 0.1²), BN weight 1 and bias 0."""
        nn.init.ones_(self.features.weight)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.1)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @staticmethod
    def _make_layer(cin: int, cout: int, n: int) -> nn.Sequential:
        # The first block of every stage strides by 2; its shortcut is always a conv1x1 + BN
        # (insightface adds it whenever stride != 1, even where channels match).
        down = nn.Sequential(_conv1x1(cin, cout, 2), nn.BatchNorm2d(cout, eps=_BN_EPS))
        layers = [IBasicBlock(cin, cout, 2, down)]
        layers += [IBasicBlock(cout, cout, 1, None) for _ in range(n - 1)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, 3, S, S)`` RGB in [0, 1] -> raw features ``(B, D)``."""
        x = self.prelu(self.bn1(self.conv1(self._prepare(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # (B, C4, S/16, S/16)
        x = torch.flatten(self.bn2(x), 1)
        return self.features(self.fc(self.dropout(x)))  # (B, D)


# --- AdaFace net.py layout ------------------------------------------------------------------


class BasicBlockIR(nn.Module):
    """AdaFace's IR block: ``res_layer`` (BN, conv, BN, PReLU, conv(stride), BN) + ``shortcut_layer``."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        if cin == cout:
            # A 1x1 max-pool is a pure strided subsample: no weights, unlike insightface.
            self.shortcut_layer: nn.Module = nn.MaxPool2d(1, stride)
        else:
            self.shortcut_layer = nn.Sequential(_conv1x1(cin, cout, stride), nn.BatchNorm2d(cout, eps=_BN_EPS))
        self.res_layer = nn.Sequential(
            nn.BatchNorm2d(cin, eps=_BN_EPS),
            _conv3x3(cin, cout),
            nn.BatchNorm2d(cout, eps=_BN_EPS),
            nn.PReLU(cout),
            _conv3x3(cout, cout, stride),
            nn.BatchNorm2d(cout, eps=_BN_EPS),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res_layer(x) + self.shortcut_layer(x)


class AdaFaceIR(FaceBackbone):
    """IResNet in AdaFace ``net.py`` layout (BGR input).

    Args:
        arch: The rebuilding dict (``name``, ``width``, ``size``, ``embedding_dim``, ``dropout``).
        blocks: Blocks per stage.
    """

    bgr = True

    def __init__(self, arch: Arch, blocks: tuple[int, int, int, int]) -> None:
        super().__init__(arch)
        chans = stage_channels(float(arch["width"]))
        size = _check_size(arch["size"])
        self.input_layer = nn.Sequential(
            _conv3x3(3, chans[0]), nn.BatchNorm2d(chans[0], eps=_BN_EPS), nn.PReLU(chans[0])
        )
        units: list[nn.Module] = []
        cin = chans[0]
        for cout, n in zip(chans, blocks):
            units.append(BasicBlockIR(cin, cout, 2))
            units += [BasicBlockIR(cout, cout, 1) for _ in range(n - 1)]
            cin = cout
        self.body = nn.Sequential(*units)
        self.output_layer = nn.Sequential(
            nn.BatchNorm2d(cin, eps=_BN_EPS),
            nn.Dropout(float(arch["dropout"])),
            nn.Flatten(),
            nn.Linear(cin * _cells(size), self.embedding_dim),
            nn.BatchNorm1d(self.embedding_dim, eps=_BN_EPS, affine=False),
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """AdaFace's initialisation: conv/linear Kaiming-normal (fan-out), BN weight 1, bias 0."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, 3, S, S)`` RGB in [0, 1] -> raw features ``(B, D)``.

        AdaFace's own forward returns ``(x / ‖x‖, ‖x‖)``; the raw ``x`` carries both.
        """
        return self.output_layer(self.body(self.input_layer(self._prepare(x))))  # (B, D)


# --- registry -------------------------------------------------------------------------------


def _builder(cls: type[FaceBackbone], name: str, depth: int) -> Callable[..., nn.Module]:
    def build(*, width: float = 1.0, size: int = 112, embedding_dim: int = 512, dropout: float = 0.0) -> nn.Module:
        arch = Arch(name=name, width=float(width), size=plain_size(_check_size(size)), embedding_dim=int(embedding_dim),
                    dropout=float(dropout))
        return cls(arch, STAGE_BLOCKS[depth])

    build.__name__ = name
    build.__doc__ = f"{cls.__name__}-{depth} ({'AdaFace' if cls is AdaFaceIR else 'insightface'} layout)."
    return build


# --- foreign weights: how each layout is recognised (pfd.nn.checkpoints.infer_arch asks every family) ---


def _count_indices(sd: dict[str, torch.Tensor], prefix: str) -> int:
    """Number of distinct ``i`` in keys ``prefix{i}.…``."""
    found = {k[len(prefix) :].split(".", 1)[0] for k in sd if k.startswith(prefix)}
    return len({int(i) for i in found if i.isdigit()})


def _infer_width(chans: tuple[int, ...]) -> float:
    for w in sorted({c / b for c, b in zip(chans, _BASE_CHANNELS)}):
        if stage_channels(w) == chans:
            return w
    raise PfdError(f"channel counts {chans} match no width multiplier; pass arch= with the model's settings")


def _depth(blocks: tuple[int, ...], family: str) -> int:
    for depth, b in STAGE_BLOCKS.items():
        if b == blocks:
            return depth
    known = ", ".join(f"{d}: {b}" for d, b in STAGE_BLOCKS.items())
    raise PfdError(f"{family} weights with {blocks} blocks per stage match no known depth ({known}); pass arch=")


def _arch(name: str, chans: tuple[int, ...], fc: torch.Tensor) -> Arch:
    """Width from the stage channels, ``size`` from the fc input (``C4 · (S/16)²``; square), D from its output."""
    width = _infer_width(chans)
    dim, fc_in = (int(x) for x in fc.shape)
    side = math.isqrt(fc_in // chans[3]) if fc_in % chans[3] == 0 else 0
    if side < 1 or side * side * chans[3] != fc_in:
        raise PfdError(f"fc input {fc_in} is not {chans[3]}·(size/16)²; pass arch= with the model's settings")
    return Arch(name=name, width=width, size=16 * side, embedding_dim=dim, dropout=0.0)


def _infer_insightface(sd: dict[str, torch.Tensor]) -> Arch | None:
    """An insightface ``arcface_torch`` state dict (``conv1``, ``layer1..4``, ``fc``): depth from the block counts."""
    if not ("conv1.weight" in sd and "layer1.0.conv1.weight" in sd and "fc.weight" in sd):
        return None
    blocks = tuple(_count_indices(sd, f"layer{s}.") for s in range(1, 5))
    chans = tuple(int(sd[f"layer{s}.0.conv2.weight"].shape[0]) for s in range(1, 5))
    return _arch(f"ir{_depth(blocks, 'insightface')}", chans, sd["fc.weight"])


def _infer_adaface(sd: dict[str, torch.Tensor]) -> Arch | None:
    """An AdaFace ``net.py`` state dict (``input_layer``, ``body``, ``output_layer``): a stage is a run of
    blocks with the same output channels."""
    if not ("input_layer.0.weight" in sd and "output_layer.3.weight" in sd):
        return None
    n = _count_indices(sd, "body.")
    groups: list[list[int]] = []
    for c in (int(sd[f"body.{i}.res_layer.4.weight"].shape[0]) for i in range(n)):
        if groups and groups[-1][0] == c:
            groups[-1].append(c)
        else:
            groups.append([c])
    name = f"adaface_ir{_depth(tuple(len(g) for g in groups), 'AdaFace')}"
    return _arch(name, tuple(g[0] for g in groups), sd["output_layer.3.weight"])


def _unwrap_lightning(obj: Any) -> dict[str, torch.Tensor] | None:
    """AdaFace's PyTorch-Lightning ``.ckpt``: the backbone under ``state_dict`` ``model.``, the head under ``head.``."""
    if not (isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict)):
        return None
    sd = strip_wrappers(obj["state_dict"])
    if any(k.startswith("model.") for k in sd):
        sd = {k[len("model.") :]: v for k, v in sd.items() if k.startswith("model.")}
    return strip_wrappers({k: v for k, v in sd.items() if not k.startswith("head.")})


register_family(BackboneFamily("insightface", 112, 512, "insightface (conv1, layer1..4, fc)", _infer_insightface))
register_family(BackboneFamily("adaface", 112, 512, "AdaFace (input_layer, body, output_layer)", _infer_adaface,
                               unwrap=_unwrap_lightning))
for _d in (18, 34, 50, 100):
    register_backbone(f"ir{_d}", family="insightface")(_builder(IResNet, f"ir{_d}", _d))
    register_backbone(f"adaface_ir{_d}", family="adaface")(_builder(AdaFaceIR, f"adaface_ir{_d}", _d))
