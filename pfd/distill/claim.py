"""Claiming a ``pfd distill`` run: the distillation's own checks, then the state dir's rules.

:func:`claim_run` is the one entry point (``Distillation`` calls it once). The state dir's rules
(separation, marker, modes, no clobbering, one writer) are :mod:`pfd.release.state_dir`'s; what
this module adds is what only a distillation knows:

* **The private set stays apart** (a separation rule of the state dir, applied there): neither the
  release nor the state dir lies inside the private identity folder, nor contains it.
* **The same run** (:func:`check_same_settings`): ``--resume`` continues only with the settings
  the state dir was made with (those in ``_FREE`` aside).
* Under ``accelerate launch`` only the main process (``RANK`` 0) takes the lock (:func:`is_main_rank`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable

from pfd.config import DistillConfig, config_to_dict, load_recipe
from pfd.errors import PfdError
from pfd.io import same_path
from pfd.release.state_dir import RunClaim, StateDir, claim_state_dir
from pfd.config.checks import same_model

__all__ = ["claim_run", "check_same_settings", "is_main_rank"]

#: Settings that may change between a run and its ``--resume`` without changing what is computed
#: (a state dir may be moved; the release may be written elsewhere). Bitwise equality with an
#: uninterrupted run also needs the same thread count.
_FREE = {"resume", "out", "state_dir", "workers", "threads", "embed_cache",
         # A longer OGP schedule continues the fine-tuning (and redoes what follows it); the
         # publication gate's override decides only whether the finished release is written.
         "ogp.epochs", "ogp.max_steps", "ogp.min_steps", "ogp.step_cap", "ogp.target_below_margin",
         "release.allow_linkable",
         # The gate's judge decides only whether the finished release is written (no loss sees it).
         "release.judge", "release.judge_seed"}



def is_main_rank() -> bool:
    """Whether this is the main process of a (possibly ``accelerate launch``-ed) run, before any
    accelerator exists: torchrun and accelerate set ``RANK`` for every process."""
    try:
        return int(os.environ.get("RANK", "0")) == 0
    except ValueError:
        return True



def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = list(v) if isinstance(v, tuple) else v
    return flat



#: Settings that name files: the same file under another spelling (absolute vs relative, ``~``,
#: a symbolic link) is the same setting.
_PATHS = {"public", "private", "pretrain.init"}



def _check_public_weights(state: StateDir, given: str) -> None:
    """On ``--resume`` the stored ``state/public_model.pt`` is what OGP started from and what the run
    keeps: a ``--public`` given now must hold those weights, wherever it lies (a moved or re-saved
    copy resumes; the same path overwritten with other weights is refused). Told apart by weights,
    not by path (issue 34: such a file was silently ignored)."""
    path = Path(given).expanduser()
    if path.is_file() and not same_model(path, state.public_model):
        raise PfdError(f"--public {given} holds other weights than the public model this run started from "
                       f"({state.public_model}); resume with that model, or distill anew into another --state-dir "
                       "and --out")


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
        and not (k in _PATHS and old.get(k) and new.get(k) and same_path(old[k], new[k]))
        # by weights against the stored model, below (without one, by path as above)
        and not (k == "public" and old.get(k) and new.get(k) and state.public_model.is_file()
                 and Path(str(new[k])).expanduser().is_file())
    ]
    if old.get("public") and new.get("public") and state.public_model.is_file():
        _check_public_weights(state, str(new["public"]))  # a missing file falls to the path comparison above
    if diff:
        more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
        raise PfdError(
            f"{state.config}: --resume with other settings than the run in this state dir ({'; '.join(diff[:3])}{more}); "
            "use the same settings or a new --state-dir"
        )



def claim_run(cfg: DistillConfig, *, main: bool | None = None, check_inputs: Callable[[], None] | None = None) -> RunClaim:
    """Claim the folders of a ``pfd distill`` run: the state dir's rules
    (:func:`~pfd.release.state_dir.claim_state_dir`), with a distillation's own checks before the lock:
    the release and the state dir apart from the private set, on ``--resume`` the same settings
    (:func:`check_same_settings`), then ``check_inputs()`` (what the run reads).

    Args:
        cfg: The resolved distill config (``out``, ``state_dir``, ``embed_cache``, ``resume``).
        main: Whether this process takes the lock (default: :func:`is_main_rank`).
        check_inputs: Called between the read-only checks and the lock.

    Returns:
        The claim; :meth:`RunClaim.begin` then writes the marker, :meth:`RunClaim.close` ends it.

    Raises:
        PfdError: The first check that fails, naming the folder or option and the fix.
    """
    state = StateDir.at(cfg.state_dir)
    # Neither folder inside the private identity folder, nor holding it: a release written among the
    # photos mixes the public artefact with what it must not reveal; one holding them publishes them.
    private = None if str(cfg.private).startswith("synthetic") else (Path(str(cfg.private)).expanduser(), str(cfg.private))
    return claim_state_dir(state, Path(cfg.out).expanduser(), resume=cfg.resume,
                           main=is_main_rank() if main is None else main,
                           embed_cache=Path(cfg.embed_cache).expanduser() if cfg.embed_cache else None,
                           private=private, check=functools.partial(_distillation_checks, cfg, state, check_inputs))


def _distillation_checks(cfg: DistillConfig, state: StateDir, check_inputs: Callable[[], None] | None) -> None:
    """A distillation's own checks, after the state dir's folder rules and before its lock: on
    ``--resume`` the same settings, then what the run reads."""
    if cfg.resume:
        check_same_settings(state, cfg)
    if check_inputs is not None:
        check_inputs()
