"""What every face backbone shares: the registry of builders and the input handling.

A backbone family (:mod:`pfd.nn.iresnet`, :mod:`pfd.nn.mobilefacenet`) subclasses
:class:`FaceBackbone` and registers one builder per named model with :func:`register_backbone`;
:func:`pfd.nn.backbones.create_backbone` builds any of them by name (one builder, as timm does).

Every backbone takes float RGB in ``[0, 1]`` of shape ``(B, 3, H, W)``, applies its own input
convention inside ``forward`` (channel order and normalisation, recorded in :attr:`FaceBackbone.convention`)
and returns raw, un-normalised features ``(B, D)``. ``model.arch`` holds the keyword arguments
that rebuild it (``name``, ``width``, ``size``, ``embedding_dim``, ``dropout``); ``size`` is
``S`` for square inputs and ``[H, W]`` otherwise (:mod:`pfd.data.shape`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from pfd.data.shape import canonical_size, image_hw, size_text
from pfd.errors import PfdError

__all__ = ["BACKBONES", "FaceBackbone", "register_backbone", "list_backbones"]

#: name -> builder(*, width, size, embedding_dim, dropout) -> nn.Module
BACKBONES: dict[str, Callable[..., nn.Module]] = {}


def register_backbone(name: str) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator adding a backbone builder to :data:`BACKBONES` under ``name``.

    The builder takes keyword arguments ``width``, ``size``, ``embedding_dim`` and ``dropout``.

    Raises:
        ValueError: If ``name`` is already registered.
    """

    def deco(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if name in BACKBONES:
            raise ValueError(f"backbone {name!r} is already registered")
        BACKBONES[name] = fn
        return fn

    return deco


def list_backbones() -> list[str]:
    """Registered backbone names, sorted."""
    return sorted(BACKBONES)


class FaceBackbone(nn.Module):
    """Shared input handling: shape check, optional RGB->BGR flip, ``(255 x - mean) / std``.

    Subclasses set :attr:`bgr`, :attr:`mean` and :attr:`std` (in 0-255 pixel units, as model
    cards state them) when their weights were trained with another convention than insightface's
    ``(x - 127.5) / 127.5`` on RGB.
    """

    #: Whether the weights were trained on BGR crops (the model flips the channels first).
    bgr: bool = False
    #: Input normalisation ``(pixel - mean) / std`` in 0-255 units.
    mean: float = 127.5
    std: float = 127.5

    def __init__(self, arch: dict[str, Any]) -> None:
        super().__init__()
        #: Keyword arguments that rebuild this model: ``create_backbone(**model.arch)``.
        self.arch = dict(arch)
        #: Input size: ``S`` (square) or ``(H, W)``.
        self.size = canonical_size(arch["size"])
        self.hw = image_hw(self.size)
        self.embedding_dim = int(arch["embedding_dim"])

    @property
    def convention(self) -> dict[str, Any]:
        """The input convention the weights expect (applied inside ``forward``; callers pass RGB in [0, 1])."""
        h, w = self.hw
        return {"channels": "bgr" if self.bgr else "rgb", "height": h, "width": w, "mean": self.mean, "std": self.std}

    def _prepare(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != 3 or tuple(x.shape[2:]) != self.hw:
            h, w = self.hw
            got = tuple(x.shape)
            raise PfdError(
                f"{self.arch['name']} expects images of shape (B, 3, {h}, {w}), got {got}; resize the faces to "
                f"{size_text(self.size)} or build the model with size={list(got[-2:]) if len(got) == 4 else '?'}"
            )
        if self.bgr:
            x = x.flip(1)  # RGB -> BGR: the weights were trained on BGR crops
        return self._normalise(x)

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:
        # insightface's (x - 0.5) / 0.5 on [0, 1] inputs, written as it always was (bitwise the same).
        return (x - 0.5) / 0.5
