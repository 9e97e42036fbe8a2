"""The one exception type pfd raises for bad input.

Every problem a user can fix (a corrupt image, a missing path, a checkpoint of another
architecture, a NaN loss) is raised as :class:`PfdError` with a single line that names the
file or identity and says what to do. The CLI turns it into ``Error: <message>`` and the
error's :attr:`PfdError.exit_code` (2: bad input or usage; 3: the publication gate refused the
release, :class:`pfd.distill.gate.PublicationRefused`), without a traceback.
"""

from __future__ import annotations

__all__ = ["PfdError"]


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
