"""Atomic file output and content hashing.

Work that pfd writes (checkpoints, release images, finished RTA batches, reports) must never be
left half-written when a process is killed: every writer here writes to a temporary file in the
destination folder, flushes and fsyncs it, then renames it over the target (``os.replace`` is
atomic on POSIX and Windows).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from pfd.errors import PfdError, os_error

try:  # POSIX; on other systems nothing is locked (documented in docs/distill.md)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "atomic_open",
    "check_writable",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_torch_save",
    "sha256_file",
    "sha256_bytes",
    "jsonable",
    "PidLock",
    "path_within",
    "same_path",
]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", *, shared: bool = False) -> Iterator[io.IOBase]:
    """Open a temporary file next to ``path``; on clean exit rename it onto ``path``.

    Args:
        path: Final destination. Its parent folder is created if missing.
        mode: ``"wb"`` or ``"w"``.
        shared: Give the file the mode a plain ``open`` would (``0666 & ~umask``, or an existing
            file's own), for what is meant to be read by others (benchmark results). Otherwise it
            keeps ``mkstemp``'s 0600: pfd writes private state (embeddings, checkpoints, maps) by default.

    Yields:
        The open temporary file. If the block raises, the temporary file is removed and
        ``path`` is left untouched.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        if shared:
            try:
                mode_bits = stat.S_IMODE(os.stat(path).st_mode)
            except OSError:
                mode_bits = 0o666 & ~_umask()
            os.fchmod(fd, mode_bits)
    except OSError as e:
        raise (os_error(e, path) or e) from None
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise (os_error(e, path) or e) from None
        raise


def _umask() -> int:
    """The process umask: from /proc on Linux, else by setting it and back (there is no getter)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, shared: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (``shared``: see :func:`atomic_open`)."""
    with atomic_open(path, "wb", shared=shared) as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str, *, shared: bool = False) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"), shared=shared)


def atomic_write_json(path: str | os.PathLike, obj: Any, *, indent: int = 2, shared: bool = False) -> None:
    """Write ``obj`` as pretty JSON (sorted keys, trailing newline) atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=True, allow_nan=False) + "\n", shared=shared)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` that never leaves a truncated file behind."""
    import torch  # here: pfd.io is read by the configs, which the CLI loads before it needs torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, *, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def jsonable(obj: Any) -> Any:
    """Plain JSON values: numpy scalars/arrays to Python, NaN/inf (e.g. ROC thresholds) to None."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


class PidLock:
    """An exclusive, non-blocking ``flock`` on a file that holds the holder's pid, until :meth:`release`.

    The kernel drops the lock when the process ends (kill -9 included), so it is never stale. A
    second holder is refused at once with ``busy`` formatted with the first one's pid. The lock
    file stays after :meth:`release`; it is harmless without a holder.

    Args:
        path: The lock file (created 0600 if missing; its folder must exist).
        busy: The refusal, e.g. ``"{path}: another pfd attack (pid {pid}) is writing here"``.

    Raises:
        PfdError: ``busy`` when another process holds the lock.
    """

    def __init__(self, path: str | os.PathLike, *, busy: str) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _lock_holder(fd)
                os.close(fd)
                raise PfdError(busy.format(pid=holder)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fchmod(fd, 0o600)
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    @staticmethod
    def holder(path: str | os.PathLike) -> str | None:
        """The pid of a live process holding the lock at ``path``, else ``None`` (read-only peek).

        Args:
            path: The lock file; a missing one has no holder.
        """
        if fcntl is None:
            return None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return _lock_holder(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __del__(self) -> None:  # an abandoned holder must not keep the lock
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __enter__(self) -> "PidLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock_holder(fd: int) -> str:
    """The pid written by the lock's holder (it writes right after locking: retry briefly)."""
    for _ in range(20):
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        if text.isdigit():
            return text
        time.sleep(0.05)
    return "unknown"


def path_within(child: str | os.PathLike, parent: str | os.PathLike) -> bool:
    """Whether ``child`` is ``parent`` or lies below it (``~`` expanded, symbolic links resolved)."""
    c, p = Path(child).expanduser().resolve(), Path(parent).expanduser().resolve()
    return c == p or p in c.parents


def same_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two settings name the same existing file or folder under any spelling (absolute or
    relative, ``~``, a trailing slash, a symbolic link), or are the same string."""
    if os.fspath(a) == os.fspath(b):
        return True
    try:
        return os.path.samefile(os.path.expanduser(a), os.path.expanduser(b))
    except (OSError, ValueError):
        return False


def check_writable(path: Path, option: str) -> None:
    """Refuse an output folder this process cannot write (itself, or the nearest folder that exists
    above it) before any work: a read-only ``--out`` used to fail only after the whole pipeline ran.

    Raises:
        PfdError: Naming the folder and the option.
    """
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return
        probe = probe.parent
    if probe.is_dir() and not os.access(probe, os.W_OK | os.X_OK):
        where = "is" if probe == path else f"would be made in {probe}, which is"
        raise PfdError(f"{path}: {where} not writable by this user; choose an {option} you can write to")
