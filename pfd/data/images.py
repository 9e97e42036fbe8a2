"""Decoding one face image into pfd's tensor convention, the same way for every source.

Identity folders, RecordIO records, ``.bin`` pairs and ``pairs.txt`` files all hand encoded
images (a path or bytes) to :class:`ImageDecoder`, which returns a ``(3, H, W)`` float32 RGB
tensor in ``[0, 1]`` (``H = W = S`` for the usual square crops; :mod:`pfd.data.shape`). Conversions, so that no source needs its own special case:

* greyscale (``1``, ``L``), 16/32-bit greyscale (``I;16``, ``I``, ``F``; scaled, not clipped),
  CMYK/YCbCr/LAB and palette images (GIF) become RGB;
* transparency (``RGBA``, ``LA``, palette with a transparent index) is composited onto black,
  the border colour of insightface's aligned crops;
* the EXIF orientation tag is applied (what a viewer shows is what the model sees);
* animated files (GIF, WebP) give their first frame;
* anything not ``H x W`` is resized with Pillow's antialiased bilinear filter; sources of another
  aspect ratio are stretched, and the decoder warns once (per decoder, i.e. once per dataset).

Decoding errors (truncated, corrupt, not an image, decompression bomb) are raised as
:class:`~pfd.errors.PfdError` naming the file and the fix.

Note: some FR code sets ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES = True`` globally; then Pillow
fills truncated images with grey instead of failing and pfd cannot detect them.
"""

from __future__ import annotations

import io
import logging
import os
import stat
from pathlib import Path
from typing import Any, Union

import numpy as np
import torch
from PIL import Image, ImageOps

from pfd.data.shape import ImageSize, canonical_size, image_hw, pil_size, size_text
from pfd.errors import PfdError

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageDecoder",
    "ImageDecodeError",
    "ImageSource",
    "is_image_name",
    "to_rgb",
    "encode_png",
]

logger = logging.getLogger(__name__)

#: File extensions read as images (compared lower-case).
IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".png", ".pgm", ".ppm", ".pbm", ".pnm", ".gif", ".bmp", ".webp", ".tif", ".tiff"}
)

#: A path to an image file, or the encoded bytes of one.
ImageSource = Union[str, os.PathLike, bytes, bytearray, memoryview]

# Errors Pillow raises for undecodable data; anything else is a bug and should propagate.
_DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError, IndexError)


class ImageDecodeError(PfdError):
    """An image that cannot be read; ``reason`` is the short cause (for skip counts)."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def is_image_name(name: str) -> bool:
    """Whether a file name has one of :data:`IMAGE_EXTENSIONS` (case-insensitive)."""
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def to_rgb(img: Image.Image) -> Image.Image:
    """Convert any Pillow image mode to 8-bit RGB (see the module docstring for the rules)."""
    if img.mode == "RGB":
        return img
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        # Pillow's own I;16 -> L conversion clips at 255 instead of scaling; scale by the range.
        arr = np.asarray(img, dtype=np.float64)
        top = 65535.0 if img.mode.startswith("I;16") or arr.max(initial=0) > 255 else 255.0
        if img.mode == "F" and arr.max(initial=0) <= 1.0:
            top = 1.0
        arr = np.clip(np.rint(arr / top * 255.0), 0, 255).astype(np.uint8)
        return Image.fromarray(arr, mode="L").convert("RGB")
    has_alpha = img.mode in ("RGBA", "LA", "La", "RGBa", "PA") or (
        img.mode == "P" and "transparency" in img.info
    )
    if has_alpha:
        rgba = img.convert("RGBA")
        black = Image.new("RGBA", rgba.size, (0, 0, 0, 255))
        return Image.alpha_composite(black, rgba).convert("RGB")
    return img.convert("RGB")


def encode_png(image: Any) -> bytes:
    """Encode an image as PNG bytes (lossless), for the test writers of RecordIO and ``.bin``.

    Args:
        image: ``bytes`` (returned unchanged: already encoded), a Pillow image, a ``uint8``
            array ``(H, W)`` or ``(H, W, 3)``, or a float tensor/array ``(3, H, W)`` in ``[0, 1]``.

    Returns:
        The encoded bytes.
    """
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            arr = np.asarray(image, dtype=np.float64)
            if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):
                arr = arr.transpose(1, 2, 0)  # (3, H, W) -> (H, W, 3)
            image = np.clip(np.rint(arr * 255.0), 0, 255).astype(np.uint8)
        if image.ndim == 3 and image.shape[-1] == 1:
            image = image[..., 0]
        image = Image.fromarray(image)
    if not isinstance(image, Image.Image):
        raise TypeError(f"cannot encode {type(image).__name__} as an image")
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


#: (dataset folder, source width, height, output size) already warned about in this process.
_WARNED_NONSQUARE: set[tuple[str, int, int, tuple[int, int]]] = set()


class ImageDecoder:
    """Decode images to ``(3, H, W)`` float32 RGB tensors in ``[0, 1]``.

    Holds the "warn once about sources of another aspect ratio" state of one dataset, so every
    dataset owns one decoder. Picklable (DataLoader workers get a copy; each may warn once).

    Args:
        size: Output side ``S`` (square) or ``(H, W)`` (:mod:`pfd.data.shape`).
        fix: What the error message suggests, e.g. ``"re-export it or pass --skip-bad"``.
    """

    def __init__(self, size: ImageSize, *, fix: str = "re-export or delete it, or pass --skip-bad") -> None:
        try:
            self.size = canonical_size(size)
        except PfdError:
            raise ValueError(f"image size must be positive, got {size}") from None
        self.hw = image_hw(self.size)
        self.fix = fix
        self.warned_nonsquare = False

    def open(self, source: ImageSource, name: str | None = None) -> Image.Image:
        """Open and fully decode ``source`` as an RGB Pillow image (original size).

        Raises:
            ImageDecodeError: (a PfdError) The data cannot be decoded; names ``name`` (or the
                path) and the fix.
        """
        in_memory = isinstance(source, (bytes, bytearray, memoryview))
        label = name if name is not None else ("<image bytes>" if in_memory else str(source))
        if not in_memory:
            try:
                regular = stat.S_ISREG(os.stat(source).st_mode)  # one stat: this runs for every image
            except OSError:
                regular = True  # missing or unreadable: Pillow's open below names it
            if not regular:  # a FIFO (or socket, device) named like an image would block the read forever
                reason = "not a regular file (a FIFO, socket or device)"
                raise ImageDecodeError(f"{label}: {reason}; replace it with the image file or remove it", reason=reason)
        try:
            fp = io.BytesIO(bytes(source)) if in_memory else Path(source)
            with Image.open(fp) as img:
                img.seek(0)  # first frame of animated GIF/WebP
                img.load()  # force the full decode: catches truncation here, not later
                img = ImageOps.exif_transpose(img)
                return to_rgb(img)
        except FileNotFoundError:
            raise ImageDecodeError(f"{label}: image file not found; restore it or list the dataset again",
                                   reason="file not found") from None
        except PermissionError:
            raise ImageDecodeError(f"{label}: permission denied; make it readable (chmod) or remove it",
                                   reason="permission denied") from None
        except _DECODE_ERRORS as e:
            reason = f"cannot decode image ({' '.join(str(e).split()) or type(e).__name__})"
            raise ImageDecodeError(f"{label}: {reason}; {self.fix}", reason=reason) from None

    def check_square(self, img: Image.Image, name: str | None = None) -> None:
        """Warn (once per decoder) that a source's aspect ratio differs from the output's: it is stretched."""
        w, h = img.size
        out_h, out_w = self.hw
        # Once per dataset and process: the dataset is the folder above the identity folder (a set
        # opened again, at another size or by another stage, said it already).
        where = os.path.dirname(os.path.dirname(str(name))) if name else ""
        key = (where, w, h, self.hw)
        if w * out_h != h * out_w and not self.warned_nonsquare and key not in _WARNED_NONSQUARE:
            self.warned_nonsquare = True
            _WARNED_NONSQUARE.add(key)
            # logging, not warnings.warn: Python's warning registry would show it once per
            # process (per code location), but each dataset should say it once.
            shape = "not square" if out_h == out_w else f"not {out_h}:{out_w} (height:width)"
            logger.warning(
                "%s: source is %dx%d (width x height), %s; images are stretched to %s (shown once per "
                "dataset). Align/crop faces to that shape first for faithful results.",
                name or "image", w, h, shape, size_text(self.size),
            )

    def __call__(self, source: ImageSource, name: str | None = None) -> torch.Tensor:
        """Decode ``source`` to a ``(3, H, W)`` tensor (see :meth:`open` for errors)."""
        img = self.open(source, name)
        self.check_square(img, name)
        if img.size != pil_size(self.size):
            img = img.resize(pil_size(self.size), Image.Resampling.BILINEAR)
        arr = np.asarray(img, dtype=np.uint8)  # (H, W, 3)
        return torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div_(255.0)  # (3, H, W)
