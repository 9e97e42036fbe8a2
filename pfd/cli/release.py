"""``pfd release lint``: nothing in a release may leak its source."""

from __future__ import annotations

import sys

import click

from pfd.cli.group import main
from pfd.errors import PfdError


@main.group("release")
def release_group() -> None:
    """Inspect a published release (a folder written by `pfd distill`)."""


@release_group.command("lint")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--private", "private", default=None, metavar="SPEC",
              help="The private source set (identity folder, RecordIO, synthetic:...): its names must not appear "
              "and no released image may be one of its photos (default: the set --state-dir records).")
@click.option("--state-dir", "state_dir", default=None, type=click.Path(file_okay=False, path_type=str),
              help="The publisher's state dir: also checks label order, the modes of its whole tree (0700/0600) "
              "and that it is outside the release.")
@click.option("--model", default=None, metavar="CKPT",
              help="Face model of the embedding near-duplicate check with --private (default: STATE_DIR/public_model.pt).")
@click.option("--skip-bad", is_flag=True, help="Skip and list unreadable images of --private.")
def release_lint(directory: str, private: str | None, state_dir: str | None, model: str | None, skip_bad: bool) -> None:
    """Fail (exit 1) if DIRECTORY leaks anything about its source.

    Checks: only manifest.json, the dataset card README.md it lists (unchanged) and <label>/<k>.png
    plain files (no symlinks, no hard links,
    0644 in 0755 folders), at least one image; PNGs that are 8-bit RGB of the manifest's size
    with nothing but pixel data; the manifest's schema and sha256 of every file; no source
    identity or file names; with --private, no released image that is a private photo (exact,
    perceptual hash, embedding cosine); with --state-dir, labels not in source order and a
    private (0700/0600) state tree outside the release, the same run on both sides (run ids), the
    release's files exactly the proxy map's, and the private set the state dir records (unless
    --private names another); a manifest that records a refusing audit fails.

    \b
    Examples:
      pfd release lint release
      pfd release lint release --private faces/ --state-dir state
    """
    from pfd.release.lint import format_findings, lint_release
    from pfd.release.state_dir import StateDir

    faces = net = None
    recorded = False
    if not private and state_dir:  # issue 54: as pfd attack and pfd card, the private set the state dir records
        from pfd.release.state_dir import recorded_private_spec

        private = recorded_private_spec(state_dir)
        recorded = private is not None
    if private:
        from pfd.data.sources import open_faces

        try:
            faces = open_faces(private, skip_bad=skip_bad)
        except PfdError as e:
            if not recorded:
                raise
            raise PfdError(f"the state dir {state_dir} records the private set as {private!r}, which cannot be opened "
                           f"here ({e}); pass --private with those images") from None
        public = StateDir.at(state_dir).public_model if state_dir else None
        ckpt = model or (str(public) if public is not None and public.is_file() else None)
        if ckpt:
            from pfd.nn.checkpoints import load_backbone

            net = load_backbone(ckpt)
    elif model:
        raise PfdError("--model is used with --private (the images to compare against); pass both")
    findings = lint_release(directory, private=faces, state_dir=state_dir, model=net)
    if findings:
        click.echo(format_findings(findings))
        click.echo(f"FAIL: {directory}: {len(findings)} problem(s); do not publish it as is.")
        sys.exit(1)
    click.echo(f"OK: {directory} passed the release lint.")
