"""Relational Topology Alignment (RTA) distillation, eq. 6-10 of the PFD paper.

* eq. 6  ``L_bn``: BatchNorm statistics of the proxies -> :class:`pfd.nn.bn_hooks.BNStatistics`
* eq. 7  ``L_cls^RTA = L_CE(h(φ(s)), y)`` on the internal proxy class y  -> :func:`distill_loss`
* eq. 8  K-means prototypes ``P`` (NK × D) on ``E_ort = E Mᵀ``; ``A* = P Pᵀ``, ``A_syn = E_syn Pᵀ``
  -> :func:`pfd.distill.prototypes.kmeans_prototypes`
* eq. 9  ``L_RTA`` with separate diagonal / off-diagonal normalisation -> :func:`rta_loss`
* eq. 10 ``L_distill = L_cls^RTA + λ_RTA L_RTA + λ_bn L_bn`` -> :func:`distill_loss`
* pfd's additions, off by default: ``+ λ_sp L_sp`` (spatial feature statistics,
  :mod:`pfd.nn.spatial_stats`) and ``+ λ_dl L_dl`` against the public model (:mod:`pfd.distill.delink`);
  proxies may start from public faces (:mod:`pfd.distill.init_pool`) instead of noise.

L_RTA is a sum over proxy rows (row i of ``A_syn`` depends only on proxy i), so any batch of
proxies can be optimised on its own: :class:`ProxyDistiller` composes the loss of one batch and
drives the image-inversion engine (:class:`pfd.nn.inversion.ImageInversion`, seeded from
``(seed, batch_index)``), which is what makes distillation resumable and shardable.

Which logits eq. 7 uses: the paper writes the same ``L_CE`` as in eq. 2, which it defines as
the margin-based cross-entropy of the FR head; :class:`ProxyDistiller` therefore uses the
adapted head's margin logits ``head(features, y)`` (AdaFace by default), the same classifier that
OGP trained. :func:`distill_loss` takes logits, so a caller can pass plain scaled cosines instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from pfd.data.shape import ImageSize, canonical_size, image_hw
from pfd.distill.delink import PublicView, rank_jitter, target_ranks
from pfd.errors import PfdError
from pfd.nn.image_prior import total_variation
from pfd.nn.inversion import ImageInversion, noise_images
from pfd.nn.spatial_stats import SpatialStatistics, SpatialTargets
from pfd.progress import progress_bar

__all__ = [
    "rta_loss",
    "rta_loss_full",
    "distill_loss",
    "DOMINANCE",
    "class_scale",
    "term_ratios",
    "dominant_term",
    "proxy_batches",
    "ProxyBatch",
    "ProxyDistiller",
]


# --------------------------------------------------------------------------------------------
# Losses (eq. 9, 10)
# --------------------------------------------------------------------------------------------


def rta_loss(proxy_emb: torch.Tensor, rows: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """The contribution of some proxy rows to L_RTA (eq. 9).

    Row i of ``A_syn`` is ``e_i Pᵀ`` and row i of ``A*`` is ``P[rows_i] Pᵀ`` (eq. 8). The
    diagonal entry ``|A_syn[i, rows_i] − A*[rows_i, rows_i]|`` is divided by NK, the
    off-diagonal ones (``j ≠ rows_i``) by NK(NK − 1). Summed over a partition of all NK rows
    this is exactly eq. 9. With NK = 1 the off-diagonal term is empty and counts 0.

    Args:
        proxy_emb: Normalised proxy embeddings ``(B, D)``.
        rows: Their prototype indices ``(B,)`` into P.
        P: Normalised prototypes ``(NK, D)``.

    Returns:
        Scalar tensor.
    """
    nk = P.shape[0]
    P = P.to(device=proxy_emb.device, dtype=proxy_emb.dtype)
    rows = rows.to(proxy_emb.device)
    a_syn = proxy_emb @ P.T  # (B, NK)
    a_star = P[rows] @ P.T  # (B, NK)
    diff = (a_syn - a_star).abs()  # (B, NK)
    diag = diff.gather(1, rows[:, None]).sum()
    loss = diag / nk
    if nk > 1:
        loss = loss + (diff.sum() - diag) / (nk * (nk - 1))
    return loss


def rta_loss_full(E: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """Eq. 9 written with full matrices (reference for tests): E, P ``(NK, D)`` in prototype order."""
    nk = P.shape[0]
    diff = (E @ P.T - P @ P.T).abs()  # (NK, NK)
    eye = torch.eye(nk, dtype=diff.dtype, device=diff.device)
    off = (diff * (1 - eye)).sum() / (nk * (nk - 1)) if nk > 1 else diff.new_zeros(())
    return (diff * eye).sum() / nk + off


def distill_loss(
    proxy_emb: torch.Tensor,
    *,
    logits: torch.Tensor | None = None,
    targets: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
    P: torch.Tensor | None = None,
    bn: torch.Tensor | None = None,
    lambda_rta: float = 1.0,
    lambda_bn: float = 0.01,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Eq. 10: ``L_distill = L_cls^RTA + λ_RTA L_RTA + λ_bn L_bn`` for one batch of proxies.

    Args:
        proxy_emb: Normalised proxy embeddings ``(B, D)``.
        logits: Head logits ``(B, C)`` of the proxies (eq. 7); ``None`` drops L_cls.
        targets: Internal proxy classes ``(B,)`` (eq. 7's y).
        rows: Prototype rows ``(B,)`` of the proxies (eq. 9).
        P: Prototypes ``(NK, D)``; ``None`` (or ``lambda_rta == 0``) drops L_RTA.
        bn: L_bn of this forward pass (eq. 6); ``None`` drops it.
        lambda_rta: λ_RTA.
        lambda_bn: λ_bn.

    Returns:
        ``(total, {"cls", "rta", "bn"})`` with detached components.
    """
    zero = proxy_emb.new_zeros(())
    l_cls = F.cross_entropy(logits.float(), targets) if logits is not None else zero
    use_rta = P is not None and rows is not None and lambda_rta != 0
    l_rta = rta_loss(proxy_emb, rows, P) if use_rta else zero  # type: ignore[arg-type]
    l_bn = bn if bn is not None else zero
    total = l_cls + (lambda_rta * l_rta if use_rta else 0.0) + (lambda_bn * l_bn if bn is not None else 0.0)
    return total, {"cls": l_cls.detach(), "rta": l_rta.detach(), "bn": l_bn.detach()}


#: A weighted term larger than this many times eq. 10's class terms at the first step drowns them: the
#: proxies then follow that term alone (issue 34: ``--lambda-spatial 1e30`` left every loss unchanged and
#: released noise). The guard is for absurd weights, so it sits far above every shipped default: measured at
#: the first step of every batch, the demo's λ_bn·L_bn is 0.24× (de-linking 0.06×, insider 0.06×), and the
#: largest of any registered method in the test world is sre2l's λ_bn·L_bn, 4.6-4.8× on every kernel path
#: (``tests/distill/test_methods.py`` asserts every method and recipe at least 10× below this bar).
DOMINANCE = 1000.0

#: Each weighted term: its setting and the flag that sets it.
TERM_SETTINGS = {"bn": ("rta.lambda_bn", "--lambda-bn"), "spatial": ("rta.lambda_spatial", "--lambda-spatial"),
                 "delink": ("rta.lambda_delink", "--lambda-delink"), "insider": ("rta.lambda_insider", None),
                 "tv": ("rta.lambda_tv", "--lambda-tv")}


def class_scale(comps: dict[str, float], *, lambda_rta: float, num_classes: int = 0) -> float:
    """The size of eq. 10's class terms that a weighted term is compared with.

    ``L_cls + λ_RTA · L_RTA`` at the first step, but never below the cross-entropy of a prediction at
    chance, ``ln C``: a noise image that the head already puts in its class makes ``L_cls`` near 0,
    and a bare ratio then calls any weight "dominant" (issue 55: sre2l's own λ_bn 0.01 was 1.2e3×
    eq. 10 on one CPU's kernels and 11× on another's, because one batch's ``L_cls`` was 0.008).

    Args:
        comps: Unweighted terms of one step (``"cls"``, ``"rta"``, ...).
        lambda_rta: λ_RTA.
        num_classes: Classes of the head (0 without one: no floor).

    Returns:
        The scale (> 0).
    """
    main = abs(float(comps.get("cls", 0.0))) + abs(lambda_rta * float(comps.get("rta", 0.0)))
    chance = math.log(num_classes) if num_classes > 1 else 0.0
    return max(main, chance, 1e-12)


def term_ratios(comps: dict[str, float], weights: dict[str, float], *, lambda_rta: float,
                num_classes: int = 0) -> dict[str, float]:
    """Each weighted term over eq. 10's class terms (:func:`class_scale`): ``weight · term / scale``.

    Args:
        comps: Unweighted terms of one step.
        weights: Each other term's weight; terms absent from ``comps`` or weighted 0 are left out.
        lambda_rta: λ_RTA.
        num_classes: Classes of the head (the floor ``ln C`` of :func:`class_scale`).

    Returns:
        ``{term: ratio}``.
    """
    scale = class_scale(comps, lambda_rta=lambda_rta, num_classes=num_classes)
    return {name: abs(w * float(comps[name])) / scale for name, w in weights.items() if name in comps and w}


def dominant_term(comps: dict[str, float], weights: dict[str, float], *, lambda_rta: float,
                  num_classes: int = 0) -> tuple[str, float] | None:
    """The weighted term that dwarfs eq. 10's class terms, and by how much (``None`` when none does).

    Args:
        comps: Unweighted terms of one step (``"cls"``, ``"rta"`` and any of :data:`TERM_SETTINGS`).
        weights: Each other term's weight.
        lambda_rta: λ_RTA.
        num_classes: Classes of the head (see :func:`class_scale`).

    Returns:
        ``(term, ratio)`` of the largest ratio of :func:`term_ratios` above :data:`DOMINANCE`, or ``None``.
    """
    ratios = term_ratios(comps, weights, lambda_rta=lambda_rta, num_classes=num_classes)
    name = max(ratios, key=ratios.__getitem__, default=None)
    return (name, ratios[name]) if name is not None and ratios[name] > DOMINANCE else None


# --------------------------------------------------------------------------------------------
# Loop for one batch of proxies
# --------------------------------------------------------------------------------------------


def proxy_batches(num_proxies: int, batch_size: int) -> list[np.ndarray]:
    """Prototype rows of each proxy batch: ``[0..B), [B..2B), ...`` (the last may be short)."""
    return [np.arange(s, min(s + batch_size, num_proxies)) for s in range(0, num_proxies, batch_size)]


@dataclass
class ProxyBatch:
    """One distilled batch.

    Attributes:
        proxies: ``(B, 3, H, W)`` float32 in [0, 1] on the CPU.
        history: Per-iteration ``cls``, ``rta``, ``bn`` and ``total`` losses.
    """

    proxies: torch.Tensor
    history: dict[str, list[float]] = field(default_factory=dict)

    def first(self, key: str) -> float:
        """The loss ``key`` at the first iteration."""
        return self.history[key][0]

    def last(self, key: str) -> float:
        """The loss ``key`` at the last iteration."""
        return self.history[key][-1]

    def summary(self) -> dict[str, float]:
        """First and last value of every recorded loss (``rta_first``, ``rta_last``, ...)."""
        out: dict[str, float] = {}
        for k, v in self.history.items():
            if v:
                out[f"{k}_first"], out[f"{k}_last"] = v[0], v[-1]
        return out


class ProxyDistiller:
    """Optimises one batch of proxies from Gaussian noise with eq. 10.

    Each iteration: augment (per image, :func:`~pfd.distill.augment.augment_proxies`) ->
    frozen backbone in eval mode -> normalise -> L_cls (head margin logits on the internal
    proxy class), L_RTA against P, L_bn from hooks on the same forward pass -> Adam step
    (cosine-decayed lr) -> clamp pixels to [0, 1]. The noise and every augmentation draw come from
    :func:`batch_generator` ``(seed, batch_index)``, so a batch is recomputed identically
    without running the others (bit for bit on the CPU).

    The constructor freezes ``backbone`` and ``head`` in place (eval mode,
    ``requires_grad_(False)``); the head must not update state in eval mode.

    Args:
        backbone: φ, ``(B, 3, H, W)`` in [0, 1] -> raw features ``(B, D)``.
        head: Margin head ``head(features, labels) -> logits``; ``None`` drops L_cls.
        prototypes: P ``(NK, D)`` normalised; ``None`` drops L_RTA (the ``sre2l`` baseline).
        size: Proxy image side ``S``, or ``(H, W)`` (:mod:`pfd.data.shape`): the model's input shape.
        cfg: An :class:`~pfd.config.RTAConfig` (iterations, lr, betas, lambdas, augmentation,
            first_bn_multiplier, init_std, seed).
        device: Where to optimise (default: the backbone's device).
        include_bn1d: Also match BatchNorm1d statistics (see :mod:`pfd.nn.bn_hooks`).
        amp: bf16 autocast for the backbone forward on CUDA.
        progress: Show a per-batch progress bar (a terminal only; :mod:`pfd.progress`).
        public: The public model and its private gallery for pfd's de-linking term
            (:mod:`pfd.distill.delink`, weight ``cfg.lambda_delink``); ``None`` or a zero weight: eq. 10 alone.
        init_pool: The public photos the proxies start from (``cfg.init = "public"``,
            :class:`~pfd.distill.init_pool.InitPool`); ``None``: Gaussian noise (the paper).
        spatial: Domain-level targets of the spatial statistics (:func:`pfd.nn.spatial_stats.spatial_targets`,
            weight ``cfg.lambda_spatial``); ``None`` or a zero weight: none.
        insider: The adapted model's own private gallery for the insider's de-linking term (weight
            ``cfg.lambda_insider``; ``model`` unused: the term reads the embeddings eq. 9 already
            computes, so it costs no forward). ``None`` or a zero weight: none.
        cf: The private features of each identity, for characteristic-function matching (the ``ncfm``
            baseline, :mod:`pfd.distill.cf_match`, weight ``cfg.lambda_cf``); ``None``: none.
        fast_prelu: Frozen PReLU layers skip their slopes' unused gradient (:mod:`pfd.nn.frozen_prelu`,
            bit-identical); ``False`` keeps aten's backward (the speed benchmark's "before").
    """

    def __init__(
        self,
        backbone: nn.Module,
        head: Callable[..., torch.Tensor] | None,
        prototypes: torch.Tensor | None,
        *,
        size: ImageSize,
        cfg: Any,
        device: torch.device | str | None = None,
        include_bn1d: bool = False,
        amp: bool = False,
        progress: bool = False,
        public: PublicView | None = None,
        init_pool: Any | None = None,
        spatial: SpatialTargets | None = None,
        fast_prelu: bool = True,
        insider: PublicView | None = None,
        cf: Any | None = None,
    ) -> None:
        self.backbone = backbone.eval().requires_grad_(False)
        if getattr(cfg, "init", "noise") == "public" and init_pool is None:
            raise PfdError("rta.init = 'public' needs the pool of public photos the proxies start from (init_pool=)")
        self.init_pool = init_pool if getattr(cfg, "init", "noise") == "public" else None
        self.spatial = spatial if float(getattr(cfg, "lambda_spatial", 0.0) or 0.0) > 0 else None
        if float(getattr(cfg, "lambda_spatial", 0.0) or 0.0) > 0 and spatial is None:
            raise PfdError("rta.lambda_spatial > 0 needs the private set's spatial statistics (spatial=)")
        self.fast_prelu = fast_prelu
        lam = float(getattr(cfg, "lambda_delink", 0.0) or 0.0)
        self.public = public if public is not None and lam > 0 else None
        if self.public is not None:
            self.public.model.eval().requires_grad_(False)
        self.cf = cf if cf is not None and float(getattr(cfg, "lambda_cf", 0.0) or 0.0) > 0 else None
        self.insider = insider if insider is not None and float(getattr(cfg, "lambda_insider", 0.0) or 0.0) > 0 else None
        if isinstance(head, nn.Module):
            head.eval().requires_grad_(False)
        self.head = head
        if device is None:
            p = next(backbone.parameters(), None)
            device = p.device if p is not None else torch.device("cpu")
        self.device = torch.device(device)
        self.P = prototypes.to(self.device).float() if prototypes is not None else None
        self.size = canonical_size(size)
        self.hw = image_hw(self.size)
        self.cfg = cfg
        self.include_bn1d = include_bn1d
        self.amp = amp and self.device.type == "cuda"
        self.progress = progress

    def init_noise(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        """Gaussian noise around mid-grey, clamped to [0, 1], on the grid RTA optimises:
        ``(B, 3, H/f, W/f)`` on the CPU (``f = rta.downsample``; noise drawn at full size and
        averaged down would start with a quarter of ``init_std`` at f = 4)."""
        h, w = image_hw(self.size)
        f = int(getattr(self.cfg, "downsample", 1) or 1)
        return noise_images(batch, (h // f, w // f), self.cfg.init_std, gen)

    def distill_batch(
        self, rows: torch.Tensor | np.ndarray | None, classes: torch.Tensor | np.ndarray | None, *, batch_index: int,
        sources: torch.Tensor | np.ndarray | None = None, on_step: Callable[[], Any] | None = None,
        bn_targets: Any | None = None, spatial_targets: SpatialTargets | None = None,
    ) -> ProxyBatch:
        """Distill one batch.

        Args:
            rows: Prototype row of each proxy ``(B,)`` (ignored without prototypes).
            classes: Internal proxy class of each proxy in the head's label space ``(B,)``.
            batch_index: The batch's index (seeds the noise and augmentation).
            sources: Source identity of each proxy ``(B,)`` in ``[0, N)``, for the de-linking term.
            on_step: Called after every Adam iteration (a progress bar's ``update``).
            bn_targets: Per BatchNorm layer ``(mean, var)`` that L_bn matches instead of the running
                statistics (the batch's lighting group, :mod:`pfd.distill.lighting`); ``None``: eq. 6.
            spatial_targets: The spatial statistics' targets for this batch (its lighting group's);
                ``None``: the domain-level ones given to the constructor.

        Returns:
            The proxies and the loss history.

        Raises:
            PfdError: If a loss becomes NaN or infinite (names the batch and iteration).
        """
        cfg = self.cfg
        n = len(rows) if rows is not None else len(classes)  # type: ignore[arg-type]
        rows_t = torch.as_tensor(np.asarray(rows), dtype=torch.int64, device=self.device) if rows is not None else None
        cls_t = torch.as_tensor(np.asarray(classes), dtype=torch.int64, device=self.device) if classes is not None else None
        if self.init_pool is not None:
            if rows is None:
                raise PfdError("a start from public photos needs each proxy's prototype row (rows=)")
            pool = self.init_pool
            start: Callable[[torch.Generator], torch.Tensor] = lambda gen: pool.images(np.asarray(rows))  # noqa: E731
        else:
            start = lambda gen: self.init_noise(n, gen)  # noqa: E731
        public, insider = self.public, self.insider
        view = public if public is not None else insider
        if view is not None:  # checked before any hook is placed on the models
            if sources is None:
                raise PfdError("the de-linking term needs each proxy's source identity (sources=)")
            src_t = torch.as_tensor(np.asarray(sources), dtype=torch.int64, device=self.device)
            if rows is None:
                raise PfdError("the de-linking term needs each proxy's prototype row (rows=)")
            rank_t = target_ranks(np.asarray(rows), view.n_ids, int(cfg.ipc), seed=cfg.seed).to(self.device)
            jitter_t = rank_jitter(np.asarray(rows), view.n_ids, int(cfg.ipc), seed=cfg.seed).to(self.device)
        cf = None
        if self.cf is not None:
            if sources is None:
                raise PfdError("characteristic-function matching needs each proxy's source identity (sources=)")
            cf = self.cf.batch(np.asarray(sources), batch_index=batch_index)
        engine = ImageInversion(
            self.backbone, size=self.size, iterations=cfg.iterations, lr=cfg.lr, betas=tuple(cfg.betas),
            crop_scale=tuple(cfg.crop_scale), flip=cfg.flip, shift=cfg.shift, lambda_bn=cfg.lambda_bn,
            first_bn_multiplier=cfg.first_bn_multiplier, include_bn1d=self.include_bn1d, init_std=cfg.init_std,
            downsample=int(getattr(cfg, "downsample", 1) or 1), seed=cfg.seed, device=self.device, amp=self.amp,
            fast_prelu=self.fast_prelu,
            frozen=[public.model] if public is not None else [], what="RTA batch",
            fix="lower rta.lr or rta.lambda_bn, or check the backbone; finished batches are kept",
        )  # fmt: skip
        spatial = (SpatialStatistics(self.backbone, spatial_targets if spatial_targets is not None else self.spatial)
                   if self.spatial is not None else None)

        def loss(x: torch.Tensor, feats: torch.Tensor, bn: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            """Eq. 10 (+ the spatial statistics, the image prior and the de-linking terms, when on), in this order."""
            emb = F.normalize(feats, dim=1)  # (B, D)
            logits = self.head(feats, cls_t) if self.head is not None and cls_t is not None else None
            total, comps = distill_loss(
                emb, logits=logits, targets=cls_t, rows=rows_t, P=self.P, bn=bn.loss(bn_targets) if bn is not None else None,
                lambda_rta=cfg.lambda_rta, lambda_bn=cfg.lambda_bn,
            )  # fmt: skip
            if cf is not None:
                l_cf = cf.loss(emb)
                total = total + cfg.lambda_cf * l_cf
                comps["cf"] = l_cf.detach()
            if spatial is not None:
                l_sp = spatial.loss()
                total = total + cfg.lambda_spatial * l_sp
                comps["spatial"] = l_sp.detach()
            if cfg_tv > 0:  # the image prior reads the pixels only: no forward pass of its own
                l_tv = total_variation(x)
                total = total + cfg_tv * l_tv
                comps["tv"] = l_tv.detach()
            if public is not None:  # its value and gradient were taken first (delink_first), before the forward
                comps["delink"] = delink_value[0]
            if insider is not None:  # the same ranks, in the adapted model's own space: no extra forward
                l_in = insider.loss_of(emb.float(), src_t, rank_t, jitter_t)
                total = total + cfg.lambda_insider * l_in
                comps["insider"] = l_in.detach()
            if not checked:  # the first step: no term may drown eq. 10 (checked before anything is kept)
                checked.append(True)
                weights = {k: float(getattr(cfg, TERM_SETTINGS[k][0].split(".")[1], 0.0) or 0.0) for k in TERM_SETTINGS}
                first = {k: float(v) for k, v in comps.items()}
                ratios = term_ratios(first, weights, lambda_rta=float(cfg.lambda_rta), num_classes=n_classes)
                dominance[:] = [max(ratios.values(), default=0.0)]  # kept in the history: how far from the bar
                worst = dominant_term(first, weights, lambda_rta=float(cfg.lambda_rta), num_classes=n_classes)
                if worst is not None:
                    name, ratio = worst
                    setting, flag = TERM_SETTINGS[name]
                    w = weights[name]
                    raise PfdError(f"{setting}{f' ({flag})' if flag else ''} = {w:g} makes its term {ratio:.3g} times eq. "
                                   f"10's class terms at the first step of RTA batch {batch_index}: the proxies would "
                                   f"follow it alone; lower it to at most {w * DOMINANCE / ratio:.3g} "
                                   f"({DOMINANCE:g} times eq. 10), or to 0 to drop the term")
            return total, comps

        cfg_tv = float(getattr(cfg, "lambda_tv", 0.0) or 0.0)
        checked: list[bool] = []
        dominance: list[float] = []
        n_classes = int(getattr(self.head, "num_classes", 0) or 0) if self.head is not None else 0
        delink_value: list[torch.Tensor] = []

        def delink_first(x: torch.Tensor) -> torch.Tensor:
            """λ_dl · L_dl through the public model, differentiated before the adapted model's forward
            (:meth:`ImageInversion.invert`'s ``first``): one network's activations at a time."""
            l_dl = public.loss(x, src_t, rank_t, jitter_t)  # type: ignore[union-attr]
            delink_value[:] = [l_dl.detach()]
            return cfg.lambda_delink * l_dl

        bar = progress_bar(total=cfg.iterations, desc=f"RTA batch {batch_index}", enabled=self.progress)
        step = on_step if on_step is not None or not self.progress else bar.update
        if cf is not None:  # NCFM's min-max: the sampler ascends right after the proxies' descent step
            outer = step

            def step() -> None:
                cf.step()
                if outer is not None:
                    outer()
        try:
            s = engine.invert(loss, n=n, batch_index=batch_index, start=start, on_step=step,
                              first=delink_first if public is not None else None)
        finally:
            bar.close()
            if spatial is not None:
                spatial.remove()
        h = engine.history
        history = {k: h.get(k, []) for k in ("cls", "rta", "bn", "total")} | {k: v for k, v in h.items() if k not in
                                                                              ("cls", "rta", "bn", "total")}
        history["dominance"] = list(dominance)  # the largest weighted term over eq. 10 at the first step
        return ProxyBatch(s.detach().cpu().float(), history)

    @torch.no_grad()
    def embed(self, proxies: torch.Tensor) -> torch.Tensor:
        """Normalised embeddings ``(B, D)`` of un-augmented proxies with the frozen backbone."""
        return F.normalize(self.backbone(proxies.to(self.device)).float(), dim=1).cpu()
