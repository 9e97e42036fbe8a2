"""Pilot of issue 19's target-domain protocol: does a raw private release lift the pretrained model?

The setting the PFD paper measures utility in: a strong public pretrained model (the shared
MobileFaceNet, 87.9 % on CelebA crops at 112 x 96) meets a target domain only the private set
covers. ``surveillance``: CelebA's seeded split (150 public / 72 private / 72 test people), the
public people at full resolution, the private and test people at 16 x 19 pixels and back up
(``+lowres`` of :mod:`benchmarks.pu.data`). Rows, each the pretrained model fine-tuned for ``--epochs`` on:

* ``public-ft``: the public people alone (the control for the extra training);
* ``raw``: the public people + ``K`` low-resolution photos of each private person (a raw release);
* ``pfd`` (``--pfd``): the public people + ``pfd distill``'s release of the private people (``K``
  proxies each; OGP and RTA at the benchmark's settings, :data:`benchmarks.pu.settings.SETTINGS`), with the
  publication gate's verdict (recorded; the release is measured either way).

``base`` (no fine-tuning) is measured too. Utility is 10-fold verification accuracy and TAR at
FAR 1e-2 on the low-resolution test people's pairs, with a 95 % identity-bootstrap interval of each
difference against ``public-ft`` (:mod:`pfd.card.stats`). This is goal (a) of issue 19 on one seed: if raw
does not gain clearly here, the full benchmark cannot show what a release is worth.

Usage:
    python -m benchmarks.target_domain_pilot [--epochs 1] [--ipc 10] [--work DIR] [--threads 2]

Run by hand (minutes on 2 cores: two fine-tuning epochs of MobileFaceNet at 112 x 96).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]

from pfd.config import TrainConfig
from pfd.data.faceset import ConcatFaces, to_memory
from pfd.release.reader import read_release
from pfd.release.state_dir import StateDir
from pfd.embed import Embedder
from pfd.io import atomic_write_json
from pfd.nn.checkpoints import load_backbone
from pfd.train import train
from pfd.verify import tar_key, verification_metrics
from benchmarks.pu.data import SpecResolver
from pfd.data.pair_sampling import adaptive_pairs, pair_identities
from pfd.card.stats import identity_bootstrap_weights, paired_difference, weighted_kfold_accuracy, weighted_tar_at_far
from benchmarks.pu.units import per_identity

MODEL = REPO.parent / "shared" / "models" / "mobilefacenet-casia.ckpt"


def distill_pfd(private, model: Path, root: Path, *, ipc: int, iterations: int, seed: int = 0):
    """``pfd distill`` of the private people from the public model: ``(release as a FaceSet, gate)``."""
    from pfd.config import DistillConfig, build_config
    from pfd.distill.pipeline import distill
    from benchmarks.pu.settings import SETTINGS

    rel = root / "release"
    if not (rel / "manifest.json").is_file():
        cfg = build_config(DistillConfig, {
            "private": "celeba:private+lowres (in memory)", "public": str(model), "method": "pfd", "size": [112, 96],
            "out": str(rel), "state_dir": str(root / "state"), "mixed_precision": "no", "threads": torch.get_num_threads(),
            "ogp": dict(SETTINGS["ogp"], seed=seed),
            "rta": dict(SETTINGS["rta"], ipc=ipc, iterations=iterations, seed=seed, kmeans_seed=seed),
            "release": {"allow_linkable": True},  # measured either way; the gate's verdict is recorded
        })  # fmt: skip
        t0 = time.perf_counter()
        distill(cfg, faces=private, progress=False)
        print(f"pfd: distilled in {time.perf_counter() - t0:.0f} s", flush=True)
    gate = json.loads(StateDir.at(root / "state").summary.read_text()).get("gate")
    print("pfd gate: " + ", ".join(f"{c['name']} {'passed' if c['passed'] else 'FAILED'}" for c in gate["checks"]), flush=True)
    return to_memory(read_release(rel, size=(112, 96))), gate


def scores(model_path: Path, pairs) -> np.ndarray:
    emb = Embedder(load_backbone(model_path), batch_size=128)(pairs.faces)
    return (emb[pairs.left] * emb[pairs.right]).sum(1).numpy()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--work", default="/tmp/pfd-target-pilot")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--ipc", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--head-init", default="class_means")
    ap.add_argument("--pfd", action="store_true", help="also distill the private people with pfd and fine-tune on that")
    ap.add_argument("--iterations", type=int, default=60, help="RTA iterations of the pfd release")
    ap.add_argument("--pfd-seed", type=int, default=0, help="seed of the pfd distillation (OGP, K-means, RTA)")
    args = ap.parse_args(argv)
    root, model = Path(args.data_root), Path(args.model)
    if not (root / "celeba-faces").is_dir() or not model.is_file():
        print(f"SKIP: needs {root / 'celeba-faces'} and {model}")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.work)
    t0 = time.perf_counter()
    res = SpecResolver(root, size=(112, 96), celeba_center=0.68)
    public, private, test = res("celeba:public"), res("celeba:private+lowres"), res("celeba:test+lowres")
    release = private.subset(per_identity(private.labels, args.ipc, seed=0))  # a raw release: K photos a person
    pairs, info = adaptive_pairs(test, num_pairs=3000, seed=0)
    print(f"public {public.num_classes} people / {len(public)} images; release {len(release)} images of "
          f"{release.num_classes} private people; test pairs {info['used']} + {info['used']} ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    rows: dict[str, np.ndarray] = {"base": scores(model, pairs)}
    fits = [("public-ft", public), ("raw", ConcatFaces([public, release]))]
    gate = None
    if args.pfd:
        tag = "" if args.pfd_seed == 0 else f"-seed{args.pfd_seed}"
        pfd_release, gate = distill_pfd(private, model, work / f"pfd-distill{tag}", ipc=args.ipc, iterations=args.iterations,
                                        seed=args.pfd_seed)
        fits.append((f"pfd{tag}", ConcatFaces([public, pfd_release])))
    for name, data in fits:
        out = work / name
        path = out / "model.pt"
        if not path.is_file():
            cfg = TrainConfig(data=["celeba:public"] + ([f"{name} release"] if name != "public-ft" else []), size=[112, 96],
                              init=str(model), head="arcface", scale=32.0, margin=0.5, head_init=args.head_init,
                              epochs=max(1, int(np.ceil(args.epochs))), max_steps=None, batch_size=64, lr=args.lr,
                              warmup_epochs=0.1, out=str(out), mixed_precision="no", checkpoint_every=0, seed=0)
            t1 = time.perf_counter()
            train(cfg, faces=data, progress=False)
            print(f"{name}: fine-tuned in {time.perf_counter() - t1:.0f} s", flush=True)
        rows[name] = scores(path, pairs)
    issame = np.asarray(pairs.issame, dtype=bool)
    left, right = pair_identities(pairs)
    w = identity_bootstrap_weights(left, right, replicates=1000, seed=0)
    acc = lambda s, ww: weighted_kfold_accuracy(s, issame, ww)  # noqa: E731
    tar = lambda s, ww: weighted_tar_at_far(s, issame, ww, far=1e-2)  # noqa: E731
    doc: dict = {"settings": vars(args), "pairs": info, "rows": {}, "pfd_gate": gate}
    for name, s in rows.items():
        m = verification_metrics(s, issame)
        doc["rows"][name] = {"accuracy": m["accuracy"], "auc": m["auc"]}
        if name != "public-ft":
            doc["rows"][name]["vs_public_ft"] = {
                "accuracy": paired_difference(acc, [s], [rows["public-ft"]], w),
                tar_key(1e-2): paired_difference(tar, [s], [rows["public-ft"]], w)}
    for name, r in doc["rows"].items():
        d = r.get("vs_public_ft", {}).get("accuracy")
        diff = f"  diff vs public-ft {100 * d['diff']:+.1f} ({100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f})" if d else ""
        print(f"{name:10s} accuracy {100 * r['accuracy']:.1f} %  AUC {r['auc']:.3f}{diff}")
    name = "pilot.json" if args.pfd_seed == 0 else f"pilot-pfd-seed{args.pfd_seed}.json"
    atomic_write_json(work / name, json.loads(json.dumps(doc, default=float)), shared=True)
    print(f"total {time.perf_counter() - t0:.0f} s; {work / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
