"""Margin heads and their target-logit penalisation g(cos θ, m).

Every angular-margin loss replaces the target-class cosine ``cos θ_y`` by a penalised value
``g(cos θ_y, m)`` and scales all logits by ``s``. The geometric membership statistics
(PenLogit, ProtoCE; geometric-membership paper §3.2) reuse exactly these functions, so they
live here as pure functions over tensors.

* ArcFace (Deng et al. 2019):   g = cos(θ + m)
* CosFace (Wang et al. 2018):   g = cos θ − m
* AdaFace (Kim et al. 2022):    g = cos(θ − m·ẑ) − (m + m·ẑ), ẑ ∈ [−1, 1] the normalised
  feature norm; ẑ = 0 (the batch-average norm) when norms are unknown, which reduces to CosFace.
* MagFace (Meng et al. 2021):   g = cos(θ + m(a)), a margin growing with the feature norm a;
  with a fixed m it is the ArcFace form.
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = [
    "arcface_g",
    "cosface_g",
    "adaface_g",
    "magface_g",
    "PENALTIES",
    "penalty",
]

_EPS = 1e-6


def _theta(cos: torch.Tensor) -> torch.Tensor:
    # Clamp away from ±1: arccos has an infinite gradient there.
    return torch.arccos(cos.clamp(-1.0 + _EPS, 1.0 - _EPS))


def arcface_g(cos: torch.Tensor, m: float | torch.Tensor) -> torch.Tensor:
    """ArcFace additive angular margin: ``cos(θ + m)``.

    Args:
        cos: Target cosines, any shape.
        m: Angular margin in radians (scalar or broadcastable tensor).

    Returns:
        Penalised cosines, same shape as ``cos``.
    """
    return torch.cos(_theta(cos) + m)


def cosface_g(cos: torch.Tensor, m: float | torch.Tensor) -> torch.Tensor:
    """CosFace additive cosine margin: ``cos θ − m``."""
    return cos - m


def adaface_g(
    cos: torch.Tensor, m: float | torch.Tensor, *, norm_z: torch.Tensor | float | None = None
) -> torch.Tensor:
    """AdaFace quality-adaptive margin: ``cos(θ − m·ẑ) − (m + m·ẑ)``.

    Args:
        cos: Target cosines.
        m: Margin.
        norm_z: Normalised feature norm ẑ = clip((‖z‖ − μ)/(σ/h), −1, 1); ``None`` means ẑ = 0,
            the value for an image of average quality.
    """
    z = 0.0 if norm_z is None else norm_z
    theta = (_theta(cos) - m * z).clamp(_EPS, torch.pi - _EPS)
    return torch.cos(theta) - (m + m * z)


def magface_g(cos: torch.Tensor, m: float | torch.Tensor) -> torch.Tensor:
    """MagFace margin for a given (magnitude-dependent) margin ``m(a)``: ``cos(θ + m)``."""
    return torch.cos(_theta(cos) + m)


#: kind -> g(cos, m)
PENALTIES: dict[str, Callable[..., torch.Tensor]] = {
    "arcface": arcface_g,
    "cosface": cosface_g,
    "adaface": adaface_g,
    "magface": magface_g,
}


def penalty(kind: str) -> Callable[..., torch.Tensor]:
    """The penalisation g(cos θ, m) of a head kind.

    Raises:
        ValueError: For an unknown kind (the message lists the known ones).
    """
    try:
        return PENALTIES[kind.lower()]
    except KeyError:
        raise ValueError(f"unknown head {kind!r}; known heads: {', '.join(sorted(PENALTIES))}") from None
