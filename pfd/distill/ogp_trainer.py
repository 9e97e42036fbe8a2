"""OGP fine-tuning (eq. 1-5): the publisher's backbone, margin head and rotation, trained jointly.

:class:`OGPTrainer` is :class:`pfd.train.Trainer` with another step module: the data order,
warm-up + cosine schedule, SGD, gradient clipping, mixed precision, data-parallel training under
``accelerate launch`` and the resumable checkpoints are the shared ones; what changes is

* the head: ``2N`` classes (original identity ``y`` and rotated proxy identity ``y + N``, eq. 2),
  of the kind in :class:`~pfd.config.OGPConfig` (AdaFace by default, as in the paper);
* the loss: :class:`~pfd.distill.ogp.OGPStep`, i.e. eq. 5 ``L_cls + λ_rep L_rep + λ_iso L_iso``
  with ``M = exp(A − Aᵀ)`` computed once per step (eq. 1);
* the parameters: the skew-symmetric generator A of :class:`~pfd.distill.ogp.Rotation` is a
  parameter group of its own (its own learning rate, no weight decay, see
  :func:`~pfd.distill.ogp.ogp_param_groups`), stored in every checkpoint's ``extra``.

With ``rotate=False`` the same trainer fine-tunes the plain N-class margin model (``M = I``) that
the ``rta-only``, ``sre2l`` and ``raw`` methods distill from, so every method starts from the same
public checkpoint with the same schedule and data order.

The schedule is counted in steps with a floor (``OGPConfig.min_steps``): eq. 3's repulsion is
learnt per step, and a small private set gets few steps per epoch. After the schedule the rotating
trainer measures the share of private embeddings below eq. 3's margin (eval mode, every private
image, :meth:`OGPTrainer.below_margin_share`); below ``OGPConfig.target_below_margin`` it stretches
the schedule to twice its length and continues, up to ``OGPConfig.step_cap``. The stretched total is
stored in every checkpoint, so a killed extension resumes where it was.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pfd.config import OGPConfig, TrainConfig
from pfd.data.faceset import FaceSet
from pfd.distill.ogp import OGPStep, Rotation, ogp_param_groups
from pfd.train import MarginStep, Trainer
from pfd.embed import Embedder

__all__ = ["OGPTrainer", "ogp_train_config", "ogp_schedule_steps"]

log = logging.getLogger(__name__)


def ogp_schedule_steps(ogp: OGPConfig, *, steps_per_epoch: int) -> int:
    """Length of the OGP schedule in steps before any extension.

    ``max_steps`` when set; otherwise ``epochs × steps_per_epoch`` with the ``min_steps`` floor.

    Args:
        ogp: The OGP settings.
        steps_per_epoch: Global batches per epoch over the private set.
    """
    if ogp.max_steps:
        return int(ogp.max_steps)
    return max(int(ogp.epochs) * int(steps_per_epoch), int(ogp.min_steps))


def ogp_train_config(
    ogp: OGPConfig,
    *,
    init: str,
    out: str | Path,
    size: Any,
    mixed_precision: str = "auto",
    workers: int = 0,
) -> TrainConfig:
    """The :class:`~pfd.config.TrainConfig` that drives the shared training loop for OGP.

    The schedule is the paper's for the FR model: SGD with linear warm-up then cosine decay
    (Experiment Setting), from the public checkpoint ``init``.

    Args:
        ogp: The OGP stage settings.
        init: Public checkpoint to fine-tune from.
        out: Folder for OGP checkpoints, ``config.toml`` and ``metrics.jsonl``.
        size: Image size, ``S`` or ``[H, W]`` (must equal the checkpoint's).
        mixed_precision: ``auto``, ``no``, ``bf16`` or ``fp16``.
        workers: DataLoader worker processes.
    """
    return TrainConfig(
        data=[],
        size=size,
        head=ogp.head,
        scale=ogp.scale,
        margin=ogp.margin,
        init=str(init),
        epochs=ogp.epochs,
        max_steps=ogp.max_steps,
        batch_size=ogp.batch_size,
        lr=ogp.lr,
        momentum=ogp.momentum,
        weight_decay=ogp.weight_decay,
        warmup_epochs=ogp.warmup_epochs,
        schedule="cosine",
        grad_clip=ogp.grad_clip,
        mixed_precision=mixed_precision,
        checkpoint_every=ogp.checkpoint_every,
        out=str(out),
        seed=ogp.seed,
        workers=workers,
        min_images=1,
        flip=ogp.flip,
    )


class OGPTrainer(Trainer):
    """Fine-tunes the public backbone with OGP (or, ``rotate=False``, a plain N-class margin head).

    Args:
        ogp: OGP settings (head, margins, λs, schedule, rotation init).
        faces: The private set (labels ``0..N-1``).
        init: The public checkpoint.
        out: Folder for OGP checkpoints (``<out>/checkpoints/step_*.pt``).
        final_path: Where the adapted model (backbone + head) is written.
        size: Image size.
        rotate: ``True``: eq. 1-5 with a 2N-class head; ``False``: plain margin loss, N classes.
        mixed_precision: ``auto`` (bf16 on CUDA), ``no``, ``bf16``, ``fp16``.
        workers: DataLoader worker processes.
        record: Settings stored in every checkpoint's ``config`` (e.g. the resolved DistillConfig).
        accelerator: An ``accelerate.Accelerator`` (created when omitted).
        progress: Show a progress bar.

    Example:
        >>> t = OGPTrainer(cfg.ogp, faces=private, init="public.pt", out="state/ogp",
        ...                final_path="state/adapted.pt", size=112)
        >>> t.resume(); t.fit(); M = t.rotation_matrix()
    """

    desc = "OGP"

    def __init__(
        self,
        ogp: OGPConfig,
        *,
        faces: FaceSet,
        init: str | Path,
        out: str | Path,
        final_path: str | Path,
        size: Any,
        rotate: bool = True,
        mixed_precision: str = "auto",
        workers: int = 0,
        record: dict[str, Any] | None = None,
        accelerator: Any | None = None,
        progress: bool = True,
    ) -> None:
        self.ogp = ogp
        self.rotate = bool(rotate)
        self.record = record
        if not rotate:
            self.desc = "fine-tune"
        cfg = ogp_train_config(ogp, init=str(init), out=out, size=size, mixed_precision=mixed_precision, workers=workers)
        super().__init__(cfg, faces=faces, accelerator=accelerator, progress=progress, final_path=final_path)
        # The step floor applies to every method, so that rta-only & co. get OGP's schedule.
        self.total_steps = ogp_schedule_steps(ogp, steps_per_epoch=self.steps_per_epoch)
        self.warmup_steps = min(self.warmup_steps, max(0, self.total_steps - 1))
        self.schedule_steps = self.total_steps
        #: Share of private embeddings below eq. 3's margin after :meth:`fit` (None: not rotating).
        self.below_margin: float | None = None

    # -- what is trained ------------------------------------------------------------------
    def num_head_classes(self) -> int:
        n = self.faces.num_classes
        return 2 * n if self.rotate else n

    def build_step(self, backbone: nn.Module, dim: int) -> nn.Module:
        head = self.make_head(dim)
        if not self.rotate:
            return MarginStep(backbone, head, amp_dtype=self.amp_dtype)
        rotation = Rotation(dim, init_scale=self.ogp.init_scale, seed=self.ogp.seed)
        return OGPStep.from_config(
            backbone, head, rotation, self.ogp, num_identities=self.faces.num_classes, amp_dtype=self.amp_dtype
        )

    def param_groups(self, step: nn.Module) -> list[dict[str, Any]]:
        if not self.rotate:
            return super().param_groups(step)
        return ogp_param_groups(
            step.backbone,
            step.head,
            step.rotation,
            lr=self.ogp.lr,
            rotation_lr=self.ogp.rotation_lr,
            weight_decay=self.ogp.weight_decay,
        )

    def checkpoint_config(self) -> dict[str, Any]:
        return {**super().checkpoint_config(), **(self.record or {})}

    def extra_state(self) -> dict[str, Any] | None:
        if not self.rotate:
            return None
        return {
            "rotation": {k: v.detach().cpu() for k, v in self.unwrapped.rotation.state_dict().items()},
            "total_steps": int(self.total_steps),
        }

    def load_extra_state(self, extra: dict[str, Any] | None) -> None:
        if self.rotate and extra and "rotation" in extra:
            self.unwrapped.rotation.load_state_dict(extra["rotation"])
            # A checkpoint written during an extension carries the stretched schedule; a longer
            # schedule asked for on --resume wins.
            self.total_steps = max(self.total_steps, int(extra.get("total_steps", 0)))

    # -- the loop: schedule, then extend until eq. 3's margin is met -------------------------
    def fit(self) -> Path:
        """Train to the schedule; a rotating trainer then extends it until the margin target.

        Returns:
            The adapted model's path.
        """
        path = super().fit()
        if not self.rotate:
            return path
        target, cap = float(self.ogp.target_below_margin), int(self.ogp.step_cap)
        while True:
            self.below_margin = self.below_margin_share()
            if self.below_margin >= target or self.total_steps >= cap:
                break
            grown = min(cap, 2 * self.total_steps)
            log.info(
                "OGP: %.3f of the private embeddings below the repulsion margin after %d steps (target %.2f); "
                "continuing to %d steps", self.below_margin, self.step, target, grown,
            )  # fmt: skip
            self.total_steps = grown
            path = super().fit()
        if self.cfg.checkpoint_every:
            # A resumable checkpoint at the end: `--resume` with a longer schedule continues from here.
            self.save(self.checkpoint_dir / f"step_{self.step:08d}.pt", resumable=True)
        if self.below_margin < target:
            log.warning(
                "OGP: only %.3f of the private embeddings are below the repulsion margin %.2f after %d steps "
                "(target %.2f, step cap %d)", self.below_margin, self.ogp.rep_margin, self.step, target, cap,
            )  # fmt: skip
        return path

    @torch.no_grad()
    def below_margin_share(self) -> float:
        """Share of private images with ``|cos(M e, e)| < m`` (eq. 3's margin), eval mode.

        Every process computes it on the whole private set with the same weights, so all of them
        take the same decision without communicating.
        """
        E = Embedder(self.backbone, batch_size=256, device=self.acc.device)(self.faces)  # (n, D), normalised
        M = self.rotation_matrix()  # (D, D)
        cos = (E @ M.T * E).sum(1)  # (n,), cos(M e, e) row-wise (eq. 1)
        return float((cos.abs() < self.ogp.rep_margin).float().mean())

    # -- results --------------------------------------------------------------------------
    @torch.no_grad()
    def rotation_matrix(self) -> torch.Tensor:
        """``M`` ``(D, D)`` float32 on the CPU (the identity when ``rotate=False``)."""
        if not self.rotate:
            dim = int(self.head.weight.shape[1])
            return torch.eye(dim)
        return self.unwrapped.rotation().detach().float().cpu()

    def rotation_generator(self) -> torch.Tensor | None:
        """The unconstrained A ``(D, D)`` (only its strict lower triangle is used), or ``None``."""
        return self.unwrapped.rotation.generator.detach().float().cpu().clone() if self.rotate else None
