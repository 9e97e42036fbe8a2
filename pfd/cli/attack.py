"""``pfd attack`` (the release scorecard), ``pfd attack mia`` and ``pfd attack dataset``."""

from __future__ import annotations

from typing import Any

import click

from pfd.cli.group import flags, main, refused_exit
from pfd.errors import PfdError


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


def _attack_options(fn: Any) -> Any:
    """One option per field of every registered attack's config (:func:`pfd.audit.contract.check_options`):
    a bool is an on/off switch, the rest take a value; the parameter is ``<attack>__<field>``."""

    import pfd.attacks.builtin  # noqa: F401 - registers the built-in attacks (their configs only: no torch)
    from pfd.audit.contract import check_options

    for opt in reversed(check_options()):
        name = f"{opt.attack}__{opt.field}"
        tp = opt.type if not isinstance(opt.type, str) else {"bool": bool, "int": int, "float": float, "str": str}.get(
            opt.type.split(" ")[0], str)
        if tp is bool or opt.type == "bool":
            fn = click.option(f"{opt.flag}/--no-{opt.flag[2:]}", name, default=None, help=opt.help)(fn)
        else:
            fn = click.option(opt.flag, name, type=tp if tp in (int, float) else str, help=opt.help)(fn)
    return fn


@main.group("attack", invoke_without_command=True)
@click.option("--recipe", help="TOML recipe; its [attack] table (and an attack's [attack.NAME] table) is used.")
@click.option("--release", help="The release folder to score.")
@click.option("--private", help="The private set the release came from (default: recorded in the state dir).")
@click.option("--state-dir", help="The publisher's state dir (proxy->source map, public and adapted models).")
@click.option("--report", help="Output folder for report.json, report.md, report.html (one self-contained page) and the plots.")
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
@_attack_options
@click.option("--reconstructor", help="module:function mapping embeddings (n, D) to images (n, 3, H, W) in [0, 1], "
              "used instead of the BN-prior inversion.")
@click.option("--downstream-steps", type=click.IntRange(min=1),
              help="Training steps of the membership test's downstream model (at least 1).")
@click.option("--batch-size", type=int, help="Embedding batch size.")
@click.option("--flip/--no-flip", default=None, help="Flip-fused embeddings.")
@click.option("--seed", type=int)
@click.option("--skip-bad", is_flag=True, default=None, help="Skip (and list) unreadable images instead of stopping.")
@click.option("--progress/--no-progress", default=True, help="Progress bars (only on a terminal; a line per stage otherwise).")
@click.pass_context
def attack_group(ctx: click.Context, recipe: str | None, reconstructor: str | None, downstream_steps: int | None,
                 progress: bool, **kw: Any) -> None:
    """Audit a release (scorecard) or a model (subcommands mia, dataset).

    Without a subcommand, runs the one audit on a release (the registered checks and attacks that
    pfd distill's gate and pfd card run, with the same verdict) and writes report.json, report.md
    (one summary table), report.html (the same as one self-contained page) and plots to --report:
    the release's integrity and private copies, OGP's margin and the judge's competence where they
    apply, linkability (VisMatch, Rank-1 Re-ID, their hubness-corrected forms, the rank of the
    source, class-level linking) with the public, the insider and the judge's model,
    reconstruction, attribute recovery and, with --public and --holdout, membership leakage through
    a downstream model. Exit status 3 when the verdict refuses the release.

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
    from pfd.attacks.report_folder import check_apart, report_folder
    from pfd.attacks.scorecard.report import summary_table, write_report
    from pfd.audit.engine import run_scorecard
    from pfd.config import AttackConfig, build_config, load_recipe

    table = dict(load_recipe(recipe).get("attack", {})) if recipe else {}
    attacks: dict[str, dict[str, Any]] = {}
    for key in [k for k in kw if "__" in k]:  # <attack>__<field>: an attack's own option
        value = kw.pop(key)
        if value is not None:
            attack, name = key.split("__", 1)
            attacks.setdefault(attack, {})[name] = value
    if downstream_steps is not None:
        membership = {**table.get("membership", {}), **attacks.get("membership", {})}
        attacks["membership"] = {**attacks.get("membership", {}),
                                 "downstream": {**membership.get("downstream", {}), "max_steps": downstream_steps}}
    cfg = build_config(AttackConfig, table, flags(**kw), attacks)
    if not cfg.release:
        click.echo(ctx.get_help())
        raise PfdError("pass --release RELEASE --state-dir STATE (or a subcommand: mia, dataset)")
    # A bad --reconstructor is an input error: refused before the report folder is made or claimed.
    recon = _load_reconstructor(reconstructor)
    mia = cfg.attacks.get("membership", {})
    check_apart(cfg.report, [("the release", cfg.release), ("--state-dir", cfg.state_dir), ("--private", cfg.private),
                             ("--public", mia.get("public", "")), ("--holdout", mia.get("holdout", ""))])
    with report_folder(cfg.report):  # pfd's own or new, one audit at a time, before any work
        card = run_scorecard(cfg, reconstructor=recon, progress=progress)
        paths = write_report(card, cfg.report)
    click.echo("\n".join(summary_table(card.rows)))
    for reason in card.data["skipped"].values():
        click.echo(f"skipped: {reason}")
    click.echo(f"report  {paths['markdown']}  ({paths['html']})")
    refused_exit(ctx, card.verdict is not None and not card.verdict.publishable)


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
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True,
              help="Cross-validation folds of the fused classifier (at least 2).")
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
