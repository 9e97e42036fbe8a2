"""The real-photo data of ``privacy_utility.py``: Extended Yale B (private + test) and Yale A (public).

Nothing here copies a photo anywhere: the sets are decoded into memory (:class:`TensorFaces`).

* **Extended Yale B, cropped** (38 people, ~64 greyscale PGMs each, 168 × 192, one pose, 64
  lighting directions). Images whose mean pixel value is below :data:`DARK_THRESHOLD` (0.05 on
  [0, 1]) are dropped: they are the ``_Ambient`` shots and the most extreme light angles
  (azimuth ±110-130°, elevation +65/+90°), almost entirely black, with too little face for a
  detector to have cropped them in a real pipeline; 111 of 2424 images (4.6 %) at 48 px. The rule looks at
  pixels only, never at results. The identities are split by a seeded permutation of their sorted
  names: the first :data:`N_PRIVATE` are the publisher's private set, the rest the held-out test
  identities (downstream verification pairs and MIA non-members).
* **Yale A** (15 people × 10-11 GIFs, 320 × 243, whole head on a white wall) is public data: a
  fixed centre box (:data:`YALE_A_BOX`) crops it to the face, roughly the framing of the Yale B
  crops (eyebrows to chin), before resizing.

Both are stretched to squares (Yale B is 7:8), as :class:`pfd.data.images.ImageDecoder` does.

Yale B's file names carry the light direction (``P00A+035E+15``: azimuth 35°, elevation 15°).
Its customary evaluation (Georghiades, Belhumeur & Kriegman, TPAMI 2001) groups images by the angle
between the light and the camera axis, ``acos(cos A · cos E)``: subsets 1-5 up to 12°, 25°, 50°,
77° and beyond. :func:`light_angle` reads it; the benchmark reports verification on all images and
on subsets 1-3 (:data:`MODERATE_LIGHT`, <= 50°), where the faces are lit well enough that a small
model's differences show.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image

from pfd.data.faces import FaceFolder
from pfd.data.faceset import TensorFaces
from pfd.data.images import ImageDecoder
from pfd.data.shape import pil_size
from pfd.errors import PfdError

__all__ = ["DARK_THRESHOLD", "MODERATE_LIGHT", "N_PRIVATE", "YALE_A_BOX", "find_data_root", "light_angle", "moderate_light", "yale_b", "split_yale_b", "yale_a"]

YALE_B = "extended-yale-b-cropped"
YALE_A = "yale-a"
#: Images darker than this mean pixel value (on [0, 1]) are dropped from Yale B.
DARK_THRESHOLD = 0.05
#: Private identities of the 38; the other 10 are the test identities.
N_PRIVATE = 28
#: Largest light angle (degrees) of Yale B's subsets 1-3.
MODERATE_LIGHT = 50.0
_LIGHT = re.compile(r"A([+-]\d+)E([+-]\d+)")
#: Face box (left, top, right, bottom) in Yale A's 320 x 243 frames.
YALE_A_BOX = (100, 62, 236, 218)


def find_data_root(given: str | None, repo: Path) -> Path | None:
    """The first of ``given``, ``<repo>/../shared/data``, ``/work/shared/data`` holding both sets."""
    candidates = [Path(given).expanduser()] if given else [repo.parent / "shared" / "data", Path("/work/shared/data")]
    for c in candidates:
        if (c / YALE_B).is_dir() and (c / YALE_A).is_dir():
            return c.resolve()
    return None


def _in_memory(faces, keep: np.ndarray) -> TensorFaces:
    sub = faces.subset(keep)
    images = torch.stack([sub.load(i) for i in range(len(sub))])
    return TensorFaces(images, sub.labels, identities=sub.identities, names=[sub.name(i) for i in range(len(sub))])


def yale_b(root: Path, *, size: Any) -> tuple[TensorFaces, dict[str, int]]:
    """Extended Yale B at ``size`` px without the near-black images.

    Returns:
        The set and counts ``{"images", "dropped_dark"}``.
    """
    folder = FaceFolder(root / YALE_B, size=size, min_images=1)
    means = np.array([float(folder.load(i).mean()) for i in range(len(folder))])
    keep = np.flatnonzero(means >= DARK_THRESHOLD)
    return _in_memory(folder, keep), {"images": int(len(folder)), "dropped_dark": int(len(folder) - len(keep))}


def split_yale_b(faces: TensorFaces, *, seed: int, n_private: int = N_PRIVATE) -> tuple[TensorFaces, TensorFaces]:
    """``(private, test)``: a seeded permutation of the sorted identity names, cut at ``n_private``."""
    names = sorted(faces.identities)
    if not 0 < n_private < len(names):
        raise PfdError(f"{n_private} private identities of {len(names)}: leave at least one for the test set")
    order = np.random.default_rng(seed).permutation(len(names))
    private = {names[i] for i in order[:n_private]}
    labels = np.arange(faces.num_classes)
    mine = [k for k in labels if faces.identities[k] in private]
    rest = [k for k in labels if faces.identities[k] not in private]
    return _select(faces, mine), _select(faces, rest)


def _select(faces: TensorFaces, labels: Sequence[int]) -> TensorFaces:
    return _in_memory(faces, np.flatnonzero(np.isin(faces.labels, labels)))


def yale_a(root: Path, *, size: Any) -> TensorFaces:
    """Yale A cropped to :data:`YALE_A_BOX` and resized to ``size`` px (RGB copies of the grey)."""
    decoder = ImageDecoder(size)
    folder = FaceFolder(root / YALE_A, size=size, min_images=1)  # lists the files and identities
    images = []
    for i in range(len(folder)):
        img = decoder.open(root / YALE_A / folder.name(i), folder.name(i))
        w, h = img.size
        box = YALE_A_BOX if (w, h) == (320, 243) else (0, 0, w, h)
        img = img.crop(box).resize(pil_size(size), Image.Resampling.BILINEAR)
        images.append(torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255.0))
    return TensorFaces(torch.stack(images), folder.labels, identities=folder.identities, names=folder.names)


def light_angle(name: str) -> float:
    """Angle in degrees between the light and the camera axis from a Yale B file name; ``inf`` when
    the name carries none (the ``_Ambient`` shots)."""
    m = _LIGHT.search(Path(name).name)
    if m is None:
        return math.inf
    a, e = (math.radians(int(g)) for g in m.groups())
    return math.degrees(math.acos(max(-1.0, min(1.0, math.cos(a) * math.cos(e)))))


def moderate_light(faces: TensorFaces, *, max_angle: float = MODERATE_LIGHT) -> TensorFaces:
    """The images of ``faces`` lit within ``max_angle`` degrees of the camera axis (subsets 1-3)."""
    keep = np.flatnonzero([light_angle(faces.name(i)) <= max_angle for i in range(len(faces))])
    return _in_memory(faces, keep)
