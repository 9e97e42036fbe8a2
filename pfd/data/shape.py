"""Face image sizes: a side ``S`` for square crops, ``(H, W)`` for models that want another shape.

Most face-recognition models take square crops (insightface's 112 x 112), and pfd keeps those as
one int everywhere (configs, manifests, checkpoints), exactly as before non-square support. Some
take another shape: MobileFaceNet was trained on 112 high x 96 wide crops. Such a size is
``(H, W)``, height first as in a tensor's ``(..., H, W)``, and written ``"112x96"`` on the command
line and ``[112, 96]`` in TOML, JSON and checkpoints. Pillow's ``Image.size`` is ``(W, H)``: the
helpers below are the one place that turns one into the other.

* :func:`image_hw`: any accepted form -> ``(H, W)``;
* :func:`canonical_size`: ``S`` when square, else ``(H, W)`` (what objects store and compare);
* :func:`plain_size`: ``S`` or ``[H, W]`` (what configs, manifests and checkpoints store);
* :func:`size_text`: ``"32px"`` or ``"112x96"`` for messages and reports;
* :func:`pil_size`: ``(W, H)`` for ``Image.resize``.
"""

from __future__ import annotations

import re
from typing import Any, Union

from pfd.errors import PfdError

__all__ = ["ImageSize", "ImageSizeSetting", "image_hw", "canonical_size", "plain_size", "size_text", "pil_size", "same_size"]

#: An image size: a square side, or ``(H, W)`` / ``[H, W]`` / ``"HxW"``.
ImageSize = Union[int, tuple[int, int], list[int], str]

#: The annotation of a config's image size: ``S`` or ``[H, W]`` (TOML holds these; the CLI's
#: ``--size 112x96`` becomes ``[112, 96]``). 0 may mean "decided later" where a config says so.
ImageSizeSetting = Union[int, list[int]]

#: The largest side a face crop may have: far above every FR model's input (112-224 px), and far below
#: what a mistyped ``--size 8192`` would allocate per image (800 MB of float32 at 8192 x 8192 x 3 x 4).
MAX_SIDE = 1024

_TEXT = re.compile(r"^\s*(\d+)\s*[xX×,]\s*(\d+)\s*$")


def image_hw(size: Any, *, what: str = "image size") -> tuple[int, int]:
    """``(H, W)`` of a size given as ``S``, ``(H, W)``, ``[H, W]``, ``"S"`` or ``"HxW"``.

    Args:
        size: The size.
        what: How an error names it (e.g. ``"--size"``).

    Returns:
        Height and width in pixels, both >= 1.

    Raises:
        PfdError: Anything else (a bool, a float that is not whole, a non-positive side, 3 numbers).
    """
    hw: tuple[Any, Any]
    if isinstance(size, bool):
        raise PfdError(f"{what} = {size!r}: not a size; give a side S (e.g. 112) or HxW (e.g. 112x96)")
    if isinstance(size, str):
        text = size.strip()
        m = _TEXT.match(text)
        if m:
            hw = (int(m.group(1)), int(m.group(2)))
        elif text.isdigit():
            hw = (int(text), int(text))
        else:
            raise PfdError(f"{what} = {size!r}: not a size; give a side S (e.g. 112) or HxW, height x width (e.g. 112x96)")
    elif isinstance(size, (list, tuple)):
        if len(size) != 2:
            raise PfdError(f"{what} = {list(size)!r}: give [height, width] (two numbers) or one side")
        hw = (size[0], size[1])
    else:
        hw = (size, size)
    out = []
    for v in hw:
        if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__index__"):
            raise PfdError(f"{what} = {size!r}: not a size; give a side S (e.g. 112) or HxW (e.g. 112x96)")
        if int(v) != v or int(v) < 1:
            raise PfdError(f"{what} = {size!r}: sides must be whole numbers >= 1")
        out.append(int(v))
    return out[0], out[1]


def canonical_size(size: Any, *, what: str = "image size") -> int | tuple[int, int]:
    """``S`` for a square size, ``(H, W)`` otherwise: the form objects store and compare."""
    h, w = image_hw(size, what=what)
    return h if h == w else (h, w)


def plain_size(size: Any, *, what: str = "image size") -> int | list[int]:
    """``S`` for a square size, ``[H, W]`` otherwise: the form TOML, JSON and checkpoints hold."""
    h, w = image_hw(size, what=what)
    return h if h == w else [h, w]


def size_text(size: Any) -> str:
    """``"32px"`` for a square size, ``"112x96"`` (height x width) otherwise."""
    h, w = image_hw(size)
    return f"{h}px" if h == w else f"{h}x{w}"


def pil_size(size: Any) -> tuple[int, int]:
    """``(W, H)``: Pillow's order, for ``Image.resize`` and comparing with ``Image.size``."""
    h, w = image_hw(size)
    return w, h


def same_size(a: Any, b: Any) -> bool:
    """Whether two sizes, in any accepted form, are the same shape."""
    return image_hw(a) == image_hw(b)
