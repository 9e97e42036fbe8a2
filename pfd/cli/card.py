"""``pfd card``: the publisher's privacy-utility card of a release."""

from __future__ import annotations

from typing import Any

import click

from pfd.cli.group import flags, main, refused_exit


@main.command("card")
@click.option("--recipe", help="TOML recipe; its [card] table (and [card.downstream], [card.eval], [card.attack]) is used.")
@click.option("--release", help="The release folder.")
@click.option("--state-dir", help="The publisher's state dir (proxy->source map, public model).")
@click.option("--private", help="The private set (default: recorded in the state dir).")
@click.option("--public-model", help="The model the release's users fine-tune (default: STATE_DIR/public_model.pt).")
@click.option("--public", "public", multiple=True, help="Public training data of the release's users (repeatable): "
              "identity folder, RecordIO or synthetic:.")
@click.option("--test", help="Held-out test people of the target domain (verification pairs; never in the private set).")
@click.option("--holdout", help="Non-member people for the membership attack (default: membership is skipped).")
@click.option("--out", help="The card's folder (card.json, card.md, card.html, privacy/, the downstream runs).")
@click.option("--seeds", type=int, help="Downstream fine-tunes per side (default 1).")
@click.option("--epochs", type=float, help="Epochs of each downstream fine-tune (default 1).")
@click.option("--batch-size", type=int, help="Batch size of each downstream fine-tune (default 64).")
@click.option("--public-images", type=int, help="A fixed seeded sample of the public images (default 0: all).")
@click.option("--pairs", type=int, help="Genuine test pairs, and as many impostors (default 3000; all when fewer).")
@click.option("--bootstrap", type=int, help="Identity-bootstrap replicates (default 1000).")
@click.option("--quick", is_flag=True, default=None, help="A smoke card in minutes: short fine-tune, few pairs, no reconstruction.")
@click.option("--resume", is_flag=True, default=None, help="Continue a card in --out (same settings).")
@click.option("--threads", type=int, help="CPU threads (0: torch's default).")
@click.option("--skip-bad", is_flag=True, default=None, help="Skip (and list) unreadable images instead of stopping.")
@click.option("--progress/--no-progress", default=True, help="Progress bars (only on a terminal; a line per stage otherwise).")
def card_command(recipe: str | None, progress: bool, epochs: float | None, batch_size: int | None,
                 public_images: int | None, pairs: int | None, bootstrap: int | None, **kw: Any) -> None:
    """Is this release safe, and is it worth anything? One card on your own faces.

    Fine-tunes the public model on the public data with and without the release (same seeds and
    schedule), verifies both on the held-out test people and reports the gain with its
    identity-bootstrap interval; runs every registered attack (linkability with chance and
    interval, the source's rank, reconstruction, attributes, membership with --holdout). Writes
    card.json, card.md and card.html (one self-contained page: verdict first, then the evidence).

    Exit status: 0 when the privacy verdict is "publishable", 3 when it is not (the card is written
    either way), 2 for bad input.

    \b
    Examples:
      pfd card --release release --state-dir state --public synthetic:public --test synthetic:test
      pfd card --release rel --state-dir st --public public_faces/ --test test_faces/ --out card --seeds 3
      pfd card --release rel --state-dir st --public pub/ --test test/ --quick
      pfd card --release rel --state-dir st --public pub/ --test test/ --out card --resume
    """
    from pfd.card.build import make_card
    from pfd.card.config import QUICK, CardConfig
    from pfd.config import build_config, load_recipe

    table = dict(load_recipe(recipe).get("card", {})) if recipe else {}
    given = flags(**kw)
    quick = given.get("quick", table.get("quick", False))
    over: dict[str, Any] = {"downstream": flags(epochs=epochs, batch_size=batch_size, public_images=public_images),
                            "eval": flags(pairs=pairs, bootstrap=bootstrap)}
    cfg = build_config(CardConfig, QUICK if quick else None, table, given, over)
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    card = make_card(cfg, progress=progress)
    u = card.data["utility"]["gain"]
    click.echo(card.verdict)
    for key, g in u.items():
        lo, hi = g["ci95"]
        click.echo(f"{key:<16} public-ft {_pct(g['ref_mean'], '5.1f')}  with release {_pct(g['row_mean'], '5.1f')}  "
                   f"gain {_pct(g['diff'])} ({_pct(lo)}, {_pct(hi)})")
    click.echo(f"card    {card.paths['html']}  ({card.paths['markdown']}, {card.paths['json']})")
    refused_exit(click.get_current_context(), not card.data["verdict"]["publishable"])


def _pct(v: Any, fmt: str = "+.1f") -> str:
    """A share in points, or "n/a" (as card.md writes it) where the test pairs cannot resolve it (nan)."""
    import math

    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a".rjust(5) if fmt.startswith("5") else "n/a"
    return format(100 * v, fmt)
