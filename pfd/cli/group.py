"""The ``pfd`` command group, its error handling, and the helpers every command shares.

:class:`~pfd.errors.PfdError` becomes a one-line ``Error: ...`` with its exit status (2; 3 when
the publication gate refused a release), and the OS errors no check up front can rule out
(:data:`pfd.errors.OS_FIXES`) one line too; the commands live in the sibling modules.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from pfd import __version__
from pfd.errors import PfdError, os_error

__all__ = ["main", "flags", "checkpoint_size", "recipe_table", "refused_exit"]


def refused_exit(ctx: click.Context, refused: bool) -> None:
    """End a command whose outputs are written with :data:`pfd.errors.REFUSED` when its audit refused.

    Args:
        ctx: The command's context.
        refused: Whether the verdict is "not publishable".
    """
    from pfd.errors import REFUSED

    if refused:
        click.echo(f"not publishable: exit status {REFUSED}", err=True)
        ctx.exit(REFUSED)


class _UserError(click.ClickException):
    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _Group(click.Group):
    """Turns PfdError into click's one-line error (its exit code: 2, or 3 for a refused release)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PfdError as e:
            raise _UserError(str(e), e.exit_code) from None
        except OSError as e:  # what no check up front can rule out: still one line, not a traceback
            err = os_error(e)
            if err is None:
                raise
            raise _UserError(str(err)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="pfd")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """pfd: publish private face-recognition training data safely, and audit what it leaks.

    \b
    Examples:
      pfd distill                      # demo: distill the built-in synthetic private set
      pfd release lint release --state-dir state
      pfd attack --release release --state-dir state --report report
      pfd card --release release --state-dir state --public synthetic:public --test synthetic:test
      pfd synth --out faces --split private
      pfd train --recipe tiny-cpu --out runs/tiny
      pfd eval --model runs/tiny/model.pt --data synthetic:test
    """
    from pfd.allocator import tune_allocator
    from pfd.progress import PROGRESS_LOGGER

    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # One line per finished stage / loop is shown by default: it replaces the bars where stderr
    # is not a terminal (CI, nohup) or --no-progress was given.
    logging.getLogger(PROGRESS_LOGGER).setLevel(min(level, logging.INFO))
    # Every command runs repeated CPU steps: keep their buffers mapped (PFD_ALLOCATOR=system opts out).
    logging.getLogger("pfd").debug("allocator: %s", tune_allocator())


def flags(**kw: Any) -> dict[str, Any]:
    """CLI values that were given (None = flag absent, so the recipe/default stands)."""
    return {k: v for k, v in kw.items() if v is not None and v != ()}


def checkpoint_size(path: str) -> Any:
    """The input size (``S`` or ``[H, W]``) recorded in or inferred from a backbone file."""
    from pfd.nn.checkpoints import read_arch

    return read_arch(path).get("size")


def recipe_table(recipe: str | None, table: str) -> dict[str, Any]:
    from pfd.config import load_recipe

    return dict(load_recipe(recipe).get(table, {})) if recipe else {}
