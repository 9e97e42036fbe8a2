"""What every face backbone shares: the registry of families and builders, and the input handling.

A backbone family (:mod:`pfd.nn.iresnet`: insightface's and AdaFace's IResNets,
:mod:`pfd.nn.mobilefacenet`) subclasses :class:`FaceBackbone`, registers itself as a
:class:`BackboneFamily` record that owns its defaults (input size, embedding dimension) and its
foreign-weight conversion (how its layout is recognised in a plain state dict and how a foreign
container holds it, timm's ``checkpoint_filter_fn``), and registers one builder per named model
with :func:`register_backbone`. :func:`pfd.nn.backbones.create_backbone` builds any of them by
name (one builder, as timm does) and :func:`pfd.nn.checkpoints.infer_arch` asks every family.

Every backbone takes float RGB in ``[0, 1]`` of shape ``(B, 3, H, W)``, applies its own input
convention inside ``forward`` (channel order and normalisation, recorded in :attr:`FaceBackbone.convention`)
and returns raw, un-normalised features ``(B, D)``. ``model.arch`` holds the keyword arguments
that rebuild it (``name``, ``width``, ``size``, ``embedding_dim``, ``dropout``); ``size`` is
``S`` for square inputs and ``[H, W]`` otherwise (:mod:`pfd.data.shape`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypedDict, TypeVar

import torch
from torch import nn

from pfd.data.shape import canonical_size, image_hw, size_text
from pfd.errors import PfdError

__all__ = ["Arch", "BACKBONES", "FAMILIES", "BackboneFamily", "FaceBackbone", "InputSpec", "register_family",
           "register_backbone", "family_of", "list_backbones", "strip_wrappers", "WRAPPER_PREFIXES"]

#: A state dict's values (tensors; a foreign file's may hold other plain values).
_V = TypeVar("_V")


class Arch(TypedDict):
    """The keyword arguments that rebuild a backbone, ``create_backbone(**arch)``: ``model.arch``, a
    checkpoint's ``arch`` and what a family's :attr:`BackboneFamily.infer_arch` reads from foreign weights.

    Attributes:
        name: The registered backbone (``mobilefacenet``, ``ir50``, ``adaface_ir101``, ...).
        width: Channel multiplier.
        size: Input size: ``S`` (square) or ``[H, W]`` (:mod:`pfd.data.shape`).
        embedding_dim: Embedding dimension D.
        dropout: Dropout before the embedding layer.
    """

    name: str
    width: float
    size: int | list[int]
    embedding_dim: int
    dropout: float


class InputSpec(TypedDict):
    """The input convention a backbone's weights expect (:attr:`FaceBackbone.convention`)."""

    channels: str
    height: int
    width: int
    mean: float
    std: float


@dataclass(frozen=True)
class BackboneFamily:
    """What a family of backbones owns.

    Attributes:
        name: The family's name (``insightface``, ``adaface``, ``mobilefacenet``).
        default_size: The input size its published weights take (``112``, ``[112, 96]``).
        default_dim: Its published embedding dimension D.
        layout: The keys that identify its state dicts (for an error that lists every family).
        infer_arch: ``state dict -> create_backbone arguments``, or ``None`` when the keys are not
            this family's layout (raises a :class:`~pfd.errors.PfdError` when they are but the
            counts fit no model).
        unwrap: ``file content -> state dict`` for a foreign container of this family's weights
            (e.g. ``{"epoch", "net_state_dict"}``), or ``None`` when the content is not one.
    """

    name: str
    default_size: Any
    default_dim: int
    layout: str
    infer_arch: Callable[[dict[str, torch.Tensor]], Arch | None]
    unwrap: Callable[[Any], dict[str, torch.Tensor] | None] = lambda obj: None


#: name -> builder(*, width, size, embedding_dim, dropout) -> nn.Module
BACKBONES: dict[str, Callable[..., nn.Module]] = {}
#: family name -> its record, in registration order.
FAMILIES: dict[str, BackboneFamily] = {}
#: backbone name -> family name.
_FAMILY_OF: dict[str, str] = {}


def register_family(family: BackboneFamily) -> BackboneFamily:
    """Add a family record (its name must be new)."""
    if family.name in FAMILIES:
        raise ValueError(f"backbone family {family.name!r} is already registered")
    FAMILIES[family.name] = family
    return family


def register_backbone(name: str, *, family: str) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator adding a backbone builder to :data:`BACKBONES` under ``name``, in ``family``.

    The builder takes keyword arguments ``width``, ``size``, ``embedding_dim`` and ``dropout``.

    Raises:
        ValueError: If ``name`` is already registered or ``family`` is not.
    """

    def deco(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if name in BACKBONES:
            raise ValueError(f"backbone {name!r} is already registered")
        if family not in FAMILIES:
            raise ValueError(f"backbone family {family!r} is not registered")
        BACKBONES[name] = fn
        _FAMILY_OF[name] = family
        return fn

    return deco


#: Prefixes of wrapped modules' keys: DDP (``module.``) and ``torch.compile`` (``_orig_mod.``).
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def strip_wrappers(sd: dict[str, _V]) -> dict[str, _V]:
    """``sd`` with the :data:`WRAPPER_PREFIXES` removed from every key (repeatedly: ``module._orig_mod.``)."""
    out = {}
    for key, value in sd.items():
        changed = True
        while changed:
            changed = False
            for p in WRAPPER_PREFIXES:
                if key.startswith(p):
                    key, changed = key[len(p) :], True
        out[key] = value
    return out


def family_of(name: str) -> BackboneFamily:
    """The family record of backbone ``name``.

    Raises:
        PfdError: An unknown backbone name, listing the registered ones.
    """
    if name not in _FAMILY_OF:
        raise PfdError(f"unknown backbone {name!r}; choose one of {', '.join(list_backbones())}")
    return FAMILIES[_FAMILY_OF[name]]


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

    def __init__(self, arch: Arch) -> None:
        super().__init__()
        #: Keyword arguments that rebuild this model: ``create_backbone(**model.arch)``.
        self.arch = Arch(**arch)
        #: Input size: ``S`` (square) or ``(H, W)``.
        self.size = canonical_size(arch["size"])
        self.hw = image_hw(self.size)
        self.embedding_dim = int(arch["embedding_dim"])

    @property
    def convention(self) -> InputSpec:
        """The input convention the weights expect (applied inside ``forward``; callers pass RGB in [0, 1])."""
        h, w = self.hw
        return InputSpec(channels="bgr" if self.bgr else "rgb", height=h, width=w, mean=self.mean, std=self.std)

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
