"""Reading a release back: as a FaceSet (``read_release``), and checking that it is one, complete.

The release layout and its manifest are :mod:`pfd.release.format`'s; this module only reads them
(what ``pfd train --data RELEASE``, the attacks and the benchmarks do).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from pfd.data.faceset import FaceSet
from pfd.release.format import LABEL_NAME_RE, MANIFEST, PNG_NAME_RE, read_manifest
from pfd.data.shape import ImageSize, canonical_size, pil_size
from pfd.errors import PfdError
from pfd.io import sha256_file

__all__ = ["ReleaseFaces", "read_release", "release_tensor", "looks_like_release", "check_complete_release"]


class ReleaseFaces(FaceSet):
    """A release (or any ``root/<label>/<image>`` folder) read as a FaceSet.

    Identities are the folder names in sorted order; samples are sorted by folder, then file.
    """

    def __init__(self, root: str | os.PathLike, *, size: ImageSize | None = None) -> None:
        self.root = Path(root)
        dirs = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        self.identities = dirs
        paths: list[str] = []
        labels: list[int] = []
        for i, d in enumerate(dirs):
            for f in sorted(q.name for q in (self.root / d).iterdir() if q.is_file() and q.suffix.lower() == ".png"):
                paths.append(f"{d}/{f}")
                labels.append(i)
        if not paths:
            raise PfdError(f"{self.root}: no <label>/<image>.png files; is this a pfd release folder?")
        self._paths = paths
        self.labels = np.asarray(labels, dtype=np.int64)
        with Image.open(self.root / paths[0]) as im:
            native = (im.size[1], im.size[0])  # (H, W)
        self.size = canonical_size(size if size else native)

    def load(self, index: int) -> torch.Tensor:
        path = self.root / self._paths[index]
        try:
            with Image.open(path) as im:
                return release_tensor(im, self.size)
        except OSError as e:
            raise PfdError(f"{path}: cannot decode image ({e}); re-download the release") from None

    def name(self, index: int) -> str:
        return self._paths[index]


def release_tensor(image: "Image.Image | np.ndarray", size: ImageSize) -> torch.Tensor:
    """A released image as the audit reads it: RGB, resized to ``size`` (bilinear) when it differs,
    ``(3, H, W)`` float in [0, 1]. One function for a release on disk and one still in memory.

    Args:
        image: A PIL image or ``(H, W, 3)`` uint8 pixels.
        size: ``S`` or ``(H, W)``.
    """
    im = Image.fromarray(image) if isinstance(image, np.ndarray) else image
    im = im.convert("RGB")
    if im.size != pil_size(size):
        im = im.resize(pil_size(size), Image.BILINEAR)
    arr = np.asarray(im, dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div_(255.0)


def read_release(path: str | os.PathLike, *, verify: bool = False, size: ImageSize | None = None) -> ReleaseFaces:
    """Open a release as a FaceSet whose identities are the label folder names.

    Args:
        path: Release folder.
        verify: Check the release is complete (:func:`check_complete_release`).
        size: Resize images to this side ``S`` or ``(H, W)`` (default: as stored).

    Raises:
        PfdError: If the folder holds no images, or ``verify`` finds a missing, unlisted or
            altered file.
    """
    root = Path(path)
    if not root.is_dir():
        raise PfdError(f"{root}: no such release folder")
    if verify:
        check_complete_release(root)
    return ReleaseFaces(root, size=size)


def looks_like_release(path: str | os.PathLike) -> bool:
    """Whether a folder looks like a pfd release: it has a ``manifest.json``, or its folders and
    files are all named as pfd names them (``0007/003.png``), a release cut short before its
    manifest (the manifest is written last)."""
    root = Path(path)
    if (root / MANIFEST).exists() or (root / MANIFEST).is_symlink():
        return True
    dirs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] if root.is_dir() else []
    if not dirs or not all(LABEL_NAME_RE.match(d.name) for d in dirs):
        return False
    files = [f for d in dirs for f in d.iterdir() if not f.name.startswith(".")]
    return bool(files) and all(PNG_NAME_RE.match(f.name) for f in files)


def check_complete_release(path: str | os.PathLike) -> dict[str, Any]:
    """Refuse a release that is not complete and intact, before anything trains on it.

    Complete means: a pfd ``manifest.json`` (written last, so a killed writer leaves none),
    every listed file present with its sha256, and no image the manifest does not list.

    Returns:
        The manifest.

    Raises:
        PfdError: Naming the folder or file and the fix.
    """
    root = Path(path)
    manifest = read_manifest(root)
    if manifest is None:
        raise PfdError(
            f"{root}: looks like a pfd release but has no valid manifest.json (its writer was stopped?); "
            "finish it with pfd distill --resume or re-download it"
        )
    listed = manifest.get("files")
    if not isinstance(listed, dict) or not listed:
        raise PfdError(f"{root / MANIFEST}: lists no files; re-download the release")
    for rel, digest in listed.items():
        p = root / rel
        if not p.is_file():
            raise PfdError(f"{p}: listed in the manifest but missing; re-download the release")
        if sha256_file(p) != digest:
            raise PfdError(f"{p}: sha256 differs from the manifest (altered or corrupt); re-download the release")
    for d in (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for f in d.iterdir():
            rel = f"{d.name}/{f.name}"
            if f.suffix.lower() == ".png" and rel not in listed:
                raise PfdError(f"{root / rel}: not listed in the manifest; remove it or re-download the release")
    return manifest


# --------------------------------------------------------------------------------------------
# The state dir
# --------------------------------------------------------------------------------------------
