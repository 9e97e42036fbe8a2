"""Privacy-utility benchmark on real photos: the shape of the PFD paper's Table 3 / Fig. 3, on a CPU.

Each row publishes the private identities of Extended Yale B one way, trains a downstream model on
public data + that release, and measures what the release is worth and what it leaks:

* rows: ``base`` (the public model, no release), ``public-ft`` (the public model fine-tuned on the
  public data alone, the control for the extra training), ``raw``, ``blur``, ``dp-pix`` at two
  budgets ε, ``sre2l``, ``rta-only`` and ``pfd`` (all from :func:`pfd.distill.pipeline.distill`);
* utility: 10-fold verification accuracy and TAR@FAR on generated pairs of the held-out test
  identities (:func:`pfd.verify.verification_metrics`), on all their images and on Yale B's subsets
  1-3 (light within 50° of the camera axis, :func:`yale_data.moderate_light`); model = public model
  fine-tuned jointly on the public data and the release (the paper trains on public data + the
  release jointly);
* linkability: VisMatch and Rank-1 Re-ID of the release against all private images, with the
  public model and with the publisher's adapted model (insider), chance ``1/N``;
* membership: the geometric MIA (:func:`pfd.attacks.audit.membership_audit`) on the downstream
  model, members = private identities, non-members = test identities (same domain);
* wall time per row and the machine's load.

Results are written per row, atomically, to ``benchmarks/results/privacy_utility.json`` (and a
markdown table next to it); a rerun skips rows already there with the same settings (``--force``
recomputes). Everything heavy (public model, releases, state dirs, downstream models) lives in
``--work`` (default ``$PFD_CACHE_DIR/bench/privacy_utility``, else ``~/.cache/pfd/bench/...``),
outside the repository: releases of ``raw`` are copies of the photos. The settings, the data
split and what was measured are documented in docs/benchmarks.md.

Usage:
    python benchmarks/privacy_utility.py [--data-root DIR] [--rows pfd raw] [--force] [--quick]

The committed results make a plain rerun print them; ``--force`` recomputes every row.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(Path(__file__).resolve().parent)]

from pfd.attacks.audit import membership_audit, resolve_head  # noqa: E402
from pfd.attacks.linkability import rank1_reid, visual_matching  # noqa: E402
from pfd.attacks.models import load_attacker  # noqa: E402
from pfd.attacks.report import jsonable  # noqa: E402
from pfd.attacks.state import open_release_state, proxy_sources  # noqa: E402
from pfd.config import DistillConfig, TrainConfig, build_config, config_to_dict, load_recipe  # noqa: E402
from pfd.data.faceset import ConcatFaces, FaceSet, to_memory  # noqa: E402
from pfd.data.pairs import generate_pairs  # noqa: E402
from pfd.data.release import read_release  # noqa: E402
from pfd.data.release_lint import lint_release  # noqa: E402
from pfd.data.sources import open_faces  # noqa: E402
from pfd.distill.pipeline import Distillation, distill  # noqa: E402
from pfd.embed import Embedder  # noqa: E402
from pfd.io import atomic_write_json, atomic_write_text  # noqa: E402
from pfd.nn.checkpoints import load_backbone, load_checkpoint  # noqa: E402
from pfd.train import train  # noqa: E402
from pfd.verify import tar_at_far, verification_metrics  # noqa: E402
from pu_report import markdown  # noqa: E402
from yale_data import N_PRIVATE, find_data_root, moderate_light, split_yale_b, yale_a, yale_b  # noqa: E402

#: Rows in table order: (name, distill method or None, baseline settings).
ROWS: list[tuple[str, str | None, dict[str, Any]]] = [
    ("base", None, {}),
    ("public-ft", None, {}),
    ("raw", "raw", {}),
    ("blur", "blur", {}),
    ("dp-pix ε=1", "dp-pix", {"epsilon": 1.0}),
    ("dp-pix ε=10", "dp-pix", {"epsilon": 10.0}),
    ("sre2l", "sre2l", {}),
    ("rta-only", "rta-only", {}),
    ("pfd", "pfd", {}),
]
#: Methods whose fine-tuning is identical (N-class head, no rotation): one shared run.
PLAIN_FINETUNE = ("raw", "blur", "dp-pix", "sre2l", "rta-only")

# Settings. Model and distillation recipe: the demo recipe's choices (tuned on synthetic data,
# docs/distill.md), at 48 px; see docs/benchmarks.md for why each number.
SETTINGS: dict[str, Any] = {
    "size": 48,
    "split": {"seed": 0, "private": N_PRIVATE},
    "model": {"backbone": "ir18", "width": 0.25, "embedding_dim": 64},
    "public": {"synthetic": "synthetic:public", "head": "arcface", "scale": 32.0, "margin": 0.3, "epochs": 6,
               "batch_size": 64, "lr": 0.1, "warmup_epochs": 0.5, "seed": 0},
    "ogp": {"head": "adaface", "scale": 32.0, "margin": 0.4, "rep_margin": 0.1, "lambda_rep": 5.0, "lambda_iso": 1.0,
            "epochs": 5, "batch_size": 48, "lr": 0.05, "warmup_epochs": 1.0, "init_scale": 0.1, "checkpoint_every": 0,
            "seed": 0},
    "rta": {"ipc": 5, "iterations": 200, "batch_size": 70, "lr": 0.05, "betas": [0.5, 0.9], "lambda_rta": 50.0,
            "lambda_bn": 0.01, "first_bn_multiplier": 10.0, "crop_scale": [1.0, 1.0], "flip": False, "shift": 0,
            "kmeans_n_init": 4, "seed": 0, "kmeans_seed": 0},
    "downstream": {"synthetic": "synthetic:public,ids=60", "head": "arcface", "scale": 32.0, "margin": 0.3,
                   "epochs": 4, "batch_size": 64, "lr": 0.05, "warmup_epochs": 0.5, "seed": 0},
    "eval": {"pairs": 5000, "moderate_pairs": 3000, "moderate_light": 50.0, "folds": 10, "flip": True, "seed": 0,
             "fars": [1e-2, 1e-3]},
    "mia": {"folds": 5, "seed": 0},
}
#: --quick: a smoke test of the whole script in a few minutes (figures mean nothing).
QUICK = {"size": 32, "public": {"epochs": 1}, "ogp": {"epochs": 1}, "rta": {"ipc": 2, "iterations": 5},
         "downstream": {"epochs": 1, "synthetic": "synthetic:public,ids=20"}, "eval": {"pairs": 500, "moderate_pairs": 300}}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def settings_hash(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Bench:
    """One benchmark run: the data, the cached public model and the per-row work folders."""

    def __init__(self, settings: dict[str, Any], *, data_root: Path, work: Path, progress: bool) -> None:
        self.s, self.work, self.progress = settings, work, progress
        size = settings["size"]
        faces, counts = yale_b(data_root, size=size)
        self.private, self.test = split_yale_b(faces, seed=settings["split"]["seed"], n_private=settings["split"]["private"])
        self.yale_a = yale_a(data_root, size=size)
        self.data_info = {
            "yale_b": {**counts, "kept": len(faces), "identities": faces.num_classes},
            "private": {"identities": self.private.identities, "images": len(self.private)},
            "test": {"identities": self.test.identities, "images": len(self.test)},
            "yale_a": {"identities": self.yale_a.num_classes, "images": len(self.yale_a)},
        }
        e = settings["eval"]
        lit = moderate_light(self.test, max_angle=e["moderate_light"])
        self.data_info["test"]["moderate_light_images"] = len(lit)
        #: Pair sets the utility is measured on: every test image, and subsets 1-3 only.
        self.pairs = {"all": generate_pairs(self.test, num_pairs=e["pairs"], seed=e["seed"]),
                      "moderate": generate_pairs(lit, num_pairs=e["moderate_pairs"], seed=e["seed"])}

    # -- the public model -----------------------------------------------------------------
    def _train_config(self, part: dict[str, Any], *, out: Path, data: list[str], init: str | None) -> TrainConfig:
        keys = ("head", "scale", "margin", "epochs", "batch_size", "lr", "warmup_epochs", "seed")
        return build_config(TrainConfig, self.s["model"], {k: part[k] for k in keys}, {
            "data": data, "size": self.s["size"], "out": str(out), "init": init, "checkpoint_every": 0, "min_images": 1,
            "mixed_precision": "no",
        })  # fmt: skip

    def public_model(self) -> tuple[Path, float]:
        """Train (or reuse) the public model on synthetic:public + cropped Yale A; (path, seconds)."""
        p = self.s["public"]
        out = self.work / "public"
        cfg = self._train_config(p, out=out, data=[p["synthetic"], "yale-a (cropped, in memory)"], init=None)
        if _same_training(out / "model.pt", cfg):
            return out / "model.pt", 0.0
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        faces = ConcatFaces([to_memory(open_faces(p["synthetic"], size=self.s["size"])), self.yale_a])
        path = train(cfg, faces=faces, progress=self.progress)
        return path, time.perf_counter() - t0

    # -- distillation ---------------------------------------------------------------------
    def distill_config(self, method: str, baseline: dict[str, Any], *, root: Path, public: Path, resume: bool) -> DistillConfig:
        return build_config(DistillConfig, {
            "private": "extended-yale-b-cropped (private split, in memory)", "public": str(public), "method": method,
            "out": str(root / "release"), "state_dir": str(root / "state"), "resume": resume, "size": self.s["size"],
            "mixed_precision": "no", "threads": torch.get_num_threads(),
            "ogp": self.s["ogp"], "rta": self.s["rta"], "baseline": baseline,
            # Every row is measured, linkable or not; the gate's verdict is kept in the summary.
            "release": {"allow_linkable": True},
        })  # fmt: skip

    def plain_finetune(self, public: Path) -> tuple[Path, float]:
        """The fine-tuning shared by the non-rotating methods (identical runs), done once."""
        root = self.work / "finetune-plain"
        cfg = self.distill_config("raw", {}, root=root, public=public, resume=False)
        st = root / "state"
        if (st / "adapted.pt").is_file() and (st / "config.toml").is_file():
            if load_recipe(st / "config.toml").get("distill") == _toml_roundtrip(config_to_dict(cfg)):
                return st / "adapted.pt", 0.0
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        run = Distillation(cfg, faces=self.private, progress=self.progress)
        run.public()
        run.adapt()
        return st / "adapted.pt", time.perf_counter() - t0

    def distill_row(self, method: str, baseline: dict[str, Any], root: Path, public: Path,
                    shared: Path | None) -> dict[str, Any]:
        """Run the pipeline for one method; a shared fine-tuned model is seeded into the state dir."""
        if shared is not None:
            st = root / "state"
            st.mkdir(parents=True)
            shutil.copyfile(public, st / "public_model.pt")
            shutil.copyfile(shared, st / "adapted.pt")  # the pipeline's resume skips fine-tuning
        cfg = self.distill_config(method, baseline, root=root, public=public, resume=shared is not None)
        return distill(cfg, faces=self.private, progress=self.progress).summary

    # -- downstream model, utility, attacks --------------------------------------------------
    def downstream(self, public: Path, release: Path | None, out: Path) -> Path:
        d = self.s["downstream"]
        data = [d["synthetic"], "yale-a (cropped, in memory)"] + (["release"] if release else [])
        cfg = self._train_config(d, out=out, data=data, init=str(public))
        sources: list[FaceSet] = [to_memory(open_faces(d["synthetic"], size=self.s["size"])), self.yale_a]
        if release is not None:
            sources.append(to_memory(read_release(release, size=self.s["size"])))
        return train(cfg, faces=ConcatFaces(sources), progress=self.progress)

    def utility(self, model_path: Path) -> dict[str, Any]:
        """Verification on the test identities' pairs, all images (top level, as before) and subsets
        1-3 (under ``"moderate"``): :func:`pfd.verify.verification_metrics` and TAR at the FARs the
        pair count resolves (5000 impostors: 1e-3 means 5 false accepts)."""
        e = self.s["eval"]
        embedder = Embedder(load_backbone(model_path), flip=e["flip"], progress=False)
        out: dict[str, Any] = {}
        for kind, pairs in self.pairs.items():
            emb = embedder(pairs.faces)  # (n, D)
            scores = (emb[pairs.left] * emb[pairs.right]).sum(1).double().numpy()
            metrics = verification_metrics(scores, pairs.issame, folds=e["folds"])
            for far in e["fars"]:
                metrics[f"tar@far={far:g}"] = tar_at_far(scores, pairs.issame, far)[0]
            if kind == "all":
                out.update(metrics)
            else:
                out[kind] = metrics
        return out

    def linkability(self, root: Path) -> dict[str, Any]:
        state = open_release_state(root / "release", root / "state")
        out: dict[str, Any] = {}
        for role, path in (("public", state.public_model), ("insider", state.adapted_model)):
            a = load_attacker(path, role=role, progress=False)
            proxies = read_release(root / "release", size=a.size)
            source = proxy_sources(state, proxies.names, self.private)
            g, q = a.embed(self.private), a.embed(proxies)
            out[role] = {"vismatch": visual_matching(q, source, g, self.private.labels).as_dict(),
                         "reid": rank1_reid(q, source, g, self.private.labels).as_dict()}
        return out

    def membership(self, model_path: Path) -> dict[str, Any]:
        m = self.s["mia"]
        kind, s, margin, _ = resolve_head(model_path, None, None, None)
        rep = membership_audit(load_attacker(model_path, role="downstream", progress=False), self.private, self.test,
                               head=kind, scale=s, margin=margin, folds=m["folds"], seed=m["seed"])
        # The per-identity statistics ("scores") stay: they let a later verdict be recomputed.
        for st in rep["statistics"].values():
            st.pop("roc", None)
        return rep

    # -- one row ----------------------------------------------------------------------------
    def row(self, name: str, method: str | None, baseline: dict[str, Any], public: Path,
            plain: tuple[Path, float] | None) -> dict[str, Any]:
        root = self.work / "rows" / _slug(name)
        shutil.rmtree(root, ignore_errors=True)  # an unfinished row starts over
        root.mkdir(parents=True)
        res: dict[str, Any] = {"row": name, "method": method or name, "load_start": _load()}
        times: dict[str, float] = {}
        t0 = time.perf_counter()
        release = None
        if method is not None:
            shared = plain[0] if plain and method in PLAIN_FINETUNE else None
            t = time.perf_counter()
            summary = self.distill_row(method, baseline, root, public, shared)
            times["distill"] = time.perf_counter() - t
            res["distill"] = {"times_s": summary["times_s"], "rates": summary["rates"], "counts": summary["counts"],
                              "gate": summary.get("gate"),
                              "losses": summary["losses"], "baseline": summary.get("baseline"),
                              "shared_finetune_s": plain[1] if shared is not None else None}
            release = root / "release"
            res["lint_findings"] = [f.kind for f in lint_release(release, private=self.private, state_dir=root / "state")]
        if name == "base":
            model = public
        else:
            t = time.perf_counter()
            model = self.downstream(public, release, root / "downstream")
            times["downstream"] = time.perf_counter() - t
        t = time.perf_counter()
        res["utility"] = self.utility(model)
        times["utility"] = time.perf_counter() - t
        if release is not None:
            t = time.perf_counter()
            res["linkability"] = self.linkability(root)
            times["linkability"] = time.perf_counter() - t
        t = time.perf_counter()
        res["membership"] = self.membership(model)
        times["membership"] = time.perf_counter() - t
        times["total"] = time.perf_counter() - t0
        res.update(times_s={k: round(v, 1) for k, v in times.items()}, load_end=_load())
        return res


def _same_training(path: Path, cfg: TrainConfig) -> bool:
    if not path.is_file():
        return False
    stored = (load_checkpoint(path).get("config") or {}).get("train")
    return stored == config_to_dict(cfg)


def _toml_roundtrip(d: dict[str, Any]) -> dict[str, Any]:
    """What a config dict reads back as from config.toml (tuples as lists, no None values)."""
    return {k: _toml_roundtrip(v) if isinstance(v, dict) else list(v) if isinstance(v, tuple) else v
            for k, v in d.items() if v is not None}


def _slug(name: str) -> str:
    return name.replace("ε=", "eps").replace(" ", "-")


def _machine() -> dict[str, Any]:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", help="folder holding extended-yale-b-cropped/ and yale-a/ "
                    "(default: ../shared/data next to the repo, then /work/shared/data)")
    ap.add_argument("--work", help="folder for models, releases and state dirs (outside the repo)")
    ap.add_argument("--results", default=str(REPO / "benchmarks" / "results"), help="where the .json and .md go")
    ap.add_argument("--rows", nargs="+", help="only these rows (names as in the table)")
    ap.add_argument("--force", action="store_true", help="recompute rows already in the results")
    ap.add_argument("--quick", action="store_true", help="smoke test on tiny settings (results in the work dir)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: best on a shared 2-core machine)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    data_root = find_data_root(args.data_root, REPO)
    if data_root is None:
        print(f"SKIP: no extended-yale-b-cropped/ and yale-a/ under {args.data_root or '../shared/data or /work/shared/data'}; "
              "pass --data-root DIR")
        return 0
    torch.set_num_threads(args.threads)
    settings = _merge(SETTINGS, QUICK) if args.quick else SETTINGS
    cache = Path(os.environ.get("PFD_CACHE_DIR", Path.home() / ".cache" / "pfd")).expanduser()
    work = Path(args.work).expanduser() if args.work else cache / "bench" / ("privacy_utility_quick" if args.quick else "privacy_utility")
    results = work / "results" if args.quick and args.results == str(REPO / "benchmarks" / "results") else Path(args.results)
    json_path, md_path = results / "privacy_utility.json", results / "privacy_utility.md"
    key = settings_hash(settings)
    doc: dict[str, Any] = json.loads(json_path.read_text()) if json_path.is_file() else {}
    if doc.get("settings_hash") != key or (args.force and not args.rows):
        # A full --force run starts an empty table, so that if it is interrupted, a plain rerun
        # continues it instead of keeping the old rows it had not reached.
        doc = {"rows": {}}
    names = [r[0] for r in ROWS]
    unknown = sorted(set(args.rows or []) - set(names))
    if unknown:
        ap.error(f"unknown row(s) {unknown}; choose from {names}")
    todo = [r for r in ROWS if (not args.rows or r[0] in args.rows) and (args.force or r[0] not in doc["rows"])]

    if not todo:
        print(f"every row is already in {json_path} with these settings (--force recomputes them):\n")
        print(markdown(doc))
        return 0
    t_start = time.perf_counter()
    print(f"data {data_root}; work {work}; {len(todo)} row(s) to run; load {_load()}", flush=True)
    bench = Bench(settings, data_root=data_root, work=work, progress=not args.no_progress and sys.stderr.isatty())
    doc.update(format="pfd-privacy-utility", version=1, settings=settings, settings_hash=key, data=bench.data_info,
               machine=_machine())
    public, t_public = bench.public_model()
    if t_public:
        doc["public_model_s"] = round(t_public, 1)
    plain = None
    for name, method, baseline in todo:
        if method in PLAIN_FINETUNE and plain is None:
            plain = bench.plain_finetune(public)
            if plain[1]:
                doc["shared_finetune_s"] = round(plain[1], 1)
        print(f"[{name}] start, load {_load()}", flush=True)
        doc["rows"][name] = res = jsonable(bench.row(name, method, baseline, public, plain))
        doc["row_order"] = names
        doc["date"] = time.strftime("%Y-%m-%d %H:%M %Z")
        atomic_write_json(json_path, doc)
        atomic_write_text(md_path, markdown(doc))
        u = res["utility"]
        print(f"[{name}] done in {res['times_s']['total']:.0f}s: acc {u['accuracy']:.3f} (subsets 1-3 "
              f"{u['moderate']['accuracy']:.3f}), TAR@1e-2 {u['tar@far=0.01']:.3f}, load {res['load_end']}", flush=True)
    if todo:
        doc["last_run_s"] = round(time.perf_counter() - t_start, 1)
        atomic_write_json(json_path, doc)
        atomic_write_text(md_path, markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
