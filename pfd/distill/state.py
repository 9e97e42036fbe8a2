"""The publisher's private state dir written by ``pfd distill``: its layout and batch files.

Layout (a contract: the attacks read it; the names are fixed)::

    state/                      mode 0700, never inside the release
      config.toml               the resolved DistillConfig ([distill] with nested tables; a recipe)
      public_model.pt           the public starting checkpoint (pfd format; the attacker's model)
      judge_model.pt            the gate's judge, a model no loss sees (release.judge; only with one)
      private_set.json          identities and per-image pixel digests of the private set (resume checks it)
      adapted.pt                adapted backbone + head (2N classes for pfd, N otherwise) + config
      rotation.pt               {"M": (D, D), "A": (D, D) | None}; the identity for non-pfd methods
      prototypes.pt             {"P": (NK, D), "proto_identity": (NK,), "identities": [...], ...}
      proxy_map.json            released file -> source identity (pfd.data.release.write_proxy_map)
      batches/batch_XXXXX.pt    finished RTA batches (resume skips them)
      ogp/                      fine-tuning checkpoints (resume), config.toml, metrics.jsonl
      summary.json              times per stage, final losses, counts, rates
      pfd-state.json            marker, written first: format, version, run id (pfd.distill.claim)
      .pfd-lock                 flock'ed by the run that owns the state dir (pid inside)

Every file is written atomically; a batch file exists only once its batch is finished, so after a
kill the state dir holds finished work only. :func:`pfd.distill.claim.claim_run` makes a run the
only writer (a lock) and refuses folders pfd did not make; ``--resume`` continues only the run
named by the marker, and only into a release whose manifest names the same run id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.data.release import PROXY_MAP, STATE_MARKER, clear_interrupted_release
from pfd.errors import PfdError
from pfd.io import atomic_torch_save

__all__ = ["StateDir", "LOCK_NAME", "MARKER_NAME", "clear_interrupted_release", "save_batch", "load_batch"]

#: The lock file, flock'ed by the run that owns the state dir (:class:`pfd.distill.claim.StateLock`).
LOCK_NAME = ".pfd-lock"
#: The marker that makes a folder a pfd state dir (:func:`pfd.distill.claim.write_marker`).
MARKER_NAME = STATE_MARKER


@dataclass(frozen=True)
class StateDir:
    """Paths inside a state dir (see the module docstring)."""

    root: Path

    @classmethod
    def at(cls, path: str | os.PathLike) -> "StateDir":
        return cls(Path(path).expanduser())

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def public_model(self) -> Path:
        return self.root / "public_model.pt"

    @property
    def judge_model(self) -> Path:
        return self.root / "judge_model.pt"

    @property
    def private_set(self) -> Path:
        return self.root / "private_set.json"

    @property
    def adapted(self) -> Path:
        return self.root / "adapted.pt"

    @property
    def rotation(self) -> Path:
        return self.root / "rotation.pt"

    @property
    def prototypes(self) -> Path:
        return self.root / "prototypes.pt"

    @property
    def proxy_map(self) -> Path:
        return self.root / PROXY_MAP

    @property
    def batches(self) -> Path:
        return self.root / "batches"

    @property
    def ogp(self) -> Path:
        return self.root / "ogp"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def marker(self) -> Path:
        return self.root / MARKER_NAME

    @property
    def lock(self) -> Path:
        return self.root / LOCK_NAME

    def batch(self, index: int) -> Path:
        """The file of RTA batch ``index``."""
        return self.batches / f"batch_{int(index):05d}.pt"

    def finished(self) -> set[int]:
        """Indices of the batches whose files exist."""
        if not self.batches.is_dir():
            return set()
        return {int(p.stem.split("_")[1]) for p in self.batches.glob("batch_*.pt") if p.stem.split("_")[1].isdigit()}

    def entries(self) -> set[str]:
        """Names in the state dir, the lock file aside (an empty set when it does not exist)."""
        if not self.root.is_dir():
            return set()
        return {p.name for p in self.root.iterdir()} - {LOCK_NAME}




def save_batch(state: StateDir, index: int, *, rows: np.ndarray, proxies: np.ndarray, embeddings: torch.Tensor,
               history: dict[str, float]) -> Path:
    """Write one finished batch atomically.

    Args:
        state: The state dir.
        index: Batch index.
        rows: Prototype rows of the proxies ``(B,)``.
        proxies: The released pixels, uint8 ``(B, 3, H, W)``.
        embeddings: Normalised embeddings of those pixels in the adapted model ``(B, D)``.
        history: First/last value of each loss (``rta_first``, ``rta_last``, ...).
    """
    path = state.batch(index)
    atomic_torch_save(
        {
            "index": int(index),
            "rows": torch.as_tensor(np.asarray(rows), dtype=torch.int64),
            "proxies": torch.as_tensor(np.ascontiguousarray(proxies), dtype=torch.uint8),
            "embeddings": embeddings.detach().float().cpu(),
            "history": {k: float(v) for k, v in history.items()},
        },
        path,
    )
    return path


def load_batch(state: StateDir, index: int) -> dict[str, Any]:
    """Read one batch file (``weights_only``).

    Raises:
        PfdError: If it is unreadable (delete it; ``--resume`` recomputes it).
    """
    path = state.batch(index)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any damage means: recompute this batch
        raise PfdError(f"{path}: unreadable batch file ({type(e).__name__}); delete it and rerun with --resume") from None
