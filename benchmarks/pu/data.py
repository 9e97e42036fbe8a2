"""Data of ``privacy_utility.py``: scenarios (named presets), dataset specs, the CelebA split, pairs.

A **scenario** names three kinds of data: the *public* sources (trained jointly with disjoint
labels, by the public model and by every downstream model), the publisher's *private* identities
(what a release is distilled from; the MIA's members) and the held-out *test* identities
(verification pairs of the downstream models; the MIA's non-members). Each is a **spec**:

* anything :func:`pfd.data.sources.open_faces` opens: an identity folder, a RecordIO set,
  ``synthetic:<split>[,key=value...]``;
* a named part of the shared data (``--data-root``, default ``../shared/data``):
  ``celeba:public`` / ``celeba:private`` / ``celeba:test`` (:func:`celeba_split`),
  ``yale-b:private`` / ``yale-b:test`` (:func:`benchmarks.pu.yale.split_yale_b`, near-black images dropped)
  and ``yale-a`` (cropped, :func:`benchmarks.pu.yale.yale_a`);
* any of those followed by ``+lowres``: the same faces brought down to ``lowres`` pixels
  (``(19, 16)``, 19 high x 16 wide, by default) and back up, bilinear: a deterministic
  surveillance-like domain made on the fly (:func:`degrade_lowres`), never a copy of the photos.

Presets (:data:`SCENARIOS`): ``celeba`` (private and test = CelebA identities, the in-the-wild
domain of the public data) and ``yaleb`` (private and test = Extended Yale B identities: a
lighting domain the public data lacks). Both share one public model, trained on
``synthetic:public`` + ``celeba:public`` + ``yale-a`` (``recipes/celeba-public.toml``).

**The CelebA split** (:func:`celeba_split`) is a pure function of the identity names, their image
counts and a seed: identities are sorted by name; those with at least ``min_images`` (10) images
are *eligible*; a seeded permutation of the eligible names gives the first ``private`` (72) to the
private set and the next ``test`` (72) to the test set; every other identity (the remaining
eligible ones and all with fewer images) is public. On ``celeba-faces`` (294 people, 247 with >= 10
images) that is 150 public / 72 private / 72 test.

**Pairs** (:func:`pfd.data.pair_sampling.adaptive_pairs`): ``num_pairs`` genuine + as many impostor pairs
(:func:`pfd.data.pair_sampling.generate_pairs`), or, when the test set has fewer distinct genuine pairs,
*all* of them and as many impostors: a publisher's small test set still gets a table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from PIL import Image

from pfd.data.faces import FaceFolder
from pfd.data.faceset import FaceSet, TensorFaces, to_memory
from pfd.data.shape import canonical_size, image_hw
from pfd.data.sources import ACCEPTED_SPECS, open_faces
from pfd.errors import PfdError
from benchmarks.pu.yale import N_PRIVATE, YALE_A, YALE_B, split_yale_b, yale_a, yale_b

__all__ = ["CELEBA", "SCENARIOS", "TARGET_SCENARIOS", "TARGET_CONTROLS", "Scenario", "celeba_split", "SpecResolver", "shared_folders"]

CELEBA = "celeba-faces"
#: The CelebA split's defaults: (public = the rest), private, test, minimum images of private/test.
CELEBA_SPLIT: dict[str, int] = {"seed": 0, "private": 72, "test": 72, "min_images": 10}


@dataclass(frozen=True)
class Scenario:
    """A named set of specs (see the module docstring).

    Attributes:
        name: Preset name.
        public: Public source specs (the public model's and every downstream model's data).
        private: The publisher's private identities.
        test: Held-out test identities (verification pairs, MIA non-members).
        light_subsets: Also report verification on Yale B's subsets 1-3 (file names carry the light).
    """

    name: str
    public: tuple[str, ...]
    private: str
    test: str
    light_subsets: bool = False


SCENARIOS: dict[str, Scenario] = {
    "celeba": Scenario("celeba", ("synthetic:public,ids=100", "celeba:public", "yale-a"), "celeba:private", "celeba:test"),
    "yaleb": Scenario("yaleb", ("synthetic:public,ids=100", "celeba:public", "yale-a"), "yale-b:private", "yale-b:test",
                      light_subsets=True),
}


#: Scenarios of the target-domain protocol (``--protocol target``; :data:`benchmarks.pu.settings.TARGET`): the
#: public model is the pretrained MobileFaceNet and the public data CelebA's public people at full
#: resolution; the private and test people come from a domain that only the private set covers.
TARGET_SCENARIOS: dict[str, Scenario] = {
    # Low resolution (16 x 19 and back up): the model card's 57.9 % against 87.9 % at full size.
    "surveillance": Scenario("surveillance", ("celeba:public",), "celeba:private+lowres", "celeba:test+lowres"),
    # Extended Yale B's extreme lighting: 65.4 % on the card.
    "illumination": Scenario("illumination", ("celeba:public",), "yale-b:private", "yale-b:test", light_subsets=True),
    # No shift: the private and test people are ordinary CelebA photos (the control).
    "celeba": Scenario("celeba", ("celeba:public",), "celeba:private", "celeba:test"),
}
#: The target protocol's scenarios without a domain shift: issue 19's goals are not theirs.
TARGET_CONTROLS = frozenset({"celeba"})


def shared_folders(specs: list[str]) -> set[str]:
    """The shared-data folders the named specs among ``specs`` read (checked before anything runs)."""
    need = {"celeba:": CELEBA, "yale-b:": YALE_B}
    out = {folder for s in specs for prefix, folder in need.items() if s.startswith(prefix)}
    return out | ({YALE_A} if "yale-a" in specs else set())


def celeba_split(counts: Mapping[str, int], *, seed: int = 0, private: int = 72, test: int = 72,
                 min_images: int = 10) -> dict[str, list[str]]:
    """Identity split of an in-the-wild set: ``{"public", "private", "test"}`` -> sorted names.

    Pure: depends only on the names, their image counts and the arguments (see the module
    docstring for the rule). Private and test identities have at least ``min_images`` images;
    public gets every other identity.

    Args:
        counts: Identity name -> number of images.
        seed: Seed of the permutation of the eligible names (``numpy.random.default_rng``).
        private: Private identities.
        test: Test identities.
        min_images: Least images of a private or test identity.

    Returns:
        The three disjoint lists, each sorted.

    Raises:
        PfdError: Fewer eligible identities than ``private + test``.
    """
    names = sorted(counts)
    eligible = [n for n in names if counts[n] >= min_images]
    if private < 1 or test < 1 or private + test > len(eligible):
        raise PfdError(f"cannot take {private} private + {test} test identities with >= {min_images} images: "
                       f"only {len(eligible)} of {len(names)} have that many; lower the counts or --min-images")
    order = np.random.default_rng(seed).permutation(len(eligible))
    priv = sorted(eligible[i] for i in order[:private])
    tst = sorted(eligible[i] for i in order[private : private + test])
    taken = set(priv) | set(tst)
    return {"public": [n for n in names if n not in taken], "private": priv, "test": tst}


#: Default (H, W) of the ``+lowres`` transform: 16 x 19 pixels for 112 x 96 faces, the shared
#: MobileFaceNet model card's surveillance-like domain (57.9 % verification there, 87.9 % at full size).
LOWRES = (19, 16)


def degrade_lowres(faces: FaceSet, small: tuple[int, int] = LOWRES) -> TensorFaces:
    """Every image down to ``small`` (H, W) and back up to its size, bilinear on 8-bit pixels.

    Pure and deterministic: the same faces give the same pixels on every machine.
    """
    h, w = image_hw(faces.size)
    out = []
    for i in range(len(faces)):
        arr = np.clip(np.rint(faces.load(i).permute(1, 2, 0).numpy() * 255.0), 0, 255).astype(np.uint8)
        img = Image.fromarray(arr).resize((small[1], small[0]), Image.Resampling.BILINEAR).resize((w, h), Image.Resampling.BILINEAR)
        out.append(torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1))
    names = [faces.name(i) for i in range(len(faces))]
    return TensorFaces(torch.stack(out).float().div_(255.0), faces.labels, identities=faces.identities, names=names,
                       attributes=getattr(faces, "attributes", None))


def center_crop_hw(faces: FaceSet, *, width_frac: float, hw: tuple[int, int]) -> TensorFaces:
    """The central ``width_frac`` of each image's width, cut to the aspect ``H:W`` and resized to ``hw``.

    How the shared MobileFaceNet's model card cuts CelebA's loose square crops to its 112 x 96 input.
    """
    out = []
    for i in range(len(faces)):
        arr = np.clip(np.rint(faces.load(i).permute(1, 2, 0).numpy() * 255.0), 0, 255).astype(np.uint8)
        img = Image.fromarray(arr)
        w, h = img.size
        cw = width_frac * w
        ch = min(float(h), cw * hw[0] / hw[1])
        box = ((w - cw) / 2, (h - ch) / 2, (w + cw) / 2, (h + ch) / 2)
        img = img.resize((hw[1], hw[0]), Image.Resampling.BILINEAR, box=box)
        out.append(torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1))
    names = [faces.name(i) for i in range(len(faces))]
    return TensorFaces(torch.stack(out).float().div_(255.0), faces.labels, identities=faces.identities, names=names,
                       attributes=getattr(faces, "attributes", None))


def center_crop(faces: TensorFaces, size: int) -> TensorFaces:
    """The central ``size × size`` pixels of every image of an in-memory set."""
    o = (faces.size - size) // 2
    images = faces.images[:, :, o : o + size, o : o + size]  # (n, 3, size, size)
    names = [faces.name(i) for i in range(len(faces))]
    return TensorFaces(images.contiguous(), faces.labels, identities=faces.identities, names=names,
                       attributes=getattr(faces, "attributes", None))


def _select(faces: FaceSet, names: list[str]) -> FaceSet:
    wanted = set(names)
    return faces.select_identities([k for k, n in enumerate(faces.identities) if n in wanted])


class SpecResolver:
    """Opens specs at one image size, named parts of the shared data included, each once.

    Args:
        data_root: Folder of the shared data sets (``celeba-faces/``, ``extended-yale-b-cropped/``,
            ``yale-a/``); only named specs need it.
        size: Image side.
        celeba: Arguments of :func:`celeba_split`.
        celeba_center: Side of the central square kept of every CelebA crop, as a share of the
            crop (1: all of it). The crops are the Haar box grown by 25 % per side, so the box
            itself is the central 1/1.5 ≈ 0.67; the shared data's README measures an outside
            network at 75.4 % on the whole crops and 86.0 % on their central 76 px.
        yale_seed: Seed of the Yale B private/test split; ``yale_private``: its private count.
    """

    def __init__(self, data_root: Path | None, *, size: Any, celeba: Mapping[str, int] | None = None,
                 yale_seed: int = 0, yale_private: int = N_PRIVATE, celeba_center: float = 1.0,
                 lowres: tuple[int, int] = LOWRES) -> None:
        if not 0 < celeba_center <= 1:
            raise PfdError(f"celeba_center must be in (0, 1], got {celeba_center}")
        self.root, self.size = data_root, canonical_size(size)
        self.lowres = (int(lowres[0]), int(lowres[1]))
        self.celeba_center = float(celeba_center)
        self.celeba = dict(CELEBA_SPLIT, **(celeba or {}))
        self.yale_seed, self.yale_private = yale_seed, yale_private
        self._cache: dict[str, FaceSet] = {}
        #: What the named parts hold (for the results' ``data`` block).
        self.info: dict[str, Any] = {}

    def _need(self, folder: str, spec: str) -> Path:
        if self.root is None or not (self.root / folder).is_dir():
            raise PfdError(f"{spec}: needs {folder}/ under the shared data root ({self.root}); pass --data-root DIR "
                           f"or give {ACCEPTED_SPECS}")
        return self.root / folder

    def __call__(self, spec: str) -> FaceSet:
        """The set of ``spec``, in memory when it fits (256 MiB of float32)."""
        if spec not in self._cache:
            self._cache[spec] = self._open(spec)
        return self._cache[spec]

    def _open(self, spec: str) -> FaceSet:
        if spec.endswith("+lowres"):
            return degrade_lowres(self(spec[: -len("+lowres")]), self.lowres)
        part = spec.split(":", 1)[1] if ":" in spec else ""
        if spec.startswith("celeba:"):
            if part not in ("public", "private", "test"):
                raise PfdError(f"{spec}: unknown part; use celeba:public, celeba:private or celeba:test")
            hw = image_hw(self.size)
            if hw[0] != hw[1]:  # a non-square model: the central share of the width at its aspect, resized
                folder = FaceFolder(self._need(CELEBA, spec), size=112)  # the crops' own size: no resampling
                counts = {n: int(c) for n, c in zip(folder.identities, folder.counts())}
                split = celeba_split(counts, **self.celeba)
                self.info["celeba"] = {"identities": len(counts), "images": len(folder), "split": self.celeba,
                                       **{k: {"identities": len(v), "images": int(sum(counts[n] for n in v))}
                                          for k, v in split.items()}}
                return center_crop_hw(_select(folder, split[part]), width_frac=self.celeba_center, hw=hw)
            # Read at a larger side and keep the central `size` pixels: the face without the margin.
            full = self.size if self.celeba_center >= 1 else int(round(self.size / self.celeba_center))
            folder = FaceFolder(self._need(CELEBA, spec), size=full)
            counts = {n: int(c) for n, c in zip(folder.identities, folder.counts())}
            split = celeba_split(counts, **self.celeba)
            self.info["celeba"] = {"identities": len(counts), "images": len(folder), "split": self.celeba,
                                   **{k: {"identities": len(v), "images": int(sum(counts[n] for n in v))}
                                      for k, v in split.items()}}
            faces = to_memory(_select(folder, split[part]), max_bytes=2**31)
            return center_crop(faces, self.size) if full != self.size else faces
        if spec.startswith("yale-b:"):
            if part not in ("private", "test"):
                raise PfdError(f"{spec}: unknown part; use yale-b:private or yale-b:test")
            faces, counts = yale_b(self._need(YALE_B, spec).parent, size=self.size)
            priv, test = split_yale_b(faces, seed=self.yale_seed, n_private=self.yale_private)
            self.info["yale_b"] = {**counts, "kept": len(faces), "private": len(priv.identities),
                                   "test": len(test.identities)}
            self._cache["yale-b:private"], self._cache["yale-b:test"] = priv, test
            return priv if part == "private" else test
        if spec == "yale-a":
            faces = yale_a(self._need(YALE_A, spec).parent, size=self.size)
            self.info["yale_a"] = {"identities": faces.num_classes, "images": len(faces)}
            return faces
        return to_memory(open_faces(os.fspath(spec), size=self.size))
