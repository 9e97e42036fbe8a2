"""The data sets an audit reads, opened once per image size.

Every attacker may take another image size; each opens the private set and the release at its own
size once (:class:`ReleaseSets`), as every check opens the other sets it is given (the membership
test's held-out people and public data: :meth:`ReleaseSets.dataset`). A benchmark's private set that lives only in memory
(:class:`OpenedPrivateSets`) and the gate's release before it is written (:class:`MemorySets`) are
read through the same three methods, so every check sees the same images whatever the way in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from pfd.data.faceset import FaceSet, TensorFaces
from pfd.data.shape import canonical_size, same_size, size_text
from pfd.data.sources import open_faces
from pfd.errors import PfdError
from pfd.release.reader import read_release, release_tensor

__all__ = ["ReleaseSets", "OpenedPrivateSets", "MemorySets", "private_spec_text"]


class ReleaseSets:
    """The private set, the release and any other data set of the audit, opened once per image size.

    ``pfd attack`` and ``pfd card`` open every set through one of these (the card's test set too), so each
    is opened and checked once and its pixel digests (:mod:`pfd.release.disjoint`) computed once.

    Args:
        private_spec: The private set's spec.
        release: The released folder.
        skip_bad: Skip (and list) unreadable images.
        recorded_in: The state dir, where ``private_spec`` is the one it records (no ``--private`` given):
            a set that does not open here is then one error naming the way out.
    """

    def __init__(self, private_spec: str, release: Path, *, skip_bad: bool = False,
                 recorded_in: Path | str | None = None) -> None:
        self.private_spec, self.release, self.skip_bad = private_spec, release, skip_bad
        self.recorded_in = recorded_in
        self._private: dict[Any, FaceSet] = {}
        self._release: dict[Any, FaceSet] = {}
        self._other: dict[tuple[str, Any], FaceSet] = {}

    def private(self, size: Any) -> FaceSet:
        key = _key(size)
        if key not in self._private:
            try:
                self._private[key] = open_faces(self.private_spec, size=size, skip_bad=self.skip_bad)
            except PfdError as e:
                if self.recorded_in is None:
                    raise
                # The spec the state dir recorded, not one the user typed: a benchmark's in-memory set
                # ("celeba:private+lowres (in memory)") or a folder that moved.
                raise PfdError(f"the state dir {self.recorded_in} records the private set as {self.private_spec!r}, "
                               f"which cannot be opened here ({e}); pass --private with those images (a benchmark's "
                               "set: write it out with python -m benchmarks.privacy_utility --export SPEC DIR)") from None
        return self._private[key]

    def proxies(self, size: Any) -> FaceSet:
        key = _key(size)
        if key not in self._release:
            self._release[key] = read_release(self.release, size=size)
        return self._release[key]

    def dataset(self, spec: str, size: Any) -> FaceSet:
        """Another data set of the audit (``--holdout``, ``--public``), opened once per size and shared by the
        checks: its pixel digests (:mod:`pfd.release.disjoint`) are then computed once too."""
        key = (spec, _key(size))
        if key not in self._other:
            self._other[key] = open_faces(spec, size=size, skip_bad=self.skip_bad)
        return self._other[key]

    def released_pixels(self) -> list[tuple[str, np.ndarray]]:
        """``(name, (H, W, 3) uint8)`` of every released image, as written."""
        out = []
        for name in read_release(self.release).names:
            with Image.open(self.release / name) as im:
                out.append((name, np.asarray(im.convert("RGB"), dtype=np.uint8)))
        return out


class OpenedPrivateSets(ReleaseSets):
    """A written release and a private set the caller has already opened (a benchmark's set that
    lives only in memory, e.g. ``celeba:private+lowres``), at the attackers' image size.

    Args:
        private: The private set.
        private_spec: How it is named in the report.
        release: The released folder.
        skip_bad: As :class:`ReleaseSets`.
    """

    def __init__(self, private: FaceSet, private_spec: str, release: Path, *, skip_bad: bool = False) -> None:
        super().__init__(private_spec, release, skip_bad=skip_bad)
        self._base = private

    def private(self, size: Any) -> FaceSet:
        if size is not None and not same_size(size, self._base.size):
            raise PfdError(f"the private set given ({private_spec_text(self.private_spec)}) is "
                           f"{size_text(self._base.size)} but an attacker takes {size_text(size)} images; open it at "
                           "that size, or pass its spec instead")
        return self._base


def _key(size: Any) -> Any:
    """One cache key per image size however it is spelt (``32``, ``[32, 32]``, ``(32, 32)``)."""
    return None if size is None else canonical_size(size)


def private_spec_text(spec: str) -> str:
    return spec if len(spec) <= 80 else spec[:77] + "..."


class MemorySets(ReleaseSets):
    """The private set and a release still in memory (the gate's, before it is written).

    The proxies are held in the order, and under the names, that the written release will have
    (:func:`pfd.release.writer.release_layout`), and read at another size through the reader's own
    resize (:func:`pfd.release.reader.release_tensor`): the audit before writing and the audit of
    the written release see the same images in the same order.

    Args:
        private: The private set (at the release's size).
        private_spec: How it was given.
        proxies: ``(n, 3, H, W)`` uint8: exactly the pixels that would be released, in ``names``' order.
        names: ``(n,)`` each proxy's file in the release, sorted as a reader lists them.
        skip_bad: As :class:`ReleaseSets`.
    """

    def __init__(self, private: FaceSet, private_spec: str, proxies: np.ndarray, names: list[str], *,
                 skip_bad: bool = False) -> None:
        super().__init__(private_spec, Path("<in memory>"), skip_bad=skip_bad)
        self._base = private
        self._pixels = np.ascontiguousarray(proxies.transpose(0, 2, 3, 1))  # (n, H, W, 3)
        self.names = list(names)

    def private(self, size: Any) -> FaceSet:
        if size not in self._private:
            self._private[size] = (self._base if size is None or same_size(size, self._base.size) else
                                   open_faces(self.private_spec, size=size, skip_bad=self.skip_bad))
        return self._private[size]

    def proxies(self, size: Any) -> FaceSet:
        if size not in self._release:
            want = size or tuple(self._pixels.shape[1:3])
            x = torch.stack([release_tensor(img, want) for img in self._pixels])  # (n, 3, H, W)
            self._release[size] = TensorFaces(x, np.zeros(len(x), dtype=np.int64), names=self.names)
        return self._release[size]

    def released_pixels(self) -> list[tuple[str, np.ndarray]]:
        return list(zip(self.names, self._pixels))
