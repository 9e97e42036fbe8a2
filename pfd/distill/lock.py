"""One writer per state dir, and the marker that says a state dir is pfd's.

Two ``pfd distill`` runs on the same ``--state-dir`` would both pass the "empty folder" check and
then interleave their batches into one release. :class:`StateLock` takes an exclusive
``fcntl.flock`` on ``state/.pfd-lock`` for the whole run: the kernel drops it when the process
ends (kill -9 included), so a lock is never stale, and a second run is refused with the holder's
pid. Under ``accelerate launch`` only the main process (``RANK`` 0) takes it.

``state/pfd-state.json`` (:func:`write_marker`) is the first file a run writes into its state dir:
``{"format": "pfd-state", "format_version": 1, "run_id": <uuid hex>}``. ``--resume`` requires it
(and a release, if one exists, whose manifest names the same ``run_id``); a folder without it is
not pfd's and is never chmodded or written to.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from pfd.errors import PfdError
from pfd.io import atomic_write_json

__all__ = ["LOCK_NAME", "MARKER_NAME", "MARKER_FORMAT", "StateLock", "read_marker", "write_marker", "new_run_id", "is_main_rank"]

LOCK_NAME = ".pfd-lock"
MARKER_NAME = "pfd-state.json"
MARKER_FORMAT = "pfd-state"
MARKER_VERSION = 1

try:  # POSIX; on other systems runs are not locked (documented in docs/distill.md)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


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


def read_marker(state_root: str | os.PathLike) -> dict[str, Any] | None:
    """The marker of a pfd state dir, or ``None`` if it has none (or an unreadable one)."""
    p = Path(state_root) / MARKER_NAME
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != MARKER_FORMAT or not isinstance(doc.get("run_id"), str):
        return None
    return doc


def write_marker(state_root: str | os.PathLike, run_id: str) -> Path:
    """Write (atomically, 0600) the marker naming ``run_id``."""
    p = Path(state_root) / MARKER_NAME
    atomic_write_json(p, {"format": MARKER_FORMAT, "format_version": MARKER_VERSION, "run_id": str(run_id)})
    os.chmod(p, 0o600)
    return p


class StateLock:
    """An exclusive, non-blocking ``flock`` on ``<state>/.pfd-lock`` held until :meth:`release`.

    Args:
        state_root: The state dir (created with mode 0700 if missing).

    Raises:
        PfdError: If another process holds the lock; the message names its pid.
    """

    def __init__(self, state_root: str | os.PathLike) -> None:
        self.root = Path(state_root)
        self.path = self.root / LOCK_NAME
        self._fd: int | None = None
        fresh = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        if fresh:
            os.chmod(self.root, 0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _holder(fd)
                os.close(fd)
                raise PfdError(
                    f"{self.root}: another pfd distill (pid {holder}) is using this state dir; wait for it to finish "
                    "or choose another --state-dir"
                ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fchmod(fd, 0o600)
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (idempotent). The lock file stays; it is harmless without a holder."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __del__(self) -> None:  # an abandoned Distillation must not keep its state dir locked
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __enter__(self) -> "StateLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fd: int) -> str:
    """The pid written by the lock's holder (it writes right after locking: retry briefly)."""
    for _ in range(20):
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        if text.isdigit():
            return text
        time.sleep(0.05)
    return "unknown"
