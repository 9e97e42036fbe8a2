"""The public starting model of a distillation: a given checkpoint, or a cached pretrained one.

When ``DistillConfig.public`` is empty (the demo), a public backbone is pretrained with
:func:`pfd.train.train` from the ``pretrain`` settings (a recipe's ``[train]`` table) and cached
under ``$PFD_CACHE_DIR/public/<hash>/model.pt`` (default ``~/.cache/pfd/public/<hash>/``), where
``<hash>`` is the sha256 of the resolved training settings and a fingerprint of the data. The model file is written atomically
and reused when present; an interrupted pretraining resumes from its checkpoints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any


from pfd.config import TrainConfig, config_to_dict
from pfd.data.faceset import FaceSet
from pfd.errors import PfdError
from pfd.data.faceset import to_memory
from pfd.train import Trainer, open_training_data

__all__ = ["public_cache_dir", "pretrain_key", "pretrained_public_model"]

#: Settings that do not change the trained weights.
# skip_bad: the images it skips change the data summary hashed below, not the model settings.
_NOT_HASHED = ("out", "workers", "checkpoint_every", "skip_bad")


def public_cache_dir() -> Path:
    """``$PFD_CACHE_DIR/public`` or ``~/.cache/pfd/public``."""
    root = os.environ.get("PFD_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "pfd"
    if base.exists() and not base.is_dir():
        raise PfdError(f"{base}: the pfd cache (PFD_CACHE_DIR) is a file, not a folder; point PFD_CACHE_DIR at a folder")
    return base / "public"


def pretrain_key(cfg: TrainConfig, faces: FaceSet | None = None) -> str:
    """First 16 hex digits of the sha256 of what determines the pretrained weights.

    The settings (all but output ones) and, when given, a fingerprint of the data: its size,
    identity count and the pixels of its first, middle and last image. The fingerprint catches a
    changed synthetic renderer or a replaced folder behind the same spec without reading the
    whole set; a subtler edit of the data needs the cache entry deleted by hand.

    Args:
        cfg: Pretraining settings.
        faces: The training data (opened from ``cfg.data``).
    """
    h = hashlib.sha256()
    h.update(json.dumps({k: v for k, v in config_to_dict(cfg).items() if k not in _NOT_HASHED}, sort_keys=True).encode())
    if faces is not None:
        n = len(faces)
        h.update(f"{n} {faces.num_classes} {faces.size}".encode())
        for i in sorted({0, n // 2, n - 1}) if n else []:
            h.update(faces.load(i).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def pretrained_public_model(cfg: TrainConfig, *, accelerator: Any | None = None, progress: bool = True,
                            desc: str = "pretrain public") -> Path:
    """The cached public model for ``cfg``, pretraining it first if needed.

    Args:
        cfg: Pretraining settings (``out`` is ignored: the cache folder is used).
        accelerator: Shared ``accelerate.Accelerator`` (multi-process runs pretrain data-parallel).
        progress: Show a progress bar.
        desc: The progress bar's (and log lines') label.

    Returns:
        Path of ``model.pt`` in the cache.
    """
    faces = open_training_data(cfg.data, size=cfg.size, min_images=cfg.min_images)
    out = public_cache_dir() / pretrain_key(cfg, faces)
    final = out / "model.pt"
    if final.is_file():
        return final
    trainer = Trainer(dataclasses.replace(cfg, out=str(out)), faces=to_memory(faces), accelerator=accelerator, progress=progress)
    trainer.desc = desc
    trainer.resume()
    return trainer.fit()
