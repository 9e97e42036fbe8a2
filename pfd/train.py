"""Margin-loss face-recognition training and fine-tuning with accelerate (``pfd train``).

One code path runs as a single CPU process, on one GPU, or data-parallel under
``accelerate launch -m pfd train ...``:

* SGD (momentum 0.9, weight decay 5e-4) over backbone and margin head, linear warm-up then
  cosine or polynomial decay, stepped per optimiser step;
* bf16 autocast on CUDA (``mixed_precision="auto"``), none on CPU; gradient-norm clipping;
* joint training on several sources with disjoint label spaces (:class:`~pfd.data.ConcatFaces`);
* deterministic data order: epoch ``e`` visits ``permutation(seed, e)`` in global batches that are
  sharded across processes, so a run resumed from step ``t`` sees exactly the batches an
  uninterrupted run would have seen;
* a resumable checkpoint every ``checkpoint_every`` steps (atomic), ``--resume`` continues from the
  newest one; the final model is ``<out>/model.pt`` with the config that built it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from pfd.config import TrainConfig, config_to_dict, save_config, validate_config
from pfd.data.faces import check_min_identities
from pfd.data.faceset import ConcatFaces, FaceSet
from pfd.data.shape import same_size, size_text
from pfd.errors import PfdError
from pfd.io import atomic_open, same_path
from pfd.runtime import stage_runtime
from pfd.data.sources import open_faces
from pfd.embed import Embedder, class_centers
from pfd.nn.backbones import create_backbone
from pfd.nn.checkpoints import load_checkpoint
from pfd.nn.checkpoints import save_checkpoint
from pfd.nn.heads import create_head
from pfd.progress import progress_bar
from pfd.release.disjoint import content_digest
from pfd.release.reader import check_complete_release, looks_like_release
from pfd.nn.checkpoints import load_backbone

__all__ = ["Trainer", "MarginStep", "StepOutput", "train", "lr_lambda", "open_training_data", "global_batches"]

log = logging.getLogger(__name__)


def lr_lambda(step: int, *, total: int, warmup: int, schedule: str = "cosine", power: float = 2.0) -> float:
    """Learning-rate multiplier at ``step``: linear warm-up, then cosine or polynomial decay to 0.

    Args:
        step: Optimiser steps taken so far (0-based).
        total: Total optimiser steps of the run.
        warmup: Warm-up steps (may be 0).
        schedule: ``"cosine"`` or ``"poly"``.
        power: Exponent of the polynomial decay.

    Returns:
        The factor applied to the peak learning rate.
    """
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    t = min(1.0, (step - warmup) / span)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * t))
    if schedule == "poly":
        return (1.0 - t) ** power
    raise PfdError(f"unknown schedule {schedule!r}; use 'cosine' or 'poly'")


def global_batches(n: int, *, batch_size: int, seed: int, epoch: int) -> np.ndarray:
    """The global batches of one epoch: a seeded permutation cut into full batches.

    Args:
        n: Dataset length.
        batch_size: Global batch size.
        seed: Run seed.
        epoch: Epoch number (part of the permutation seed).

    Returns:
        Index array of shape ``(n // batch_size, batch_size)`` (the incomplete last batch is
        dropped so every step sees the same batch size).
    """
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    nb = n // batch_size
    return perm[: nb * batch_size].reshape(nb, batch_size)


def open_training_data(specs: Sequence[str], *, size: Any, min_images: int, skip_bad: bool = False) -> FaceSet:
    """Open and join the training sources (disjoint label spaces).

    A folder that looks like a pfd release (:func:`~pfd.release.reader.looks_like_release`) is used
    only when its manifest is there and verifies: a release whose writer was killed would
    otherwise train on a fraction of its images without a word.

    One set given twice, however its path is spelt or wherever it was copied, is refused: its people
    would train under two contradictory labels. Sets are told apart by content
    (:func:`~pfd.release.disjoint.content_digest`); only sets of equal length are hashed, since sets of
    different lengths cannot hold the same images.

    Raises:
        PfdError: No data, an incomplete release, one set given twice, or a size mismatch.
    """
    if not specs:
        raise PfdError("no training data given; pass --data SPEC (e.g. --data synthetic:public)")
    for spec in specs:
        path = Path(spec).expanduser()
        if not str(spec).startswith("synthetic") and path.is_dir() and looks_like_release(path):
            check_complete_release(path)
    for i, spec in enumerate(specs):  # the same file needs no hashing: refused before anything is opened
        twin = next((s for s in specs[:i] if same_path(s, spec)), None)
        if twin is not None:
            raise PfdError(f"{spec}: given twice as training data (also as {twin}); its identities would get "
                           "two labels each: pass each dataset once")
    sources = [open_faces(s, size=size, min_images=min_images, skip_bad=skip_bad) for s in specs]
    for spec, src in zip(specs, sources):
        if not same_size(src.size, size):
            raise PfdError(f"{spec}: images are {size_text(src.size)} but the model expects {size_text(size)}; "
                           "set size consistently")
    for (i, a), (j, b) in itertools.combinations(enumerate(sources), 2):  # a copy, under another path
        if len(a) == len(b) and content_digest(a) == content_digest(b):
            raise PfdError(f"{specs[j]}: holds the same images as {specs[i]} (given twice as training data); its "
                           "identities would get two labels each: pass each dataset once")
    return sources[0] if len(sources) == 1 else ConcatFaces(sources)


@dataclass
class StepOutput:
    """One training step's loss.

    Attributes:
        loss: The differentiable scalar to minimise.
        components: Detached scalars to log (``cls``, and whatever else the step reports).
    """

    loss: torch.Tensor
    components: dict[str, torch.Tensor]


def _autocast(device: torch.device, dtype: torch.dtype | None) -> Any:
    """bf16/fp16 autocast on ``device`` when ``dtype`` is set, otherwise a no-op context."""
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


class MarginStep(nn.Module):
    """Margin-loss cross-entropy of one batch: ``L_CE(head(φ(x)), y)`` (+ the head's regulariser).

    Holds backbone and head as submodules, so one ``accelerator.prepare`` (DDP) synchronises
    both. The backbone runs under autocast when ``amp_dtype`` is set; the head's logits and the
    loss stay in fp32.

    Args:
        backbone: φ, ``(B, 3, H, W)`` in [0, 1] -> raw features ``(B, D)``.
        head: Margin head ``head(features, labels) -> logits (B, C)``.
        amp_dtype: Autocast dtype for the backbone (``None``: full precision).
    """

    def __init__(self, backbone: nn.Module, head: nn.Module, *, amp_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.amp_dtype = amp_dtype

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> StepOutput:
        with _autocast(images.device, self.amp_dtype):
            feats = self.backbone(images)
        feats = feats.float()  # (B, D)
        loss = F.cross_entropy(self.head(feats, labels), labels)
        comps = {"cls": loss.detach()}
        reg = getattr(self.head, "regularizer", None)
        if reg is not None:
            loss = loss + reg(feats)
        return StepOutput(loss, comps)


class Trainer:
    """Owns one training run: model, head, optimiser, schedule, data order and checkpoints.

    The loss of a batch comes from a *step module* (:meth:`build_step`; :class:`MarginStep` here)
    that holds every trained submodule and returns a :class:`StepOutput`. Subclasses change what
    is trained by overriding :meth:`num_head_classes`, :meth:`build_step`, :meth:`param_groups`
    and :meth:`extra_state` / :meth:`load_extra_state` (``pfd.distill.ogp_trainer.OGPTrainer``
    adds OGP's rotation this way); the data order, schedule, clipping, mixed precision,
    checkpoints and resume are shared.

    Args:
        cfg: The training configuration.
        faces: Training data; opened from ``cfg.data`` when omitted.
        accelerator: An ``accelerate.Accelerator``; created from ``cfg`` when omitted.
        progress: Show a tqdm progress bar on the main process.
        final_path: Where :meth:`fit` writes the final model (default ``<out>/model.pt``).
    """

    #: Progress-bar label.
    desc = "train"

    def __init__(
        self,
        cfg: TrainConfig,
        *,
        faces: FaceSet | None = None,
        accelerator: Any | None = None,
        progress: bool = True,
        final_path: str | Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.final_path = Path(final_path) if final_path is not None else self.out / "model.pt"
        self.acc = stage_runtime(cfg.threads, cfg.mixed_precision, accelerator)
        self.progress = progress
        self.faces = faces if faces is not None else open_training_data(
            cfg.data, size=cfg.size, min_images=cfg.min_images, skip_bad=cfg.skip_bad)
        check_min_identities(self.faces, 2, what="training", where=", ".join(cfg.data))
        if cfg.batch_size % self.acc.num_processes:
            raise PfdError(
                f"batch size {cfg.batch_size} is not divisible by {self.acc.num_processes} processes; "
                "choose a multiple of the process count"
            )
        if len(self.faces) < cfg.batch_size:
            raise PfdError(
                f"training data has {len(self.faces)} images, fewer than one batch of {cfg.batch_size}; lower --batch-size"
            )
        torch.manual_seed(cfg.seed)
        if cfg.init:

            backbone = load_backbone(cfg.init)
            arch = getattr(backbone, "arch", {})
            if not same_size(arch.get("size", cfg.size), cfg.size):
                raise PfdError(
                    f"{cfg.init}: model was built for {size_text(arch.get('size'))} but --size is {size_text(cfg.size)}; "
                    "use the same size (or leave --size out: it is taken from --init)"
                )
            # The architecture is the checkpoint's: record it, so config.toml says what was trained.
            actual = {k: arch[a] for k, a in (("backbone", "name"), ("width", "width"), ("embedding_dim", "embedding_dim"))
                      if a in arch}
            given = {k: getattr(cfg, k) for k in actual}
            if actual != given:
                # Warn only about settings someone chose (not left at their defaults, as OGP does).
                defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
                chosen = {k: v for k, v in given.items() if v != defaults[k] and v != actual[k]}
                (log.warning if chosen else log.info)(
                    "architecture from --init %s: %s%s", cfg.init, ", ".join(f"{k}={v}" for k, v in actual.items()),
                    f" (not {', '.join(f'{k}={v}' for k, v in chosen.items())})" if chosen else "")
                self.cfg = cfg = dataclasses.replace(cfg, **actual)
        else:
            backbone = create_backbone(cfg.backbone, width=cfg.width, size=cfg.size, embedding_dim=cfg.embedding_dim)
        dim = int(getattr(backbone, "arch", {}).get("embedding_dim", cfg.embedding_dim))
        step = self.build_step(backbone, dim)
        if cfg.head_init == "class_means":
            self.init_head_at_class_means(step, backbone)
        optimizer = torch.optim.SGD(
            self.param_groups(step), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )

        self.steps_per_epoch = len(self.faces) // cfg.batch_size
        self.total_steps = cfg.max_steps or cfg.epochs * self.steps_per_epoch
        warmup = int(round(cfg.warmup_epochs * self.steps_per_epoch))
        self.warmup_steps = min(warmup, max(0, self.total_steps - 1))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda s: lr_lambda(s, total=self.total_steps, warmup=self.warmup_steps, schedule=cfg.schedule),
        )
        # channels_last on CUDA (DESIGN: conventions): NHWC convolutions are the fast path for
        # tensor cores; on the CPU the default layout is kept.
        self.channels_last = self.acc.device.type == "cuda"
        if self.channels_last:
            step = step.to(memory_format=torch.channels_last)
        self.model, self.optimizer = self.acc.prepare(step, optimizer)
        self.scheduler = scheduler
        self.step = 0
        self.last: dict[str, float] = {}

    # -- what is trained (override in subclasses) -------------------------------------------
    @property
    def amp_dtype(self) -> torch.dtype | None:
        """The autocast dtype of the backbone forward (from the accelerator's mixed precision)."""
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(self.acc.mixed_precision))

    def num_head_classes(self) -> int:
        """Classes of the margin head (the training set's identities)."""
        return self.faces.num_classes

    def make_head(self, dim: int) -> nn.Module:
        """The margin head: ``cfg.head`` with ``cfg.scale`` / ``cfg.margin``, :meth:`num_head_classes` rows."""
        cfg = self.cfg
        return create_head(cfg.head, embedding_dim=dim, num_classes=self.num_head_classes(), scale=cfg.scale, margin=cfg.margin)

    def init_head_at_class_means(self, step: nn.Module, backbone: nn.Module) -> None:
        """``head_init = class_means``: every head row at the normalised mean embedding of its class."""
        head = getattr(step, "head", None)
        weight = getattr(head, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.shape[0] != self.faces.num_classes:
            raise PfdError(f"head_init = class_means needs a head with one row per identity ({self.faces.num_classes}); "
                           "use head_init = random for this trainer")
        was_training = backbone.training
        emb = Embedder(backbone.eval(), batch_size=self.cfg.batch_size, progress=self.progress)(self.faces)  # (n, D)
        backbone.train(was_training)
        with torch.no_grad():
            weight.copy_(class_centers(emb, self.faces.labels, self.faces.num_classes).to(weight))

    def build_step(self, backbone: nn.Module, dim: int) -> nn.Module:
        """The module whose ``forward(images, labels)`` returns a :class:`StepOutput`."""
        return MarginStep(backbone, self.make_head(dim), amp_dtype=self.amp_dtype)

    def param_groups(self, step: nn.Module) -> list[dict[str, Any]]:
        """SGD parameter groups (default: everything, with ``cfg.weight_decay``)."""
        return [{"params": [p for p in step.parameters() if p.requires_grad]}]

    def checkpoint_config(self) -> dict[str, Any]:
        """The settings recorded in every checkpoint (``config``)."""
        return {"train": config_to_dict(self.cfg)}

    def extra_state(self) -> dict[str, Any] | None:
        """Further state stored in every checkpoint (``extra``)."""
        return None

    def load_extra_state(self, extra: dict[str, Any] | None) -> None:
        """Restore :meth:`extra_state` on resume."""

    @property
    def unwrapped(self) -> nn.Module:
        """The step module without DDP wrappers."""
        return self.acc.unwrap_model(self.model)

    @property
    def backbone(self) -> nn.Module:
        return self.unwrapped.backbone

    @property
    def head(self) -> nn.Module:
        return self.unwrapped.head

    # -- checkpoints ----------------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> Path:
        return self.out / "checkpoints"

    def _latest_checkpoint(self) -> Path | None:
        found = sorted(self.checkpoint_dir.glob("step_*.pt"))
        return found[-1] if found else None

    def save(self, path: Path, *, resumable: bool) -> None:
        """Write a checkpoint (main process only); resumable ones carry optimiser state."""
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            save_checkpoint(
                path,
                backbone=self.backbone,
                head=self.head,
                config=self.checkpoint_config(),
                step=self.step,
                optimizer=self.optimizer.state_dict() if resumable else None,
                scheduler=self.scheduler.state_dict() if resumable else None,
                extra=self.extra_state(),
            )
        self.acc.wait_for_everyone()

    def resume(self) -> bool:
        """Load the newest resumable checkpoint; return whether one was found."""
        path = self._latest_checkpoint()
        if path is None:
            return False
        ck = load_checkpoint(path)
        self.backbone.load_state_dict(ck["backbone"])
        self.head.load_state_dict(ck["head"]["state_dict"])
        self.load_extra_state(ck.get("extra"))
        if ck.get("optimizer"):
            self.optimizer.load_state_dict(ck["optimizer"])
        if ck.get("scheduler"):
            self.scheduler.load_state_dict(ck["scheduler"])
        self.step = int(ck["step"])
        log.info("resumed from %s at step %d", path, self.step)
        return True

    # -- loop -----------------------------------------------------------------------------
    def _loader(self, epoch: int, skip: int) -> DataLoader:
        """This process's shard of the epoch's global batches, from batch ``skip`` on."""
        cfg = self.cfg
        batches = global_batches(len(self.faces), batch_size=cfg.batch_size, seed=cfg.seed, epoch=epoch)
        per = cfg.batch_size // self.acc.num_processes
        r = self.acc.process_index
        shard = [b[r * per : (r + 1) * per].tolist() for b in batches[skip:]]
        return DataLoader(
            self.faces,
            batch_sampler=shard,
            num_workers=cfg.workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=False,
        )

    def _augment(self, x: torch.Tensor) -> torch.Tensor:
        if not self.cfg.flip:
            return x
        # One mask per global batch, seeded by (seed, step), cut into the same shards as the
        # batch: a resumed run, and a run on any number of processes, flips the same images.
        seed = np.random.SeedSequence([self.cfg.seed, self.step, 0]).generate_state(1)[0]
        g = torch.Generator().manual_seed(int(seed))
        per, r = x.shape[0], self.acc.process_index
        flip = (torch.rand(per * self.acc.num_processes, generator=g) < 0.5)[r * per : (r + 1) * per]
        return torch.where(flip.view(-1, 1, 1, 1).to(x.device), x.flip(-1), x)

    def fit(self) -> Path:
        """Run (or continue) training to ``total_steps``; return the final model path."""
        cfg = self.cfg
        if self.acc.is_main_process:
            self.out.mkdir(parents=True, exist_ok=True)
            save_config(cfg, self.out / "config.toml", section="train")
        self.model.train()
        bar = progress_bar(
            total=self.total_steps,
            initial=self.step,
            desc=self.desc,
            enabled=self.progress and self.acc.is_local_main_process,
            dynamic_ncols=True,
        )
        metrics_path = self.out / "metrics.jsonl"
        if self.acc.is_main_process:
            _drop_metrics_after(metrics_path, self.step)
        t0 = time.perf_counter()
        while self.step < self.total_steps:
            epoch, skip = divmod(self.step, self.steps_per_epoch)
            for x, y in self._loader(epoch, skip):
                x = self._augment(x.to(self.acc.device, non_blocking=True))
                if self.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                y = y.to(self.acc.device, non_blocking=True)
                out = self.model(x, y)
                loss = out.loss
                if not torch.isfinite(loss):
                    raise PfdError(
                        f"{self.desc} loss became {loss.item()} at step {self.step}; lower --lr or check the data "
                        f"(checkpoints so far are kept in {self.checkpoint_dir})"
                    )
                self.optimizer.zero_grad(set_to_none=True)
                self.acc.backward(loss)
                if cfg.grad_clip > 0:
                    self.acc.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                self.optimizer.step()
                self.scheduler.step()
                self.step += 1
                self.last = {"loss": float(loss.detach()), **{k: float(v) for k, v in out.components.items()}}
                bar.update(1)
                bar.set_postfix(loss=f"{self.last['loss']:.3f}", lr=f"{self.scheduler.get_last_lr()[0]:.4f}")
                if self.acc.is_main_process and (self.step % 10 == 0 or self.step == self.total_steps):
                    with open(metrics_path, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"step": self.step, **self.last, "lr": self.scheduler.get_last_lr()[0]}) + "\n")
                if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.step < self.total_steps:
                    self.save(self.checkpoint_dir / f"step_{self.step:08d}.pt", resumable=True)
                if self.step >= self.total_steps:
                    break
        bar.close()
        self.save(self.final_path, resumable=False)
        self.elapsed = time.perf_counter() - t0
        self.final_loss = self.last.get("loss", float("nan"))
        return self.final_path


def _drop_metrics_after(path: Path, step: int) -> None:
    """Keep only the ``metrics.jsonl`` records up to ``step`` (a resumed run recomputes the rest,
    and would otherwise log those steps twice); a line cut short by a kill is dropped too."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if int(json.loads(line)["step"]) <= step:
                kept.append(line)
        except (ValueError, KeyError, TypeError):
            continue
    with atomic_open(path, "w") as f:
        f.write("".join(f"{line}\n" for line in kept))


#: Settings that may differ when a run is resumed: they do not change what is computed.
_RESUME_MAY_CHANGE = frozenset({"out", "workers", "threads", "checkpoint_every"})


def _check_resume(cfg: TrainConfig, path: str | Path) -> None:
    """Refuse to continue the run saved in ``path`` with settings that would make another run.

    Data, model, head, batch size, seed and schedule must all be those the checkpoint was made
    with (resuming with other data used to fail deep in ``load_state_dict``, and with another
    batch size or schedule it silently trained a mixture of two runs); only
    ``_RESUME_MAY_CHANGE`` may differ. Checkpoints without a ``[train]`` config pass.

    Raises:
        PfdError: Naming the checkpoint and up to five differing settings (saved -> now).
    """
    saved = (load_checkpoint(path).get("config") or {}).get("train")
    if not isinstance(saved, dict):
        return
    now = config_to_dict(cfg)
    # With --init the architecture is the checkpoint's (recorded in place of the flags by Trainer);
    # the init path itself is compared.
    free = _RESUME_MAY_CHANGE | ({"backbone", "width", "embedding_dim"} if cfg.init else set())
    diff = sorted(k for k in saved.keys() & now.keys() if k not in free and saved[k] != now[k])
    if diff:
        shown = ", ".join(f"{k} {saved[k]!r} -> {now[k]!r}" for k in diff[:5])
        raise PfdError(
            f"{path}: the run was made with other settings ({shown}); resume with the settings of "
            f"{Path(cfg.out) / 'config.toml'} or choose another --out"
        )


def train(cfg: TrainConfig, *, faces: FaceSet | None = None, progress: bool = True, resume: bool = False) -> Path:
    """Train (or fine-tune) a face-recognition model.

    Args:
        cfg: Training configuration (``cfg.out`` receives checkpoints, ``model.pt`` and
            ``config.toml``).
        faces: Training data; opened from ``cfg.data`` when omitted.
        progress: Show progress bars.
        resume: Continue from the newest checkpoint in ``<out>/checkpoints`` (a finished run,
            one with ``model.pt``, is returned as it is).

    Returns:
        Path of the final model checkpoint.

    Raises:
        PfdError: If ``cfg.out`` already holds a run and ``resume`` is false, if ``resume`` meets
            a run made with other settings (:func:`_check_resume`), or on bad data or a
            non-finite loss.
    """
    validate_config(cfg)
    out = Path(cfg.out)
    final = out / "model.pt"
    found = sorted((out / "checkpoints").glob("step_*.pt"))
    if not resume and (final.exists() or found):
        raise PfdError(f"{out} already holds a training run; pass --resume to continue it or choose another --out")
    if resume and (final.exists() or found):
        _check_resume(cfg, final if final.exists() else found[-1])
        if final.exists():
            log.info("%s: the run had finished; nothing to resume", final)
            return final
    trainer = Trainer(cfg, faces=faces, progress=progress)
    if resume:
        trainer.resume()
    return trainer.fit()
