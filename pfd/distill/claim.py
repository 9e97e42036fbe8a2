"""Claiming a ``pfd distill`` run: the folder checks, the resume checks, the marker and the lock.

:func:`claim_run` is the one entry point (``Distillation`` calls it once); what it makes sure of:

* **Separate folders.** The release and the private state dir never contain each other; an
  embedding cache (private state too) is never inside the release.
* **No clobbering, nothing foreign touched** (:func:`check_outputs`). Without ``--resume`` the
  state dir must be new, empty, or a pfd state dir whose run wrote nothing but its marker and
  config, and the release folder new or empty. With ``--resume`` the state dir must carry pfd's
  marker, and a release already there must name the same run id in its manifest.
* **The same run** (:func:`check_same_settings`): ``--resume`` continues only with the settings
  the state dir was made with (those in ``_FREE`` aside).
* **One writer** (:class:`StateLock`). Two runs on one ``--state-dir`` would both pass the "empty
  folder" check and interleave their batches into one release. The lock is an exclusive
  ``fcntl.flock`` on ``state/.pfd-lock`` for the whole run: the kernel drops it when the process
  ends (kill -9 included), so it is never stale, and a second run is refused with the holder's
  pid. Under ``accelerate launch`` only the main process (``RANK`` 0) takes it; the checks run
  again once it is held, so two runs started together cannot both find the folders empty.
* **The marker** (:func:`write_marker`): ``state/pfd-state.json`` is the first file a run writes
  into its state dir: ``{"format": "pfd-state", "format_version": 1, "run_id": <uuid hex>}``. A
  folder without it is not pfd's and is never chmodded or written to.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pfd.config import DistillConfig, config_to_dict, load_recipe
from pfd.data.release import (
    MANIFEST,
    MARKER_FORMAT,
    check_outside_release,
    check_separate,
    prepare_state_dir,
    read_manifest,
    read_marker,
    secure_state_dir,
)
from pfd.distill.state import LOCK_NAME, MARKER_NAME, StateDir
from pfd.errors import PfdError
from pfd.io import PidLock, atomic_write_json, check_writable, path_within, same_path

__all__ = [
    "MARKER_FORMAT",
    "claim_run",
    "check_outputs",
    "check_same_settings",
    "claim_state_dir",
    "RunClaim",
    "StateLock",
    "read_marker",
    "write_marker",
    "new_run_id",
    "is_main_rank",
]

MARKER_VERSION = 1

#: Settings that may change between a run and its ``--resume`` without changing what is computed
#: (a state dir may be moved; the release may be written elsewhere). Bitwise equality with an
#: uninterrupted run also needs the same thread count.
_FREE = {"resume", "out", "state_dir", "workers", "threads", "embed_cache",
         # A longer OGP schedule continues the fine-tuning (and redoes what follows it); the
         # publication gate's override decides only whether the finished release is written.
         "ogp.epochs", "ogp.max_steps", "ogp.min_steps", "ogp.step_cap", "ogp.target_below_margin",
         "release.allow_linkable", "release.rule_out",
         # The gate's level and judge decide only whether the finished release is written (no loss sees the judge).
         "release.alpha", "release.judge", "release.judge_seed"}



def is_main_rank() -> bool:
    """Whether this is the main process of a (possibly ``accelerate launch``-ed) run, before any
    accelerator exists: torchrun and accelerate set ``RANK`` for every process."""
    try:
        return int(os.environ.get("RANK", "0")) == 0
    except ValueError:
        return True


def new_run_id() -> str:
    """A random run id (names nothing: 128 random bits)."""
    return uuid.uuid4().hex


def write_marker(state_root: str | os.PathLike, run_id: str) -> Path:
    """Write (atomically, 0600) the marker naming ``run_id``."""
    p = Path(state_root) / MARKER_NAME
    atomic_write_json(p, {"format": MARKER_FORMAT, "format_version": MARKER_VERSION, "run_id": str(run_id)})
    os.chmod(p, 0o600)
    return p


class StateLock(PidLock):
    """The run's exclusive lock on ``<state>/.pfd-lock`` (:class:`pfd.io.PidLock`), held until :meth:`release`.

    Args:
        state_root: The state dir (created with mode 0700 if missing).

    Raises:
        PfdError: If another process holds the lock; the message names its pid.
    """

    def __init__(self, state_root: str | os.PathLike) -> None:
        self.root = Path(state_root)
        fresh = not self.root.exists()
        #: Whether this lock created the state dir (a failed first run then removes its stub).
        self.created = fresh
        self.root.mkdir(parents=True, exist_ok=True)
        if fresh:
            os.chmod(self.root, 0o700)
        super().__init__(self.root / LOCK_NAME, busy=self.busy_message(self.root))

    @staticmethod
    def busy_message(root: Path) -> str:
        """The refusal while another run holds ``root``'s lock (``{pid}`` to fill in)."""
        return f"{root}: another pfd distill (pid {{pid}}) is using this state dir; wait for it to finish or choose another --state-dir"


#: What a run writes before its first stage (a failed one leaves only these).
_STUB = (MARKER_NAME, "config.toml", "private_set.json")


def _holds_work(state: StateDir, marker: dict[str, Any] | None) -> bool:
    """Whether a stage of a pfd run finished in ``state`` (a fresh run would overwrite it).

    The marker, ``config.toml`` and the private-set record alone are what a run that failed
    before its first stage leaves: they do not count, so the corrected rerun needs no cleaning by hand.
    """
    if marker is None:
        return bool(state.entries())
    return bool(state.entries() - set(_STUB))


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
    marker = read_marker(state.root)  # read once: every decision below is on this marker
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
    if _holds_work(state, marker):
        raise PfdError(
            f"{state.root}: the state dir already holds a distillation run; pass --resume to continue it "
            "or choose another --state-dir"
        )
    if _release_holds_work(out):
        manifest = read_manifest(out) if out.is_dir() else None
        if manifest is None:  # --resume would refuse it too: do not suggest it
            raise PfdError(f"{out}: already exists and holds files that are not a pfd release; it is left untouched: "
                           "choose an empty or new --out")
        raise PfdError(f"{out}: already holds the release of another pfd run (not of {state.root}); to continue that "
                       "run pass its --state-dir with --resume, else choose another --out")


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

    def close(self, *, failed: bool = False) -> None:
        """Tighten every file and folder of the state dir (0600 / 0700), then drop the lock.

        Args:
            failed: The run stopped with an error. If it made the state dir and no stage finished
                (only the marker and ``config.toml`` are there), the stub is removed: a run that
                failed on its input leaves nothing behind to clean up by hand.
        """
        if self.lock is None:
            return
        stub = failed and getattr(self.lock, "created", False) and self.state.entries() <= set(_STUB)
        try:
            if read_marker(self.state.root) is not None and not stub:
                self.secure()
        finally:
            self.lock.release()
        if stub:
            for name in (*_STUB, LOCK_NAME):
                (self.state.root / name).unlink(missing_ok=True)
            try:
                self.state.root.rmdir()
            except OSError:  # something appeared meanwhile: keep it
                pass


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
    try:
        check_outputs(out, state, resume=resume)
    except PfdError:
        # A run holding the lock may be mid-write (its marker's temporary file, its first stage):
        # name that run, not "files pfd did not write".
        pid = StateLock.holder(state.root / LOCK_NAME)
        if pid is not None:
            raise PfdError(StateLock.busy_message(state.root).format(pid=pid)) from None
        raise
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


#: Settings that name files: the same file under another spelling (absolute vs relative, ``~``,
#: a symbolic link) is the same setting.
_PATHS = {"public", "private", "pretrain.init"}


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
    ]
    if diff:
        more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
        raise PfdError(
            f"{state.config}: --resume with other settings than the run in this state dir ({'; '.join(diff[:3])}{more}); "
            "use the same settings or a new --state-dir"
        )


def _check_apart_from_private(cfg: DistillConfig, out: Path, state_root: Path) -> None:
    """Neither the release nor the state dir may lie in the private identity folder, nor contain it.

    A release written into the private folder mixes the public artefact with the photos it must
    not reveal (and becomes an "identity" of the next run); a private folder inside the release
    would be published with it.
    """
    private = Path(str(cfg.private)).expanduser()
    if str(cfg.private).startswith("synthetic") or not private.is_dir():
        return
    for path, option, what in ((out, "--out", "the release"), (state_root, "--state-dir", "the state dir")):
        if path_within(path, private):
            raise PfdError(f"{path}: {what} would lie inside the private set {cfg.private} (its photos and the "
                           f"release must stay apart); choose an {option} outside it")
        if path_within(private, path):
            raise PfdError(f"{path}: {what} would contain the private set {cfg.private}; choose an {option} that "
                           "does not hold the private photos")


def claim_run(cfg: DistillConfig, *, main: bool | None = None, check_inputs: Callable[[], None] | None = None) -> RunClaim:
    """Claim the folders of a ``pfd distill`` run: every folder and resume check, then the lock.

    In order, each refusing before anything is written:

    1. the release and the state dir are separate (:func:`pfd.data.release.check_separate`), and
       an embedding cache (private state) lies outside the release;
    2. :func:`check_outputs`: no earlier work is clobbered and no foreign folder touched;
    3. on ``--resume``, :func:`check_same_settings`: the settings equal the state dir's run;
    4. ``check_inputs()``: the caller's checks of what it reads (the private set), which must
       also fail before anything is written;
    5. :func:`claim_state_dir`: the lock (main process), the checks of 2 again under it, the run id.

    Args:
        cfg: The resolved distill config (``out``, ``state_dir``, ``embed_cache``, ``resume``).
        main: Whether this process takes the lock (default: :func:`is_main_rank`).
        check_inputs: Called between the read-only checks and the lock.

    Returns:
        The claim; :meth:`RunClaim.begin` then writes the marker, :meth:`RunClaim.close` ends it.

    Raises:
        PfdError: The first check that fails, naming the folder or option and the fix.
    """
    out = Path(cfg.out).expanduser()
    state = StateDir.at(cfg.state_dir)
    check_separate(out, state.root)
    if cfg.embed_cache:  # cached private embeddings are private state: never inside the release
        check_outside_release(Path(cfg.embed_cache).expanduser(), out, what="the embedding cache", option="--embed-cache")
    _check_apart_from_private(cfg, out, state.root)
    for path, option in ((out, "--out"), (state.root, "--state-dir")):
        check_writable(path, option)
    check_outputs(out, state, resume=cfg.resume)
    if cfg.resume:
        check_same_settings(state, cfg)
    if check_inputs is not None:
        check_inputs()
    return claim_state_dir(state, out, resume=cfg.resume, main=is_main_rank() if main is None else main)
