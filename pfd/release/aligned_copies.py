"""Private photos hidden in a release by a geometric or photometric edit: found by aligned pixel matching.

The perceptual hash of :mod:`pfd.release.private_copies` finds re-encoded, resized, mirrored and
slightly shifted copies, and the embedding test finds what the lint's model calls the same
face; neither finds a private photo rotated by 5-10°, shifted by 8 px, cropped, turned upside down
or into its negative, pasted at 40-60 % of its size into a proxy, tiled into a 2 × 2 mosaic or
alpha-blended into a proxy (issue 27: each passed ``pfd release lint --private``). This module
compares *structure*: greyscale images at 32 × 32 with their blur (σ = 3 px) subtracted, so that
the mean face and the lighting cancel and what is left is where this photo's edges lie.

1. **Candidates.** Each released image, its mirror, its upside-down and its negative, and windows
   of it (4 scales from 40 % to 75 % of the side, on a grid of eighths) are reduced to 8 × 8
   structure thumbnails and compared with the private images' by cosine: the best few private
   images of the whole image and of its best windows are the candidates.
2. **Alignment.** Each candidate is warped (mirror, rotation ±15° in 2.5° steps, scale 0.75-1.45;
   for windows ±10°, 0.85-1.15) and matched against the centre of the released image or window
   (its border of 5 px at 32 left out: a shift or a crop brings content there that the photo
   never had) at every integer shift up to 5 px, then refined by half pixels; the score is the
   largest absolute normalised cross-correlation of the structures (absolute: a negative
   correlates at −1). A genuine proxy, distilled from noise, shares no edge layout with
   any private photo; an edited copy keeps most of it.
3. **Threshold**, calibrated on the release itself as for the embedding test: median + 5 robust SDs
   of the releases' scores, never below :data:`SCORE_FLOOR` and never above :data:`SCORE_CEILING`
   (a release of real faces spreads its scores so widely that median + 5 SDs passes 1, where no
   score can reach: an aligned correlation of 0.95 is a copy whatever else the release holds).
   Measured on CelebA crops: photos of other people align at 0.89 at most, another photo of the
   same person at 0.86, a private photo rolled by 6-10 px at 0.985; renders of one synthetic
   person at 64 px are near-duplicates and may reach it (a photo of a private person either way).
   A window match must also pass :data:`PASTED_FLOOR` (0.78): the best of many blurry windows
   reaches 0.70 on a genuine release of low-resolution faces.

Blends below about a third of the photo and JPEG at quality 5 keep too little of the structure to
be told from a proxy by pixels; docs/distill.md lists what is found and what is not.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["AlignedMatch", "find_aligned_copies", "structure", "SCORE_FLOOR", "SCORE_CEILING", "PASTED_FLOOR"]

#: Work side of the structure images.
SIDE = 32
#: Side of the candidate thumbnails.
THUMB = 8
#: The calibrated threshold is never below this absolute correlation.
SCORE_FLOOR = 0.5
#: ... and never above this one: a copy aligns at 0.99; another person's photo at 0.89 at most (CelebA).
SCORE_CEILING = 0.95
#: A window match (pasted, tiled) must also beat this: a window is blurrier than the whole image
#: and is searched over more places, so genuine proxies reach 0.70 there (low-resolution private
#: faces), while a pasted or tiled photo aligns at 0.83 or more.
PASTED_FLOOR = 0.78
#: Robust standard deviations above the release's median score.
SIGMAS = 5.0
#: Candidate private images per released image (direct, and again by their crops), and (window,
#: private image) pairs verified per released image.
CANDIDATES, WINDOW_PAIRS = 6, 8
#: Window scales (share of the side) of a released image, for pasted and tiled faces ...
WINDOW_SCALES = (0.4, 0.5, 0.6, 0.75)
#: ... and of a private photo, for a crop of it released whole.
PRIVATE_WINDOW_SCALES = (0.625, 0.75, 0.875)


@dataclass(frozen=True)
class AlignedMatch:
    """The best aligned match of one released image.

    Attributes:
        index: The released image's index.
        private: Index of the private image.
        score: Absolute normalised cross-correlation of the structures (0-1).
        how: ``"transformed"`` (the whole image) or ``"pasted"`` (a window of it).
        window: ``(top, left, side)`` of the window as shares of the image side (``pasted``).
        threshold: The release's calibrated threshold the score crossed.
    """

    index: int
    private: int
    score: float
    how: str
    window: tuple[float, float, float] | None = None
    threshold: float = 0.0


def _grey(x: torch.Tensor) -> torch.Tensor:
    """``(n, 3, H, W)`` in [0, 1] -> ``(n, 1, SIDE, SIDE)`` luminance."""
    g = (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2])[:, None]
    return F.interpolate(g, size=(SIDE, SIDE), mode="bilinear", align_corners=False, antialias=True)


@functools.lru_cache(maxsize=8)
def _blur_matrix(side: int, sigma: float) -> torch.Tensor:
    """``(S, S)`` Gaussian blur of a line (±3σ, edges replicated): ``B x`` blurs ``x``'s columns."""
    r = int(math.ceil(3 * sigma))
    t = torch.arange(-r, r + 1, dtype=torch.float32)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    k = k / k.sum()
    src = (torch.arange(side)[:, None] + torch.arange(-r, r + 1)[None, :]).clamp(0, side - 1)  # (S, 2r+1) pixel read
    return torch.zeros(side, side).index_put_((torch.arange(side)[:, None].expand_as(src), src), k.expand_as(src),
                                              accumulate=True)


def _blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """``(n, 1, S, S)`` blurred separably, as two matrix products (``F.conv2d`` with a one-channel line
    kernel was 2.7 ms for 75 windows, a third of the search's time)."""
    b = _blur_matrix(x.shape[-1], float(sigma)).to(x.dtype)
    return b @ x @ b.T


def structure(grey: torch.Tensor) -> torch.Tensor:
    """Greyscale ``(n, 1, S, S)`` minus its blur (σ = 3 px at 32 px): edges, not lighting."""
    return grey - _blur(grey, 3.0 * grey.shape[-1] / SIDE)


def _unit(x: torch.Tensor) -> torch.Tensor:
    x = x.flatten(1)
    x = x - x.mean(1, keepdim=True)
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-8)


def _low(grey: torch.Tensor) -> torch.Tensor:
    """``(n, THUMB²)`` low-frequency thumbnails of greyscale images: the centre (the border of
    :data:`MARGIN` px left out, as in the alignment: a rotation's corners, a roll's wrapped edge),
    blurred, pooled to 8 × 8. With the border in, a private photo rotated by 10° with black corners
    was not among its own candidates (issue 34)."""
    side = grey.shape[-1]
    m = _margin(side)
    return F.adaptive_avg_pool2d(_blur(grey[..., m:side - m, m:side - m], 2.0 * side / SIDE), THUMB).flatten(1)


class _Thumbs:
    """Candidate retrieval: low-frequency thumbnails (hair, background, skin and lighting layout: robust
    to small rotations, shifts, blur and re-encoding) minus the private set's mean thumbnail, by cosine."""

    def __init__(self, private_grey: torch.Tensor) -> None:
        low = _low(private_grey)
        self.mean = low.mean(0, keepdim=True)  # (1, T²) the mean face's layout
        self.private = self.unit(low)  # (m, T²)
        thumbs, owner = [], []
        for lo in range(0, len(private_grey), 256):  # crops of each private photo: a release of a crop matches one
            block = private_grey[lo : lo + 256]  # (b, 1, S, S)
            # One warp for the block (the windows are the same boxes for every photo), thumbnailed a block
            # at a time: the windows held whole ((m·w, 1, S, S), 29 per photo) were 28 GB at 2 × 10^4 photos.
            wins, boxes = _windows(block, scales=PRIVATE_WINDOW_SCALES)  # (b·w, 1, S, S)
            owner.append(torch.arange(lo, lo + len(block)).repeat_interleave(len(boxes)))
            thumbs.append(self.unit(_low(wins)))
        self.windows = torch.cat(thumbs)  # (m·w, T²)
        self.owner = torch.cat(owner)  # (m·w,)

    def unit(self, low: torch.Tensor) -> torch.Tensor:
        return _unit(low - self.mean)

    def whole(self, grey_views: torch.Tensor, k: int) -> list[int]:
        """The ``k`` private images nearest any view, and those whose crops are nearest."""
        q = self.unit(_low(grey_views))  # (v, T²)
        sims = q @ self.private.T  # (v, m)
        direct = sims.amax(0)  # (m,)
        crops = torch.full_like(direct, -2.0).scatter_reduce(0, self.owner, (q @ self.windows.T).amax(0), reduce="amax")
        out = torch.topk(direct, min(k, len(direct))).indices.tolist()
        # The image as it is gets its own k: the mirrored, turned and negative views of look-alike faces
        # otherwise crowd out the true source of a plain crop (issue 34: a 3-px crop at 64 px).
        out += [c for c in torch.topk(sims[0], min(k, len(direct))).indices.tolist() if c not in out]
        return out + [c for c in torch.topk(crops, min(k, len(crops))).indices.tolist() if c not in out]

    def pairs(self, windows_grey: torch.Tensor, k: int) -> list[tuple[int, int]]:
        """The ``k`` best (window, private image) pairs by thumbnail cosine."""
        sims = self.unit(_low(windows_grey)) @ self.private.T  # (w, m)
        flat = torch.topk(sims.flatten(), min(k, sims.numel())).indices
        return [(int(i) // sims.shape[1], int(i) % sims.shape[1]) for i in flat]


@functools.lru_cache(maxsize=4)
def _base_grid(side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)``, each ``(1, S²)``: the pixel centres in ``[-1, 1]`` as ``F.affine_grid`` (align_corners=False) lays them."""
    c = torch.linspace(-1.0, 1.0, side) * ((side - 1) / side)
    return c[None, :].expand(side, side).reshape(1, -1), c[:, None].expand(side, side).reshape(1, -1)


def _affine_grid(theta: torch.Tensor, side: int) -> torch.Tensor:
    """``F.affine_grid(theta, (n, 1, S, S), align_corners=False)`` (to rounding), from a base grid made once.

    ``F.affine_grid`` builds an ``(n, S, S, 3)`` base each call and multiplies it by a batched product
    with an inner size of 3: ~3 ms for 135 warps at 32 px (0.2 ms here), the search's largest cost after the correlation.
    """
    x, y = _base_grid(side)  # (1, S²) each
    t = theta[..., None]  # (n, 2, 3, 1)
    grid = t[:, :, 0] * x[:, None] + t[:, :, 1] * y[:, None] + t[:, :, 2]  # (n, 2, S²)
    return grid.transpose(1, 2).reshape(len(theta), side, side, 2)


def _warp_grid(params: torch.Tensor, side: int) -> torch.Tensor:
    """The sampling grid ``(n, S, S, 2)`` of each row ``(mirror, angle_deg, scale, dx, dy)`` (dx, dy in pixels)."""
    m, a, sc, dx, dy = params.unbind(1)
    th = torch.deg2rad(a)
    cos, sin = torch.cos(th) / sc, torch.sin(th) / sc
    flip = torch.where(m > 0, -1.0, 1.0)
    theta = torch.stack([torch.stack([cos * flip, -sin, dx * 2 / side], 1),
                         torch.stack([sin * flip, cos, dy * 2 / side], 1)], 1)  # (n, 2, 3)
    return _affine_grid(theta, side)


def _warp(img: torch.Tensor, params: torch.Tensor | None = None, *, grid: torch.Tensor | None = None) -> torch.Tensor:
    """Warp one ``(1, 1, S, S)`` image by each row of ``params`` (:func:`_warp_grid`), or along a ``grid`` made by it."""
    grid = _warp_grid(params, img.shape[-1]) if grid is None else grid
    return F.grid_sample(img.expand(len(grid), -1, -1, -1), grid, mode="bilinear", padding_mode="border",
                         align_corners=False)


def _grid(angles: Sequence[float], scales: Sequence[float], shifts: Sequence[float], mirror: bool = True) -> torch.Tensor:
    rows = [(mi, a, s, dx, dy) for mi in ((0.0, 1.0) if mirror else (0.0,)) for a in angles for s in scales
            for dx in shifts for dy in shifts]
    return torch.tensor(rows, dtype=torch.float32)


def _offsets(angles: Sequence[float], scales: Sequence[float], shifts: Sequence[float]) -> torch.Tensor:
    """Fine-search offsets ``(0, da, ds, dx, dy)`` added to the best coarse row."""
    return torch.tensor([(0.0, a, s, dx, dy) for a in angles for s in scales for dx in shifts for dy in shifts])


#: Pixels (at :data:`SIDE`) of the released image's border left out of the correlation: a shift, a
#: crop or a rotation brings content there that was never in the photo (a roll wraps the other side in).
#: Every integer shift up to this many pixels is tried exactly (template matching), so odd shifts
#: need no grid point.
MARGIN = 5

#: Whole-image search, coarse: mirror, rotations, scales (a crop enlarges); every integer shift of
#: ±:data:`MARGIN` comes from the template matching (a half turn is a view of the released image,
#: :func:`find_aligned_copies`; a negative correlates at −1); then fine steps around the best,
#: half-pixel shifts included.
#: Scales every 0.1 with fine steps of ±0.05 cover 0.75-1.45 without a gap (with steps of 0.2 a
#: 3-px crop of a 64-px photo, scale 1.10, aligned at 0.91 only); shifts refine to a quarter pixel
#: (a 4-px roll of a 48-px photo is 2.67 px at 32: 0.944 at half pixels, 0.96 at quarters).
_WHOLE = _grid([-15.0, -10.0, -5.0, 0.0, 5.0, 10.0, 15.0], [0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4], [0.0])
_WHOLE_FINE = _offsets([-2.5, 0.0, 2.5], [-0.05, 0.0, 0.05], [-0.5, -0.25, 0.0, 0.25, 0.5])
#: Window search: smaller rotations and scales around the window.
_WINDOW = _grid([-10.0, 0.0, 10.0], [0.9, 1.1], [0.0])
_WINDOW_FINE = _offsets([-5.0, 0.0, 5.0], [-0.05, 0.0, 0.05], [-0.5, 0.0, 0.5])
#: Candidates refined by the fine steps (the best by the coarse search).
REFINE = 3
#: Private photos whose warps are kept at once (about 0.25 MB each).
BANK_SIZE = 1024


def _template(target: torch.Tensor) -> torch.Tensor:
    """The unit, zero-mean centre ``(1, 1, K, K)`` of a ``(1, 1, S, S)`` structure image (border of :data:`MARGIN` px off)."""
    side = target.shape[-1]
    m = _margin(side)
    centre = target[..., m:side - m, m:side - m]
    centre = centre - centre.mean()
    return centre / centre.norm().clamp_min(1e-8)


def _margin(side: int) -> int:
    return max(1, round(MARGIN * side / SIDE))


@functools.lru_cache(maxsize=4)
def _window_pixels(k: int, side: int) -> torch.Tensor:
    """``(o², K²)``: the flat pixel index of each kernel entry at each of the ``o × o`` offsets (``o = S − K + 1``)."""
    o = side - k + 1
    offset = (torch.arange(o)[:, None] * side + torch.arange(o)[None, :]).reshape(-1, 1)  # (o², 1) top-left pixel
    within = (torch.arange(k)[:, None] * side + torch.arange(k)[None, :]).reshape(1, -1)  # (1, K²) pixel in the window
    return offset + within


def _sliding(kernel: torch.Tensor, side: int) -> torch.Tensor:
    """``(S², o²)``: the matrix whose product with flattened ``(S, S)`` images is their correlation with the
    ``(K, K)`` ``kernel`` at each of the ``o × o`` valid offsets (``o = S − K + 1``; ``F.conv2d``'s output).

    One matrix product instead of ``F.conv2d``: with one channel and a kernel nearly the image's size, the
    convolution ran at a fifth of the speed (0.054 against 0.010 s for 1,764 warps at 32 px) and rounded more.
    """
    pixels = _window_pixels(kernel.shape[-1], side)  # (o², K²)
    t = torch.zeros(pixels.shape[0], side * side, dtype=kernel.dtype)
    return t.scatter_(1, pixels, kernel.reshape(1, -1).expand_as(pixels)).T  # (S², o²)


class _Bank:
    """Each private structure image warped by a coarse grid, with the norms of its windows, built once.

    A private photo is a candidate of many released images; its warps and the ``K × K`` window
    statistics of the template matching do not depend on the released image, so they are cached
    (at most :data:`BANK_SIZE` photos, oldest out).
    """

    def __init__(self, private_s: torch.Tensor, coarse: torch.Tensor) -> None:
        self.private_s, self.coarse = private_s, coarse  # (m, 1, S, S), (r, 5)
        side = private_s.shape[-1]
        self.k = side - 2 * _margin(side)
        self.box = _sliding(torch.ones(self.k, self.k), side)  # (S², o²): sums over every K × K window
        self.grid = _warp_grid(coarse, side)  # (r, S, S, 2): the same warps for every photo
        self.cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def get(self, c: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(warps (r, S²), window norms (r, o²))`` of private image ``c`` (flattened)."""
        hit = self.cache.get(c)
        if hit is None:
            warps = _warp(self.private_s[c:c + 1], grid=self.grid).flatten(1)  # (r, S²)
            s1, s2 = warps @ self.box, (warps * warps) @ self.box  # (r, o²) window sums of x and x²
            hit = (warps, (s2 - s1 * s1 / (self.k * self.k)).clamp_min(1e-12).sqrt())
            if len(self.cache) >= BANK_SIZE:
                self.cache.pop(next(iter(self.cache)))
            self.cache[c] = hit
        return hit


def _best_alignment(target: torch.Tensor, candidates: Sequence[int], bank: _Bank, fine: torch.Tensor) -> tuple[float, int]:
    """The largest |NCC| between structure image ``target`` ``(1, 1, S, S)`` and any candidate warped, and which.

    The target's centre (its border of :data:`MARGIN` px left out) is matched against each coarse
    warp of every candidate (``(mirror, angle, scale, 0, 0)``) at every integer shift up to the
    margin, in one matrix product (:func:`_sliding`); then ``fine`` offsets (rotation, scale, half-pixel shifts) are
    tried around the best warp of the :data:`REFINE` best candidates. Structure is warped directly
    (it commutes with a rigid warp up to resampling), so no blur runs per warp.
    """
    if not candidates:
        return 0.0, -1
    side = target.shape[-1]
    k = side - 2 * _margin(side)
    t = _template(target)  # (1, 1, K, K)
    warps, norms = zip(*(bank.get(c) for c in candidates))
    r = len(bank.coarse)
    scores = ((torch.cat(warps) @ _sliding(t[0, 0], side)) / torch.cat(norms)).abs().view(len(candidates), -1)  # (c, r·o·o)
    per, where = scores.max(dim=1)
    best = (0.0, -1)
    o = scores.shape[1] // r
    side_o = int(round(o ** 0.5))
    for ci in torch.topk(per, min(REFINE, len(candidates))).indices.tolist():
        row, (i, j) = int(where[ci]) // o, divmod(int(where[ci]) % o, side_o)
        around = _warp(bank.private_s[candidates[ci]:candidates[ci] + 1], bank.coarse[row] + fine)
        refined = (_unit(around[..., i:i + k, j:j + k]) @ t.flatten()[:, None]).abs().max()
        best = max(best, (max(float(refined), float(per[ci])), candidates[ci]))
    return best


def _windows(grey: torch.Tensor, scales: Sequence[float] = None) -> tuple[torch.Tensor, list[tuple[float, float, float]]]:
    """Every window of each ``(b, 1, S, S)`` image on a grid of eighths, resized to ``S``: ``(b·w, 1, S, S)``
    (image-major: image 0's ``w`` windows first), and the ``w`` boxes."""
    boxes = []
    for s in (WINDOW_SCALES if scales is None else scales):
        steps = np.arange(0.0, 1.0 - s + 1e-9, 0.125)
        for top in steps:
            for left in steps:
                boxes.append((float(top), float(left), float(s)))
    side = grey.shape[-1]
    theta = torch.tensor([[[s, 0.0, (2 * left + s) - 1.0], [0.0, s, (2 * top + s) - 1.0]] for top, left, s in boxes])
    grid = _affine_grid(theta, side)  # (w, S, S, 2)
    b = grey.shape[0]
    return F.grid_sample(grey.repeat_interleave(len(boxes), 0), grid.repeat(b, 1, 1, 1), mode="bilinear",
                         align_corners=False), boxes


def find_aligned_copies(released: torch.Tensor, private: torch.Tensor) -> list[AlignedMatch]:
    """Released images that are private photos under a geometric or photometric edit.

    Args:
        released: ``(n, 3, H, W)`` released images in [0, 1].
        private: ``(m, 3, h, w)`` private images in [0, 1] (any size: both sides are reduced to 32 × 32).

    Returns:
        One :class:`AlignedMatch` per flagged released image (the better of its whole-image and
        window matches), in input order.
    """
    if len(released) == 0 or len(private) == 0:
        return []
    rel_g, priv_g = _grey(released.float()), _grey(private.float())  # (n, 1, S, S), (m, 1, S, S)
    priv_s = structure(priv_g)
    thumbs = _Thumbs(priv_g)
    whole_bank, window_bank = _Bank(priv_s, _WHOLE), _Bank(priv_s, _WINDOW)
    scores, matches = [], []
    for i in range(len(released)):
        g = rel_g[i : i + 1]
        turned = g.flip(-1).flip(-2)
        # Views: as is, mirrored, upside down (both), negative; the warp grid holds mirrors too.
        views = torch.cat([g, g.flip(-1), turned, g.flip(-2), 1.0 - g])
        candidates = thumbs.whole(views, CANDIDATES)
        whole = max(_best_alignment(target, candidates, whole_bank, _WHOLE_FINE) for target in (structure(g), structure(turned)))
        wins, boxes = _windows(g)
        win_s = structure(wins)
        part = (0.0, -1, boxes[0])
        for w, c in thumbs.pairs(wins, WINDOW_PAIRS):
            sc, _ = _best_alignment(win_s[w : w + 1], [c], window_bank, _WINDOW_FINE)
            if sc > part[0]:
                part = (sc, c, boxes[w])
        scores.append(max(whole[0], part[0]))
        matches.append(AlignedMatch(i, whole[1], whole[0], "transformed") if whole[0] >= part[0]
                       else AlignedMatch(i, part[1], part[0], "pasted", part[2]))
    threshold = calibrated_threshold(np.array(scores))
    out = []
    for m in matches:
        bar = max(threshold, PASTED_FLOOR) if m.how == "pasted" else threshold
        if m.score > bar:
            out.append(replace(m, threshold=bar))
    return out


def calibrated_threshold(scores: np.ndarray) -> float:
    """Median + :data:`SIGMAS` robust SDs of the release's scores, within [:data:`SCORE_FLOOR`, :data:`SCORE_CEILING`]."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return SCORE_FLOOR
    med = float(np.median(s))
    mad = 1.4826 * float(np.median(np.abs(s - med)))
    return min(SCORE_CEILING, max(SCORE_FLOOR, med + SIGMAS * mad))
