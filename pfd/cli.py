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


# --- synth ---
@main.command("synth")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Folder to write (must be empty).")
@click.option("--split", type=click.Choice(["public", "private", "test"]), default="private", show_default=True,
              help="Identity split (the three never share an identity).")
@click.option("--ids", type=int, help="Number of identities (default: public 200, private 40, test 40).")
@click.option("--imgs", type=int, help="Images per identity (default: public 24, private 20, test 16).")
@click.option("--domain", type=click.Choice(["clean", "age", "lowres", "pose", "nir"]), default="clean",
              show_default=True, help="Scenario: clean, cross-age, surveillance, large pose, NIR.")
@click.option("--seed", type=int, default=0, show_default=True, help="Population seed (other seed, other people).")
@click.option("--size", type=int, default=112, show_default=True, help="Image side in pixels.")
@click.option("--force", is_flag=True, help="Write into a non-empty folder, replacing files of the same name.")
def synth_cmd(out: str, split: str, ids: int | None, imgs: int | None, domain: str, seed: int, size: int,
              force: bool) -> None:
    """Write the built-in synthetic face set as an identity folder plus attributes.csv.

    The same images are what `--data synthetic:<split>,...` reads without writing anything;
    every image is a pure function of (seed, identity, index, domain, size).

    \b
    Examples:
      pfd synth --out faces --split private                 # 40 identities x 20 images, 112 px
      pfd synth --out lowres --split test --domain lowres --size 64
      pfd synth --out big --split public --ids 1000 --imgs 30 --seed 1
    """
    from pfd.data.synthetic import SyntheticFaces, write_synthetic

    faces = SyntheticFaces(split, identities=ids, images_per_identity=imgs, domain=domain, seed=seed, size=size)
    path = write_synthetic(out, faces, overwrite=force)
    click.echo(f"wrote {len(faces)} images of {faces.num_classes} identities ({faces.spec()}) to {path}")
