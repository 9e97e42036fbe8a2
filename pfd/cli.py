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


# --- release ---


@main.group("release")
def release_group() -> None:
    """Inspect a published release (a folder written by `pfd distill`)."""


@release_group.command("lint")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--private", "private", default=None, metavar="SPEC",
              help="The private source set (identity folder, RecordIO, synthetic:...); its names must not appear.")
@click.option("--state-dir", "state_dir", default=None, type=click.Path(file_okay=False, path_type=str),
              help="The publisher's state dir: also checks label order, its mode (0700) and that it is outside the release.")
def release_lint(directory: str, private: str | None, state_dir: str | None) -> None:
    """Fail (exit 1) if DIRECTORY leaks anything about its source.

    Checks: only manifest.json and <label>/<k>.png files; no state files; PNGs without metadata
    chunks; sha256 of every file as in the manifest; no source identity or file names in paths or
    in the manifest; with --state-dir, labels not in source order and a private (0700) state dir
    outside the release.

    \b
    Examples:
      pfd release lint release
      pfd release lint release --private faces/ --state-dir state
    """
    from pfd.data.release_lint import format_findings, lint_release

    faces = None
    if private:
        from pfd.data.sources import open_faces

        faces = open_faces(private)
    findings = lint_release(directory, private=faces, state_dir=state_dir)
    if findings:
        click.echo(format_findings(findings))
        click.echo(f"FAIL: {directory}: {len(findings)} problem(s); do not publish it as is.")
        sys.exit(1)
    click.echo(f"OK: {directory} passed the release lint.")


if __name__ == "__main__":  # pragma: no cover
    main()
