"""Reconstruction attack: turn each proxy's embedding back into a face image, then link that.

The PFD paper's "post-release reconstruction stress test" (Fig. 5, Fig. 3 bottom) feeds each
proxy's embedding to an off-the-shelf embedding-to-face generator (Arc2Face) and scores the
reconstructions with VisMatch and Rank-1 Re-ID like the proxies themselves. No face generator
ships with pfd, so the built-in reconstructor inverts the attacker's *public* model with a
BatchNorm image prior instead (model inversion in the style of SRe2L / DeepInversion): starting
from noise, optimise an image ``x`` so that

    L(x) = 1 − cos(φ(aug(x)), t) + λ_bn · L_bn(x)

where ``t`` is the target (proxy) embedding, ``aug`` a fresh random crop / flip / shift per image
and iteration (:func:`pfd.nn.augment.augment_proxies`) and ``L_bn`` the BatchNorm statistics
distance of eq. 6 of the PFD paper (:class:`pfd.nn.bn_hooks.BNStatistics`), which pulls the batch
towards the image statistics the public model was trained on. Adam, cosine-decayed learning rate,
pixels clamped to [0, 1] after every step: the image-inversion engine RTA drives too
(:class:`pfd.nn.inversion.ImageInversion`), with this loss.

This is a weaker prior than a face generator: reconstructions look like textures that the model
reads as the target identity, not like photographs. The hook below lets a user plug in a real
generator: any callable ``reconstructor(embeddings (n, D) float32 unit rows) -> images
(n, 3, H, W) float in [0, 1]`` (e.g. a wrapper around Arc2Face) replaces the inversion.

Cost: one step is the work of one RTA iteration (a forward and backward to the pixels with the
same BatchNorm statistics, :mod:`pfd.nn.bn_hooks`), so with the default 100 steps an image costs
half of what a demo-recipe proxy costs (200 RTA iterations). On the demo's public model 100 steps
reach a mean cosine of 0.67 to the targets where 300 reached 0.69 (64 proxies of the demo
release; noise starts at 0.32), for a third of the time. A single progress bar counts every step
of every batch, so its rate and remaining time are the projection of the whole attack;
:attr:`BNInversion.history` keeps each batch's time.

Seeding: batch ``b`` draws its noise and augmentations from
:func:`pfd.nn.inversion.batch_generator` ``(seed, b)``; results are reproducible on one device.
Because L_bn is a statistic of the whole batch, a reconstruction depends on the batch it was
optimised in (the batch size is part of the settings).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from pfd.progress import progress_bar

from pfd.data.shape import canonical_size, plain_size
from pfd.errors import PfdError
from pfd.nn.bn_hooks import BNStatistics
from pfd.nn.inversion import ImageInversion

__all__ = ["Reconstructor", "BNInversion", "check_reconstructions"]

#: ``reconstructor(embeddings (n, D)) -> images (n, 3, H, W) in [0, 1]``.
Reconstructor = Callable[[torch.Tensor], torch.Tensor]


class BNInversion:
    """The built-in reconstructor: BN-prior inversion of embeddings through a frozen model.

    The model is used in eval mode with gradients only for the images; its training flags and
    ``requires_grad`` are restored after every call.

    Args:
        model: φ, ``(B, 3, H, W)`` in [0, 1] -> ``(B, D)`` features, with BatchNorm layers.
        size: Image size ``S`` or ``(H, W)`` (the attacker model's input).
        iterations: Adam steps per batch.
        batch_size: Images optimised together (L_bn is a batch statistic).
        lr: Peak Adam learning rate (cosine decay, no warm-up).
        lambda_bn: Weight of L_bn.
        first_bn_multiplier: Extra weight of the first BN layer (SRe2L: 10).
        crop_scale: Random-resized-crop area range per iteration.
        flip: Random horizontal flips per iteration.
        shift: Max cyclic shift in pixels per iteration.
        init_std: Std of the Gaussian start around mid-grey.
        seed: Seed of the noise and augmentations.
        device: Where to optimise (default: the model's device).
        progress: Show a progress bar over every step of every batch (rate and projected time).

    Raises:
        PfdError: If the model has no BatchNorm layer (L_bn is undefined) while ``lambda_bn > 0``.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        size: Any,
        iterations: int = 100,
        batch_size: int = 64,
        lr: float = 0.1,
        lambda_bn: float = 0.01,
        first_bn_multiplier: float = 10.0,
        crop_scale: tuple[float, float] = (0.8, 1.0),
        flip: bool = True,
        shift: int = 2,
        init_std: float = 0.2,
        seed: int = 0,
        device: str | torch.device | None = None,
        progress: bool = False,
    ) -> None:
        if iterations < 1 or batch_size < 1:
            raise PfdError(f"reconstruction needs iterations >= 1 and batch_size >= 1 (got {iterations}, {batch_size})")
        self.model = model
        self.size = canonical_size(size)
        self.iterations = int(iterations)
        self.batch_size = int(batch_size)
        self.lr = float(lr)
        self.lambda_bn = float(lambda_bn)
        self.first_bn_multiplier = float(first_bn_multiplier)
        self.crop_scale = (float(crop_scale[0]), float(crop_scale[1]))
        self.flip = bool(flip)
        self.shift = int(shift)
        self.init_std = float(init_std)
        self.seed = int(seed)
        if device is None:
            p = next(model.parameters(), None)
            device = p.device if p is not None else torch.device("cpu")
        self.device = torch.device(device)
        self.progress = progress
        #: Per batch: final mean cosine to the targets (un-augmented images), final L_bn, images, seconds.
        self.history: list[dict[str, float]] = []
        if self.lambda_bn > 0:
            BNStatistics(model).remove()  # raises a PfdError when there is nothing to match

    def settings(self) -> dict[str, Any]:
        """JSON-ready settings (for reports)."""
        return {"method": "bn-inversion", "size": plain_size(self.size), "iterations": self.iterations,
                "batch_size": self.batch_size, "lr": self.lr, "lambda_bn": self.lambda_bn,
                "first_bn_multiplier": self.first_bn_multiplier, "crop_scale": list(self.crop_scale),
                "flip": self.flip, "shift": self.shift, "init_std": self.init_std, "seed": self.seed}

    def __call__(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Reconstruct one image per embedding.

        Args:
            embeddings: ``(n, D)`` target embeddings (normalised here).

        Returns:
            ``(n, 3, H, W)`` float32 in [0, 1] on the CPU.

        Raises:
            PfdError: For a non-matrix input or a loss that becomes NaN/inf.
        """
        t = torch.as_tensor(embeddings).detach().float()
        if t.ndim != 2 or t.shape[0] == 0:
            raise PfdError(f"reconstruction targets must be a non-empty (n, D) matrix, got {tuple(t.shape)}")
        t = F.normalize(t, dim=1)
        modes = [(m, m.training) for m in self.model.modules()]
        grads = [(p, p.requires_grad) for p in self.model.parameters()]
        self.model.eval().requires_grad_(False)
        self.model.to(self.device)
        self.history = []
        out = []
        starts = list(range(0, t.shape[0], self.batch_size))
        # One bar over every Adam step of every batch: its rate and remaining time are the projection.
        # Only on a terminal: under CI or nohup the bar would fill the log; one line is logged instead.
        bar = progress_bar(total=len(starts) * self.iterations, desc=f"reconstruct {t.shape[0]} images", unit="step",
                           enabled=self.progress)
        try:
            for b, lo in enumerate(starts):
                out.append(self._invert_batch(t[lo : lo + self.batch_size], b, bar=bar, batches=len(starts)))
        finally:
            bar.close()
            for m, flag in modes:
                m.training = flag
            for p, flag in grads:
                p.requires_grad_(flag)
        return torch.cat(out)

    def _invert_batch(self, target: torch.Tensor, index: int, *, bar: Any = None, batches: int = 1) -> torch.Tensor:
        t0 = time.perf_counter()
        target = target.to(self.device)  # (b, D)
        engine = ImageInversion(
            self.model, size=self.size, iterations=self.iterations, lr=self.lr, betas=(0.5, 0.9),
            crop_scale=self.crop_scale, flip=self.flip, shift=self.shift, lambda_bn=self.lambda_bn,
            first_bn_multiplier=self.first_bn_multiplier, init_std=self.init_std, seed=self.seed, device=self.device,
            # A host sync per step costs a GPU its queue; a NaN shows within a few steps anyway.
            check_every=16, record=False, what="reconstruction batch",
            fix="lower the reconstruction lr or lambda_bn",
        )  # fmt: skip
        last_bn: list[torch.Tensor] = [torch.zeros((), device=self.device)]

        def loss(x: torch.Tensor, feats: torch.Tensor, bn: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            emb = F.normalize(feats, dim=1)  # (b, D)
            total = (1.0 - (emb * target).sum(1)).mean()
            if bn is not None:
                last_bn[0] = bn.loss()
                total = total + self.lambda_bn * last_bn[0]
            return total, {}

        x = engine.invert(loss, n=target.shape[0], batch_index=index, on_step=bar.update if bar is not None else None)
        with torch.no_grad():
            final = (F.normalize(self.model(x).float(), dim=1) * target).sum(1).mean()
        self.history.append({"cosine": float(final), "bn": float(last_bn[0].detach()), "images": target.shape[0],
                             "seconds": time.perf_counter() - t0})
        if bar is not None:
            bar.set_postfix_str(f"batch {index + 1}/{batches}, cos {float(final):.3f}")
        return x.detach().cpu().float()


def check_reconstructions(images: Any, n: int, *, where: str = "reconstructor") -> torch.Tensor:
    """Validate the output of a reconstructor: ``(n, 3, H, W)`` finite floats in [0, 1] (any size: each
    attacker resizes them to its input).

    Args:
        images: What the reconstructor returned.
        n: Number of embeddings it was given.
        where: Name used in the error message.

    Returns:
        The images as a float32 CPU tensor.

    Raises:
        PfdError: On a wrong type, shape or value range.
    """
    if not isinstance(images, torch.Tensor):
        raise PfdError(f"{where} returned a {type(images).__name__}; it must return a (n, 3, H, W) tensor in [0, 1]")
    x = images.detach().float().cpu()
    if x.ndim != 4 or x.shape[0] != n or x.shape[1] != 3:
        raise PfdError(f"{where} returned shape {tuple(x.shape)} for {n} embeddings; expected ({n}, 3, H, W)")
    if not torch.isfinite(x).all() or x.min() < -1e-6 or x.max() > 1 + 1e-6:
        raise PfdError(f"{where} returned values outside [0, 1] (or NaN); return RGB images scaled to [0, 1]")
    return x.clamp_(0.0, 1.0)
