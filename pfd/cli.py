"""The ``pfd`` command line: parse options, build a config dataclass, call the library.

Nothing here computes anything; each command is a thin wrapper over a library function so
that the same work is available from Python. :class:`~pfd.errors.PfdError` becomes a one-line
``Error: ...`` with exit status 2.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from pfd import __version__
from pfd.errors import PfdError

__all__ = ["main"]


class _UserError(click.ClickException):
    exit_code = 2


class _Group(click.Group):
    """Turns PfdError into click's one-line error (exit 2) instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PfdError as e:
            raise _UserError(str(e)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="pfd")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """pfd: publish private face-recognition training data safely, and audit what it leaks.

    \b
    Examples:
      pfd distill                      # demo: distill the built-in synthetic private set
      pfd synth --out faces --split private
      pfd train --recipe demo          # pretrain a tiny public model on synthetic:public
      pfd eval --model runs/train/model.pt --data synthetic:test
      pfd attack --release release --private synthetic:private --state-dir state
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    main()
