"""``pfd distill``: options -> :class:`~pfd.config.DistillConfig` -> :func:`pfd.distill.pipeline.distill`."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from pfd.cli.group import checkpoint_size, flags, main
from pfd.distill.methods import METHODS, method_names


def _nested(**tables: dict[str, Any]) -> dict[str, Any]:
    """Nested CLI layer ``{"ogp": {...}, "rta": {...}}`` without the flags that were not given."""
    return {name: given for name, t in tables.items() if (given := flags(**t))}


@main.command("distill")
@click.option("--recipe", default="demo", show_default=True,
              help="TOML recipe (path or name in recipes/): [train] pretrains the public model, [distill] the rest.")
@click.option("--private", metavar="SPEC", help="Private set: identity folder, RecordIO, or synthetic:private[,ids=N,...].")
@click.option("--public", metavar="CKPT", help="Public checkpoint to start from (pfd, insightface or AdaFace); "
              "default: pretrain (or reuse a cached) model from the recipe's [train] table.")
@click.option("--method", type=click.Choice(method_names()),
              help="; ".join(f"{m.name}: {m.help}" for m in METHODS.values()) + ".")
@click.option("--out", help="Release folder (published).")
@click.option("--state-dir", help="Private state folder (mode 0700, never inside the release).")
@click.option("--resume", is_flag=True, default=None, help="Continue: skip finished stages and RTA batches in --state-dir.")
@click.option("--size", metavar="S|HxW", help="Image size: a side, or height x width (112x96); must match the "
              "public model. Default with --public: the checkpoint's.")
@click.option("--backbone", help="Expected backbone of --public (ir50, adaface_ir50, ...); another one is an error.")
@click.option("--min-images", type=int, help="Drop identities with fewer images first (else each needs >= --ipc).")
@click.option("--skip-bad", is_flag=True, default=None, help="Skip and list unreadable private images instead of stopping.")
@click.option("--mixed-precision", type=click.Choice(["auto", "no", "bf16", "fp16"]))
@click.option("--workers", type=int, help="DataLoader worker processes for fine-tuning.")
@click.option("--threads", type=int, help="CPU threads per process (0: torch's default; 1 on a busy shared CPU).")
@click.option("--embed-cache", help="Folder caching the private set's embeddings across runs that share a model "
              "(e.g. several --method runs); private state, never inside --out.")
@click.option("--seed", type=int, help="Seed of OGP, K-means and RTA (same seed, same release).")
@click.option("--ogp-head", help="[ogp] margin head of the fine-tuning (adaface, arcface, cosface, magface).")
@click.option("--ogp-epochs", type=int, help="[ogp] fine-tuning epochs over the private set.")
@click.option("--ogp-steps", type=int, help="[ogp] schedule length in steps (replaces --ogp-epochs and the step floor); "
              "with --resume, a longer schedule continues the fine-tuning.")
@click.option("--ogp-min-steps", type=int, help="[ogp] floor on the schedule length in steps (default 200).")
@click.option("--ogp-batch-size", type=int, help="[ogp] images per step (split across processes).")
@click.option("--ogp-lr", type=float, help="[ogp] peak SGD learning rate (warm-up, then cosine).")
@click.option("--rep-margin", type=float, help="[ogp] cosine margin m of L_rep (eq. 3).")
@click.option("--lambda-rep", type=float, help="[ogp] weight of L_rep (eq. 5).")
@click.option("--lambda-iso", type=float, help="[ogp] weight of L_iso (eq. 5).")
@click.option("--ipc", type=int, help="[rta] proxy images per class K (= K-means prototypes per identity).")
@click.option("--iterations", type=int, help="[rta] Adam steps per proxy batch.")
@click.option("--rta-batch-size", type=int, help="[rta] proxies optimised together (one resumable unit).")
@click.option("--rta-lr", type=float, help="[rta] Adam learning rate (0.25 in the paper).")
@click.option("--lambda-rta", type=float, help="[rta] weight of L_RTA (eq. 10).")
@click.option("--lambda-bn", type=float, help="[rta] weight of L_bn (eq. 10).")
@click.option("--lambda-delink", type=float, help="[rta] weight of pfd's de-linking term against the public model "
              "(the source at a uniformly random rank; 0 = the paper). Needs --judge.")
@click.option("--init", type=click.Choice(["noise", "public"]), help="[rta] what the proxies start from: Gaussian noise "
              "(the paper) or public face photos of --init-data (never private ones: a shared photo is refused).")
@click.option("--init-data", metavar="SPEC", help="[rta] public faces the proxies start from with --init public "
              "(identity folder, RecordIO or synthetic:public), at the release's size.")
@click.option("--lambda-spatial", type=float, help="[rta] weight of the spatial feature statistics (per-region mean and "
              "variance of every BN layer's input, matched to the private set's domain-level values; 0 = the paper).")
@click.option("--lambda-tv", type=float, help="[rta] weight of the total-variation image prior (DeepInversion's "
              "R_TV: neighbouring pixels pulled together; 0 = the paper).")
@click.option("--downsample", type=int, help="[rta] optimise each proxy at SIZE/N per side and upsample it "
              "bilinearly (IDC's low-resolution parameterisation; for private photos taken at low resolution; 1 = the paper).")
@click.option("--lighting-clusters", type=int, help="[rta] lighting lever: group the private images into at most this "
              "many lighting conditions (each pooled over >= 5 identities); proxies span their source's groups and match "
              "their group's BN statistics (0 = the paper's domain-level eq. 6).")
@click.option("--lambda-cf", type=float, help="[rta] --method ncfm: weight of the characteristic-function matching "
              "term (NCFM's 300).")
@click.option("--cf-frequencies", type=int, help="[rta] --method ncfm: frequencies compared per iteration (NCFM's 4096).")
@click.option("--label-seed", type=int, help="[release] seed of the arbitrary label permutation.")
@click.option("--license", metavar="ID", help="[release] the licence the release's dataset card (release/README.md) "
              "states, an identifier such as cc-by-4.0 or mit (default cc-by-nc-4.0).")
@click.option("--judge", metavar="CKPT|pretrain", help="[release] a face model no loss sees, which the audit "
              "consults as one more attacker (every linkage attack, and its competence check): a checkpoint at the "
              "release's size, or 'pretrain' (a second model pretrained like the demo's public one).")
@click.option("--allow-linkable", is_flag=True, default=None,
              help="[release] publish even when the one audit refuses the release (the verdict `pfd attack` "
                   "and `pfd card` give: a leak, a check that failed, or a design too small to rule out the bound). "
                   "For benchmark baselines, not for publishing.")
@click.option("--epsilon", type=float, help="[baseline] dp-pix privacy budget ε (Laplace scale 255 m / (b² ε)).")
@click.option("--dp-cell", type=int, help="[baseline] dp-pix cell side b in pixels (0: 16 at 112 px, scaled).")
@click.option("--dp-pixels", type=int, help="[baseline] dp-pix m, pixels neighbouring images may differ in (0: 16 at 112 px, scaled).")
@click.option("--blur-sigma", type=float, help="[baseline] blur σ in pixels (0: image side / 14).")
@click.option("--progress/--no-progress", default=True, help="Progress bars (only on a terminal; a line per stage otherwise).")
def distill_cmd(recipe: str, seed: int | None, progress: bool, **kw: Any) -> None:
    """Distill a private face set into a publishable proxy release (OGP -> prototypes -> RTA).

    With no options it runs the demo: a tiny public model pretrained (once, then cached) on the
    built-in synthetic faces, then synthetic:private distilled into ./release, with the private
    state in ./state. Prints times, losses, counts and rates; full figures in state/summary.json.

    \b
    Examples:
      pfd distill                                          # the demo, a few minutes on a CPU
      pfd distill --resume --ogp-steps 800                 # refused for OGP's margin: train OGP longer, redo the rest
      pfd distill --init public --init-data public_faces/ --lambda-spatial 0.01 --public r50.pt --private faces/
      pfd distill --method rta-only --out rel-rta --state-dir st-rta --allow-linkable   # ablation row
      pfd distill --method dp-pix --epsilon 1 --out rel-dp --state-dir st-dp --allow-linkable
      pfd distill --method blur --blur-sigma 4 --out rel-blur --state-dir st-blur --allow-linkable
      pfd distill --recipe cross-age --private faces/ --public adaface_ir50.ckpt
      pfd distill --recipe cross-age --private faces/ --public r50.pt --resume
      accelerate launch --config_file recipes/accelerate-multi-gpu.yaml -m pfd distill \\
          --recipe surveillance --private faces/ --public r50.pt
      accelerate launch --multi_gpu --num_processes 2 -m pfd distill   # 2 CPU processes (gloo)

    The release (proxy PNGs, manifest.json and a dataset card, README.md) is written only if the
    one audit passes it: the same registered checks and family-wise verdict as `pfd attack` and
    `pfd card` (no private photo in it, OGP's margin, and every linkage attack by the public
    model, the adapted model and a judge where there is one). Otherwise nothing is published,
    the state is kept and the exit status is 3 (2 is a usage or input error).

    Private state goes to --state-dir (mode 0700; never publish it); see docs/distill.md.
    """
    from pfd.config import DistillConfig, build_config, load_recipe
    from pfd.distill.methods import ignored_options
    from pfd.distill.gate import PublicationRefused
    from pfd.distill.pipeline import distill
    from pfd.distill.summary import format_summary

    given = {k for k, v in kw.items() if v is not None}
    r = load_recipe(recipe)
    ogp = {k: kw.pop(f"ogp_{k}") for k in ("head", "epochs", "batch_size", "lr")}
    ogp["max_steps"] = kw.pop("ogp_steps")
    ogp["min_steps"] = kw.pop("ogp_min_steps")
    ogp.update({k: kw.pop(k) for k in ("rep_margin", "lambda_rep", "lambda_iso")})
    rta = {k: kw.pop(k) for k in ("ipc", "iterations", "lambda_rta", "lambda_bn", "lambda_delink", "init", "init_data",
                                  "lambda_spatial", "lighting_clusters", "lambda_cf", "cf_frequencies", "lambda_tv",
                                  "downsample")}
    rta.update(batch_size=kw.pop("rta_batch_size"), lr=kw.pop("rta_lr"))
    release = {"label_seed": kw.pop("label_seed"), "allow_linkable": kw.pop("allow_linkable"), "judge": kw.pop("judge"),
               "license": kw.pop("license")}
    baseline = {"epsilon": kw.pop("epsilon"), "cell": kw.pop("dp_cell"), "pixels": kw.pop("dp_pixels"),
                "blur_sigma": kw.pop("blur_sigma")}
    if seed is not None:
        ogp["seed"] = seed
        rta.update(seed=seed, kmeans_seed=seed)
        baseline["seed"] = seed
    table = r.get("distill", {})
    public = kw.get("public") or table.get("public")
    # A checkpoint knows its input size: --public without --size takes it (a recipe's size is that
    # of the model its [train] table pretrains, unless the recipe names the public model itself).
    if public and kw.get("size") is None and (kw.get("public") or "size" not in table):
        kw["size"] = checkpoint_size(public)
    if public and (table.get("release") or {}).get("judge") == "pretrain" and release["judge"] is None:
        # The demo's judge is pretrained like its public model, which a given --public replaces: with
        # it go the de-linking term it vouches for (unless asked for); the gate says if it is needed.
        release["judge"] = ""
        if rta["lambda_delink"] is None:
            rta["lambda_delink"] = 0.0
        logging.getLogger("pfd.cli").warning(
            "--public %s: the recipe's pretrained judge does not apply; running without the de-linking term (pass "
            "--lambda-delink 10 --judge CKPT, a face model no loss sees, to use it)", public)
    cfg = build_config(
        DistillConfig, {"pretrain": r.get("train", {})}, table,
        flags(**kw), _nested(ogp=ogp, rta=rta, release=release, baseline=baseline),
    )  # fmt: skip
    unused = ignored_options(cfg.method, given)
    if unused:
        logging.getLogger("pfd.cli").warning("--method %s ignores %s", cfg.method, ", ".join(unused))
    try:
        result = distill(cfg, progress=progress)
    except PublicationRefused as e:
        click.echo(format_summary(e.summary, private=cfg.private, skip_bad=cfg.skip_bad))  # what failed, then the error
        raise
    except KeyboardInterrupt:
        # Finished stages and RTA batches are on disk (atomic writes): say how to go on, not just "Aborted!".
        click.echo(f"Interrupted: finished work is kept in {cfg.state_dir}; run the same command with --resume to "
                   "continue it", err=True)
        sys.exit(130)
    if result.is_main:
        click.echo(format_summary(result.summary, private=cfg.private, skip_bad=cfg.skip_bad))
