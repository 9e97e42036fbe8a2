"""Perceptual hashes and near-duplicate search: is a released image a (re-encoded, brightened,
resized, mirrored, shifted or cropped) copy of a private photo?

The hash is the difference hash (dHash, Krawetz 2013): the image in greyscale, downscaled to
``(h, h + 1)`` pixels with a box filter, and one bit per horizontally adjacent pair, set when the
right pixel is brighter. It depends on the signs of coarse brightness gradients only, so it is
unchanged by re-encoding, by resizing, and by a brightness or contrast change that keeps the order
of neighbouring cells; unrelated images differ in about half of the bits. With ``h = 16``
(256 bits) two unrelated images are ``128 ± 8`` bits apart, and a near-duplicate threshold of
12.5 % of the bits (:data:`NEAR_DUPLICATE_FRACTION`, 32 bits) lies 12 standard deviations below
that. Images smaller than the grid are hashed on a grid of ``side − 1`` (:func:`grid_for`):
upscaling would make equal neighbours, i.e. zero bits shared by every image.

dHash is not invariant to geometry: a mirrored copy flips every gradient, and a shift or crop of a
few per cent moves the cells. :func:`copy_variants` therefore lists what a careless or hostile
publishing script makes of a photo (its mirror, shifts of up to 4 % of the side, crops of 5-15 %
at the centre and the corners, each also mirrored); hashing every variant of a private image and
matching a released image against all of them finds such copies with the same bit threshold.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__ = ["HASH_SIZE", "NEAR_DUPLICATE_FRACTION", "grid_for", "near_duplicate_bits", "dhash", "copy_variants", "hamming",
           "nearest"]

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

def _grey(img: np.ndarray) -> Image.Image:
    arr = np.asarray(img)
    if arr.ndim == 3 and arr.shape[0] == 3 and arr.shape[-1] != 3:  # (3, H, W) -> (H, W, 3)
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


#: Crop scales (side kept) of :func:`copy_variants`; each at the centre and the four corners.
CROP_SCALES = (0.95, 0.9, 0.85)
#: Shifts of :func:`copy_variants` as a share of the side (and at least 1 and 2 pixels).
SHIFT_FRACTIONS = (0.02, 0.04)


def copy_variants(img: np.ndarray) -> list[np.ndarray]:
    """Greyscale ``(h, w)`` uint8 versions of an image as copies of it may be: shifted, cropped, mirrored.

    Every shift ``(dy, dx)`` of 0, ±2 % and ±4 % of the side (at least 1 and 2 pixels; edges
    replicated; ``(0, 0)`` is the image itself), crops keeping 95/90/85 % of each side at the
    centre and the four corners, and the mirror image of each of those (``2 · (25 + 15) = 80``
    variants).

    Args:
        img: ``(H, W, 3)`` or ``(3, H, W)`` uint8, or floats in [0, 1].
    """
    g = np.asarray(_grey(img), dtype=np.uint8)  # (H, W)
    h, w = g.shape
    steps = sorted({0, *(s * max(k + 1, round(f * min(h, w))) for k, f in enumerate(SHIFT_FRACTIONS) for s in (-1, 1))})
    pad = max(abs(s) for s in steps)
    padded = np.pad(g, pad, mode="edge")
    out = [padded[pad - dy : pad - dy + h, pad - dx : pad - dx + w] for dy in steps for dx in steps]  # out[y] = g[y - dy]
    for scale in CROP_SCALES:
        ch, cw = max(2, round(scale * h)), max(2, round(scale * w))
        for y0, x0 in ((h - ch) // 2, (w - cw) // 2), (0, 0), (0, w - cw), (h - ch, 0), (h - ch, w - cw):
            # Resized back to the full size, as the copy was (the hash cells then line up).
            out.append(np.asarray(Image.fromarray(g).resize((w, h), Image.Resampling.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))))
    return [np.ascontiguousarray(v) for v in out + [v[:, ::-1] for v in out]]


def _words(h: np.ndarray) -> np.ndarray:
    """``(n, B)`` packed hash bytes -> ``(⌈B/8⌉, n)`` uint64 words, word-major (zero-padded: a zero
    byte adds no distance)."""
    h = np.ascontiguousarray(np.atleast_2d(h), dtype=np.uint8)
    pad = (-h.shape[1]) % 8
    return np.ascontiguousarray((np.pad(h, ((0, 0), (0, pad))) if pad else h).view(np.uint64).T)


def _distances(wa: np.ndarray, wb: np.ndarray) -> np.ndarray:
    """``(W, n)`` and ``(W, m)`` words -> ``(n, m)`` uint16 bit distances: per word an XOR and a hardware
    popcount (numpy's ``bitwise_count``) into reused buffers, four times a byte-table lookup."""
    n, m = wa.shape[1], wb.shape[1]
    d = np.zeros((n, m), dtype=np.uint16)
    x, c = np.empty((n, m), dtype=np.uint64), np.empty((n, m), dtype=np.uint8)
    for w in range(wa.shape[0]):
        np.bitwise_xor(wa[w][:, None], wb[w][None, :], out=x)
        d += np.bitwise_count(x, out=c)
    return d


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bit distances between every row of ``a (n, B)`` and of ``b (m, B)`` packed hashes: ``(n, m)`` int32."""
    return _distances(_words(a), _words(b)).astype(np.int32)


def nearest(a: np.ndarray, b: np.ndarray, *, chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For every hash in ``a (n, B)``, the index of and distance to the closest hash in ``b (m, B)``.

    The search is exhaustive (``n · m`` distances: 10^4 released images against the copy variants
    of 2 × 10^4 photos is over 10^10), on 64-bit words.

    Args:
        a: ``(n, B)`` packed hashes.
        b: ``(m, B)`` packed hashes.
        chunk: Rows of ``b`` per block (default: about 2^22 distances at a time).

    Returns:
        ``(index (n,), distance (n,))``; ties go to the lowest index in ``b``.
    """
    wa, wb = _words(a), _words(b)
    n = wa.shape[1]
    chunk = chunk or max(1, (1 << 22) // max(n, 1))
    idx = np.zeros(n, dtype=np.int64)
    dist = np.full(n, np.iinfo(np.int32).max, dtype=np.int32)
    for lo in range(0, wb.shape[1], chunk):
        d = _distances(wa, wb[:, lo : lo + chunk])  # (n, c)
        j = d.argmin(axis=1)
        best = d[np.arange(len(a)), j]
        better = best < dist
        idx[better], dist[better] = j[better] + lo, best[better]
    return idx, dist
