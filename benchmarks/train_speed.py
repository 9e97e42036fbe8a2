"""Training throughput of ``pfd train`` (:class:`pfd.train.Trainer`) against a bare loop.

Three ways to run the same optimiser steps on the same model, head and batches:

* **bare**: a plain PyTorch loop over images rendered beforehand (forward, margin-head
  cross-entropy, backward, gradient clipping, SGD step) — the lower bound of what any trainer costs;
* **pfd (in memory)**: the Trainer on the same pre-rendered images (:class:`TensorFaces`): adds the
  DataLoader over the seeded global batches, flip augmentation, accelerate, the LR schedule, the
  progress/metrics bookkeeping and the final checkpoint;
* **pfd (spec)**: the Trainer on the dataset spec itself, as ``pfd train --data SPEC`` runs it
  (for ``synthetic:...`` every image is rendered again each epoch, on the training process unless
  ``--workers`` > 0).

Prints images/s of each and the ratios to the bare loop (target for the in-memory Trainer: >= 0.9).
The best of ``--repeats`` alternating rounds is kept; on a shared machine treat the figures as
indicative.

Usage::

    python -m benchmarks.train_speed                                  # ir18/0.25, 48 px, 30 steps
    python -m benchmarks.train_speed --size 64 --steps 20 --workers 1
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F


from pfd.config import TrainConfig
from pfd.data.faceset import TensorFaces
from pfd.data.sources import open_faces
from pfd.nn.heads import create_head
from pfd.nn.backbones import create_backbone
from pfd.train import Trainer, global_batches

TARGET = 0.9


def bare_loop(cfg: TrainConfig, faces: TensorFaces) -> float:
    """Seconds for ``cfg.max_steps`` plain SGD steps over the Trainer's own batch order."""
    torch.manual_seed(cfg.seed)
    model = create_backbone(cfg.backbone, width=cfg.width, size=cfg.size, embedding_dim=cfg.embedding_dim)
    head = create_head(cfg.head, embedding_dim=cfg.embedding_dim, num_classes=faces.num_classes,
                       scale=cfg.scale, margin=cfg.margin)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    labels = torch.from_numpy(faces.labels)
    batches = global_batches(len(faces), batch_size=cfg.batch_size, seed=cfg.seed, epoch=0)
    model.train()
    head.train()
    t0 = time.perf_counter()
    for step in range(cfg.max_steps):
        idx = torch.from_numpy(batches[step % len(batches)])
        x, y = faces.images[idx], labels[idx]  # (B, 3, S, S), (B,)
        loss = F.cross_entropy(head(model(x), y), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
    return time.perf_counter() - t0


def trainer_run(cfg: TrainConfig, faces: object | None) -> float:
    """Seconds of :meth:`Trainer.fit` (data loading, steps, bookkeeping, final save)."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg.out = str(Path(tmp) / "run")
        trainer = Trainer(cfg, faces=faces, progress=False)
        t0 = time.perf_counter()
        trainer.fit()
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="synthetic:public")
    ap.add_argument("--backbone", default="ir18")
    ap.add_argument("--width", type=float, default=0.25)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers of the spec run")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (machine is shared)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    cfg = TrainConfig(data=[args.data], backbone=args.backbone, width=args.width, size=args.size,
                      embedding_dim=args.dim, batch_size=args.batch_size, max_steps=args.steps,
                      warmup_epochs=0.0, checkpoint_every=0, mixed_precision="no")
    spec_faces = open_faces(args.data, size=args.size, min_images=cfg.min_images)
    n = min(len(spec_faces), args.steps * args.batch_size)
    sub = spec_faces.subset(range(n))  # the images the steps need (one pass, no repeats)
    t0 = time.perf_counter()
    images = torch.stack([sub.load(i) for i in range(n)])  # (n, 3, S, S)
    render_s = time.perf_counter() - t0
    mem = TensorFaces(images, sub.labels)
    print(f"{args.backbone} width {args.width}, {args.size}px, D={args.dim}; batch {args.batch_size}, "
          f"{args.steps} steps; {torch.get_num_threads()} thread(s); data {args.data} "
          f"({n} images loaded in {render_s:.1f} s = {n / render_s:.0f} img/s)")

    bare_loop(cfg, mem)  # warm-up (allocator, oneDNN kernels)
    runs: dict[str, list[float]] = {"bare": [], "pfd (in memory)": [], "pfd (spec)": []}
    spec_cfg = TrainConfig(**{**cfg.__dict__, "workers": args.workers})
    for _ in range(args.repeats):  # alternate so that load changes hit every side alike
        runs["bare"].append(bare_loop(cfg, mem))
        runs["pfd (in memory)"].append(trainer_run(TrainConfig(**cfg.__dict__), mem))
        runs["pfd (spec)"].append(trainer_run(spec_cfg, None))
    imgs = args.steps * args.batch_size
    rates = {k: imgs / min(v) for k, v in runs.items()}
    for k, r in rates.items():
        note = "" if k == "bare" else f"   ratio to bare {r / rates['bare']:.3f}"
        print(f"{k:<17}: {r:8.1f} img/s (best {min(runs[k]):.2f} s){note}")
    ratio = rates["pfd (in memory)"] / rates["bare"]
    print(f"ratio pfd(in memory)/bare = {ratio:.3f}  (target >= {TARGET}: {'ok' if ratio >= TARGET else 'BELOW'})")
    return rates


if __name__ == "__main__":
    main()
