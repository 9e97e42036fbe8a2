"""Differentiable per-iteration augmentation of the images being inverted (RTA, as in SRe2L's recover step).

SRe2L (Yin et al. 2023, ``recover/data_synthesis.py``) re-augments the synthetic batch at every
iteration before the forward pass: ``RandomResizedCrop(size)`` (torchvision's default scale range
(0.08, 1) and aspect ratio (3/4, 4/3)), ``RandomHorizontalFlip()``, then a random cyclic shift
(``torch.roll`` by up to ``jitter`` pixels). Gradients flow through the augmentation to the
un-augmented proxies.

Differences here, deliberate:

* Parameters are drawn **per image** (SRe2L draws one crop/flip/shift for the whole batch,
  because torchvision transforms on a batched tensor draw once). Per-image draws give the BN
  statistics of eq. 6 a more varied batch at the same cost: all crops and flips are one
  ``affine_grid`` + ``grid_sample`` call (bilinear), all shifts one ``gather``.
* The crop scale range is configurable and defaults to (0.5, 1) in :class:`~pfd.config.RTAConfig`:
  aligned faces lose their structure under 8 % crops.
* Aspect ratio is drawn log-uniformly in (3/4, 4/3) as torchvision does, but instead of
  torchvision's 10 rejection trials and centre-crop fallback the side fractions are clipped to 1.
* The cyclic shift is symmetric, ``[−shift, shift]`` pixels per axis (SRe2L: ``[0, jitter]``;
  a cyclic shift by ``−k`` is a shift by ``S − k``, so only the distribution differs).

All random numbers come from a caller-provided CPU :class:`torch.Generator`, so a batch's
augmentations are reproducible from its seed regardless of the device.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["augment_proxies"]


def _uniform(n: int, lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)


def augment_proxies(
    x: torch.Tensor,
    *,
    generator: torch.Generator,
    crop_scale: tuple[float, float] = (0.5, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    flip: bool = True,
    shift: int = 0,
) -> torch.Tensor:
    """Random-resized-crop, horizontal flip and cyclic shift, per image, differentiable.

    Args:
        x: Proxies ``(B, C, H, W)`` (gradients flow back to them).
        generator: CPU generator that draws every random parameter.
        crop_scale: Range of the crop area as a fraction of the image; ``(1, 1)`` disables.
        ratio: Range of the crop aspect ratio (width / height).
        flip: Flip each image horizontally with probability 1/2.
        shift: Maximum cyclic translation in pixels along each axis (0 disables).

    Returns:
        ``(B, C, H, W)`` augmented batch, same dtype and device as ``x``.
    """
    b, _, h, w = x.shape
    lo, hi = float(crop_scale[0]), float(crop_scale[1])
    out = x
    if lo < 1.0 or flip:
        f64 = torch.float64
        if lo < 1.0:
            area = _uniform(b, lo, hi, generator)  # (B,)
            r = torch.exp(_uniform(b, math.log(ratio[0]), math.log(ratio[1]), generator))
            cw = torch.sqrt(area * r).clamp(max=1.0)  # crop width as a fraction of W
            ch = torch.sqrt(area / r).clamp(max=1.0)
            cx = cw / 2 + torch.rand(b, generator=generator, dtype=f64) * (1 - cw)  # centre in [0, 1]
            cy = ch / 2 + torch.rand(b, generator=generator, dtype=f64) * (1 - ch)
        else:  # flip only: the whole image, exactly
            cw = ch = torch.ones(b, dtype=f64)
            cx = cy = torch.full((b,), 0.5, dtype=f64)
        fx = torch.ones(b, dtype=f64)
        if flip:
            fx = torch.where(torch.rand(b, generator=generator) < 0.5, -1.0, 1.0).to(f64)
        theta = torch.zeros(b, 2, 3, dtype=f64)
        # affine_grid maps output coords in [-1, 1] to input coords: x_in = θ00 x_out + θ02.
        theta[:, 0, 0] = cw * fx
        theta[:, 0, 2] = 2 * cx - 1
        theta[:, 1, 1] = ch
        theta[:, 1, 2] = 2 * cy - 1
        theta = theta.to(device=x.device, dtype=x.dtype)
        grid = F.affine_grid(theta, [b, x.shape[1], h, w], align_corners=False)
        out = F.grid_sample(out, grid, mode="bilinear", padding_mode="border", align_corners=False)
    if shift > 0:
        oy = torch.randint(-shift, shift + 1, (b,), generator=generator)
        ox = torch.randint(-shift, shift + 1, (b,), generator=generator)
        rows = (torch.arange(h)[None, :] - oy[:, None]) % h  # (B, H): out[i] = in[i - oy] (torch.roll)
        cols = (torch.arange(w)[None, :] - ox[:, None]) % w  # (B, W)
        idx = (rows[:, :, None] * w + cols[:, None, :]).reshape(b, 1, h * w).to(x.device)
        flat = out.reshape(b, out.shape[1], h * w)
        out = flat.gather(2, idx.expand(-1, out.shape[1], -1)).reshape(b, -1, h, w)
    return out
