"""RTA's batch files in the state dir: one per finished batch of proxies, what ``--resume`` skips.

``state/batches/batch_XXXXX.pt`` (:meth:`pfd.release.state_dir.StateDir.batch`) holds a batch's
prototype rows, its released pixels (uint8), their embeddings in the adapted model and the first
and last value of each loss. A file exists only once its batch is finished (atomic write).
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import numpy as np
import torch

from pfd.errors import PfdError
from pfd.io import atomic_torch_save
from pfd.release.state_dir import StateDir

__all__ = ["save_batch", "load_batch", "gather_batches", "BatchFile"]


class BatchFile(TypedDict):
    """One batch file (a plain dict in ``batch_XXXXX.pt``).

    Attributes:
        index: The batch's index.
        rows: ``(B,)`` prototype rows of its proxies.
        proxies: ``(B, 3, H, W)`` uint8 released pixels.
        embeddings: ``(B, D)`` their normalised embeddings in the adapted model.
        history: First/last value of each loss.
    """

    index: int
    rows: torch.Tensor
    proxies: torch.Tensor
    embeddings: torch.Tensor
    history: dict[str, float]


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
        BatchFile(index=int(index), rows=torch.as_tensor(np.asarray(rows), dtype=torch.int64),
                  proxies=torch.as_tensor(np.ascontiguousarray(proxies), dtype=torch.uint8),
                  embeddings=embeddings.detach().float().cpu(), history={k: float(v) for k, v in history.items()}),
        path,
    )
    return path



def load_batch(state: StateDir, index: int) -> BatchFile:
    """Read one batch file (``weights_only``).

    Raises:
        PfdError: If it is unreadable (delete it; ``--resume`` recomputes it).
    """
    path = state.batch(index)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any damage means: recompute this batch
        raise PfdError(f"{path}: unreadable batch file ({type(e).__name__}); delete it and rerun with --resume") from None


def gather_batches(state: StateDir, n_batches: int, n_proxies: int) -> tuple[list[BatchFile], torch.Tensor]:
    """Every batch file of a finished RTA stage, checked to cover each proxy exactly once.

    Returns:
        ``(batch documents in order, prototype rows (NK,) in that order)``.

    Raises:
        PfdError: A batch is missing (``--resume`` finishes it) or the files do not cover the proxies.
    """
    missing = [b for b in range(n_batches) if not state.batch(b).is_file()]
    if missing:
        raise PfdError(f"{state.batches}: batches {missing[:5]} are missing; rerun with --resume to finish them")
    docs = [load_batch(state, b) for b in range(n_batches)]
    rows = torch.cat([d["rows"] for d in docs])
    if not torch.equal(rows.sort().values, torch.arange(n_proxies)):
        raise PfdError(f"{state.batches}: batch files do not cover every proxy exactly once; delete the folder and rerun")
    return docs, rows
