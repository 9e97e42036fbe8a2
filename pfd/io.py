"""Atomic file output and content hashing.

Work that pfd writes (checkpoints, release images, finished RTA batches, reports) must never be
left half-written when a process is killed: every writer here writes to a temporary file in the
destination folder, flushes and fsyncs it, then renames it over the target (``os.replace`` is
atomic on POSIX and Windows).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from pfd.errors import PfdError

__all__ = [
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_torch_save",
    "sha256_file",
    "sha256_bytes",
    "jsonable",
]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[io.IOBase]:
    """Open a temporary file next to ``path``; on clean exit rename it onto ``path``.

    Args:
        path: Final destination. Its parent folder is created if missing.
        mode: ``"wb"`` or ``"w"``.

    Yields:
        The open temporary file. If the block raises, the temporary file is removed and
        ``path`` is left untouched.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise _disk_error(e, path) from None
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
            raise _disk_error(e, path) from None
        raise


#: errno values that mean "the disk (or the user's quota) is full".
_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _disk_error(e: OSError, path: Path) -> BaseException:
    """A full disk or an unwritable folder as pfd's one-line error; anything else as it was."""
    if e.errno in _FULL:
        return PfdError(f"{path}: no space left on the device ({os.strerror(e.errno)}); nothing half-written was kept: "
                        "free some space and run the command again (pfd distill continues with --resume)")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return PfdError(f"{path}: cannot write here ({os.strerror(e.errno)}); choose a writable folder")
    if e.errno == errno.ENAMETOOLONG:
        return PfdError(f"{path}: file name too long ({os.strerror(e.errno)}); choose a shorter path")
    return e


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, *, indent: int = 2) -> None:
    """Write ``obj`` as pretty JSON (sorted keys, trailing newline) atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=True, allow_nan=False) + "\n")


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` that never leaves a truncated file behind."""
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
