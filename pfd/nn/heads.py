"""Margin heads and their target-logit penalisation g(cos θ, m).

Every angular-margin loss replaces the target-class cosine ``cos θ_y`` by a penalised value
``g(cos θ_y, m)`` and scales all logits by ``s``. The geometric membership statistics
(PenLogit, ProtoCE; geometric-membership paper §3.2) reuse exactly these functions, so they
live here as pure functions over tensors, and every head's ``forward`` goes through them.

* ArcFace (Deng et al. 2019):   g = cos(θ + m); where θ + m would pass π (cos θ ≤ cos(π − m)),
  g = cos θ − m·sin m instead, the linear continuation of insightface's original ArcFace
  (``easy_margin=False``). Plain cos(θ + m) rises again past π, rewarding the worst samples;
  current arcface_torch (``CombinedMarginLoss``) leaves that unhandled, we do not.
* CosFace (Wang et al. 2018):   g = cos θ − m
* AdaFace (Kim et al. 2022):   g = cos(θ − m·ẑ) − (m + m·ẑ), ẑ ∈ [−1, 1] the batch-
  normalised feature norm (ẑ = −1 gives ArcFace, 0 CosFace, +1 a negative angular margin with a
  2m shift); ẑ = 0 when norms are unknown.
* MagFace (Meng et al. 2021):   g = cos(θ + m(a)), m(a) linear in the clipped norm
  a ∈ [l_a, u_a]; as in MagFace's released code (``easy_margin=True``) samples with cos θ ≤ 0
  keep cos θ. The magnitude regulariser λ_g·g(a), g(a) = 1/a + a/u_a², is
  :meth:`MagFaceHead.regularizer`.

Heads (:class:`MarginHead`) hold the class prototypes ``weight (C, D)`` and compute logits in
fp32 whatever the autocast state, so margins are not lost to bf16 rounding.
"""

from __future__ import annotations

import math
from typing import Any, Callable, ClassVar, TypedDict

import torch
import torch.nn.functional as F
from torch import nn

from pfd.errors import PfdError

__all__ = [
    "arcface_g",
    "cosface_g",
    "adaface_g",
    "magface_g",
    "PENALTIES",
    "penalty",
    "MarginHead",
    "ArcFaceHead",
    "CosFaceHead",
    "AdaFaceHead",
    "MagFaceHead",
    "HEADS",
    "register_head",
    "create_head",
    "HeadSpec",
]

_EPS = 1e-6


class HeadSpec(TypedDict):
    """What rebuilds a margin head, ``create_head(**spec)`` (a checkpoint's ``head`` adds its ``state_dict``)."""

    kind: str
    embedding_dim: int
    num_classes: int
    scale: float
    margin: float | None
    kwargs: dict[str, float | bool]


def _theta(cos: torch.Tensor) -> torch.Tensor:
    # Clamp away from ±1: arccos has an infinite gradient there.
    return torch.arccos(cos.clamp(-1.0 + _EPS, 1.0 - _EPS))


def _angular(cos: torch.Tensor, m: float | torch.Tensor, easy_margin: bool) -> torch.Tensor:
    """cos(θ + m) with the ArcFace/MagFace treatment of angles where the margin misbehaves."""
    m = torch.as_tensor(m, dtype=cos.dtype, device=cos.device)
    penalised = torch.cos(_theta(cos) + m)
    if easy_margin:
        return torch.where(cos > 0, penalised, cos)
    # θ + m > π  <=>  cos θ < cos(π − m): continue linearly, cos θ − m·sin(π − m).
    return torch.where(cos > torch.cos(math.pi - m), penalised, cos - m * torch.sin(math.pi - m))


def arcface_g(cos: torch.Tensor, m: float | torch.Tensor, *, easy_margin: bool = False) -> torch.Tensor:
    """ArcFace additive angular margin: ``cos(θ + m)``.

    Args:
        cos: Target cosines, any shape.
        m: Angular margin in radians (scalar or broadcastable tensor).
        easy_margin: Apply the margin only where ``cos θ > 0`` (else keep ``cos θ``). The default
            (False) applies it everywhere, replacing ``cos(θ + m)`` by ``cos θ − m·sin m`` where
            ``θ + m > π``.

    Returns:
        Penalised cosines, same shape as ``cos``.
    """
    return _angular(cos, m, easy_margin)


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
    # AdaFace clips the shifted angle into (0, π) so that cos stays monotone in it.
    theta = (_theta(cos) - m * z).clamp(_EPS, torch.pi - _EPS)
    return torch.cos(theta) - (m + m * z)


def magface_g(cos: torch.Tensor, m: float | torch.Tensor, *, easy_margin: bool = True) -> torch.Tensor:
    """MagFace margin for a given (magnitude-dependent) margin ``m(a)``: ``cos(θ + m)``.

    Args:
        cos: Target cosines.
        m: Margin(s) m(a), scalar or broadcastable to ``cos``.
        easy_margin: MagFace's released default: keep ``cos θ`` where ``cos θ ≤ 0``. With False,
            the ArcFace continuation ``cos θ − m·sin m`` past ``θ + m = π`` is used.
    """
    return _angular(cos, m, easy_margin)


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


# --- heads ----------------------------------------------------------------------------------


def _fp32(device: torch.device) -> Any:
    """A context that switches autocast off on ``device`` (logits and margins stay in fp32)."""
    return torch.autocast(device_type=device.type, enabled=False)


class MarginHead(nn.Module):
    """Cosine classifier with a margin on the target class.

    ``logits[i, j] = s · cos θ_ij`` for ``j ≠ y_i`` and ``s · g(cos θ_iy, m)`` for the target,
    with ``cos θ_ij`` between the normalised feature ``i`` and the normalised prototype ``j``.
    Labels ``-1`` (insightface's "not in this shard") get no margin.

    Args:
        embedding_dim: Feature dimension D.
        num_classes: Number of classes C.
        scale: Logit scale s (``None``: the head's default, 64).
        margin: Margin m (``None``: the head's default).

    Attributes:
        weight: Class prototypes, ``(C, D)``, initialised N(0, 0.01²) as insightface.
    """

    kind: ClassVar[str] = ""
    default_scale: ClassVar[float] = 64.0
    default_margin: ClassVar[float | None] = None
    #: Extra keyword options of the head and their defaults (part of the saved spec).
    options: ClassVar[dict[str, float | bool]] = {}

    def __init__(
        self,
        embedding_dim: int,
        num_classes: int,
        *,
        scale: float | None = None,
        margin: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if int(embedding_dim) < 1 or int(num_classes) < 1:
            raise PfdError(
                f"{self.kind} head needs embedding_dim >= 1 and num_classes >= 1, got {embedding_dim}, {num_classes}"
            )
        unknown = sorted(set(kwargs) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise PfdError(f"{self.kind} head has no option(s) {', '.join(unknown)}; its options: {known}")
        self.embedding_dim = int(embedding_dim)
        self.num_classes = int(num_classes)
        self.scale = float(self.default_scale if scale is None else scale)
        if not self.scale > 0:
            raise PfdError(f"{self.kind} head scale must be > 0, got {self.scale}")
        self.margin = None if (margin is None and self.default_margin is None) else float(
            self.default_margin if margin is None else margin
        )
        self.opts = {k: type(v)(kwargs.get(k, v)) for k, v in self.options.items()}
        self.weight = nn.Parameter(torch.empty(self.num_classes, self.embedding_dim))
        nn.init.normal_(self.weight, 0.0, 0.01)

    # -- description ----------------------------------------------------------------------
    def spec(self) -> HeadSpec:
        """Plain dict that rebuilds this head: ``create_head(**spec)`` (kwargs flattened)."""
        return HeadSpec(kind=self.kind, embedding_dim=self.embedding_dim, num_classes=self.num_classes, scale=self.scale,
                        margin=self.margin, kwargs=dict(self.opts))

    def extra_repr(self) -> str:
        opts = "".join(f", {k}={v}" for k, v in self.opts.items())
        return f"{self.embedding_dim} -> {self.num_classes}, s={self.scale}, m={self.margin}{opts}"

    # -- maths ----------------------------------------------------------------------------
    def cosine(self, features: torch.Tensor) -> torch.Tensor:
        """Cosines between features and class prototypes, fp32.

        Args:
            features: ``(B, D)`` raw features (any dtype; normalised here).

        Returns:
            ``(B, C)`` float32 cosines.
        """
        with _fp32(features.device):
            return F.linear(F.normalize(features.float(), dim=1), F.normalize(self.weight.float(), dim=1))

    def g(self, cos: torch.Tensor, m: float | torch.Tensor | None = None) -> torch.Tensor:
        """The head's penalisation g(cos θ, m); ``m=None`` uses the head's margin."""
        raise NotImplementedError

    def penalise(self, cos_y: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
        """Penalised target cosines exactly as :meth:`forward` computes them (no state update).

        Args:
            cos_y: ``(B,)`` target cosines.
            norms: ``(B,)`` raw feature norms (used by norm-adaptive heads).
        """
        return self.g(cos_y)

    def _observe(self, norms: torch.Tensor) -> None:
        """Hook for heads that track batch statistics during training."""

    def regularizer(self, features: torch.Tensor) -> torch.Tensor:
        """Extra loss term to add to the cross-entropy (0 except for MagFace)."""
        return torch.zeros((), dtype=torch.float32, device=features.device)

    def forward(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Margin logits.

        Args:
            features: ``(B, D)`` raw (un-normalised) features.
            labels: ``(B,)`` int64 class indices in ``[0, C)``, or -1 for "no target here".

        Returns:
            ``(B, C)`` float32 logits ``s · cos`` with the target entry ``s · g(cos_y, m)``.
        """
        with _fp32(features.device):
            features = features.float()
            cos = self.cosine(features)  # (B, C)
            norms = features.norm(dim=1)  # (B,)
            if self.training:
                self._observe(norms)
            valid = labels >= 0
            idx = labels.clamp(min=0).long().unsqueeze(1)  # (B, 1)
            cos_y = cos.gather(1, idx).squeeze(1)  # (B,)
            target = torch.where(valid, self.penalise(cos_y, norms), cos_y)
            # Out-of-place scatter keeps autograd through both the margin and the other cosines.
            return cos.scatter(1, idx, target.unsqueeze(1)) * self.scale


#: kind -> head class
HEADS: dict[str, type[MarginHead]] = {}


def register_head(cls: type[MarginHead]) -> type[MarginHead]:
    """Class decorator adding a head to :data:`HEADS` under ``cls.kind``."""
    if not cls.kind or cls.kind in HEADS:
        raise ValueError(f"head kind {cls.kind!r} is empty or already registered")
    HEADS[cls.kind] = cls
    return cls


@register_head
class ArcFaceHead(MarginHead):
    """ArcFace, s = 64, m = 0.5 (option ``easy_margin``, default False: see module docs)."""

    kind = "arcface"
    default_margin = 0.5
    options = {"easy_margin": False}

    def g(self, cos: torch.Tensor, m: float | torch.Tensor | None = None) -> torch.Tensor:
        return arcface_g(cos, self.margin if m is None else m, easy_margin=self.opts["easy_margin"])


@register_head
class CosFaceHead(MarginHead):
    """CosFace, s = 64, m = 0.4."""

    kind = "cosface"
    default_margin = 0.4

    def g(self, cos: torch.Tensor, m: float | torch.Tensor | None = None) -> torch.Tensor:
        return cosface_g(cos, self.margin if m is None else m)


@register_head
class AdaFaceHead(MarginHead):
    """AdaFace, s = 64, m = 0.4, h = 0.333, EMA momentum t_alpha = 0.01.

    The norm statistics ``batch_mean`` / ``batch_std`` (buffers, initialised 20 and 100 as in
    AdaFace's head) follow an EMA of the batch mean and standard deviation of the detached,
    clipped (0.001..100) feature norms, updated in training mode before the margin is computed.
    ẑ = clip(h · (‖z‖ − μ) / (σ + 0.001), −1, 1). High-norm (high-quality) samples get ẑ → +1:
    a *negative* angular margin −m·ẑ and a larger additive one m + m·ẑ, which emphasises hard
    samples; low-norm ones get ẑ → −1, i.e. ArcFace, which de-emphasises them.
    """

    kind = "adaface"
    default_margin = 0.4
    options = {"h": 0.333, "t_alpha": 0.01}
    _eps = 1e-3

    def __init__(self, embedding_dim: int, num_classes: int, **kw: Any) -> None:
        super().__init__(embedding_dim, num_classes, **kw)
        self.register_buffer("batch_mean", torch.tensor(20.0))
        self.register_buffer("batch_std", torch.tensor(100.0))

    @staticmethod
    def _safe(norms: torch.Tensor) -> torch.Tensor:
        return norms.detach().float().clamp(0.001, 100.0)

    def _observe(self, norms: torch.Tensor) -> None:
        a = self.opts["t_alpha"]
        safe = self._safe(norms)
        with torch.no_grad():
            self.batch_mean.mul_(1.0 - a).add_(a * safe.mean())
            if safe.numel() > 1:  # the std of one sample is undefined; keep the running value
                self.batch_std.mul_(1.0 - a).add_(a * safe.std())

    def norm_z(self, norms: torch.Tensor) -> torch.Tensor:
        """ẑ for raw feature norms ``(B,)`` under the current statistics (no gradient)."""
        z = (self._safe(norms) - self.batch_mean) / (self.batch_std + self._eps)
        return (z * self.opts["h"]).clamp(-1.0, 1.0)

    def g(
        self,
        cos: torch.Tensor,
        m: float | torch.Tensor | None = None,
        *,
        norm_z: torch.Tensor | float | None = None,
    ) -> torch.Tensor:
        return adaface_g(cos, self.margin if m is None else m, norm_z=norm_z)

    def penalise(self, cos_y: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
        return self.g(cos_y, norm_z=self.norm_z(norms))


@register_head
class MagFaceHead(MarginHead):
    """MagFace, s = 64, m(a) ∈ [l_m, u_m] = [0.45, 0.8] for a ∈ [l_a, u_a] = [10, 110], λ_g = 35.

    ``margin`` must stay ``None``: the margin is ``m(a) = l_m + (u_m − l_m)(a − l_a)/(u_a − l_a)``
    of the clipped norm a, with gradient flowing into a as in MagFace. :meth:`regularizer`
    returns ``λ_g · mean(1/a + a/u_a²)`` for the trainer to add to the loss.
    """

    kind = "magface"
    default_margin = None
    options = {"l_a": 10.0, "u_a": 110.0, "l_m": 0.45, "u_m": 0.8, "lambda_g": 35.0, "easy_margin": True}

    def __init__(self, embedding_dim: int, num_classes: int, *, margin: float | None = None, **kw: Any) -> None:
        if margin is not None:
            raise PfdError(
                f"magface has no fixed margin (got margin={margin}); its margin grows with the feature norm, "
                "set l_m/u_m (defaults 0.45/0.8) instead"
            )
        super().__init__(embedding_dim, num_classes, **kw)
        o = self.opts
        if not (0 < o["l_a"] < o["u_a"]):
            raise PfdError(f"magface needs 0 < l_a < u_a, got l_a={o['l_a']}, u_a={o['u_a']}")

    def clipped_norm(self, norms: torch.Tensor) -> torch.Tensor:
        """a = clip(‖z‖, l_a, u_a) (fp32)."""
        return norms.float().clamp(self.opts["l_a"], self.opts["u_a"])

    def margin_for(self, norms: torch.Tensor) -> torch.Tensor:
        """The margin m(a) for raw feature norms ``(B,)``."""
        o = self.opts
        a = self.clipped_norm(norms)
        return o["l_m"] + (o["u_m"] - o["l_m"]) * (a - o["l_a"]) / (o["u_a"] - o["l_a"])

    def g(self, cos: torch.Tensor, m: float | torch.Tensor | None = None) -> torch.Tensor:
        if m is None:
            raise ValueError("magface's margin depends on the feature norm: pass m=head.margin_for(norms)")
        return magface_g(cos, m, easy_margin=self.opts["easy_margin"])

    def penalise(self, cos_y: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
        return self.g(cos_y, self.margin_for(norms))

    def regularizer(self, features: torch.Tensor) -> torch.Tensor:
        """``λ_g · mean_i g(a_i)``, g(a) = 1/a + a/u_a², fp32 scalar."""
        with _fp32(features.device):
            a = self.clipped_norm(features.float().norm(dim=1))
            return self.opts["lambda_g"] * (1.0 / a + a / self.opts["u_a"] ** 2).mean()


def create_head(
    kind: str,
    *,
    embedding_dim: int,
    num_classes: int,
    scale: float | None = None,
    margin: float | None = None,
    **kw: Any,
) -> MarginHead:
    """Build a registered margin head.

    Args:
        kind: ``arcface`` (s 64, m 0.5), ``cosface`` (s 64, m 0.4), ``adaface`` (s 64, m 0.4,
            ``h=0.333, t_alpha=0.01``) or ``magface`` (s 64, ``l_a=10, u_a=110, l_m=0.45,
            u_m=0.8, lambda_g=35, easy_margin=True``; no ``margin``).
        embedding_dim: Feature dimension D.
        num_classes: Number of classes C.
        scale: Logit scale; ``None`` for the default.
        margin: Margin; ``None`` for the default.
        **kw: Head options (listed above). A ``kwargs`` dict, as in :meth:`MarginHead.spec`,
            is merged in, so ``create_head(**head.spec())`` rebuilds a head.

    Raises:
        PfdError: Unknown kind or option, or invalid values.
    """
    kw = {**kw.pop("kwargs", {}), **kw}
    try:
        cls = HEADS[kind.lower()]
    except KeyError:
        raise PfdError(f"unknown head {kind!r}; choose one of {', '.join(sorted(HEADS))}") from None
    return cls(embedding_dim, num_classes, scale=scale, margin=margin, **kw)
