"""The release format: what a published release holds, its pixels, labels and manifest.

A release is an ImageFolder tree ``OUT/<label>/<k>.png`` plus ``OUT/manifest.json``:

* ``<label>`` is a zero-padded number (``0007``); labels are an arbitrary permutation of the
  internal proxy classes drawn from ``np.random.default_rng(label_seed)``, redrawn if it looks
  ordered (see :func:`looks_ordered`), so label order says nothing about source order. Within a
  class the image order is shuffled by the same generator.
* PNGs carry pixels only: PIL writes IHDR, IDAT and IEND for an RGB image without ``pnginfo``
  (no tEXt/iTXt/zTXt/tIME/pHYs/eXIf); ``optimize=False`` and a fixed compression level make the
  bytes a function of the pixels, so a resumed run writes byte-identical files.
* ``manifest.json`` holds the format, counts, image size (``S``, or ``[H, W]`` for non-square
  proxies), the method, the run id (a random id that ties the release to the state dir of the run
  that wrote it, for ``--resume``), the publication gate's verdicts and a sha256 per file -- no
  names, no seeds, no rotation, no model, no timestamps, nothing else (:data:`MANIFEST_KEYS`; the
  lint fails any other key).
* The release is the public artefact: files are 0644, folders 0755, whatever the umask.

:mod:`pfd.release.writer` writes it, :mod:`pfd.release.reader` reads it, :mod:`pfd.release.lint`
checks it for leaks; :mod:`pfd.release.state_dir` holds the rules of the private state dir that
must never travel with it.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Sequence, TypedDict

import numpy as np
import torch
from PIL import Image

__all__ = [
    "FORMAT", "FORMAT_VERSION", "MANIFEST", "CARD", "MANIFEST_KEYS", "AUDIT_KEYS", "LABEL_NAME_RE", "PNG_NAME_RE", "TMP_NAME_RE",
    "RELEASE_FILE_MODE", "RELEASE_DIR_MODE", "to_uint8", "encode_png", "looks_ordered", "label_permutation",
    "read_manifest", "Manifest", "CardEntry",
]

FORMAT = "pfd-release"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: The dataset card at the release's top level (:mod:`pfd.release.dataset_card`), listed as ``manifest["card"]``.
CARD = "README.md"
#: Leftovers of :func:`pfd.io.atomic_open` after a kill.
TMP_NAME_RE = re.compile(r"^\..+\.tmp$")

#: The keys of the manifest's ``audit`` table: the verdict the release passed, in aggregates only
#: (:meth:`pfd.audit.verdict.Verdict.summary`; nothing about any person), each a number, a bool or null.
AUDIT_KEYS = frozenset({"version", "level", "rule_out", "bound", "figures", "checks", "publishable",
                        "largest_rate_over_chance", "rules_out_share", "rules_out_multiple", "people", "failed"})

#: Every key a manifest may hold (the documented schema).
MANIFEST_KEYS = frozenset(
    {"format", "format_version", "method", "run_id", "image_size", "num_classes", "num_images", "images_per_class", "files",
     "audit", "card"}
)

class CardEntry(TypedDict):
    """The manifest's ``card``: the dataset card's file and its digest."""

    file: str
    sha256: str


class _ManifestFields(TypedDict):
    format: str
    format_version: int
    method: str
    image_size: int | list[int]
    num_classes: int
    num_images: int
    images_per_class: dict[str, int]
    files: dict[str, str]


class Manifest(_ManifestFields, total=False):
    """A release's ``manifest.json`` (:data:`MANIFEST_KEYS`; what :mod:`pfd.release.lint` checks).

    Attributes:
        format: :data:`FORMAT`.
        format_version: :data:`FORMAT_VERSION`.
        method: The distillation method.
        image_size: ``S``, or ``[H, W]`` when not square.
        num_classes: Released classes; ``num_images`` images.
        images_per_class: Per class folder, its images.
        files: Per released file (``0007/003.png``), its SHA-256.
        run_id: The run that wrote it (optional).
        audit: The audit's summary (:data:`AUDIT_KEYS`; optional).
        card: The dataset card (optional).
    """

    run_id: str
    audit: dict[str, object]
    card: CardEntry


#: Modes of the published files and folders (readable by everyone: it is the public artefact).
RELEASE_FILE_MODE, RELEASE_DIR_MODE = 0o644, 0o755
#: How pfd names release folders and files (``0007/003.png``).
LABEL_NAME_RE = re.compile(r"^\d{4,}$")
PNG_NAME_RE = re.compile(r"^\d{3,}\.png$")


# --------------------------------------------------------------------------------------------
# Pixels and PNG bytes
# --------------------------------------------------------------------------------------------


def to_uint8(proxies: torch.Tensor | np.ndarray) -> np.ndarray:
    """Quantise ``(n, 3, H, W)`` floats in [0, 1] (or uint8) to uint8 ``(n, H, W, 3)``.

    Floats are rounded to the nearest level (``round(255 x)``), values outside [0, 1] clipped.

    Raises:
        ValueError: On a wrong shape or non-finite values.
    """
    x = proxies.detach().cpu().numpy() if isinstance(proxies, torch.Tensor) else np.asarray(proxies)
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"proxies must be (n, 3, H, W), got {x.shape}")
    if x.dtype != np.uint8:
        x = x.astype(np.float64)
        if not np.isfinite(x).all():
            raise ValueError("proxies contain NaN or infinite values")
        x = np.clip(np.round(x * 255.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))



def encode_png(img: np.ndarray) -> bytes:
    """PNG bytes of one ``(H, W, 3)`` uint8 image with no metadata chunks, deterministically."""
    buf = io.BytesIO()
    Image.fromarray(img, mode="RGB").save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()



# --------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------


def looks_ordered(labels: Sequence[float] | np.ndarray, sources: Sequence[float] | np.ndarray) -> bool:
    """Whether labels follow the source order: a release must never do this.

    True when the Spearman rank correlation between the labels and the source identities is
    ±1 (same or reversed order, from 3 classes up) or ``|ρ| ≥ max(0.5, 4/√(n−1))`` (more than
    4 standard deviations from a random permutation, and at least a strong correlation).
    """
    a = np.asarray(labels, dtype=np.float64)
    b = np.asarray(sources, dtype=np.float64)
    n = len(a)
    if n < 3:
        return False
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(np.float64)
    ra -= ra.mean()
    rb -= rb.mean()
    rho = float((ra * rb).sum() / np.sqrt((ra**2).sum() * (rb**2).sum()))
    return abs(rho) >= 1 - 1e-9 or abs(rho) >= max(0.5, 4.0 / np.sqrt(n - 1))



def label_permutation(num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Label index of each internal class: a permutation that does not :func:`looks_ordered`."""
    perm = rng.permutation(num_classes)
    for _ in range(1000):
        if not looks_ordered(perm, np.arange(num_classes)):
            break
        perm = rng.permutation(num_classes)
    return perm



def read_manifest(path: str | os.PathLike) -> Manifest | None:
    """The manifest of a pfd release folder, or ``None`` if it has none / is not pfd's."""
    p = Path(path) / MANIFEST
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None

