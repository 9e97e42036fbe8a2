"""RTA's batch files in the state dir: one per finished batch of proxies, what ``--resume`` skips.

``state/batches/batch_XXXXX.pt`` (:meth:`pfd.release.state_dir.StateDir.batch`) holds a batch's
prototype rows, its released pixels (uint8), their embeddings in the adapted model and the first
and last value of each loss. A file exists only once its batch is finished (atomic write).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.errors import PfdError
from pfd.io import atomic_torch_save
from pfd.release.state_dir import StateDir

__all__ = ["save_batch", "load_batch"]


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

