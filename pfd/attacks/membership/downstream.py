"""Membership leakage of a release: train on it as a downstream user would, then audit that model.

A release is meant to be trained on together with public data. If training on the proxies makes
a model treat the *private* identities as its own (tighter clusters, §3 of the geometric
membership paper), the release leaks membership even when no proxy links to a person directly.
The test (DESIGN.md, "Attacks"):

1. train a downstream model on ``public data + release`` (:func:`pfd.train.train`, two data
   specs with disjoint labels; a tiny recipe by default, :data:`pfd.config.ATTACK_DOWNSTREAM_DEFAULTS`);
2. run the geometric MIA with the private identities as members and held-out identities *of the
   same domain* as non-members (cross-domain non-members inflate the AUC, §5.3).

The downstream model is written to ``<report>/downstream/model.pt`` and reused by a later run
with the same settings (its stored training config must match), so re-running a scorecard does
not retrain.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from pfd.config import ATTACK_DOWNSTREAM_DEFAULTS, TrainConfig, build_config, config_to_dict
from pfd.data.shape import plain_size
from pfd.errors import PfdError
from pfd.nn.checkpoints import load_checkpoint
from pfd.train import train

__all__ = ["downstream_config", "train_downstream"]


def downstream_config(
    overrides: Mapping[str, Any] | None, *, public: str, release: str | os.PathLike, image_size: Any, out: str | os.PathLike
) -> TrainConfig:
    """The resolved :class:`TrainConfig` of the downstream model.

    Args:
        overrides: ``[attack.downstream]`` settings laid over the tiny defaults.
        public: Public training data spec.
        release: The release folder (an identity folder).
        image_size: The release's image size, ``S`` or ``(H, W)`` (used when ``size`` is 0).
        out: Training output folder.

    Returns:
        The config, with ``data = [public, release]``.

    Raises:
        PfdError: For an unknown or ill-typed setting, or one of the fixed keys ``data``/``out``.
    """
    fixed = {"data", "out"} & set(overrides or {})
    if fixed:
        raise PfdError(f"attack.downstream: {sorted(fixed)[0]!r} is set by the scorecard (--public, --report); "
                       "remove it from [attack.downstream]")
    cfg = build_config(TrainConfig, ATTACK_DOWNSTREAM_DEFAULTS, overrides, where="attack.downstream")
    cfg.data = [str(public), str(release)]
    cfg.out = str(out)
    if cfg.size == 0:
        cfg.size = plain_size(image_size)
    return cfg


def train_downstream(cfg: TrainConfig, *, progress: bool = True) -> tuple[Path, bool]:
    """Train the downstream model, or reuse ``<out>/model.pt`` trained with the same config.

    Args:
        cfg: From :func:`downstream_config`.
        progress: Show a training progress bar.

    Returns:
        ``(model path, reused)``.

    Raises:
        PfdError: If ``<out>`` holds a model trained with other settings (remove it or choose
            another --report), or on bad training data.
    """
    out = Path(cfg.out)
    final = out / "model.pt"
    if final.is_file():
        stored = (load_checkpoint(final).get("config") or {}).get("train")
        if stored == config_to_dict(cfg):
            return final, True
        raise PfdError(f"{final}: a downstream model trained with other settings; remove {out} or choose "
                       "another --report folder")
    return train(cfg, progress=progress, resume=(out / "checkpoints").is_dir()), False
