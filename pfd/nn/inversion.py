"""The image-inversion engine: images optimised through a frozen network, the loop RTA and the reconstruction attack share.

RTA (:mod:`pfd.distill.rta`, eq. 6-10) distills proxies against the adapted model; the
reconstruction attack (:mod:`pfd.attacks.linkability.reconstruction`) turns embeddings back into
images through the attacker's model. Both run the same seeded loop, SRe2L's "recover" step:

1. start: the caller's images (public faces) or Gaussian noise around mid-grey,
   ``clamp(0.5 + init_std · z, 0, 1)``, ``z`` drawn from :func:`batch_generator` ``(seed, batch)``;
2. per iteration: the learning rate of :func:`cosine_lr`; a fresh per-image augmentation
   (:func:`pfd.nn.augment.augment_proxies`, from the same generator); the frozen model in eval
   mode (bf16 autocast on CUDA when asked) with its BatchNorm statistics read in the same pass
   (:class:`pfd.nn.bn_hooks.BNStatistics`, eq. 6) and its PReLU slopes frozen
   (:class:`pfd.nn.frozen_prelu.FrozenPReLU`); the caller's loss; Adam; pixels clamped to [0, 1].

With ``downsample`` = f > 1 the optimised tensor is the images at ``H/f × W/f``, and what the model
sees (and what is returned) is that tensor upsampled bilinearly to ``H × W``: the low-resolution
parameterisation of IDC (Kim et al., ICML 2022, "Dataset Condensation via Efficient
Synthetic-Data Parameterization"). Nothing the optimiser can write then lies above the low
resolution's Nyquist frequency: a class cannot be encoded in a pixel-scale pattern that only the
inverted model reads, which is what a private set photographed at low resolution never holds.

The caller owns the loss (its terms and the order they are summed in, which the pixels depend
on bit for bit); the engine owns everything else, so a batch is a pure function of ``(seed,
batch)``, the model and the loss: resumable and shardable, bit for bit on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn

from pfd.data.shape import ImageSize, canonical_size, image_hw
from pfd.errors import PfdError
from pfd.nn.augment import augment_proxies
from pfd.nn.bn_hooks import BNStatistics
from pfd.nn.frozen_prelu import FrozenPReLU

__all__ = ["cosine_lr", "batch_generator", "noise_images", "InversionLoss", "ImageInversion"]


def cosine_lr(base_lr: float, iteration: int, iterations: int) -> float:
    """SRe2L's schedule without warm-up: ``0.5 (1 + cos(π t / T)) · lr``."""
    return 0.5 * (1.0 + math.cos(math.pi * iteration / max(iterations, 1))) * base_lr


def batch_generator(seed: int, batch_index: int) -> torch.Generator:
    """A CPU generator seeded from ``(seed, batch_index)`` only (independent across batches)."""
    state = np.random.SeedSequence([int(seed), int(batch_index)]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def noise_images(n: int, size: ImageSize, init_std: float, generator: torch.Generator) -> torch.Tensor:
    """Gaussian noise around mid-grey, clamped to [0, 1]: ``(n, 3, H, W)`` on the CPU."""
    z = torch.randn(n, 3, *image_hw(size), generator=generator)
    return (0.5 + float(init_std) * z).clamp_(0.0, 1.0)


#: ``loss(augmented images (B, 3, H, W), features (B, D) float32, BN statistics or None) -> (total, parts)``.
InversionLoss = Callable[[torch.Tensor, torch.Tensor, BNStatistics | None], tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclass
class ImageInversion:
    """The loop of one batch of images optimised through a frozen ``model`` (module docstring).

    Attributes:
        model: φ, ``(B, 3, H, W)`` in [0, 1] -> ``(B, D)`` features; frozen in eval mode by the caller.
        size: Image size ``S`` or ``(H, W)``.
        iterations: Adam steps.
        lr: Peak learning rate (cosine decay, no warm-up).
        betas: Adam betas.
        crop_scale, flip, shift: The per-iteration augmentation (:func:`~pfd.nn.augment.augment_proxies`).
        lambda_bn: Whether the BatchNorm statistics are read (``> 0``; the caller weighs them).
        first_bn_multiplier: Weight of the first BN layer in ``L_bn`` (SRe2L: 10).
        include_bn1d: Also read BatchNorm1d statistics.
        init_std: Spread of the noise start.
        downsample: Optimise the images at ``H/f × W/f`` and upsample them bilinearly (module
            docstring; 1: the pixels themselves).
        seed: Seed of the noise and augmentation draws (with the batch index).
        device: Where to optimise.
        amp: bf16 autocast for the forward pass on CUDA.
        fast_prelu: Frozen PReLU slopes skip their unused gradient (bit-identical; ``False``: aten's).
        frozen: Other frozen models the loss runs through (their PReLU layers too).
        check_every: Check the loss for NaN/inf every this many iterations (and at the last).
        record: Record every part of the loss at every iteration (the history).
        what: Names the batch in an error (``"RTA batch"``).
        fix: What to do about a non-finite loss.
    """

    model: nn.Module
    size: ImageSize
    iterations: int
    lr: float
    betas: tuple[float, float] = (0.5, 0.9)
    crop_scale: tuple[float, float] = (1.0, 1.0)
    flip: bool = False
    shift: int = 0
    lambda_bn: float = 0.0
    first_bn_multiplier: float = 10.0
    include_bn1d: bool = False
    init_std: float = 0.2
    downsample: int = 1
    seed: int = 0
    device: torch.device | str = "cpu"
    amp: bool = False
    fast_prelu: bool = True
    frozen: Iterable[nn.Module] = ()
    check_every: int = 1
    record: bool = True
    what: str = "batch"
    fix: str = "lower the learning rate"
    history: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.size = canonical_size(self.size)
        self.device = torch.device(self.device)
        self.frozen = tuple(self.frozen)
        h, w = image_hw(self.size)
        f = int(self.downsample)
        if f < 1 or h % f or w % f:
            raise PfdError(f"downsample {self.downsample} must be a whole number >= 1 that divides the image size "
                           f"{h}x{w}; pick a divisor of both sides")
        self.low_hw = (h // f, w // f)

    def render(self, s: torch.Tensor) -> torch.Tensor:
        """The images ``(n, 3, H, W)`` of the optimised tensor ``s``: ``s`` itself, or ``s`` upsampled
        bilinearly from ``H/f × W/f`` (in [0, 1] when ``s`` is: each pixel is a convex combination)."""
        if self.downsample == 1:
            return s
        return torch.nn.functional.interpolate(s, size=image_hw(self.size), mode="bilinear", align_corners=False)

    def invert(self, loss: InversionLoss, *, n: int, batch_index: int,
               start: torch.Tensor | Callable[[torch.Generator], torch.Tensor] | None = None,
               on_step: Callable[[], Any] | None = None,
               first: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """Optimise one batch.

        Args:
            loss: The caller's loss (:data:`InversionLoss`).
            n: Images in the batch.
            batch_index: Seeds the noise and augmentation with :attr:`seed`.
            start: ``(n, 3, H, W)`` images to start from, or a function of the batch's generator that
                draws them (before any augmentation draw); ``None``: :func:`noise_images`.
            on_step: Called after every Adam step (a progress bar's ``update``).
            first: A weighted term of the loss that reaches the images only through *another* model
                (one of :attr:`frozen`): ``first(x)`` of the augmented batch, a scalar. It is
                differentiated with respect to ``x`` before :attr:`model`'s forward pass, so its
                model's activations are freed first and the step holds one network's activations,
                not two (MobileFaceNet at 112 × 96, batch 96: ~3 GB each); its value and its exact
                gradient join ``loss``'s total (the sum rule: the same step as one backward pass
                through both, up to float summation order).

        Returns:
            The images ``(n, 3, H, W)`` (a tensor on :attr:`device` with grad; detach it; with
            :attr:`downsample` > 1, :meth:`render` of the optimised low-resolution tensor); the
            loss parts per iteration are in :attr:`history` (``total`` included) when :attr:`record`.

        Raises:
            PfdError: If the loss becomes NaN or infinite (names the batch and iteration).
        """
        gen = batch_generator(self.seed, batch_index)
        if start is None:
            s = noise_images(n, self.low_hw, self.init_std, gen)  # (n, 3, H/f, W/f)
        else:  # the caller's images are never changed in place
            s = start(gen) if callable(start) else start.detach().clone()
            if self.downsample > 1:  # a photo start, averaged down to the parameterisation's grid
                s = torch.nn.functional.adaptive_avg_pool2d(s, self.low_hw)
        s = s.to(self.device).requires_grad_(True)
        opt = torch.optim.Adam([s], lr=self.lr, betas=tuple(self.betas), eps=1e-8)
        bn = (BNStatistics(self.model, first_multiplier=self.first_bn_multiplier, include_bn1d=self.include_bn1d)
              if self.lambda_bn != 0 else None)
        prelus = [FrozenPReLU(m) for m in (self.model, *self.frozen)] if self.fast_prelu else []
        self.history = {}
        try:
            for it in range(self.iterations):
                for g in opt.param_groups:
                    g["lr"] = cosine_lr(self.lr, it, self.iterations)
                x = augment_proxies(self.render(s), generator=gen, crop_scale=tuple(self.crop_scale), flip=self.flip,
                                    shift=self.shift)  # (n, 3, H, W)
                early = None
                if first is not None:
                    term = first(x)
                    (g,) = torch.autograd.grad(term, x)  # (B, 3, H, W); frees the other model's graph
                    # value term, gradient g through x: d/ds (x · g) = g · dx/ds, exactly term's own
                    early = term.detach() + (x * g).sum() - (x.detach() * g).sum()
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
                    feats = self.model(x)
                total, parts = loss(x, feats.float(), bn)  # (B, D) features in float32
                if early is not None:
                    total = total + early
                if self.record or it % self.check_every == 0 or it == self.iterations - 1:
                    value = float(total.detach())
                    if not math.isfinite(value):
                        shown = ", ".join(f"L_{k}={float(v):.4g}" for k, v in parts.items())
                        raise PfdError(f"{self.what} {batch_index}: loss became {value} at iteration {it}"
                                       + (f" ({shown})" if shown else "") + f"; {self.fix}")
                    if self.record:
                        for k, v in parts.items():
                            self.history.setdefault(k, []).append(float(v))
                        self.history.setdefault("total", []).append(value)
                opt.zero_grad(set_to_none=True)
                total.backward()
                opt.step()
                with torch.no_grad():
                    s.clamp_(0.0, 1.0)
                if on_step is not None:
                    on_step()
        finally:
            if bn is not None:
                bn.remove()
            for p in prelus:
                p.remove()
        return self.render(s)
