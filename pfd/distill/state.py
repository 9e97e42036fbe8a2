"""The publisher's private state dir written by ``pfd distill``: file names, checks, batch files.

Layout (a contract: the attacks read it; the names are fixed)::

    state/                      mode 0700, never inside the release
      config.toml               the resolved DistillConfig ([distill] with nested tables; a recipe)
      public_model.pt           the public starting checkpoint (pfd format; the attacker's model)
      adapted.pt                adapted backbone + head (2N classes for pfd, N otherwise) + config
      rotation.pt               {"M": (D, D), "A": (D, D) | None}; the identity for non-pfd methods
      prototypes.pt             {"P": (NK, D), "proto_identity": (NK,), "identities": [...], ...}
      proxy_map.json            released file -> source identity (pfd.data.release.write_proxy_map)
      batches/batch_XXXXX.pt    finished RTA batches (resume skips them)
      ogp/                      fine-tuning checkpoints (resume), config.toml, metrics.jsonl
      summary.json              times per stage, final losses, counts, rates

Every file is written atomically; a batch file exists only once its batch is finished, so after a
kill the state dir holds finished work only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.config import DistillConfig, config_to_dict, load_recipe
from pfd.data.release import PROXY_MAP, read_manifest
from pfd.errors import PfdError
from pfd.io import atomic_torch_save

__all__ = ["StateDir", "check_outputs", "check_same_settings", "clear_interrupted_release", "save_batch", "load_batch"]

#: Settings that may change between a run and its ``--resume`` without changing what is computed
#: (a state dir may be moved; the release may be written elsewhere). Bitwise equality with an
#: uninterrupted run also needs the same thread count.
_FREE = {"resume", "out", "state_dir", "workers", "threads",
         # A longer OGP schedule continues the fine-tuning (and redoes what follows it); the
         # publication gate's override decides only whether the finished release is written.
         "ogp.epochs", "ogp.max_steps", "ogp.min_steps", "ogp.step_cap", "ogp.target_below_margin",
         "release.allow_linkable"}


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

    def batch(self, index: int) -> Path:
        """The file of RTA batch ``index``."""
        return self.batches / f"batch_{int(index):05d}.pt"

    def finished(self) -> set[int]:
        """Indices of the batches whose files exist."""
        if not self.batches.is_dir():
            return set()
        return {int(p.stem.split("_")[1]) for p in self.batches.glob("batch_*.pt") if p.stem.split("_")[1].isdigit()}

    def holds_work(self) -> bool:
        """Whether anything a run wrote is here (a fresh run would overwrite it)."""
        return self.root.is_dir() and any(self.root.iterdir())


def _release_holds_work(out: Path) -> bool:
    return out.exists() and (not out.is_dir() or any(out.iterdir()))


def check_outputs(out: Path, state: StateDir, *, resume: bool) -> None:
    """Refuse to clobber earlier work: without ``resume`` both folders must be new or empty.

    Raises:
        PfdError: Naming the folder and the ``--resume`` flag.
    """
    if resume:
        return
    if state.holds_work():
        raise PfdError(
            f"{state.root}: the state dir already holds a distillation run; pass --resume to continue it "
            "or choose another --state-dir"
        )
    if _release_holds_work(out):
        raise PfdError(f"{out}: already exists and is not empty; pass --resume to continue that run or choose another --out")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = list(v) if isinstance(v, tuple) else v
    return flat


def check_same_settings(state: StateDir, cfg: DistillConfig) -> None:
    """On ``--resume``: the settings must equal those the state dir was made with.

    A finished batch is only valid for the model, prototypes and seeds that made it, so a
    changed setting (other than ``out``, ``state_dir``, ``workers``, ``threads``) is refused
    rather than mixed in.

    Raises:
        PfdError: Listing up to three differing settings.
    """
    if not state.config.is_file():
        return
    old = _flatten(load_recipe(state.config).get("distill", {}))
    new = _flatten(config_to_dict(cfg))
    diff = [
        f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
        for k in sorted(set(old) | set(new))
        if k.split(".")[-1] not in _FREE and k not in _FREE and old.get(k) != new.get(k)
    ]
    if diff:
        more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
        raise PfdError(
            f"{state.config}: --resume with other settings than the run in this state dir ({'; '.join(diff[:3])}{more}); "
            "use the same settings or a new --state-dir"
        )


def clear_interrupted_release(out: Path) -> None:
    """Remove a release that a killed run left half-written (no manifest yet), before rewriting it.

    Only files in the release layout (``<digits>/<digits>.png`` and atomic-write leftovers) are
    removed; anything else makes the folder foreign and is left for the release writer to refuse.
    """
    if not out.is_dir() or read_manifest(out) is not None or (out / "manifest.json").exists():
        return
    files = [p for p in out.rglob("*") if p.is_file()]
    ours = all(
        (p.parent.parent == out and p.parent.name.isdigit() and (p.name.endswith(".tmp") or p.stem.isdigit() and p.suffix == ".png"))
        for p in files
    )
    if not files or not ours:
        return
    for p in files:
        p.unlink()
    for d in sorted((p for p in out.iterdir() if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()


def save_batch(state: StateDir, index: int, *, rows: np.ndarray, proxies: np.ndarray, embeddings: torch.Tensor,
               history: dict[str, float]) -> Path:
    """Write one finished batch atomically.

    Args:
        state: The state dir.
        index: Batch index.
        rows: Prototype rows of the proxies ``(B,)``.
        proxies: The released pixels, uint8 ``(B, 3, S, S)``.
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
