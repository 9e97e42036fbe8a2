"""One builder for every face backbone: ``create_backbone(name, ...)``.

The families register their named models on import (:mod:`pfd.nn.iresnet`: ``ir18 … ir100``,
``adaface_ir18 … adaface_ir100``; :mod:`pfd.nn.mobilefacenet`: ``mobilefacenet``); this module
imports them all, so a name resolves whichever family it belongs to.

Example:
    >>> model = create_backbone("mobilefacenet", width=0.125, size=(32, 32), embedding_dim=16)
    >>> model(torch.rand(2, 3, 32, 32)).shape
    torch.Size([2, 16])
"""

from __future__ import annotations

from typing import Any

from torch import nn

import pfd.nn.iresnet  # noqa: F401 - registers ir* and adaface_ir*
import pfd.nn.mobilefacenet  # noqa: F401 - registers mobilefacenet
from pfd.errors import PfdError
from pfd.nn.registry import BACKBONES, family_of, list_backbones

__all__ = ["create_backbone", "list_backbones", "default_size"]


def default_size(name: str) -> Any:
    """The input size a backbone's published weights take (its family's: 112, or ``[112, 96]`` for MobileFaceNet)."""
    return family_of(name).default_size


def create_backbone(
    name: str,
    *,
    width: float = 1.0,
    size: Any = None,
    embedding_dim: int | None = None,
    dropout: float = 0.0,
) -> nn.Module:
    """Build a registered backbone.

    Args:
        name: Registered name (``ir18, ir34, ir50, ir100, adaface_ir18, ..., adaface_ir100,
            mobilefacenet``).
        width: Channel multiplier (1.0 = the published network; 0.25 is a fast CPU model).
        size: Input size: a side or ``(H, W)``, each a multiple of 16; default: the family's
            published one (112 for IResNet checkpoints, 112 x 96 for MobileFaceNet).
        embedding_dim: Output feature dimension D (default: the family's, 512 or 128).
        dropout: Dropout before the fc layer (insightface default 0; AdaFace trained with 0.4).

    Returns:
        The model, in training mode, with ``model.arch`` such that
        ``create_backbone(**model.arch)`` rebuilds it.

    Raises:
        PfdError: Unknown name, non-positive width, or a size the family cannot take.
    """
    family = family_of(name)
    if embedding_dim is None:
        embedding_dim = family.default_dim
    if int(embedding_dim) < 1:
        raise PfdError(f"embedding_dim must be >= 1, got {embedding_dim}")
    return BACKBONES[name](width=width, size=family.default_size if size is None else size,
                           embedding_dim=embedding_dim, dropout=dropout)
