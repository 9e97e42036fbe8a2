"""Perceptual hashes and near-duplicate search: is a released image a (re-encoded, brightened,
resized) copy of a private photo?

The hash is the difference hash (dHash, Krawetz 2013): the image in greyscale, downscaled to
``(h, h + 1)`` pixels with a box filter, and one bit per horizontally adjacent pair, set when the
right pixel is brighter. It depends on the signs of coarse brightness gradients only, so it is
unchanged by re-encoding, by resizing, and by a brightness or contrast change that keeps the order
of neighbouring cells; unrelated images differ in about half of the bits. With ``h = 16``
(256 bits) two unrelated images are ``128 ± 8`` bits apart, and a near-duplicate threshold of
12.5 % of the bits (:data:`NEAR_DUPLICATE_FRACTION`, 32 bits) lies 12 standard deviations below
that. Images smaller than the grid are hashed on a grid of ``side − 1`` (:func:`grid_for`):
upscaling would make equal neighbours, i.e. zero bits shared by every image.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__ = ["HASH_SIZE", "NEAR_DUPLICATE_FRACTION", "grid_for", "near_duplicate_bits", "dhash", "hamming", "nearest"]

#: Side of the hash grid: ``HASH_SIZE²`` bits.
HASH_SIZE = 16
#: Two images whose hashes differ in at most this fraction of the bits are near-duplicates.
NEAR_DUPLICATE_FRACTION = 0.125


def grid_for(side: int) -> int:
    """Hash grid side for images of ``side`` pixels: :data:`HASH_SIZE`, or ``side − 1`` below it."""
    return max(2, min(HASH_SIZE, int(side) - 1))


def near_duplicate_bits(grid: int) -> int:
    """The near-duplicate threshold in bits for a ``grid × grid`` hash."""
    return int(NEAR_DUPLICATE_FRACTION * grid * grid)

_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _grey(img: np.ndarray) -> Image.Image:
    arr = np.asarray(img)
    if arr.ndim == 3 and arr.shape[0] == 3 and arr.shape[-1] != 3:  # (3, S, S) -> (S, S, 3)
        arr = arr.transpose(1, 2, 0)
    if arr.dtype != np.uint8:
        arr = np.clip(np.round(arr.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
    return Image.fromarray(arr).convert("L")


def dhash(img: np.ndarray, *, size: int = HASH_SIZE) -> np.ndarray:
    """Difference hash of one image.

    Args:
        img: ``(H, W, 3)`` or ``(3, H, W)`` uint8, or floats in [0, 1].
        size: Hash grid side (``size²`` bits).

    Returns:
        The bits packed into ``uint8`` ``(size² / 8,)``.
    """
    small = _grey(img).resize((size + 1, size), Image.Resampling.BOX)
    g = np.asarray(small, dtype=np.int16)  # (size, size + 1)
    return np.packbits((g[:, 1:] > g[:, :-1]).reshape(-1))


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bit distances between every row of ``a (n, B)`` and of ``b (m, B)`` packed hashes: ``(n, m)``."""
    a = np.atleast_2d(a)
    b = np.atleast_2d(b)
    return _POPCOUNT[a[:, None, :] ^ b[None, :, :]].sum(axis=2, dtype=np.int32)


def nearest(a: np.ndarray, b: np.ndarray, *, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """For every hash in ``a (n, B)``, the index of and distance to the closest hash in ``b (m, B)``.

    Returns:
        ``(index (n,), distance (n,))``.
    """
    idx = np.zeros(len(a), dtype=np.int64)
    dist = np.full(len(a), np.iinfo(np.int32).max, dtype=np.int32)
    for lo in range(0, len(b), chunk):
        d = hamming(a, b[lo : lo + chunk])  # (n, c)
        j = d.argmin(axis=1)
        best = d[np.arange(len(a)), j]
        better = best < dist
        idx[better], dist[better] = j[better] + lo, best[better]
    return idx, dist
