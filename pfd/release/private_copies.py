"""Released images that are private photos: exact copies and near-duplicates.

A sha256 in the manifest proves only that a file is the one the manifest lists: someone who
copies a private photo into a release and updates the manifest passes every file-level check.
:func:`find_private_copies` compares every released image with every private image, twice:

* **pixels**: an exact copy (identical pixels once the private image is resized to the release
  size) or a perceptual near-duplicate (:func:`pfd.release.phash.dhash` within 12.5 % of its bits
  of the private image or of one of its 80 :func:`~pfd.release.phash.copy_variants`: a re-encoded,
  brightened, resized, mirrored, shifted or cropped copy), and at most half as far as photos of two
  *different* private people come (:func:`distinct_hash_level`): in a smooth domain (faces shot at
  16 px and enlarged) a quarter of the photos hash within 12.5 % of another person's photo, so
  there that distance says nothing about copying;
* **aligned pixels** (:mod:`pfd.release.aligned_copies`): a private photo rotated, shifted, cropped,
  turned upside down or into its negative, or pasted or tiled into a released image, found by
  warping candidate photos onto the image (or a window of it) and correlating their edges;
* **embeddings** (with a model, normally the publisher's public model): the cosine of each
  released image to its nearest private image, flagged above a threshold calibrated on the
  release itself (:func:`cosine_threshold`): genuine proxies form the bulk of that distribution,
  a copied photo sits far above it. It must also beat how close two different private photos come
  under the same model, by a factor (:func:`distinct_photo_level`): a weak or low-resolution model
  maps other people's photos almost as close as copies (the pixel tests still look at every image).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from pfd.data.faceset import FaceSet
from pfd.release.phash import copy_variants, dhash, grid_for, hamming, near_duplicate_bits, nearest
from pfd.data.shape import image_hw
from PIL import Image
from collections import Counter
from pfd.release.aligned_copies import find_aligned_copies
from pfd.embed import Embedder

#: Version of what :func:`find_private_copies` finds: a recorded pass of an older search (a state
#: dir's initialisation-pool check) is not taken for this one's. Bump it when the search finds more.
SEARCH_VERSION = 1

__all__ = ["SEARCH_VERSION", "PrivateCopy", "find_private_copies", "cosine_threshold", "distinct_photo_level", "distinct_hash_level",
           "COSINE_FLOOR", "COSINE_CEILING"]

#: The calibrated cosine threshold never drops below this (a release of near-identical proxies
#: must not turn ordinary similarity into findings) ...
COSINE_FLOOR = 0.9
#: ... nor rises above this (a release made mostly of copies must still flag them).
COSINE_CEILING = 0.99
#: Robust standard deviations above the release's median nearest-private cosine.
COSINE_SIGMAS = 6.0
#: A hash near-duplicate must sit this many times closer (in bits) to its private photo than photos
#: of two different private people come (:func:`distinct_hash_level`).
DISTINCT_HASH_FACTOR = 2.0
#: Percentile of the private photos' distances to other people's photos that sets that level (a
#: few duplicated photos under two names, as CelebA has, must not set it to 0).
DISTINCT_HASH_PERCENTILE = 1.0
#: Private photos sampled as queries for that level (each against every hash of every other person).
DISTINCT_HASH_QUERIES = 256

#: An embedding copy must also sit this many times closer (in 1 − cos) to its private photo than
#: the two closest different private photos sit to each other (:func:`distinct_photo_level`).
DISTINCT_FACTOR = 4.0


@dataclass(frozen=True)
class PrivateCopy:
    """A released image that matches a private one.

    Attributes:
        file: The released file (relative to the release).
        private: The private image's name.
        how: ``exact``, ``near-duplicate``, ``transformed`` (rotated, shifted, cropped, upside down, negative:
            :mod:`pfd.release.aligned_copies`), ``pasted`` (a window of the image: a pasted or tiled face)
            or ``embedding``.
        score: Hash distance in bits (``exact``/``near-duplicate``), the aligned correlation
            (``transformed``/``pasted``) or the cosine (``embedding``).
        threshold: The threshold it crossed.
        bits: Bits of the hash (``near-duplicate``).
    """

    file: str
    private: str
    how: str
    score: float
    threshold: float
    bits: int = 0


def cosine_threshold(nearest_cos: np.ndarray) -> float:
    """The embedding threshold of a release: median + 6 robust SDs of its nearest-private cosines,
    clipped to [:data:`COSINE_FLOOR`, :data:`COSINE_CEILING`].

    Args:
        nearest_cos: Each released image's cosine to its nearest private image ``(n,)``.
    """
    c = np.asarray(nearest_cos, dtype=np.float64)
    if c.size == 0:
        return COSINE_CEILING
    med = float(np.median(c))
    mad = 1.4826 * float(np.median(np.abs(c - med)))
    return float(np.clip(med + COSINE_SIGMAS * mad, COSINE_FLOOR, COSINE_CEILING))


def distinct_photo_level(embeddings: torch.Tensor) -> float:
    """The cosine an embedding copy must beat, from how close two *different* private photos come.

    With ``c`` the largest cosine between two private photos, a copy must reach
    ``1 − (1 − c) / DISTINCT_FACTOR``: a re-encoded or edited copy sits at 0.99 or above under a
    model that tells people apart, but a weak or low-resolution model maps different photos (and
    other people's) to 0.98, so only what is :data:`DISTINCT_FACTOR` times closer than any two
    private photos is a copy by the embeddings (the pixel tests still look at every image).

    Args:
        embeddings: Unit embeddings of the private photos ``(m, D)``.

    Returns:
        The level (``-1`` with fewer than two photos).
    """
    if len(embeddings) < 2:
        return -1.0
    closest = -1.0
    for lo in range(0, len(embeddings), 1024):  # (b, m) blocks: a large private set never needs m² at once
        block = embeddings[lo:lo + 1024] @ embeddings.T
        block[torch.arange(len(block)), torch.arange(lo, lo + len(block))] = -2.0  # not itself
        closest = max(closest, float(block.max()))
    return 1.0 - (1.0 - min(closest, 1.0)) / DISTINCT_FACTOR


def distinct_hash_level(queries: np.ndarray, query_ids: np.ndarray, hashes: np.ndarray, hash_ids: np.ndarray) -> float:
    """How close, in hash bits, photos of two different private people come.

    Each query's distance to the nearest hash (a photo or one of its copy variants) of another
    person; the :data:`DISTINCT_HASH_PERCENTILE` th percentile of those distances. A released image
    is a hash near-duplicate only within ``level / DISTINCT_HASH_FACTOR`` bits (and within
    :data:`~pfd.release.phash.NEAR_DUPLICATE_FRACTION` of the bits): a smaller distance than two
    different people's photos reach is evidence of copying, a larger one is not.

    Args:
        queries: Packed hashes of (a sample of) the private photos ``(q, B)``.
        query_ids: Their identities ``(q,)``.
        hashes: Packed hashes of every private photo's variants ``(m, B)``.
        hash_ids: The identity each belongs to ``(m,)``.

    Returns:
        The level in bits (``inf`` when no query has another person to compare with).
    """
    best = np.full(len(queries), np.inf)
    for lo in range(0, len(hashes), 4096):  # (q, c) blocks
        d = hamming(queries, hashes[lo:lo + 4096]).astype(np.float64)
        d[query_ids[:, None] == hash_ids[None, lo:lo + 4096]] = np.inf  # the same person's photos
        best = np.minimum(best, d.min(axis=1))
    best = best[np.isfinite(best)]
    return float(np.percentile(best, DISTINCT_HASH_PERCENTILE)) if len(best) else float("inf")


def _uint8(x: torch.Tensor) -> np.ndarray:
    return np.clip(np.round(x.detach().cpu().float().numpy() * 255.0), 0, 255).astype(np.uint8).transpose(1, 2, 0)


#: PIL's resampling filters, as publishing scripts resize (BOX is area averaging, as OpenCV's INTER_AREA).
_FILTERS = ("NEAREST", "BILINEAR", "BICUBIC", "LANCZOS", "BOX", "HAMMING")


def _resamplings(original: torch.Tensor, size: tuple[int, int]) -> list[np.ndarray]:
    """``(H, W, 3)`` uint8 versions of a ``(3, h, w)`` photo at ``size`` by each of :data:`_FILTERS` and
    torch's area and bicubic modes (none when the photo already has that size)."""
    if tuple(original.shape[-2:]) == tuple(size):
        return []
    h, w = size
    im = Image.fromarray(_uint8(original))
    out = [np.asarray(im.resize((w, h), getattr(Image.Resampling, f))) for f in _FILTERS]
    x = original[None].float()
    out.append(_uint8(F.interpolate(x, size=(h, w), mode="area")[0]))
    out.append(_uint8(F.interpolate(x, size=(h, w), mode="bicubic", align_corners=False)[0].clamp(0, 1)))
    return out


def _common_size(released: Sequence[tuple[str, np.ndarray]]) -> tuple[tuple[int, int], list[tuple[str, np.ndarray]]]:
    """The release's size (the most common ``(H, W)``) and every image at it (others resized, area-averaged)."""
    counts = Counter(tuple(int(v) for v in img.shape[:2]) for _, img in released)
    size = max(counts, key=lambda hw: (counts[hw], hw))
    out = [(f, img if tuple(img.shape[:2]) == size else
            _uint8(_resize(torch.from_numpy(np.array(img[..., :3])).permute(2, 0, 1).float().div(255.0), size)))
           for f, img in released]
    return size, out


def _resize(x: torch.Tensor, size: Any) -> torch.Tensor:
    """``(3, h, w)`` -> ``(3, H, W)`` of ``size`` (bilinear, as the decoders resize)."""
    hw = image_hw(size)
    if tuple(x.shape[-2:]) == hw:
        return x
    return F.interpolate(x[None], size=hw, mode="bilinear", align_corners=False, antialias=True)[0].clamp(0, 1)


def find_private_copies(
    released: Sequence[tuple[str, np.ndarray]],
    private: FaceSet,
    *,
    model: Any | None = None,
    batch_size: int = 64,
    aligned: bool = True,
) -> list[PrivateCopy]:
    """Released images that are copies or near-duplicates of private images.

    Args:
        released: ``(file, pixels (H, W, 3) uint8)`` of every released image.
        private: The private set.
        model: A face model (``(B, 3, H, W)`` in [0, 1] -> ``(B, D)``) for the embedding check;
            ``None`` skips it. Images are resized to ``model.arch["size"]`` when it declares one.
        batch_size: Embedding batch size.
        aligned: Also search rotated, cropped, pasted or tiled copies (:mod:`pfd.release.aligned_copies`;
            the slow part); ``False`` keeps exact copies and perceptual near-duplicates.

    Returns:
        One :class:`PrivateCopy` per flagged released image (the strongest reason), in input order.
    """
    if not released or len(private) == 0:
        return []
    originals = list(released)
    size, released = _common_size(released)  # (H, W); an image of another size is compared at this one
    grid = grid_for(min(size))
    limit = near_duplicate_bits(grid)
    rel_hash = np.stack([dhash(img, size=grid) for _, img in released])  # (n, grid² / 8)
    priv_hash, owner, exact_index, plain = [], [], {}, []
    for i in range(len(private)):
        original = private.load(i)  # (3, h, w) at the size the set was opened at (lint: each photo's own)
        x = _resize(original, size)
        px = _uint8(x)
        exact_index.setdefault(px.tobytes(), i)
        plain.append(dhash(px, size=grid))
        # Mirrored, shifted and cropped copies too: a careless publishing script makes those.
        for v in copy_variants(px):
            priv_hash.append(dhash(v, size=grid))
            owner.append(i)
        # The photo resized to the release's size as other libraries resize (issue 54: a 112 px original
        # resized to 32 px with bicubic, Lanczos or area resampling sat 18-24 bits from the bilinear
        # reference, past the threshold): each an exact reference and a hash of its own.
        for v in _resamplings(original, size):
            exact_index.setdefault(v.tobytes(), i)
            priv_hash.append(dhash(v, size=grid))
            owner.append(i)
    priv_hash = np.stack(priv_hash)  # (m * variants, grid² / 8)
    owner = np.asarray(owner, dtype=np.int64)
    ids = np.asarray(private.labels, dtype=np.int64)
    queries = np.random.default_rng(0).permutation(len(private))[:DISTINCT_HASH_QUERIES]
    level = distinct_hash_level(np.stack([plain[i] for i in queries]), ids[queries], priv_hash, ids[owner])
    limit = min(limit, int(level / DISTINCT_HASH_FACTOR))
    idx, dist = nearest(rel_hash, priv_hash)
    idx = owner[idx]  # variant -> its private image
    names = private.names
    found: dict[int, PrivateCopy] = {}
    native = {}  # a private photo at its own size, copied in as it is (issue 54: 112 px among 32 px proxies)
    for k, (_, img) in enumerate(originals):
        if img.shape[:2] != size:
            native.setdefault(img.shape, {})[k] = img.tobytes()
    for shape, wanted in native.items():
        for i in range(len(private)):
            px = _uint8(private.load(i))
            if px.shape == shape:
                for k, b in wanted.items():
                    if b == px.tobytes():
                        exact_index.setdefault(("native", k), i)
    for k, (f, img) in enumerate(released):
        j = exact_index.get(("native", k), exact_index.get(img.tobytes()))
        if j is not None:
            found[k] = PrivateCopy(f, names[j], "exact", 0.0, 0.0)
        elif dist[k] <= limit:
            found[k] = PrivateCopy(f, names[int(idx[k])], "near-duplicate", float(dist[k]), float(limit), grid * grid)
    # Rotated, shifted, cropped, upside-down, negative, pasted or tiled copies: aligned pixel matching.

    rel_t = torch.stack([torch.from_numpy(img.copy()).permute(2, 0, 1).float().div(255.0) for _, img in released])
    todo = [k for k in range(len(released)) if k not in found] if aligned else []
    if todo:
        priv_t = torch.stack([_resize(private.load(i), size) for i in range(len(private))])  # (m, 3, H, W)
        for m in find_aligned_copies(rel_t[todo], priv_t):
            k = todo[m.index]
            found[k] = PrivateCopy(released[k][0], names[m.private], m.how, m.score, m.threshold)
    if model is not None:

        side = getattr(model, "arch", {}).get("size", size) if hasattr(model, "arch") else size
        emb = Embedder(model, batch_size=batch_size, device="cpu")
        rel_x = torch.stack([_resize(torch.from_numpy(img.copy()).permute(2, 0, 1).float().div(255.0), side)
                             for _, img in released])  # (n, 3, H, W)
        e_rel = emb(rel_x)  # (n, D)
        e_priv = torch.cat([
            emb(torch.stack([_resize(private.load(i), side) for i in range(lo, min(lo + 512, len(private)))]))
            for lo in range(0, len(private), 512)
        ])  # (m, D)  # fmt: skip
        best = torch.full((len(e_rel),), -2.0)  # (n,): each released image's closest private photo
        arg = torch.zeros(len(e_rel), dtype=torch.long)
        for lo in range(0, len(e_priv), 4096):  # (n, b) blocks: never the whole n × m at once
            b_best, b_arg = (e_rel @ e_priv[lo:lo + 4096].T).max(dim=1)
            better = b_best > best  # strictly: the first of equal maxima, as one (n, m) max
            best, arg = torch.where(better, b_best, best), torch.where(better, b_arg + lo, arg)
        # Only far above what two *different* private photos reach under this model: a weak or
        # low-resolution model maps another person's photo as close as a copy.
        t = max(cosine_threshold(best.numpy()), distinct_photo_level(e_priv))
        for k in np.flatnonzero(best.numpy() > t):
            if k not in found:
                found[int(k)] = PrivateCopy(released[k][0], names[int(arg[k])], "embedding", float(best[k]), t)
    return [found[k] for k in sorted(found)]
