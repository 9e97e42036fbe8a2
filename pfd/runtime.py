"""Where pfd computes: CPU threads and the accelerator, for every command (training, distillation, attacks).

Device-agnostic by design (DESIGN, *Conventions*): the same code runs on a CPU, one GPU or several
processes under ``accelerate launch``; :func:`make_accelerator` picks the precision and tells
accelerate when there is no CUDA, and :func:`set_threads` bounds the CPU threads by the cores.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

__all__ = ["set_threads", "make_accelerator", "stage_runtime"]

log = logging.getLogger(__name__)


def set_threads(threads: int) -> None:
    """``torch.set_num_threads`` for ``--threads`` (0: leave torch's setting), at most one per core.

    More intra-op threads than cores do not add speed, they make OpenMP threads wait on each other:
    ``--threads 1000`` on 2 cores ran a minute-long distillation for over five.
    """
    if threads <= 0:
        return
    cores = os.cpu_count() or threads
    if threads > cores:
        log.warning("--threads %d is more than the %d CPU cores here; using %d", threads, cores, cores)
    torch.set_num_threads(min(threads, cores))


def stage_runtime(threads: int, mixed_precision: str = "auto", accelerator: Any = None) -> Any:
    """What a training stage runs on: ``--threads`` (:func:`set_threads`) and its accelerator.

    Args:
        threads: Intra-op threads (0: leave torch's setting).
        mixed_precision: As :func:`make_accelerator`.
        accelerator: One the caller made (a test's, a shared one); otherwise a new one.

    Returns:
        The accelerator.
    """
    set_threads(threads)
    return accelerator if accelerator is not None else make_accelerator(mixed_precision)


def make_accelerator(mixed_precision: str = "auto") -> Any:
    """An ``accelerate.Accelerator``; ``"auto"`` is bf16 on CUDA and full precision elsewhere.

    Without CUDA the accelerator is told it runs on the CPU: that is what lets accelerate
    recognise a ``torchrun`` / ``accelerate launch --multi_gpu --num_processes N`` start on a
    CPU-only machine as data-parallel (gloo) instead of N independent single-process runs.
    """
    from accelerate import Accelerator

    cuda = torch.cuda.is_available()
    mp = mixed_precision
    if mp == "auto":
        mp = "bf16" if cuda else "no"
    return Accelerator(mixed_precision=mp, cpu=not cuda)
