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
      pfd-state.json            marker, written first: format, version, run id (pfd.distill.lock)
      .pfd-lock                 flock'ed by the run that owns the state dir (pid inside)

Every file is written atomically; a batch file exists only once its batch is finished, so after a
kill the state dir holds finished work only. :func:`claim_state_dir` makes a run the only writer
(a lock) and refuses folders pfd did not make; ``--resume`` continues only the run named by the
marker, and only into a release whose manifest names the same run id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.config import DistillConfig, config_to_dict, load_recipe
from pfd.data.release import MANIFEST, PROXY_MAP, prepare_state_dir, read_manifest, secure_state_dir
from pfd.distill.lock import LOCK_NAME, MARKER_NAME, StateLock, new_run_id, read_marker, write_marker
from pfd.errors import PfdError
from pfd.io import atomic_torch_save

__all__ = [
    "StateDir",
    "RunClaim",
    "claim_state_dir",
    "check_outputs",
    "check_same_settings",
    "clear_interrupted_release",
    "save_batch",
    "load_batch",
]

#: Settings that may change between a run and its ``--resume`` without changing what is computed
#: (a state dir may be moved; the release may be written elsewhere). Bitwise equality with an
#: uninterrupted run also needs the same thread count.
_FREE = {"resume", "out", "state_dir", "workers", "threads", "embed_cache",
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

    def is_foreign(self) -> bool:
        """Whether the folder holds something but no pfd marker: pfd must not touch it."""
        return bool(self.entries()) and read_marker(self.root) is None

    def holds_work(self) -> bool:
        """Whether a stage of a pfd run finished here (a fresh run would overwrite it).

        The marker and ``config.toml`` alone are what a run that failed before its first stage
        leaves: they do not count, so the corrected rerun needs no cleaning by hand.
        """
        if read_marker(self.root) is None:
            return bool(self.entries())
        return bool(self.entries() - {MARKER_NAME, "config.toml"})


def _release_holds_work(out: Path) -> bool:
    return out.exists() and (not out.is_dir() or any(out.iterdir()))


def check_outputs(out: Path, state: StateDir, *, resume: bool) -> None:
    """Refuse to clobber earlier work or to touch folders pfd did not make (read-only).

    Without ``resume`` the state dir must be new, empty or a pfd state dir whose run wrote
    nothing but its marker and config, and the release folder new or empty. With ``resume`` the
    state dir must carry pfd's marker, and a release already in ``out`` must name the same run id
    in its manifest (a half-written release without a manifest is finished by the run).

    Raises:
        PfdError: Naming the folder and what to do.
    """
    if state.root.exists() and not state.root.is_dir():
        raise PfdError(f"{state.root}: exists and is not a folder; choose another --state-dir")
    marker = read_marker(state.root)
    if resume:
        if marker is None:
            if state.entries():
                raise PfdError(
                    f"{state.root}: not a pfd state dir (no {MARKER_NAME}); --resume continues only a run that pfd distill "
                    "started there, and this folder is left untouched; check --state-dir"
                )
            raise PfdError(f"{state.root}: no pfd run to resume (no {MARKER_NAME}); run without --resume to start one")
        if (out / MANIFEST).exists() or (out / MANIFEST).is_symlink():
            manifest = read_manifest(out)
            if manifest is None or manifest.get("run_id") != marker["run_id"]:
                raise PfdError(
                    f"{out}: holds a release written by another run than the one in {state.root}; --resume leaves it "
                    "untouched: pass this run's --out or a new folder"
                )
        return
    if marker is None and state.entries():
        raise PfdError(
            f"{state.root}: holds files that pfd distill did not write (no {MARKER_NAME}); choose an empty or new --state-dir"
        )
    if state.holds_work():
        raise PfdError(
            f"{state.root}: the state dir already holds a distillation run; pass --resume to continue it "
            "or choose another --state-dir"
        )
    if _release_holds_work(out):
        raise PfdError(f"{out}: already exists and is not empty; pass --resume to continue that run or choose another --out")


@dataclass
class RunClaim:
    """A run's hold on its state dir: the lock (main process only) and the run id.

    Attributes:
        state: The state dir.
        out: The release folder.
        run_id: The run id written to the marker and to the release manifest (``None`` on
            processes other than the main one).
        lock: The held lock (``None`` on other processes).
    """

    state: StateDir
    out: Path
    run_id: str | None
    lock: StateLock | None

    def begin(self) -> None:
        """Main process: make the state dir private (0700) and write the marker first."""
        if self.lock is None or self.run_id is None:
            return
        prepare_state_dir(self.state.root, release=self.out)
        old = read_marker(self.state.root)
        if old is None or old["run_id"] != self.run_id:
            write_marker(self.state.root, self.run_id)
        self.secure()  # a resumed run also tightens what a killed one left

    def secure(self) -> None:
        """Main process: every folder of the state dir 0700, every file 0600 (after each stage)."""
        if self.lock is not None and self.state.root.is_dir():
            secure_state_dir(self.state.root)

    def close(self) -> None:
        """Tighten every file and folder of the state dir (0600 / 0700), then drop the lock."""
        if self.lock is None:
            return
        try:
            if read_marker(self.state.root) is not None:
                self.secure()
        finally:
            self.lock.release()


def claim_state_dir(state: StateDir, out: Path, *, resume: bool, main: bool = True) -> RunClaim:
    """Lock the state dir for this run and check it again under the lock.

    The checks of :func:`check_outputs` run before the lock (so that a foreign folder is never
    touched, not even by a lock file) and again once it is held (so that two runs started
    together cannot both find the folders empty).

    Args:
        state: The state dir.
        out: The release folder.
        resume: ``--resume``: keep the marker's run id.
        main: Whether this process takes the lock (the main process of an accelerate run).

    Raises:
        PfdError: Another run holds the lock (its pid is named), or a check fails.
    """
    check_outputs(out, state, resume=resume)
    if not main:
        return RunClaim(state, out, None, None)
    lock = StateLock(state.root)
    try:
        check_outputs(out, state, resume=resume)
        marker = read_marker(state.root)
        run_id = marker["run_id"] if resume and marker is not None else new_run_id()
    except BaseException:
        lock.release()
        raise
    return RunClaim(state, out, run_id, lock)


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
