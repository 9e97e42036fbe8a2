"""The ``pfd`` command line: parse options, build a config dataclass, call the library.

Nothing here computes anything; each command is a thin wrapper over a library function so
that the same work is available from Python. :class:`~pfd.errors.PfdError` becomes a one-line
``Error: ...`` with exit status 2 (3 when the publication gate refused a release; 130 after Ctrl-C).
"""

from __future__ import annotations

import errno
import logging
import sys
from typing import Any

import click

from pfd import __version__
from pfd.errors import PfdError

__all__ = ["main"]


class _UserError(click.ClickException):
    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


#: OS errors the CLI reports as one line, with the fix.
_OS_FIXES = {
    errno.ENAMETOOLONG: "choose a shorter path (names of at most 255 bytes, paths under 4096)",
    errno.ELOOP: "the path runs through a loop of symbolic links; fix the links or pass another path",
    errno.ENOSPC: "free some space and run the command again (pfd distill continues with --resume)",
    errno.EROFS: "the file system is read-only; choose a writable folder",
    errno.ENOTDIR: "a part of that path is a file, not a folder; fix the path",
}


class _Group(click.Group):
    """Turns PfdError into click's one-line error (its exit code: 2, or 3 for a refused release)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PfdError as e:
            raise _UserError(str(e), e.exit_code) from None
        except OSError as e:  # what no check up front can rule out: still one line, not a traceback
            if e.errno not in _OS_FIXES:
                raise
            name = str(e.filename or "")
            name = name if len(name) <= 120 else f"{name[:60]}...{name[-40:]} ({len(name)} characters)"
            raise _UserError(f"{name}: {e.strerror}; {_OS_FIXES[e.errno]}") from None


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
      pfd synth --out faces --split private
      pfd train --recipe tiny-cpu --out runs/tiny
      pfd eval --model runs/tiny/model.pt --data synthetic:test
    """
    from pfd.progress import PROGRESS_LOGGER

    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # One line per finished stage / loop is shown by default: it replaces the bars where stderr
    # is not a terminal (CI, nohup) or --no-progress was given.
    logging.getLogger(PROGRESS_LOGGER).setLevel(min(level, logging.INFO))


def _flags(**kw: Any) -> dict[str, Any]:
    """CLI values that were given (None = flag absent, so the recipe/default stands)."""
    return {k: v for k, v in kw.items() if v is not None and v != ()}


def _checkpoint_size(path: str) -> Any:
    """The input size (``S`` or ``[H, W]``) recorded in or inferred from a backbone file."""
    from pfd.nn.checkpoints import read_arch

    return read_arch(path).get("size")


def _recipe_table(recipe: str | None, table: str) -> dict[str, Any]:
    from pfd.config import load_recipe

    return dict(load_recipe(recipe).get(table, {})) if recipe else {}


# --- train ---
@main.command("train")
@click.option("--recipe", help="TOML recipe (path or name in recipes/); its [train] table is used.")
@click.option("--data", multiple=True, help="Dataset spec; repeat to train jointly (disjoint labels).")
@click.option("--backbone", help="ir18, ir34, ir50, ir100, adaface_ir50, ...")
@click.option("--width", type=float, help="Channel-width multiplier (tiny CPU models: 0.25).")
@click.option("--size", metavar="S|HxW", help="Input size: a side in pixels, or height x width (112x96 for "
              "MobileFaceNet); sides divisible by 16. Default with --init: the checkpoint's.")
@click.option("--embedding-dim", type=int, help="Embedding dimension D.")
@click.option("--head", help="arcface, cosface, adaface or magface.")
@click.option("--scale", type=float, help="Head scale s.")
@click.option("--margin", type=float, help="Head margin m.")
@click.option("--init", help="Checkpoint to fine-tune from (pfd, insightface, AdaFace or MobileFaceNet).")
@click.option("--head-init", type=click.Choice(["random", "class_means"]),
              help="Start the margin head at random (default) or at each class's mean embedding (fine-tuning).")
@click.option("--epochs", type=int)
@click.option("--max-steps", type=int, help="Stop after this many steps (overrides --epochs).")
@click.option("--batch-size", type=int, help="Global batch size (split across processes).")
@click.option("--lr", type=float, help="Peak SGD learning rate.")
@click.option("--warmup-epochs", type=float)
@click.option("--schedule", type=click.Choice(["cosine", "poly"]))
@click.option("--grad-clip", type=float, help="Max gradient norm (0 disables).")
@click.option("--mixed-precision", type=click.Choice(["auto", "no", "bf16", "fp16"]))
@click.option("--checkpoint-every", type=int, help="Resumable checkpoint every N steps.")
@click.option("--out", help="Output folder.")
@click.option("--seed", type=int)
@click.option("--workers", type=int, help="DataLoader worker processes.")
@click.option("--min-images", type=int, help="Drop identities with fewer images.")
@click.option("--flip/--no-flip", default=None, help="Random horizontal flips (default on).")
@click.option("--threads", type=int, help="CPU threads per process (0: OMP_NUM_THREADS or torch's default).")
@click.option("--skip-bad", is_flag=True, default=None, help="Skip and list unreadable images instead of stopping.")
@click.option("--resume", is_flag=True, help="Continue from the newest checkpoint in OUT/checkpoints.")
@click.option("--progress/--no-progress", default=True, help="Progress bar (only on a terminal; a line per run otherwise).")
def train_cmd(recipe: str | None, resume: bool, progress: bool, **kw: Any) -> None:
    """Train or fine-tune a face-recognition model with a margin loss.

    \b
    Examples:
      pfd train --recipe demo                       # tiny ir18 on synthetic:public, CPU
      pfd train --data synthetic:public --backbone ir18 --width 0.25 --size 64 --epochs 5
      pfd train --data faces/ --data release/ --init public.pt --out runs/ft
      pfd train --recipe tiny-cpu --out runs/tiny   # ~3 min on 2 CPU cores
      pfd train --recipe demo --out runs/demo --resume
      accelerate launch --multi_gpu --num_processes 2 -m pfd train --recipe tiny-cpu   # data-parallel

    Without --data it pretrains on the built-in synthetic:public set.
    """
    import time

    from accelerate import PartialState

    from pfd.config import TrainConfig, build_config
    from pfd.nn.checkpoints import load_checkpoint
    from pfd.train import train

    kw["data"] = list(kw["data"]) or None
    table = _recipe_table(recipe, "train")
    if kw.get("init") and kw.get("size") is None:  # a checkpoint knows its input size
        kw["size"] = _checkpoint_size(kw["init"])
    cfg = build_config(TrainConfig, table, _flags(**kw))
    t0 = time.perf_counter()
    path = train(cfg, resume=resume, progress=progress)
    state = PartialState()  # the training run's (already initialised) process group
    if state.is_main_process:
        ck = load_checkpoint(path)
        click.echo(f"model      {path}\nsteps      {ck.get('step')}\nprocesses  {state.num_processes}\n"
                   f"time       {time.perf_counter() - t0:.1f} s")


# --- eval ---
@main.command("eval")
@click.option("--recipe", help="TOML recipe; its [eval] table is used.")
@click.option("--model", help="Checkpoint to evaluate (pfd, insightface or AdaFace).")
@click.option("--pairs", help="pairs.txt (images under --data) or an insightface .bin.")
@click.option("--data", help="Image root for pairs.txt, or a dataset to draw pairs from.")
@click.option("--num-pairs", type=int, help="Genuine pairs to draw (as many impostors are added).")
@click.option("--folds", type=int, help="Cross-validation folds for the accuracy.")
@click.option("--flip/--no-flip", default=None, help="Fuse each image with its mirror (insightface).")
@click.option("--batch-size", type=int)
@click.option("--seed", type=int, help="Pair-drawing seed.")
@click.option("--out", help="JSON output (default: eval.json next to the model).")
@click.option("--skip-bad", is_flag=True, default=None, help="Skip and list unreadable images of --data.")
@click.option("--progress/--no-progress", default=True, help="Embedding progress bar (only on a terminal).")
def eval_cmd(recipe: str | None, progress: bool, **kw: Any) -> None:
    """Verification accuracy (10-fold), TAR@FAR, EER and ROC AUC of a model.

    \b
    Examples:
      pfd eval --model runs/train/model.pt --data synthetic:test
      pfd eval --model ms1mv3_r50.pt --pairs lfw.bin
      pfd eval --model model.pt --pairs lfw/pairs.txt --data lfw/images
    """
    from pfd.config import EvalConfig, build_config
    from pfd.verify import evaluate, format_metrics_table

    cfg = build_config(EvalConfig, _recipe_table(recipe, "eval"), _flags(**kw))
    metrics = evaluate(cfg, progress=progress)
    click.echo(format_metrics_table(metrics))


# --- release ---


@main.group("release")
def release_group() -> None:
    """Inspect a published release (a folder written by `pfd distill`)."""


@release_group.command("lint")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--private", "private", default=None, metavar="SPEC",
              help="The private source set (identity folder, RecordIO, synthetic:...): its names must not appear "
              "and no released image may be one of its photos.")
@click.option("--state-dir", "state_dir", default=None, type=click.Path(file_okay=False, path_type=str),
              help="The publisher's state dir: also checks label order, the modes of its whole tree (0700/0600) "
              "and that it is outside the release.")
@click.option("--model", default=None, metavar="CKPT",
              help="Face model of the embedding near-duplicate check with --private (default: STATE_DIR/public_model.pt).")
@click.option("--skip-bad", is_flag=True, help="Skip and list unreadable images of --private.")
def release_lint(directory: str, private: str | None, state_dir: str | None, model: str | None, skip_bad: bool) -> None:
    """Fail (exit 1) if DIRECTORY leaks anything about its source.

    Checks: only manifest.json and <label>/<k>.png plain files (no symlinks, no hard links,
    0644 in 0755 folders), at least one image; PNGs that are 8-bit RGB of the manifest's size
    with nothing but pixel data; the manifest's schema and sha256 of every file; no source
    identity or file names; with --private, no released image that is a private photo (exact,
    perceptual hash, embedding cosine); with --state-dir, labels not in source order and a
    private (0700/0600) state tree outside the release.

    \b
    Examples:
      pfd release lint release
      pfd release lint release --private faces/ --state-dir state
    """
    from pathlib import Path

    from pfd.data.release_lint import format_findings, lint_release

    faces = net = None
    if private:
        from pfd.data.sources import open_faces

        faces = open_faces(private, skip_bad=skip_bad)
        ckpt = model or (str(Path(state_dir) / "public_model.pt") if state_dir and (Path(state_dir) / "public_model.pt").is_file() else None)
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


# --- attack ---
def _load_reconstructor(spec: str | None) -> Any:
    """``module:attr`` -> the callable ``reconstructor(embeddings) -> images`` (user code)."""
    if not spec:
        return None
    import importlib

    module, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr) if attr else None
    except (ImportError, AttributeError) as e:
        raise PfdError(f"--reconstructor {spec}: cannot import it ({e}); give module:function on PYTHONPATH") from None
    if not callable(fn):
        raise PfdError(f"--reconstructor {spec}: not a callable; give module:function")
    return fn


def _floats(value: str | None, flag: str) -> list[float] | None:
    """``"127.5"`` or ``"123.7,116.3,103.5"`` -> floats (None when the flag is absent)."""
    if value is None:
        return None
    try:
        vals = [float(v) for v in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{flag} takes one number or three comma-separated (R,G,B), got {value!r}") from None
    if len(vals) not in (1, 3):
        raise click.BadParameter(f"{flag} takes one number or three comma-separated (R,G,B), got {value!r}")
    return vals


@main.group("attack", invoke_without_command=True)
@click.option("--recipe", help="TOML recipe; its [attack] table (and [attack.downstream]) is used.")
@click.option("--release", help="The release folder to score.")
@click.option("--private", help="The private set the release came from (default: recorded in the state dir).")
@click.option("--state-dir", help="The publisher's state dir (proxy->source map, public and adapted models).")
@click.option("--report", help="Output folder for report.json, report.md and the plots.")
@click.option("--public-model", help="Attacker's model: pfd/insightface/AdaFace checkpoint or TorchScript "
              "(default: STATE_DIR/public_model.pt).")
@click.option("--public-model-size", type=int, help="Input size of a TorchScript public model.")
@click.option("--insider/--no-insider", default=None, help="Also attack with the adapted model (default on).")
@click.option("--attacker", "attackers", multiple=True, help="An outside attacker model (repeatable): .onnx, "
              "TorchScript, .toml attacker spec or module:callable; each adds rows beside public and insider.")
@click.option("--attacker-size", type=int, help="Input side of the --attacker models (default: declared, else 112).")
@click.option("--attacker-mean", callback=lambda c, p, v: _floats(v, "--attacker-mean"),
              help="Their input mean on 0..255: one value or R,G,B (default 127.5, insightface).")
@click.option("--attacker-std", callback=lambda c, p, v: _floats(v, "--attacker-std"),
              help="Their input std on 0..255: one value or R,G,B (default 127.5).")
@click.option("--attacker-resize", type=click.Choice(["stretch", "pad"]),
              help="Resize to their input by stretching (default) or padding to its aspect (dlib, face-api).")
@click.option("--attacker-distance", type=click.Choice(["cosine", "euclidean"]),
              help="How they compare embeddings (default cosine).")
@click.option("--public", help="Public data for the downstream membership test (with --holdout).")
@click.option("--holdout", help="Same-domain held-out identities: non-members of the membership test.")
@click.option("--attr-data", help="Labelled auxiliary set (attributes.csv) for the attribute probe.")
@click.option("--attributes/--no-attributes", default=None, help="Run attribute recovery (default on).")
@click.option("--reconstruct/--no-reconstruct", default=None, help="Run the reconstruction attack (default on).")
@click.option("--reconstructor", help="module:function mapping embeddings (n, D) to images (n, 3, H, W) in [0, 1], "
              "used instead of the BN-prior inversion.")
@click.option("--recon-iterations", type=int, help="Inversion steps per batch.")
@click.option("--recon-batch-size", type=int, help="Images inverted together.")
@click.option("--recon-lr", type=float, help="Inversion learning rate.")
@click.option("--recon-lambda-bn", type=float, help="Weight of the BatchNorm prior.")
@click.option("--recon-limit", type=int, help="Reconstruct at most N proxies (seeded sample; 0 = all).")
@click.option("--downstream-steps", type=int, help="Training steps of the downstream model.")
@click.option("--batch-size", type=int, help="Embedding batch size.")
@click.option("--flip/--no-flip", default=None, help="Flip-fused embeddings.")
@click.option("--seed", type=int)
@click.option("--skip-bad", is_flag=True, default=None, help="Skip (and list) unreadable images instead of stopping.")
@click.option("--progress/--no-progress", default=True, help="Progress bars (only on a terminal; a line per stage otherwise).")
@click.pass_context
def attack_group(ctx: click.Context, recipe: str | None, reconstructor: str | None, downstream_steps: int | None,
                 progress: bool, **kw: Any) -> None:
    """Audit a release (scorecard) or a model (subcommands mia, dataset).

    Without a subcommand, runs every applicable attack on a release and writes report.json,
    report.md (one summary table) and plots to --report: linkability (VisMatch, Rank-1 Re-ID) with
    the public and the insider model, reconstruction, attribute recovery and, with --public and
    --holdout, membership leakage through a downstream model.

    \b
    Examples:
      pfd attack --release release --private faces/ --state-dir state --report report
      pfd attack --release release --state-dir state --public-model r50.pt --no-reconstruct
      pfd attack --release release --state-dir state --public synthetic:public --holdout synthetic:test
      pfd attack --release release --state-dir state --attacker w600k_r50.onnx --attacker facenet.toml
      pfd attack mia --model model.pt --members members/ --nonmembers heldout/
      pfd attack dataset --model model.pt --candidates setA/ setB/ setC/ setD/
    """
    if ctx.invoked_subcommand is not None:
        return
    from pfd.attacks.report_folder import report_folder
    from pfd.attacks.scorecard.report import summary_rows, summary_table, write_report
    from pfd.attacks.scorecard.run import run_scorecard
    from pfd.config import AttackConfig, build_config, load_recipe

    table = dict(load_recipe(recipe).get("attack", {})) if recipe else {}
    if downstream_steps is not None:
        table["downstream"] = {**table.get("downstream", {}), "max_steps": downstream_steps}
    cfg = build_config(AttackConfig, table, _flags(**kw))
    if not cfg.release:
        click.echo(ctx.get_help())
        raise PfdError("pass --release RELEASE --state-dir STATE (or a subcommand: mia, dataset)")
    with report_folder(cfg.report, release=cfg.release):  # pfd's own or new, one audit at a time, before any work
        card = run_scorecard(cfg, reconstructor=_load_reconstructor(reconstructor), progress=progress)
        paths = write_report(card, cfg.report)
    click.echo("\n".join(summary_table(summary_rows(card.data))))
    for reason in card.data["skipped"].values():
        click.echo(f"skipped: {reason}")
    click.echo(f"report  {paths['markdown']}")


@attack_group.command("mia")
@click.option("--model", required=True, help="Model to audit: pfd/insightface/AdaFace checkpoint, TorchScript, "
              ".onnx (insightface convention), .toml attacker spec or module:callable.")
@click.option("--members", required=True, help="Identities believed to be in its training set (>= 2 images each).")
@click.option("--nonmembers", required=True, help="Identities known not to be, of the same domain.")
@click.option("--head", type=click.Choice(["arcface", "cosface", "adaface", "magface"]),
              help="Head of PenLogit/ProtoCE (default: the checkpoint's head, else arcface).")
@click.option("--scale", type=float, help="Head scale s (default: the checkpoint's, else 64).")
@click.option("--margin", type=float, help="Head margin m (default: the checkpoint's, else the head's usual).")
@click.option("--model-size", type=int, help="Input size of a TorchScript, ONNX or Python model.")
@click.option("--folds", type=int, default=5, show_default=True, help="Cross-validation folds of the fused classifier.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--batch-size", type=int, default=256, show_default=True)
@click.option("--report", help="Folder for membership.json and the ROC / density plots.")
@click.option("--reference", help="A model that trained on neither group (e.g. the backbone the audited model was "
              "fine-tuned from): checks that the groups do not differ before training; if they do, a LEAKS verdict "
              "becomes INCONCLUSIVE.")
@click.option("--reference-size", type=int, help="Input size of a TorchScript, ONNX or Python reference model.")
@click.option("--skip-bad", is_flag=True, help="Skip (and list) unreadable images instead of stopping.")
@click.option("--progress/--no-progress", default=True, help="Progress bars (only on a terminal).")
def attack_mia(model: str, members: str, nonmembers: str, **kw: Any) -> None:
    """Identity-level geometric membership inference on any face-recognition model.

    Four per-identity cluster statistics (PairCos, vMF kappa, PenLogit, ProtoCE), their AUCs and
    TPR at low FPR, and a fused classifier under 5-fold CV. Non-members must come from the same
    domain as the members, or the AUC also measures the domain shift. The verdict's 5 % false-LEAKS
    bound assumes members and non-members drawn from one population; for a fixed split (whoever
    was trained on vs whoever else is at hand) pass --reference.

    \b
    Examples:
      pfd attack mia --model model.pt --members synthetic:private --nonmembers synthetic:test
      pfd attack mia --model r50.pt --members members/ --nonmembers heldout/ --head arcface --scale 64 --margin 0.5
      pfd attack mia --model net.ts --model-size 112 --members a/ --nonmembers b/ --report mia_report
      pfd attack mia --model finetuned.pt --reference public.pt --members private/ --nonmembers heldout/
    """
    from pfd.attacks.membership.audit import format_membership_table, run_mia

    rep = run_mia(model, members, nonmembers, **kw)
    click.echo(f"head {rep['config']['head']} s={rep['config']['scale']} m={rep['config']['margin']} "
               f"({rep['head_source']})")
    click.echo(format_membership_table(rep))
    if "written_to" in rep:
        click.echo(f"report  {rep['written_to']}")


@attack_group.command("dataset")
@click.option("--model", required=True, help="Model to audit: pfd/insightface/AdaFace checkpoint, TorchScript, "
              ".onnx (insightface convention), .toml attacker spec or module:callable.")
@click.option("--candidates", "candidates_flag", is_flag=True, help="Marks the candidate list (optional).")
@click.argument("candidates", nargs=-1, required=True)
@click.option("--n", type=int, default=500, show_default=True, help="Gallery (= probe) identities per candidate.")
@click.option("--per-identity", type=click.Choice(["mean", "sample"]), default="mean", show_default=True,
              help="One embedding per identity: the mean template or one random image.")
@click.option("--model-size", type=int, help="Input size of a TorchScript, ONNX or Python model.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--batch-size", type=int, default=256, show_default=True)
@click.option("--report", help="Folder for dataset.json.")
@click.option("--skip-bad", is_flag=True, help="Skip (and list) unreadable images instead of stopping.")
@click.option("--progress/--no-progress", default=True, help="Progress bars (only on a terminal).")
def attack_dataset(model: str, candidates_flag: bool, candidates: tuple[str, ...], **kw: Any) -> None:
    """Which candidate dataset trained MODEL? (dataset-level MIA, robust z-scores).

    Each candidate gets the mean probe-to-centroid cosine of disjoint gallery and probe
    identities; the robust z-score against the other candidates ranks them, lowest first = most
    likely training set. Needs at least 3 candidates.

    \b
    Examples:
      pfd attack dataset --model model.pt --candidates setA/ setB/ setC/ setD/
      pfd attack dataset --model model.pt --n 200 --candidates synthetic:public synthetic:test \\
          synthetic:private,domain=lowres synthetic:private,domain=nir
    """
    from pfd.attacks.membership.audit import format_dataset_table, run_dataset

    rows = run_dataset(model, list(candidates), **kw)
    click.echo(format_dataset_table(rows))


# --- distill ---
def _nested(**tables: dict[str, Any]) -> dict[str, Any]:
    """Nested CLI layer ``{"ogp": {...}, "rta": {...}}`` without the flags that were not given."""
    return {name: given for name, t in tables.items() if (given := _flags(**t))}


@main.command("distill")
@click.option("--recipe", default="demo", show_default=True,
              help="TOML recipe (path or name in recipes/): [train] pretrains the public model, [distill] the rest.")
@click.option("--private", metavar="SPEC", help="Private set: identity folder, RecordIO, or synthetic:private[,ids=N,...].")
@click.option("--public", metavar="CKPT", help="Public checkpoint to start from (pfd, insightface or AdaFace); "
              "default: pretrain (or reuse a cached) model from the recipe's [train] table.")
@click.option("--method", type=click.Choice(["pfd", "rta-only", "sre2l", "raw", "dp-pix", "blur"]),
              help="pfd (OGP+RTA), rta-only (no rotation), sre2l (BN+CE only), raw (real images), or the "
              "baselines dp-pix (DP pixelisation of raw's images) and blur (Gaussian blur of them).")
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
@click.option("--label-seed", type=int, help="[release] seed of the arbitrary label permutation.")
@click.option("--allow-linkable", is_flag=True, default=None,
              help="[release] publish even when the publication gate fails (pfd's own attacks link the proxies "
                   "above chance, or OGP missed its margin target). For benchmark baselines, not for publishing.")
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
      pfd distill --resume --ogp-steps 800                 # the gate refused: train OGP longer, redo the rest
      pfd distill --method rta-only --out rel-rta --state-dir st-rta --allow-linkable   # ablation row
      pfd distill --method dp-pix --epsilon 1 --out rel-dp --state-dir st-dp --allow-linkable
      pfd distill --method blur --blur-sigma 4 --out rel-blur --state-dir st-blur --allow-linkable
      pfd distill --recipe cross-age --private faces/ --public adaface_ir50.ckpt
      pfd distill --recipe cross-age --private faces/ --public r50.pt --resume
      accelerate launch --config_file recipes/accelerate-multi-gpu.yaml -m pfd distill \\
          --recipe surveillance --private faces/ --public r50.pt
      accelerate launch --multi_gpu --num_processes 2 -m pfd distill   # 2 CPU processes (gloo)

    The release is written only if the publication gate passes (OGP below its margin target; pfd's
    own VisMatch and Re-ID with the public and the adapted model at chance); otherwise nothing is
    published, the state is kept and the exit status is 3 (2 is a usage or input error).

    Private state goes to --state-dir (mode 0700; never publish it); see docs/distill.md.
    """
    from pfd.config import DistillConfig, build_config, load_recipe
    from pfd.config.checks import ignored_options
    from pfd.distill.gate import PublicationRefused
    from pfd.distill.pipeline import distill
    from pfd.distill.summary import format_summary

    given = {k for k, v in kw.items() if v is not None}
    r = load_recipe(recipe)
    ogp = {k: kw.pop(f"ogp_{k}") for k in ("head", "epochs", "batch_size", "lr")}
    ogp["max_steps"] = kw.pop("ogp_steps")
    ogp["min_steps"] = kw.pop("ogp_min_steps")
    ogp.update({k: kw.pop(k) for k in ("rep_margin", "lambda_rep", "lambda_iso")})
    rta = {k: kw.pop(k) for k in ("ipc", "iterations", "lambda_rta", "lambda_bn")}
    rta.update(batch_size=kw.pop("rta_batch_size"), lr=kw.pop("rta_lr"))
    release = {"label_seed": kw.pop("label_seed"), "allow_linkable": kw.pop("allow_linkable")}
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
        kw["size"] = _checkpoint_size(public)
    cfg = build_config(
        DistillConfig, {"pretrain": r.get("train", {})}, table,
        _flags(**kw), _nested(ogp=ogp, rta=rta, release=release, baseline=baseline),
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


if __name__ == "__main__":  # pragma: no cover
    main()
