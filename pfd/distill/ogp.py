"""Orthogonal Geometry Preservation (OGP), eq. 1-5 of the PFD paper.

OGP fine-tunes the backbone φ jointly with a learnable rotation ``M ∈ SO(D)`` and a margin head
with 2N classes (N original identities ``y``, N rotated proxy identities ``y + N``):

* eq. 1  ``e_ort = M e``, ``M = exp(Ω)``, ``Ω = A − Aᵀ``  -> :class:`Rotation`, :func:`rotate`
* eq. 2  ``L_cls = L_CE(h([e, e_ort]), [y, y + N])``       -> :func:`ogp_classification_inputs`
* eq. 3  ``L_rep = E[max(0, |cos(e_ort, e)| − m)]``       -> :func:`repulsion_loss`
* eq. 4  ``L_iso = 1/N Σ_i [1 − cos(P_ort⁽ⁱ⁾, M P_real⁽ⁱ⁾)]`` -> :func:`isometry_loss`
* eq. 5  ``L_OGP = L_cls + λ_rep L_rep + λ_iso L_iso``     -> :func:`ogp_loss`, :class:`OGPStep`

Conventions. The paper writes embeddings as column vectors (``M e``, ``M P`` with ``P`` D×N).
pfd stacks vectors as rows, so eq. 1 becomes ``E_ort = E Mᵀ`` and the rotated prototypes of eq. 4
are ``W_real Mᵀ`` for row-stacked head weights. The matrix exponential costs ~0.2 s forward +
backward at D = 512 on a CPU: compute ``M = rotation()`` once per step and pass it to every
function that needs it (:class:`OGPStep` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import geotorch
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

__all__ = [
    "Rotation",
    "rotate",
    "ogp_classification_inputs",
    "repulsion_loss",
    "isometry_loss",
    "ogp_loss",
    "ogp_param_groups",
    "OGPOutput",
    "OGPStep",
    "orthogonality_error",
    "det_sign",
]


class Rotation(nn.Module):
    """The learnable rotation ``M = exp(A − Aᵀ) ∈ SO(D)`` of eq. 1.

    Implementation: a ``(D, D)`` tensor ``weight`` parametrised by ``geotorch.SO`` with the
    matrix-exponential trivialisation (``triv="expm"``). geotorch computes
    ``weight = base @ expm(tril(A, −1) − tril(A, −1)ᵀ)`` from the unconstrained parameter ``A``
    (stored at ``parametrizations.weight.original``). Every skew-symmetric Ω is ``L − Lᵀ`` for
    exactly one strictly lower-triangular ``L``, so using the lower triangle of ``A`` is eq. 1's
    ``Ω = A − Aᵀ`` without the redundant symmetric part; the upper triangle gets zero gradient.

    Why the base is the identity: geotorch's own initialisation (``geotorch.orthogonal`` or
    ``SO.sample()``) sets ``base`` to a Haar-random orthogonal matrix whose sign is fixed with
    ``torch.det``, which underflows to 0 for D = 512 in float32, so about half the draws have
    det −1 (not a rotation, and no path of ``expm`` ever reaches SO(D) from there). Here the
    parametrisation is registered on the identity (``right_inverse`` stores ``base = I`` and
    ``A = 0``), and ``A`` is then set to a seeded random non-zero strictly lower-triangular
    matrix. Hence ``M = exp(A − Aᵀ)`` exactly as eq. 1, det M = +1 at every D, and M ≠ I at
    initialisation (the spectral radius of Ω is about ``2 · init_scale · √D`` radians).

    Args:
        dim: Embedding dimension D.
        init_scale: Standard deviation of the entries of the initial Ω (must be > 0).
        seed: Seed of the initial A (``None``: torch's global RNG).

    Example:
        >>> rot = Rotation(512, seed=0)
        >>> M = rot()                  # (512, 512), once per step
        >>> e_ort = rotate(e, M)       # (B, 512)
    """

    def __init__(self, dim: int, *, init_scale: float = 0.1, seed: int | None = None) -> None:
        super().__init__()
        if dim < 2:
            raise ValueError(f"rotation dimension must be >= 2, got {dim}")
        if not init_scale > 0:
            raise ValueError(f"init_scale must be > 0 (M must not start at the identity), got {init_scale}")
        self.dim = int(dim)
        self.weight = nn.Parameter(torch.eye(self.dim))
        # unsafe=False: geotorch's right_inverse checks I ∈ SO(D) and stores base = I, A = 0.
        parametrize.register_parametrization(self, "weight", geotorch.SO((self.dim, self.dim), triv="expm"))
        gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        a0 = torch.randn(self.dim, self.dim, generator=gen).mul_(init_scale).tril_(-1)  # (D, D)
        with torch.no_grad():
            self.parametrizations.weight.original.copy_(a0)
            self.parametrizations.weight[0].base.copy_(torch.eye(self.dim))

    @property
    def generator(self) -> nn.Parameter:
        """The unconstrained parameter A (only its strict lower triangle is used)."""
        return self.parametrizations.weight.original

    def skew(self) -> torch.Tensor:
        """Ω = A − Aᵀ (eq. 1), shape ``(D, D)``."""
        a = self.generator.tril(-1)
        return a - a.transpose(-2, -1)

    def forward(self) -> torch.Tensor:
        """``M = exp(Ω)``, shape ``(D, D)``; differentiable w.r.t. A. Call once per step."""
        return self.weight

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def rotate(e: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """Rotate row vectors: ``e_ort = e Mᵀ`` (eq. 1, ``e_ort = M e`` for column vectors).

    Args:
        e: Embeddings ``(B, D)`` (normalised or raw: rotation preserves norms).
        M: Rotation ``(D, D)``.

    Returns:
        ``(B, D)`` rotated embeddings.
    """
    return e @ M.transpose(-2, -1).to(e.dtype)


def ogp_classification_inputs(
    features: torch.Tensor, M: torch.Tensor, labels: torch.Tensor, num_identities: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch-wise concatenation ``[e, e_ort]`` and labels ``[y, y + N]`` of eq. 2.

    The margin head computes L_CE from these. Raw (un-normalised) features are rotated, not
    normalised ones: ``‖f Mᵀ‖ = ‖f‖``, so the head's cosine of the rotated half equals that of
    ``e_ort = norm(f) Mᵀ`` exactly, and norm-dependent margins (AdaFace, MagFace) see the same
    feature norm for an image and its rotated counterpart.

    Args:
        features: Backbone output ``(B, D)``.
        M: Rotation ``(D, D)`` from :class:`Rotation`.
        labels: Original identity labels ``(B,)`` in ``[0, N)``.
        num_identities: N.

    Returns:
        ``(features2 (2B, D), labels2 (2B,))`` for a head with 2N classes.
    """
    rotated = rotate(features, M)  # (B, D)
    return torch.cat([features, rotated], 0), torch.cat([labels, labels + int(num_identities)], 0)


def repulsion_loss(e: torch.Tensor, e_ort: torch.Tensor, margin: float) -> torch.Tensor:
    """Eq. 3: ``L_rep = mean_batch max(0, |cos(e_ort, e)| − m)``.

    Args:
        e: Embeddings ``(B, D)``.
        e_ort: Their rotations ``(B, D)``.
        margin: Cosine margin m.

    Returns:
        Scalar tensor.
    """
    cos = F.cosine_similarity(e_ort, e, dim=-1)  # (B,)
    return (cos.abs() - margin).clamp_min(0).mean()


def isometry_loss(head_weight: torch.Tensor, M: torch.Tensor, num_identities: int) -> torch.Tensor:
    """Eq. 4: ``L_iso = 1/N Σ_i [1 − cos(P_ort⁽ⁱ⁾, M P_real⁽ⁱ⁾)]``.

    The paper's P are column-wise D×N; the head stores class prototypes as rows, so
    ``M P_real`` is ``W_real Mᵀ`` here. Prototypes are L2-normalised first.

    Args:
        head_weight: Head prototypes ``(2N, D)``: rows ``0..N−1`` original identities,
            rows ``N..2N−1`` their rotated proxy identities.
        M: Rotation ``(D, D)``.
        num_identities: N.

    Returns:
        Scalar tensor (0 when ``W_ort = W_real Mᵀ`` up to positive row scales).

    Raises:
        ValueError: If the head does not have exactly 2N rows.
    """
    n = int(num_identities)
    if head_weight.shape[0] != 2 * n:
        raise ValueError(f"OGP head must have 2N = {2 * n} classes, got {head_weight.shape[0]}")
    w = F.normalize(head_weight.float(), dim=1)  # (2N, D)
    target = rotate(w[:n], M.float())  # (N, D) = (M P_real)ᵀ
    return (1.0 - F.cosine_similarity(w[n:], target, dim=1)).mean()


def ogp_loss(
    logits: torch.Tensor,
    labels2: torch.Tensor,
    e: torch.Tensor,
    e_ort: torch.Tensor,
    head_weight: torch.Tensor,
    M: torch.Tensor,
    num_identities: int,
    *,
    rep_margin: float,
    lambda_rep: float = 1.0,
    lambda_iso: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Eq. 5: ``L_OGP = L_cls + λ_rep L_rep + λ_iso L_iso``.

    Args:
        logits: Margin-head logits ``(2B, 2N)`` of ``[e, e_ort]`` (eq. 2).
        labels2: ``[y, y + N]`` ``(2B,)``.
        e: Normalised embeddings ``(B, D)``.
        e_ort: ``e Mᵀ`` ``(B, D)``.
        head_weight: Head prototypes ``(2N, D)``.
        M: Rotation ``(D, D)``.
        num_identities: N.
        rep_margin: Cosine margin m of eq. 3.
        lambda_rep: λ_rep.
        lambda_iso: λ_iso.

    Returns:
        ``(total, {"cls", "rep", "iso"})``; components are detached, for logging.
    """
    l_cls = F.cross_entropy(logits.float(), labels2)
    l_rep = repulsion_loss(e, e_ort, rep_margin)
    l_iso = isometry_loss(head_weight, M, num_identities)
    total = l_cls + lambda_rep * l_rep + lambda_iso * l_iso
    return total, {"cls": l_cls.detach(), "rep": l_rep.detach(), "iso": l_iso.detach()}


def ogp_param_groups(
    backbone: nn.Module,
    head: nn.Module,
    rotation: Rotation,
    *,
    lr: float,
    rotation_lr: float = 0.0,
    weight_decay: float = 5e-4,
) -> list[dict[str, Any]]:
    """Optimiser parameter groups: backbone + head with weight decay, A without.

    Weight decay on A would pull M back towards the identity, which eq. 3 works against;
    ``rotation_lr = 0`` means "same as lr".
    """
    params = [p for p in list(backbone.parameters()) + list(head.parameters()) if p.requires_grad]
    return [
        {"params": params, "lr": lr, "weight_decay": weight_decay},
        {"params": [rotation.generator], "lr": rotation_lr or lr, "weight_decay": 0.0},
    ]


@dataclass
class OGPOutput:
    """One OGP step's result.

    Attributes:
        loss: L_OGP (eq. 5), differentiable.
        components: Detached ``cls``, ``rep``, ``iso``, ``cos_abs`` (mean |cos(e_ort, e)|) and
            ``below_margin`` (fraction of the batch with |cos(e_ort, e)| < m, eq. 3).
        M: The rotation used in this step ``(D, D)`` (with graph; do not recompute it).
    """

    loss: torch.Tensor
    components: dict[str, torch.Tensor]
    M: torch.Tensor

    def floats(self) -> dict[str, float]:
        """Components and the total as Python floats (for logging)."""
        out = {k: float(v) for k, v in self.components.items()}
        out["total"] = float(self.loss.detach())
        return out


class OGPStep(nn.Module):
    """Computes L_OGP (eq. 5) for one batch with M computed once.

    The trainer owns the optimiser and the loop; this module only turns ``(images, labels)``
    into the loss. It holds backbone, head and rotation as submodules, so one
    ``accelerator.prepare(step)`` (DDP) synchronises the gradients of all three, and
    ``step.parameters()`` is everything OGP trains.

    Args:
        backbone: φ, ``(B, 3, H, W)`` in [0, 1] -> raw features ``(B, D)``.
        head: Margin head with 2N classes: ``head(features, labels) -> logits``, ``head.weight``
            ``(2N, D)``.
        rotation: The :class:`Rotation`.
        num_identities: N.
        rep_margin: Cosine margin of eq. 3.
        lambda_rep: λ_rep.
        lambda_iso: λ_iso.
        amp_dtype: Autocast dtype of the backbone forward (``None``: full precision). The
            rotation, the head and the losses always run in fp32: a bf16 ``e Mᵀ`` would blur the
            very cosines that eq. 3 bounds.

    Example:
        >>> step = OGPStep(backbone, head, rotation, num_identities=N, rep_margin=0.2)
        >>> out = step(images, labels); out.loss.backward(); opt.step()
    """

    def __init__(
        self,
        backbone: nn.Module,
        head: nn.Module,
        rotation: Rotation,
        *,
        num_identities: int,
        rep_margin: float,
        lambda_rep: float = 1.0,
        lambda_iso: float = 1.0,
        amp_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.amp_dtype = amp_dtype
        self.backbone = backbone
        self.head = head
        self.rotation = rotation
        self.num_identities = int(num_identities)
        self.rep_margin = float(rep_margin)
        self.lambda_rep = float(lambda_rep)
        self.lambda_iso = float(lambda_iso)

    @classmethod
    def from_config(
        cls,
        backbone: nn.Module,
        head: nn.Module,
        rotation: Rotation,
        cfg: Any,
        *,
        num_identities: int,
        amp_dtype: torch.dtype | None = None,
    ) -> "OGPStep":
        """Build from an :class:`~pfd.config.OGPConfig`."""
        return cls(
            backbone,
            head,
            rotation,
            num_identities=num_identities,
            rep_margin=cfg.rep_margin,
            lambda_rep=cfg.lambda_rep,
            lambda_iso=cfg.lambda_iso,
            amp_dtype=amp_dtype,
        )

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> OGPOutput:
        """L_OGP of one batch.

        Args:
            images: ``(B, 3, H, W)`` in [0, 1].
            labels: Original identity labels ``(B,)`` in ``[0, N)``.
        """
        M = self.rotation()  # (D, D), the one expm of this step
        amp = self.amp_dtype
        with torch.autocast(images.device.type, dtype=amp or torch.float32, enabled=amp is not None):
            features = self.backbone(images)
        features = features.float()  # (B, D)
        feats2, labels2 = ogp_classification_inputs(features, M, labels, self.num_identities)
        logits = self.head(feats2, labels2)  # (2B, 2N)
        e = F.normalize(features, dim=1)  # (B, D)
        e_ort = F.normalize(feats2[features.shape[0] :], dim=1)  # = rotate(e, M)
        total, comps = ogp_loss(
            logits,
            labels2,
            e,
            e_ort,
            self.head.weight,
            M,
            self.num_identities,
            rep_margin=self.rep_margin,
            lambda_rep=self.lambda_rep,
            lambda_iso=self.lambda_iso,
        )
        cos_abs = F.cosine_similarity(e_ort, e, dim=1).abs().detach()  # (B,)
        comps["cos_abs"] = cos_abs.mean()
        comps["below_margin"] = (cos_abs < self.rep_margin).float().mean()
        return OGPOutput(total, comps, M)


def orthogonality_error(M: torch.Tensor) -> float:
    """``max |M Mᵀ − I|`` (a float), for checks and logging."""
    M = M.detach()
    eye = torch.eye(M.shape[-1], dtype=M.dtype, device=M.device)
    return float((M @ M.transpose(-2, -1) - eye).abs().max())


def det_sign(M: torch.Tensor) -> int:
    """Sign of det M via ``slogdet`` (``torch.linalg.det`` underflows to 0 at D = 512 in fp32)."""
    return int(torch.linalg.slogdet(M.detach().double()).sign.item())

