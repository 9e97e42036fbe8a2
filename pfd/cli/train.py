"""``pfd train``, ``pfd eval`` and ``pfd synth``: models and data."""

from __future__ import annotations

from typing import Any

import click

from pfd.cli.group import checkpoint_size, flags, main, recipe_table


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
    table = recipe_table(recipe, "train")
    if kw.get("init") and kw.get("size") is None:  # a checkpoint knows its input size
        kw["size"] = checkpoint_size(kw["init"])
    cfg = build_config(TrainConfig, table, flags(**kw))
    t0 = time.perf_counter()
    path = train(cfg, resume=resume, progress=progress)
    state = PartialState()  # the training run's (already initialised) process group
    if state.is_main_process:
        ck = load_checkpoint(path)
        click.echo(f"model      {path}\nsteps      {ck.get('step')}\nprocesses  {state.num_processes}\n"
                   f"time       {time.perf_counter() - t0:.1f} s")


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

    cfg = build_config(EvalConfig, recipe_table(recipe, "eval"), flags(**kw))
    metrics = evaluate(cfg, progress=progress)
    click.echo(format_metrics_table(metrics))


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
