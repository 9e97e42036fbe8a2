"""Spatial feature statistics: where in the image a layer's activity falls, matched at domain level.

Not in the PFD paper. Eq. 6's ``L_bn`` matches each BatchNorm layer's *channel* statistics, which
pool over every position of the feature map: a face lit from the left and one lit from the right
have the same channel means. G-VBSM and EDC (``shaoshitong/EDC``, ``ConvFeatureHook``) also match,
per layer, the mean and variance of each spatial *patch* of its features, pooled over the batch,
the channels and the patch's pixels; the targets are those of the real data. That keeps where in
the image the shading falls, plausibly what a lighting domain needs.

Here, for every BatchNorm2d layer whose input map is at least ``grid × grid``:

    ``μ_p = mean over (b, c, pixels of region p)``, ``σ²_p = the biased variance over the same``,

for the ``grid × grid`` regions ``p`` of :func:`torch.nn.functional.adaptive_avg_pool2d` (G-VBSM
cuts 4 × 4-pixel patches of a map resized to a multiple of 4, so its count of patches varies per
layer; a fixed grid gives every layer the same regions of the face), and

    ``L_sp = Σ_l ‖μ_l − μ*_l‖₂ + ‖σ²_l − σ*²_l‖₂``

(L2 norms, not squared, as G-VBSM and eq. 6). The targets ``μ*, σ*²`` are **domain-level**: pooled
over every image of the private set (:func:`spatial_targets`), never per identity, which would be
per-person statistics here. They are private state (the prototypes file), like the adapted model's
BatchNorm running statistics they complement.
"""

from __future__ import annotations

from typing import Any, Iterable, TypedDict

import torch
import torch.nn.functional as F
from torch import nn

from pfd.errors import PfdError

__all__ = ["patch_moments", "spatial_targets", "SpatialStatistics", "SpatialTargets", "RegionMoments"]


class RegionMoments(TypedDict):
    """One layer's target: per region, the mean and biased variance ``(G²,)`` (float32)."""

    mean: torch.Tensor
    var: torch.Tensor


class SpatialTargets(TypedDict):
    """Domain-level targets of :class:`SpatialStatistics` (a plain dict in ``prototypes.pt``)."""

    grid: int
    layers: dict[str, RegionMoments]


def patch_moments(x: torch.Tensor, grid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and biased variance of each of the ``grid × grid`` regions of a feature map, pooled over
    the batch, the channels and the region's pixels.

    Args:
        x: ``(B, C, H, W)`` with ``H, W >= grid``.
        grid: Regions per side.

    Returns:
        ``(mean (grid², ), var (grid², ))`` float32, differentiable.
    """
    x = x.float()
    c = x.shape[1]
    # Channels first: two reductions over x, then pooling of (B, 1, H, W) maps (cheap), where pooling
    # x and x² themselves would cost a full pass each way. Equal-sized channels make the region's
    # mean over (channels, pixels) the region mean of the channel-mean map.
    mean_c = x.mean(1, keepdim=True)  # (B, 1, H, W) E_c[x]
    sq_c = torch.linalg.vector_norm(x, 2, dim=1, keepdim=True).square() / c  # (B, 1, H, W) E_c[x²]
    m1 = F.adaptive_avg_pool2d(mean_c, grid).mean(0).flatten()  # (G²,) E[x] per region
    m2 = F.adaptive_avg_pool2d(sq_c, grid).mean(0).flatten()  # (G²,) E[x²]
    return m1, (m2 - m1 * m1).clamp_min(0.0)


def _norm(d: torch.Tensor) -> torch.Tensor:
    """``‖d‖₂`` whose gradient at an exact match is the zero subgradient, not NaN."""
    sq = d.square().sum()
    return sq.clamp_min(torch.finfo(sq.dtype).tiny).sqrt()


def _layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]


class _Recorder:
    """Forward pre-hooks on every BatchNorm2d input, calling ``fn(name, x)`` where the map is large enough."""

    def __init__(self, model: nn.Module, grid: int, fn: Any) -> None:
        self.handles = []
        for name, m in _layers(model):
            def hook(_m: nn.Module, args: tuple[torch.Tensor, ...], name: str = name) -> None:
                x = args[0]
                if x.ndim == 4 and min(x.shape[-2:]) >= grid:
                    fn(name, x)

            self.handles.append(m.register_forward_pre_hook(hook))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


@torch.no_grad()
def spatial_targets(model: nn.Module, batches: Iterable[torch.Tensor], *, grid: int = 4) -> SpatialTargets:
    """Domain-level targets of :class:`SpatialStatistics`: each layer's region moments over a whole image set.

    Args:
        model: The frozen network, in eval mode (the one the proxies are distilled against).
        batches: Batches ``(B, 3, H, W)`` in [0, 1] covering the set once (un-augmented).
        grid: Regions per side.

    Returns:
        The :class:`SpatialTargets`: per layer, the mean and biased variance over every image,
        channel and pixel of each region (float32).

    Raises:
        PfdError: If no BatchNorm2d layer has a map of at least ``grid × grid``.
    """
    sums: dict[str, list[torch.Tensor]] = {}

    def add(name: str, x: torch.Tensor) -> None:
        x = x.double()
        s1 = F.adaptive_avg_pool2d(x, grid).sum((0, 1)).flatten()  # (G²,) Σ over images and channels of region means
        s2 = F.adaptive_avg_pool2d(x * x, grid).sum((0, 1)).flatten()
        n = torch.tensor(float(x.shape[0] * x.shape[1]), dtype=torch.float64)
        acc = sums.setdefault(name, [torch.zeros_like(s1), torch.zeros_like(s2), torch.zeros((), dtype=torch.float64)])
        acc[0] += s1.cpu()
        acc[1] += s2.cpu()
        acc[2] += n

    was = model.training
    model.eval()
    rec = _Recorder(model, grid, add)
    try:
        for x in batches:
            model(x)
    finally:
        rec.remove()
        model.train(was)
    if not sums:
        raise PfdError(f"{type(model).__name__}: no BatchNorm2d layer with a map of at least {grid}x{grid} for the "
                       "spatial statistics; lower rta.spatial_grid or set rta.lambda_spatial = 0")
    layers: dict[str, RegionMoments] = {}
    for name, (s1, s2, n) in sums.items():
        mean = s1 / n
        layers[name] = RegionMoments(mean=mean.float(), var=(s2 / n - mean * mean).clamp_min(0.0).float())
    return SpatialTargets(grid=int(grid), layers=layers)


class SpatialStatistics:
    """Same-pass spatial statistics of a model and ``L_sp`` against domain-level targets.

    While active, every BatchNorm2d input with a target records its region moments at each forward
    pass; :meth:`loss` returns ``L_sp`` of the last pass. Outputs and gradients of the model are
    those it has without it (pre-hooks only read the input). Use as a context manager or call
    :meth:`remove`.

    Args:
        model: The network (frozen, eval mode).
        targets: :func:`spatial_targets` of the same model.

    Raises:
        PfdError: If a target names a layer the model does not have.
    """

    def __init__(self, model: nn.Module, targets: SpatialTargets) -> None:
        self.grid = int(targets["grid"])
        self.targets = targets["layers"]
        names = {n for n, _ in _layers(model)}
        missing = sorted(set(self.targets) - names)
        if missing:
            raise PfdError(f"spatial statistics: the model has no layer {missing[0]!r}; the targets belong to another model")
        self._last: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

        def record(name: str, x: torch.Tensor) -> None:
            if name in self.targets:
                self._last[name] = patch_moments(x, self.grid)

        self._rec = _Recorder(model, self.grid, record)

    def loss(self) -> torch.Tensor:
        """``L_sp`` of the last forward pass.

        Raises:
            RuntimeError: If a layer with a target did not run since the last call.
        """
        if len(self._last) != len(self.targets):
            raise RuntimeError(f"{len(self.targets) - len(self._last)} layer(s) with spatial targets did not run; "
                               "call the model before loss()")
        total = None
        for name, (mean, var) in self._last.items():
            t = self.targets[name]
            d = _norm(mean - t["mean"].to(mean.device)) + _norm(var - t["var"].to(var.device))
            total = d if total is None else total + d
        self._last = {}
        return total  # type: ignore[return-value]

    def remove(self) -> None:
        """Stop recording (idempotent)."""
        self._rec.remove()
        self._last = {}

    def __enter__(self) -> "SpatialStatistics":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    def __len__(self) -> int:
        return len(self.targets)
