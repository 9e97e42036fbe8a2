"""Image priors of model inversion: what a natural image's pixels look like, whatever the model.

Not part of the PFD paper's eq. 10. DeepInversion (Yin et al., CVPR 2020, eq. 3's R_prior) adds
a total-variation and an l2 prior to the BatchNorm statistics so that inverted images stay smooth;
SRe2L drops them. pfd keeps the total variation as an RTA lever (``rta.lambda_tv``): inverted from
noise against a small network, proxies carry several times the high-frequency energy of the faces
they stand for, and high-frequency patterns are the part of an inverted image that one network
reads and another does not.
"""

from __future__ import annotations

import torch

__all__ = ["total_variation"]


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic total variation: the mean absolute difference of neighbouring pixels.

    ``TV(x) = ½ (mean |x[..., i+1, j] − x[..., i, j]| + mean |x[..., i, j+1] − x[..., i, j]|)``,
    averaged over the batch and the channels (DeepInversion's ``R_TV`` in its l1 form), so that it
    reads in pixel units: a flat image has 0, i.i.d. noise of std σ about ``2σ/√π``.

    Args:
        x: ``(B, C, H, W)`` images.

    Returns:
        Scalar tensor.
    """
    dh = (x[..., 1:, :] - x[..., :-1, :]).abs().mean()  # vertical neighbours
    dw = (x[..., :, 1:] - x[..., :, :-1]).abs().mean()  # horizontal neighbours
    return 0.5 * (dh + dw)
