"""The common interface of every identity-labelled face source.

Every source (identity folders, insightface RecordIO, the built-in synthetic set, a release)
is a :class:`FaceSet`: a map-style ``torch`` dataset whose item ``i`` is

* an image tensor of shape ``(3, H, W)``, ``float32``, RGB, values in ``[0, 1]`` (``H = W = S``
  for square crops; :mod:`pfd.data.shape`; models apply their own normalisation inside
  ``forward``), and
* an integer label in ``[0, num_classes)``.

Besides the items, a FaceSet exposes everything the later stages need without decoding images:
``labels`` (one int per sample), ``identities`` (label -> identity name), ``names`` (a stable
per-sample name such as ``"alice/003.jpg"``, used by the release lint and the attacks) and
``size``. Subsets keep or re-number labels explicitly.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from pfd.data.shape import canonical_size, image_hw, size_text

__all__ = ["FaceSet", "FaceSubset", "TensorFaces", "ConcatFaces", "to_memory"]


class FaceSet(Dataset):
    """Abstract identity-labelled face dataset.

    Subclasses set ``identities`` (list of identity names, index = label), ``labels``
    (``np.int64`` array, one per sample), ``size`` (``S``, or ``(H, W)`` when not square) and implement
    :meth:`load` and :meth:`name`.
    """

    identities: list[str]
    labels: np.ndarray
    size: int | tuple[int, int]
    #: Optional per-identity attributes, e.g. ``{"alice": {"tone": 2, "hair": 0, "age": 4}}``.
    attributes: dict[str, dict[str, int]] | None = None

    # -- to implement ---------------------------------------------------------------------
    def load(self, index: int) -> torch.Tensor:
        """Image ``index`` as a ``(3, H, W)`` float32 RGB tensor in ``[0, 1]``."""
        raise NotImplementedError

    def name(self, index: int) -> str:
        """A stable, human-readable name of sample ``index`` (e.g. ``"alice/003.jpg"``)."""
        raise NotImplementedError

    # -- provided ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(len(self.labels))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.load(int(index)), int(self.labels[index])

    @property
    def num_classes(self) -> int:
        """Number of identities (labels run from 0 to ``num_classes - 1``)."""
        return len(self.identities)

    @property
    def hw(self) -> tuple[int, int]:
        """``(H, W)`` of the images :meth:`load` returns."""
        return image_hw(self.size)

    @property
    def names(self) -> list[str]:
        """Per-sample names, in sample order."""
        return [self.name(i) for i in range(len(self))]

    def indices_of(self, label: int) -> np.ndarray:
        """Sample indices of identity ``label``, ascending."""
        return np.flatnonzero(self.labels == label)

    def counts(self) -> np.ndarray:
        """Images per identity, shape ``(num_classes,)``."""
        return np.bincount(self.labels, minlength=self.num_classes)

    def subset(self, indices: Sequence[int] | np.ndarray, *, relabel: bool = True) -> "FaceSubset":
        """A view on some samples.

        Args:
            indices: Sample indices into this set.
            relabel: Re-number the identities that remain to ``0..n-1`` (in order of their old
                label) and keep only those in ``identities``; otherwise keep labels as they are.
        """
        return FaceSubset(self, indices, relabel=relabel)

    def select_identities(self, labels: Sequence[int] | np.ndarray, *, relabel: bool = True) -> "FaceSubset":
        """All samples of the given identities (see :meth:`subset` for ``relabel``)."""
        keep = np.isin(self.labels, np.asarray(labels, dtype=np.int64))
        return self.subset(np.flatnonzero(keep), relabel=relabel)

    def describe(self) -> str:
        """One line: identities, images, image size."""
        return f"{type(self).__name__}: {self.num_classes} identities, {len(self)} images, {size_text(self.size)}"


class FaceSubset(FaceSet):
    """A subset of a :class:`FaceSet` (see :meth:`FaceSet.subset`)."""

    def __init__(self, parent: FaceSet, indices: Sequence[int] | np.ndarray, *, relabel: bool = True) -> None:
        self.parent = parent
        self.indices = np.asarray(indices, dtype=np.int64)
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= len(parent)):
            raise IndexError("subset index out of range")
        old = parent.labels[self.indices]
        self.size = parent.size
        if relabel:
            kept = np.unique(old)
            remap = np.full(parent.num_classes, -1, dtype=np.int64)
            remap[kept] = np.arange(len(kept))
            self.labels = remap[old]
            self.identities = [parent.identities[k] for k in kept]
            #: new label -> label in the parent
            self.parent_labels = kept
        else:
            self.labels = old.copy()
            self.identities = list(parent.identities)
            self.parent_labels = np.arange(parent.num_classes)
        if parent.attributes is not None:
            self.attributes = {k: v for k, v in parent.attributes.items() if k in set(self.identities)}

    def load(self, index: int) -> torch.Tensor:
        return self.parent.load(int(self.indices[index]))

    def name(self, index: int) -> str:
        return self.parent.name(int(self.indices[index]))


class TensorFaces(FaceSet):
    """A FaceSet held in memory: images ``(n, 3, H, W)`` in ``[0, 1]`` and labels.

    Args:
        images: Float tensor ``(n, 3, H, W)`` with values in ``[0, 1]``.
        labels: Integer labels, shape ``(n,)``.
        identities: Identity names (default ``"id00000"``...).
        names: Per-sample names (default ``"<identity>/<i>.png"``).
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: Sequence[int] | np.ndarray | torch.Tensor,
        *,
        identities: Sequence[str] | None = None,
        names: Sequence[str] | None = None,
        attributes: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be (n, 3, H, W), got {tuple(images.shape)}")
        self.images = images.float()
        self.labels = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels, dtype=np.int64)
        if len(self.labels) != len(images):
            raise ValueError("images and labels differ in length")
        n_cls = int(self.labels.max()) + 1 if len(self.labels) else 0
        self.identities = list(identities) if identities is not None else [f"id{k:05d}" for k in range(n_cls)]
        self.size = canonical_size(tuple(images.shape[-2:]))
        self._names = list(names) if names is not None else None
        self.attributes = attributes

    def load(self, index: int) -> torch.Tensor:
        return self.images[index]

    def name(self, index: int) -> str:
        if self._names is not None:
            return self._names[index]
        return f"{self.identities[self.labels[index]]}/{index}.png"


class ConcatFaces(FaceSet):
    """Several FaceSets trained jointly with disjoint label spaces.

    Labels of source ``j`` are shifted by the number of identities of sources ``0..j-1``;
    identity and sample names are prefixed with ``"<j>:"`` when there is more than one source so
    that equal identity names in two sources stay different classes.

    Args:
        sources: FaceSets of equal image size.

    Raises:
        ValueError: If the sources differ in image size or none is given.
    """

    def __init__(self, sources: Sequence[FaceSet]) -> None:
        if not sources:
            raise ValueError("ConcatFaces needs at least one source")
        sizes = {s.size for s in sources}
        if len(sizes) != 1:
            raise ValueError(f"sources differ in image size: {sorted(map(size_text, sizes))}")
        self.sources = list(sources)
        self.size = sources[0].size
        multi = len(sources) > 1
        offsets = np.cumsum([0] + [s.num_classes for s in sources])
        self.labels = np.concatenate([s.labels + off for s, off in zip(sources, offsets)]).astype(np.int64)
        self.identities = [
            (f"{j}:{name}" if multi else name) for j, s in enumerate(sources) for name in s.identities
        ]
        self._starts = np.cumsum([0] + [len(s) for s in sources])
        self._multi = multi
        attrs = [s.attributes for s in sources]
        if all(a is not None for a in attrs):
            self.attributes = {
                (f"{j}:{k}" if multi else k): v for j, a in enumerate(attrs) for k, v in a.items()  # type: ignore[union-attr]
            }

    def _locate(self, index: int) -> tuple[int, int]:
        j = int(np.searchsorted(self._starts, index, side="right") - 1)
        return j, index - int(self._starts[j])

    def load(self, index: int) -> torch.Tensor:
        j, i = self._locate(index)
        return self.sources[j].load(i)

    def name(self, index: int) -> str:
        j, i = self._locate(index)
        n = self.sources[j].name(i)
        return f"{j}:{n}" if self._multi else n


def to_memory(faces: FaceSet, *, max_bytes: int = 256 << 20) -> FaceSet:
    """The set decoded once into a :class:`TensorFaces` when it fits in ``max_bytes`` (float32).

    Training loops read every image once per epoch; for small sets (the synthetic demo renders
    each image from scratch) decoding once is much cheaper. Names, identities and attributes are
    kept; a set that is already in memory or too large is returned as is.

    Args:
        faces: Any FaceSet.
        max_bytes: Largest float32 footprint to materialise.
    """
    if isinstance(faces, TensorFaces) or not len(faces) or len(faces) * 3 * math.prod(image_hw(faces.size)) * 4 > max_bytes:
        return faces
    images = torch.stack([faces.load(i) for i in range(len(faces))])  # (n, 3, H, W)
    return TensorFaces(
        images,
        faces.labels,
        identities=faces.identities,
        names=[faces.name(i) for i in range(len(faces))],
        attributes=getattr(faces, "attributes", None),
    )
