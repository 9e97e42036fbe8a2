"""Light, reproducible photometric and crop augmentation for the benchmark's public model.

``pfd train`` itself flips; :class:`AugmentedFaces` wraps a FaceSet so that each :meth:`load`
returns a fresh variant of the image: a random square crop of ``crop_scale`` of the area (resized
back, bilinear), brightness and contrast factors uniform in ``1 ± brightness`` / ``1 ± contrast``
(contrast around the image's mean grey) and, with probability ``grey_p``, the greyscale image
(ITU-R 601 luma in all three channels). The ``r``-th load of image ``i`` draws from a generator
seeded by ``(seed, i, r)``, so epoch ``r`` sees the same variants whatever the batch order.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from pfd.data.faceset import FaceSet

__all__ = ["AugmentedFaces", "augment_image"]

_LUMA = torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)


def augment_image(x: torch.Tensor, g: torch.Generator, *, crop_scale: tuple[float, float] = (0.8, 1.0),
                  brightness: float = 0.2, contrast: float = 0.2, grey_p: float = 0.2) -> torch.Tensor:
    """One random variant of ``x`` ``(3, S, S)`` in [0, 1] (module docstring); same shape and range."""
    s = x.shape[-1]
    u = torch.rand(7, generator=g).tolist()
    area = crop_scale[0] + (crop_scale[1] - crop_scale[0]) * u[0]
    side = max(1, min(s, int(round(s * area ** 0.5))))
    if side < s:
        top, left = int(u[1] * (s - side + 1)), int(u[2] * (s - side + 1))
        x = F.interpolate(x[None, :, top : top + side, left : left + side], size=(s, s), mode="bilinear",
                          align_corners=False)[0]
    x = x * (1 + brightness * (2 * u[3] - 1))
    mean = (x * _LUMA).sum(0).mean()
    x = (x - mean) * (1 + contrast * (2 * u[4] - 1)) + mean
    if u[5] < grey_p:
        x = (x * _LUMA).sum(0, keepdim=True).expand(3, -1, -1)
    return x.clamp(0.0, 1.0).contiguous()


class AugmentedFaces(FaceSet):
    """``faces`` with :func:`augment_image` applied at every load (labels and names unchanged).

    Args:
        faces: The set to wrap.
        settings: Keyword arguments of :func:`augment_image` (``crop_scale`` as a 2-list).
        seed: Seed of the variants.
    """

    def __init__(self, faces: FaceSet, settings: Mapping[str, Any], *, seed: int = 0) -> None:
        self.faces, self.seed = faces, int(seed)
        self.settings = {**settings, "crop_scale": tuple(settings.get("crop_scale", (0.8, 1.0)))}
        self.labels, self.identities, self.size = faces.labels, faces.identities, faces.size
        self.attributes = getattr(faces, "attributes", None)
        self._loads = np.zeros(len(faces), dtype=np.int64)

    def load(self, index: int) -> torch.Tensor:
        r = int(self._loads[index])
        self._loads[index] += 1
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([self.seed, index, r]).generate_state(1)[0]))
        return augment_image(self.faces.load(index), g, **self.settings)

    def name(self, index: int) -> str:
        return self.faces.name(index)
