"""A tiny pretrained public model and tiny distillation settings, shared by the pipeline tests.

Pretraining once per test module (a module-scoped fixture calls :func:`tiny_public`) keeps every
distillation test to a few seconds: ir18 at width 0.125, 32 px, D = 32, ~100 SGD steps on a
small slice of ``synthetic:public``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pfd.config import DistillConfig, TrainConfig, build_config

#: Private set of the tests: 6 people x 8 images at 32 px.
PRIVATE = "synthetic:private,ids=6,imgs=8,size=32"


def tiny_train_config(out: str | Path, **kw: Any) -> TrainConfig:
    """Settings of the tiny public model (also used to test the pretraining cache)."""
    base: dict[str, Any] = dict(
        data=["synthetic:public,ids=40,imgs=8,size=32"], size=32, backbone="ir18", width=0.125, embedding_dim=32,
        head="arcface", scale=16.0, margin=0.3, epochs=10, batch_size=32, lr=0.1, warmup_epochs=1.0,
        checkpoint_every=0, out=str(out), seed=0,
    )  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


def tiny_public(out: Path) -> Path:
    """Pretrain the tiny public model into ``out`` (once) and return its checkpoint.

    Several processes may ask for the same ``out`` at once (pytest-xdist workers sharing
    :func:`shared_root`): the first trains under an exclusive lock, the others wait and read its
    checkpoint, so the suite pretrains it once instead of once per test module (~7 s each).
    """
    import fcntl

    from pfd.train import train

    out.mkdir(parents=True, exist_ok=True)
    final = out / "model.pt"
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if final.is_file():
            return final
        return train(tiny_train_config(out), progress=False)


def shared_root(tmp_path_factory: Any) -> Path:
    """A folder shared by every pytest-xdist worker of this session (the workers' common basetemp parent)."""
    import os

    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def tiny_distill_config(public: Path, root: Path, **kw: Any) -> DistillConfig:
    """Tiny distillation settings writing ``root/release`` and ``root/state``.

    As the demo recipe (rep margin 0.1, λ_rep 5, no augmentation), with λ_RTA scaled so that the
    per-proxy weight λ_RTA · B / NK stays near the demo's (100 · 2 / 12 ≈ 17). Measured with
    these settings: own-prototype 0.75 (pfd) and 1.00 (rta-only), source nearest 0.00 / 1.00.

    OGP has no step floor here (8 epochs are 24 steps): the trainer's own extension (doubling the
    schedule until 95 % of the private embeddings are below the margin) is what gets the rotation
    there, so every pipeline test exercises it. The methods other than ``pfd`` link by design
    (they are the ablation rows), so they publish with ``allow_linkable``.

    Nested tables (``ogp``, ``rta``, ``release``) in ``kw`` merge key by key.
    """
    base: dict[str, Any] = {
        "private": PRIVATE, "public": str(public), "out": str(root / "release"), "state_dir": str(root / "state"),
        "size": 32,
        "ogp": {"head": "adaface", "scale": 16.0, "margin": 0.3, "rep_margin": 0.1, "lambda_rep": 5.0, "epochs": 8, "batch_size": 16,
                "lr": 0.05, "warmup_epochs": 1.0, "checkpoint_every": 10, "seed": 0, "min_steps": 0},
        "rta": {"ipc": 2, "iterations": 40, "batch_size": 2, "lr": 0.05, "lambda_rta": 100.0, "lambda_bn": 0.01,
                "crop_scale": [1.0, 1.0], "shift": 0, "flip": False, "kmeans_n_init": 2, "seed": 0},
        "release": {"allow_linkable": kw.get("method", "pfd") != "pfd"},
    }  # fmt: skip
    return build_config(DistillConfig, base, kw)
