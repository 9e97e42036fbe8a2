"""The one exception type pfd raises for bad input.

Every problem a user can fix (a corrupt image, a missing path, a checkpoint of another
architecture, a NaN loss) is raised as :class:`PfdError` with a single line that names the
file or identity and says what to do. The CLI turns it into ``Error: <message>`` and the
error's :attr:`PfdError.exit_code` (2: bad input or usage; 3: the publication gate refused the
release, :class:`pfd.distill.gate.PublicationRefused`), without a traceback. ``pfd attack`` and
``pfd card`` exit with the same :data:`REFUSED` when the audit's verdict is "not publishable" (their
reports are written first), so that ``pfd attack ... && upload`` never uploads what pfd refuses.
"""

from __future__ import annotations

import errno
import os

__all__ = ["PfdError", "OS_FIXES", "os_error", "REFUSED"]

#: The exit status of every command whose audit refused the release: ``pfd distill`` (nothing
#: published), ``pfd attack`` and ``pfd card`` (report written, verdict "not publishable").
REFUSED = 3


class PfdError(Exception):
    """A user-facing error: one line naming the culprit and the fix.

    Args:
        message: The one-line explanation, e.g.
            ``"data/alice/3.jpg: cannot decode image (truncated?); delete or re-export it, or pass --skip-bad"``.
    """

    #: Exit status of the CLI for this error (scripts tell a refused release from a usage error).
    exit_code: int = 2

    def __init__(self, message: str) -> None:
        # Keep it to one line: multi-line messages get lost in logs and CI output.
        super().__init__(" ".join(str(message).split("\n")))


#: OS errors that are the user's to fix (a full disk, a path too long, ...): what happened and the fix.
_FULL = ("no space left on the device; nothing half-written was kept: free some space and run the command "
         "again (with --resume, pfd distill and pfd card continue from what is finished)")
OS_FIXES = {
    errno.ENOSPC: _FULL,
    getattr(errno, "EDQUOT", errno.ENOSPC): _FULL,
    # ``ulimit -f`` (Python ignores SIGXFSZ, so the write fails with EFBIG instead of killing the process).
    errno.EFBIG: ("file too large for this process's file-size limit (ulimit -f) or the file system; nothing "
                  "half-written was kept: raise the limit or choose another folder, and run the command again "
                  "(with --resume, pfd distill and pfd card continue from what is finished)"),
    errno.ENAMETOOLONG: "file name too long; choose a shorter path (names of at most 255 bytes, paths under 4096)",
    errno.ELOOP: "the path runs through a loop of symbolic links; fix the links or pass another path",
    errno.EROFS: "the file system is read-only; choose a writable folder",
    errno.EACCES: "permission denied; make it writable or choose a writable folder",
    errno.EPERM: "operation not permitted; make it writable or choose a writable folder",
    errno.ENOTDIR: "a part of that path is a file, not a folder; fix the path",
}


def os_error(e: OSError, path: str | os.PathLike | None = None) -> "PfdError | None":
    """The one-line :class:`PfdError` of an OS error in :data:`OS_FIXES` (naming ``path`` or the
    error's file, shortened when very long), or ``None`` for any other error."""
    if e.errno not in OS_FIXES:
        return None
    name = os.fspath(path if path is not None else (e.filename or ""))
    name = name if len(name) <= 120 else f"{name[:60]}...{name[-40:]} ({len(name)} characters)"
    return PfdError(f"{name}: {OS_FIXES[e.errno]}")
