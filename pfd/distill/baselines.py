"""Classic image-obfuscation baselines: differentially private pixelisation and Gaussian blur.

The PFD paper compares against face anonymisation (FA) and differential privacy (DP) methods
(Table 1, Fig. 3). ``pfd distill --method dp-pix`` and ``--method blur`` are the classic,
training-free members of those two families: they take the same K real images per identity as
``raw`` (:func:`pfd.distill.prototypes.raw_selection`) and release transformed copies of them under
arbitrary labels. The transforms are pure functions of ``(B, 3, H, W)`` float tensors in [0, 1]:

* **DP-Pix** (L. Fan, "Image pixelization with differential privacy", DBSec 2018, LNCS 10980,
  pp. 148-162; Algorithm 1): split the image into ``b × b`` cells, replace each cell by its mean
  and add Laplace noise to each mean, ``Lap(Δ/ε)`` with the global sensitivity
  ``Δ = 255 · m / b²`` (0-255 pixel units): two neighbouring images differ in at most ``m``
  pixels, each by at most 255, and a cell mean averages ``b²`` pixels. Noisy means are clipped to
  the valid range. This is ε-DP for the pixelised image under "m-neighbourhood"
  (:func:`dp_pix`). The formula is Fan's (restated, e.g., by Liu 2025, arXiv 2511.04261, "A
  parallel region-adaptive DP framework for image pixelization"). The defaults ``b = 16``,
  ``m = 16`` for 112 px crops are the values commonly paired with Fan's method for face images of
  about that size; Fan's own text was not at hand to confirm her defaults, so set them explicitly
  when following another protocol. Other image sizes scale them (:func:`auto_cell`,
  :func:`auto_pixels`) so that the grid and the per-cell noise stay the same (``m / b²`` kept).
* **Gaussian blur** (:func:`gaussian_blur`): the conventional face-obfuscation filter. The
  default ``σ = S / 14`` (8 px on a 112 px crop, kernel 2⌈3σ⌉ + 1 = 49 px, ~40 % of the face)
  smears eyes, nose and mouth into blobs; it is a strong setting, yet blurred faces are known to
  stay re-identifiable by CNNs and restoration models (e.g. Revelio, arXiv 2506.12344, reports
  95.9 % re-identification under high blurring), which is what the benchmark measures.

Channels: a greyscale image (three equal channels, like Yale B) gets one noise draw per cell,
copied to the three channels, so the release still satisfies ε-DP (noising each copy separately
would spend 3ε). A colour image is one query of ``3 × cells`` means whose L1 sensitivity is
``3 · 255 · m / b²``, so its noise scale is three times larger.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from pfd.data.shape import image_hw, size_text
from pfd.errors import PfdError

__all__ = [
    "REFERENCE_SIZE",
    "auto_cell",
    "auto_pixels",
    "auto_sigma",
    "pixelate",
    "laplace",
    "dp_pix_scale",
    "dp_pix",
    "gaussian_kernel",
    "gaussian_blur",
    "is_greyscale",
    "dp_pix_settings",
    "blur_settings",
    "dp_pix_transform",
    "blur_transform",
]

#: Image side the default DP-Pix and blur parameters are stated for (insightface crops).
REFERENCE_SIZE = 112


def auto_cell(size: int, *, cell: int = 16) -> int:
    """DP-Pix cell side b for ``size`` px images: ``cell`` at 112 px, scaled linearly (>= 1)."""
    return max(1, round(cell * size / REFERENCE_SIZE))


def auto_pixels(size: int, *, pixels: int = 16) -> int:
    """DP-Pix m for ``size`` px images: ``pixels`` at 112 px, scaled with the area (>= 1)."""
    return max(1, round(pixels * (size / REFERENCE_SIZE) ** 2))


def auto_sigma(size: int) -> float:
    """Default blur σ in pixels for ``size`` px images: ``size / 14`` (8 px at 112 px)."""
    return size / 14.0


def _check_images(x: torch.Tensor) -> None:
    if x.ndim != 4 or x.shape[1] != 3:
        raise PfdError(f"images must be (B, 3, H, W), got shape {tuple(x.shape)}")


def _cell_grid(h: int, w: int, b: int) -> tuple[int, int]:
    return math.ceil(h / b), math.ceil(w / b)


def _cell_means(x: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cell means ``(B, C, gh, gw)`` and pixel counts ``(gh, gw)``; edge cells may be partial."""
    h, w = x.shape[-2:]
    gh, gw = _cell_grid(h, w, b)
    pad = (0, gw * b - w, 0, gh * b - h)
    sums = F.avg_pool2d(F.pad(x, pad), b, stride=b, divisor_override=1)  # (B, C, gh, gw)
    ones = F.pad(torch.ones(1, 1, h, w, dtype=x.dtype, device=x.device), pad)
    counts = F.avg_pool2d(ones, b, stride=b, divisor_override=1)[0, 0]  # (gh, gw)
    return sums / counts, counts


def _fill(cells: torch.Tensor, b: int, h: int, w: int) -> torch.Tensor:
    """Each cell value repeated over its b × b pixels, cropped to ``h × w``."""
    return cells.repeat_interleave(b, dim=-2).repeat_interleave(b, dim=-1)[..., :h, :w]


def pixelate(x: torch.Tensor, cell: int) -> torch.Tensor:
    """Mosaic: every ``cell × cell`` block replaced by its mean (partial blocks at the right and
    bottom edges by the mean of their own pixels).

    Args:
        x: Images ``(B, 3, H, W)``.
        cell: Block side b >= 1.

    Returns:
        ``(B, 3, H, W)``, same dtype.
    """
    _check_images(x)
    if cell < 1:
        raise PfdError(f"pixelisation cell must be >= 1 pixel, got {cell}")
    means, _ = _cell_means(x, cell)
    return _fill(means, cell, *x.shape[-2:])


def laplace(shape: tuple[int, ...], *, scale: torch.Tensor | float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Laplace(0, scale) samples in float64 by inverting the CDF of a uniform draw.

    ``u ~ U(-1/2, 1/2)``, ``x = -scale · sign(u) · log(1 - 2|u|)``; ``scale`` broadcasts.
    """
    u = torch.rand(shape, generator=generator, dtype=torch.float64) - 0.5
    return -torch.as_tensor(scale, dtype=torch.float64) * torch.sign(u) * torch.log1p(-2.0 * u.abs())


def dp_pix_scale(*, epsilon: float, cell: int, pixels: int, cell_pixels: int | None = None, channels: int = 1) -> float:
    """Laplace scale of DP-Pix in 0-255 units: ``channels · 255 · min(m, n) / (n · ε)``.

    ``n`` is the number of pixels in the cell (``b²`` for a full cell); Fan's sensitivity is
    ``Δ = 255 m / b²``. A partial edge cell (``n < b²``) has the larger sensitivity of a smaller
    average, and at most ``n`` of its pixels can differ.

    Args:
        epsilon: Privacy budget ε > 0.
        cell: Cell side b.
        pixels: Pixels m in which neighbouring images may differ.
        cell_pixels: Pixels in this cell (default ``b²``).
        channels: Channels noised as one query (1 for greyscale; 3 for colour, see the module doc).

    Raises:
        PfdError: For a non-positive ε, b or m.
    """
    if not epsilon > 0 or cell < 1 or pixels < 1:
        raise PfdError(f"DP-Pix needs epsilon > 0, cell >= 1 and pixels >= 1; got {epsilon}, {cell}, {pixels}")
    n = cell * cell if cell_pixels is None else int(cell_pixels)
    return channels * 255.0 * min(pixels, n) / (n * epsilon)


def is_greyscale(x: torch.Tensor) -> torch.Tensor:
    """``(B,)`` bool: the three channels of an image are equal."""
    return (x[:, 0] == x[:, 1]).flatten(1).all(1) & (x[:, 1] == x[:, 2]).flatten(1).all(1)


def dp_pix(
    x: torch.Tensor, *, epsilon: float, cell: int, pixels: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Fan's DP-Pix: pixelate into ``b × b`` cells, add Laplace noise to each cell mean, clip.

    Args:
        x: Images ``(B, 3, H, W)`` in [0, 1].
        epsilon: Privacy budget ε.
        cell: Cell side b.
        pixels: m, the pixels in which neighbouring images may differ.
        generator: Seeded generator (the noise is drawn in float64 on the CPU).

    Returns:
        ``(B, 3, H, W)`` float32 in [0, 1]; constant over each cell.

    Raises:
        PfdError: Bad shapes or parameters.
    """
    _check_images(x)
    h, w = x.shape[-2:]
    means, counts = _cell_means(x.detach().double().cpu() * 255.0, cell)  # (B, 3, gh, gw), 0-255
    grey = is_greyscale(x.detach().cpu())
    n = counts.long()
    base = torch.tensor(
        [[dp_pix_scale(epsilon=epsilon, cell=cell, pixels=pixels, cell_pixels=int(c)) for c in row] for row in n.tolist()],
        dtype=torch.float64,
    )  # (gh, gw), one channel
    B = x.shape[0]
    noise = laplace((B, 3, *base.shape), scale=base * 3.0, generator=generator)  # colour: L1 over 3 channels
    shared = laplace((B, 1, *base.shape), scale=base, generator=generator).expand(B, 3, *base.shape)
    noise = torch.where(grey[:, None, None, None], shared, noise)
    cells = (means + noise).clamp_(0.0, 255.0) / 255.0
    return _fill(cells, cell, h, w).to(device=x.device, dtype=torch.float32)


def gaussian_kernel(sigma: float, *, radius: int | None = None) -> torch.Tensor:
    """Normalised 1-D Gaussian ``(2r + 1,)`` with ``r = ⌈3σ⌉`` unless given."""
    if not sigma > 0:
        raise PfdError(f"blur sigma must be > 0 pixels, got {sigma}")
    r = math.ceil(3.0 * sigma) if radius is None else int(radius)
    t = torch.arange(-r, r + 1, dtype=torch.float64)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


def gaussian_blur(x: torch.Tensor, *, sigma: float, radius: int | None = None) -> torch.Tensor:
    """Separable Gaussian blur with edge-replicating borders (no dark frame at the edges).

    Args:
        x: Images ``(B, 3, H, W)``.
        sigma: Standard deviation in pixels.
        radius: Kernel half-width (default ``⌈3σ⌉``; kernel side ``2r + 1``).

    Returns:
        ``(B, 3, H, W)``, same dtype; the mean of each image is preserved up to border effects.
    """
    _check_images(x)
    k = gaussian_kernel(sigma, radius=radius).to(device=x.device, dtype=x.dtype)
    r = (k.numel() - 1) // 2
    c = x.shape[1]
    y = F.pad(x, (r, r, 0, 0), mode="replicate")
    y = F.conv2d(y, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)  # along the width
    y = F.pad(y, (0, 0, r, r), mode="replicate")
    return F.conv2d(y, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)  # along the height


def _equal_area_side(size: Any) -> tuple[int, int, float]:
    """``(H, W, side)``: the side of a square of the same area scales the defaults of a non-square size."""
    h, w = image_hw(size)
    return h, w, (h if h == w else math.sqrt(h * w))


def dp_pix_settings(cfg: Any, size: Any) -> dict[str, float]:
    """DP-Pix's resolved parameters at image size ``size`` (a side ``S`` or ``(H, W)``; 0 = the default).

    Args:
        cfg: A :class:`~pfd.config.BaselineConfig` (``epsilon``, ``cell``, ``pixels``).
        size: The release's image size (defaults scale with ``sqrt(H W)``).

    Returns:
        ``epsilon``, ``cell`` (b), ``pixels`` (m) and ``noise_scale`` (Laplace scale of a full
        greyscale cell, 0-255 units).

    Raises:
        PfdError: A setting out of range, naming the flag to fix.
    """
    h, w, side = _equal_area_side(size)
    epsilon, cell, pixels = cfg.epsilon, cfg.cell, cfg.pixels
    if not epsilon > 0 or not math.isfinite(epsilon):
        raise PfdError(f"dp-pix: epsilon must be a positive number, got {epsilon}; pass --epsilon E (e.g. 1)")
    if cell < 0 or pixels < 0:
        raise PfdError(f"dp-pix: cell and pixels must be >= 1 (or 0 for the default), got {cell}, {pixels}; "
                       "fix --dp-cell / --dp-pixels")
    b = cell or auto_cell(side)
    m = pixels or auto_pixels(side)
    if b > min(h, w):
        raise PfdError(f"dp-pix: a {b}px cell is larger than the {size_text((h, w))} images; lower --dp-cell")
    return {"epsilon": float(epsilon), "cell": b, "pixels": m, "noise_scale": dp_pix_scale(epsilon=epsilon, cell=b, pixels=m)}


def blur_settings(cfg: Any, size: Any) -> dict[str, float]:
    """The blur's resolved parameters at image size ``size``: ``sigma`` and ``kernel`` (side in pixels).

    Args:
        cfg: A :class:`~pfd.config.BaselineConfig` (``blur_sigma``; 0 = ``S / 14``).
        size: The release's image size.

    Raises:
        PfdError: A sigma out of range, naming the flag to fix.
    """
    _, _, side = _equal_area_side(size)
    if cfg.blur_sigma < 0 or not math.isfinite(cfg.blur_sigma):
        raise PfdError(f"blur: sigma must be > 0 pixels (or 0 for the default), got {cfg.blur_sigma}; fix --blur-sigma")
    sigma = cfg.blur_sigma or auto_sigma(side)
    return {"sigma": float(sigma), "kernel": 2 * math.ceil(3.0 * sigma) + 1}


def dp_pix_transform(x: torch.Tensor, p: dict[str, float], generator: torch.Generator) -> torch.Tensor:
    """:func:`dp_pix` with the resolved parameters of :func:`dp_pix_settings` (noise from ``generator``)."""
    return dp_pix(x, epsilon=p["epsilon"], cell=int(p["cell"]), pixels=int(p["pixels"]), generator=generator)


def blur_transform(x: torch.Tensor, p: dict[str, float], generator: torch.Generator) -> torch.Tensor:
    """:func:`gaussian_blur` with the resolved ``sigma`` (deterministic: ``generator`` is unused)."""
    return gaussian_blur(x, sigma=p["sigma"])
