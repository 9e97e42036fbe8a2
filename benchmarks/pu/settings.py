"""The benchmark's settings, rows and scenarios' quick variant, and the naming of its units.

Part of the privacy-utility benchmark (``benchmarks/privacy_utility.py``; :mod:`pu`).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

import torch

from pfd.config import load_recipe
from pfd.verify import tar_key
from benchmarks.pu.data import Scenario

REPO = Path(__file__).resolve().parents[2]

#: Where each protocol's current table is committed (``--results``' default): ``privacy_utility.py``
#: continues it from its units and ``pu_ablation.py`` pairs its variants with it. A table whose
#: settings change what its units mean starts a new folder, so the previous one stays readable
#: (target-v5 is issue 35's: the one audit with the judge, the ncfm row; the table before it sits
#: one folder up, where goal (e) reads it).
RESULTS: dict[str, Path] = {"trained": REPO / "benchmarks" / "results",
                            "target": REPO / "benchmarks" / "results" / "target-v5"}


RECIPE = REPO / "recipes" / "celeba-public.toml"


#: The target protocol's public model: the shared pretrained MobileFaceNet (read in place, never copied).
MODEL_FILE = "mobilefacenet-casia.ckpt"


#: Rows in table order: (name, distill method or None, baseline settings).
ROWS: list[tuple[str, str | None, dict[str, Any]]] = [
    ("base", None, {}),
    ("public-ft", None, {}),
    ("raw", "raw", {}),
    ("blur", "blur", {}),
    ("dp-pix", "dp-pix", {"epsilon": 10.0}),
    ("sre2l", "sre2l", {}),
    ("rta-only", "rta-only", {}),
    ("ncfm", "ncfm", {}),
    ("pfd", "pfd", {}),
]


#: Methods whose fine-tuning is identical (N-class head, no rotation): one shared run per seed.
PLAIN_FINETUNE = ("raw", "blur", "dp-pix", "sre2l", "rta-only", "ncfm")


#: Settings one row changes for itself, ``{row: {"rta": {...}, "ogp": {...}}}`` (e.g. the pfd row's
#: de-linking term): outside the unit hash, so that the other rows' units stay, and recorded in each
#: unit of that row (``row_settings``), whose unit runs again when its record differs (:func:`unit_current`).
ROW_KEY = "row_settings"
#: The sections a row may change: what its distillation depends on, not the shared data or downstream.
ROW_SECTIONS = ("rta", "ogp")

#: Statistics of the MIA compared with base (a-priori AUC, higher = member).
MIA_STATS = ("pair_cos", "vmf_kappa", "pen_logit", "proto_ce")

#: The benchmark's TAR (at FAR 1e-2), under the name every pfd figure gives it (``tar@far=0.01``).
TAR = tar_key(1e-2)


# Settings (docs/benchmarks.md says why each number). The committed table was run at these values
# from a fresh clone. Its ablations say a heavier downstream (6 epochs, lr 0.05) and a larger K
# would make utility and membership more measurable; both cost more than the 90-min budget has.
SETTINGS: dict[str, Any] = {
    "seeds": 3,
    # celeba_center: the central 0.68 of each loose CelebA crop (~76 of 112 px, the detection box).
    "split": {"celeba": {"seed": 0, "private": 72, "test": 72, "min_images": 10}, "yale_seed": 0, "yale_private": 28,
              "celeba_center": 0.68},
    "ogp": {"head": "adaface", "scale": 32.0, "margin": 0.4, "rep_margin": 0.1, "lambda_rep": 5.0, "lambda_iso": 1.0,
            "epochs": 2, "batch_size": 64, "lr": 0.05, "warmup_epochs": 0.5, "init_scale": 0.1, "checkpoint_every": 0,
            # No 200-step floor (it would quadruple the fine-tuning of 1,589 images): OGP's own margin
            # extension (to 95 % below the margin) is what keeps pfd's rotation complete, and the
            # plain fine-tune of the other rows keeps its 2 epochs. --plan counts the 2 epochs only.
            "min_steps": 0},
    # RTA 60 iterations: 120 changed nothing measurable (docs/benchmarks.md, Ablations), but 40
    # (the v3 run) left pfd's proxies linkable on 1 of 3 seeds per scenario and the gate refused them.
    "rta": {"ipc": 2, "iterations": 60, "batch_size": 96, "lr": 0.05, "betas": [0.5, 0.9], "lambda_rta": 50.0,
            "lambda_bn": 0.01, "first_bn_multiplier": 10.0, "crop_scale": [1.0, 1.0], "flip": False, "shift": 0,
            "kmeans_n_init": 4},
    # Downstream = the public model fine-tuned on a fixed sample of the public images + the
    # release, 2 epochs (public-ft: the sample alone); the sample keeps the release a real share.
    "downstream": {"head": "arcface", "scale": 32.0, "margin": 0.4, "epochs": 2, "public_images": 768,
                   "batch_size": 64, "lr": 0.02, "warmup_epochs": 0.2},
    "eval": {"pairs": 3000, "moderate_pairs": 2000, "moderate_light": 50.0, "folds": 10, "flip": False, "seed": 0,
             "fars": [1e-2, 1e-3], "bootstrap": 1000},
    "recon": {"iterations": 50, "batch_size": 72, "lr": 0.1, "lambda_bn": 0.01, "per_identity": 1, "seeds": 1},
    "mia": {"folds": 5, "seed": 0},
}


#: The target-domain protocol (issue 19; the paper's setting): the public model is the shared
#: pretrained MobileFaceNet (CASIA-WebFace, 112 x 96; no public training in the run), the public
#: data are CelebA's public people at full resolution, and the private and test people come from a
#: domain the public model is weak on (:data:`benchmarks.pu.data.TARGET_SCENARIOS`). The downstream is the
#: pilot's measured protocol (docs/benchmarks.md, "Target-domain pilot"): one epoch over all the
#: public images + the release, SGD 0.01, ArcFace s 32 m 0.5 with the head at the class means.
#: Releases at the paper's K = 10 images per identity. Seeds go where they decide the goals:
#: public-ft and raw (goal a) on 3, pfd on ``seeds``, the other rows on 1 (``row_seeds``).
TARGET: dict[str, Any] = {
    "protocol": "target",
    "seeds": 2,
    "row_seeds": {"public-ft": 3, "raw": 3, "blur": 1, "dp-pix": 1, "sre2l": 1, "rta-only": 1, "ncfm": 1},
    "public_model": {"checkpoint": MODEL_FILE, "size": [112, 96]},
    # celeba_center 0.68: the model card's cut (central 0.68 of the width, 112:96 tall).
    "split": {"celeba": {"seed": 0, "private": 72, "test": 72, "min_images": 10}, "yale_seed": 0, "yale_private": 28,
              "celeba_center": 0.68},
    "ogp": SETTINGS["ogp"],
    "rta": dict(SETTINGS["rta"], ipc=10),
    "downstream": {"head": "arcface", "scale": 32.0, "margin": 0.5, "head_init": "class_means", "epochs": 1,
                   "public_images": 0, "batch_size": 64, "lr": 0.01, "warmup_epochs": 0.1},
    "eval": SETTINGS["eval"],
    "recon": SETTINGS["recon"],
    "mia": SETTINGS["mia"],
}


#: The target protocol's judge (issue 26): a face model that no loss of pfd ever sees, of another
#: architecture than the public MobileFaceNet (an IResNet-18 at quarter width), trained here on the
#: public people (CelebA's public split and Yale A) at the release's size. It is the third attacker
#: of every linkability figure and the publication gate's judge (``release.judge``), so that a
#: de-linking term that optimises against the public model is judged by a model it never saw.
JUDGE: dict[str, Any] = {
    "train": {"data": ["celeba:public", "yale-a"], "size": [112, 96], "backbone": "ir18", "width": 0.25,
              "embedding_dim": 128, "head": "arcface", "scale": 32.0, "margin": 0.4, "epochs": 10, "batch_size": 64,
              "lr": 0.1, "warmup_epochs": 1.0, "flip": True, "min_images": 1, "checkpoint_every": 0, "seed": 1},
    "augment": {},
}
TARGET["judge_model"] = JUDGE
#: The rows' own settings (:data:`ROW_KEY`): none. The pfd row carried the de-linking term against
#: the public model (lambda_delink 10, the demo's) for one seed per scenario on 2026-12-05, and the
#: one audit refused both releases (``target-v5/pfd_delink_units.json``): on celeba the public
#: model's hubness-corrected VisMatch linked 7.2 % (chance 1.4 %) with every source rank uniform; on
#: surveillance, where the public model is weak, the term could not pull proxies towards their
#: sources and the public source rank was skewed far (mean 0.576, p 5e-05). Without it the celeba
#: control is refused by the public model (source rank p 5e-05), surveillance is not.
TARGET[ROW_KEY] = {}


#: --quick of the target protocol: a tiny random MobileFaceNet trained for one epoch on synthetic
#: faces stands in for the pretrained file (no shared data or model needed; figures mean nothing).
QUICK_TARGET: dict[str, Any] = {
    "seeds": 2,
    "public_model": {"train": {"data": ["synthetic:public,ids=24,imgs=10"], "backbone": "mobilefacenet",
                               "size": [48, 32], "width": 0.125, "embedding_dim": 32, "epochs": 1, "batch_size": 32,
                               "head": "arcface", "scale": 32.0, "margin": 0.3, "checkpoint_every": 0},
                     "augment": {}},
    "ogp": {"epochs": 1, "batch_size": 32}, "rta": {"ipc": 2, "iterations": 3, "batch_size": 32},
    "downstream": {"epochs": 1, "public_images": 96, "batch_size": 32},
    "eval": {"pairs": 150, "moderate_pairs": 100, "bootstrap": 100},
    "recon": {"iterations": 2, "batch_size": 16},
    "judge_model": {"train": {"data": ["synthetic:public,ids=24,imgs=10"], "backbone": "ir18", "size": [48, 32],
                              "width": 0.125, "embedding_dim": 32, "epochs": 1, "batch_size": 32, "head": "arcface",
                              "scale": 32.0, "margin": 0.3, "checkpoint_every": 0, "seed": 1},
                    "augment": {}},
}


#: --quick: a smoke test of the whole script on synthetic data in a few minutes (figures mean nothing).
QUICK: dict[str, Any] = {
    "seeds": 2,
    "public_train": {"data": ["synthetic:public,ids=24,imgs=10"], "size": 32, "width": 0.25, "embedding_dim": 64,
                     "epochs": 1, "batch_size": 32, "scale": 32.0, "margin": 0.3, "checkpoint_every": 3},
    "ogp": {"epochs": 1, "batch_size": 32}, "rta": {"ipc": 2, "iterations": 4, "batch_size": 32},
    "downstream": {"epochs": 1, "public_images": 96, "batch_size": 32},
    "eval": {"pairs": 150, "moderate_pairs": 100, "bootstrap": 100},
    "recon": {"iterations": 3, "batch_size": 16},
}


QUICK_SCENARIO = Scenario("synthetic", ("synthetic:public,ids=24,imgs=10",), "synthetic:private,ids=10,imgs=6",
                          "synthetic:test,ids=10,imgs=6")


def merge_settings(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge_settings(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def settings_hash(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


#: Settings that choose which units run, not what any unit computes.
RUN_KEYS = ("seeds", "row_seeds")


def unit_hash(settings: dict[str, Any]) -> str:
    """The hash of what every unit's figures depend on: ``settings`` without the seed counts (a row's
    added seed joins the units already measured) and without the per-row settings (:data:`ROW_KEY`)."""
    return settings_hash({k: v for k, v in settings.items() if k not in (*RUN_KEYS, ROW_KEY)})


def row_overrides(settings: dict[str, Any], name: str) -> dict[str, Any]:
    """Row ``name``'s own settings (:data:`ROW_KEY`; ``{}`` for a row with none).

    Raises:
        ValueError: When a row changes a section other than :data:`ROW_SECTIONS`.
    """
    over = copy.deepcopy((settings.get(ROW_KEY) or {}).get(name, {}))
    bad = sorted(set(over) - set(ROW_SECTIONS))
    if bad:
        raise ValueError(f"row {name!r} changes {bad}: a row may change only {list(ROW_SECTIONS)} "
                         "(a change of the shared data or downstream is a new table)")
    return over


def row_view(settings: dict[str, Any], name: str) -> dict[str, Any]:
    """``settings`` as row ``name``'s units run them: its own settings merged in, the per-row table dropped."""
    return merge_settings({k: v for k, v in settings.items() if k != ROW_KEY}, row_overrides(settings, name))


def unit_current(unit: dict[str, Any] | None, settings: dict[str, Any]) -> bool:
    """Whether a stored unit exists and was made with its row's current settings (a unit from before
    rows had settings of their own records none, i.e. ``{}``)."""
    return unit is not None and unit.get("row_settings", {}) == row_overrides(settings, unit.get("row", ""))


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 (12 hex digits) of the ``pfd`` package's Python sources: part of the key of every cached
    release and fine-tune (:meth:`benchmarks.pu.units.Bench.release_dir`), so that a change of the
    code that distils is never answered by a release an older version made (a fix of the rank jitter
    was once measured on a release cached before it)."""
    root = REPO / "pfd"
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def public_settings(quick: bool) -> dict[str, Any]:
    """The public model's [train] and [augment] tables (the recipe, shrunk by --quick)."""
    rec = load_recipe(RECIPE)
    train_t, aug = dict(rec["train"]), dict(rec.get("augment", {}))
    if quick:
        train_t.update(QUICK["public_train"])
    return {"train": train_t, "augment": aug}


def protocol_settings(protocol: str, *, quick: bool = False) -> dict[str, Any]:
    """The benchmark's settings of ``protocol`` (``target`` or ``trained``), shrunk by ``quick``:
    what ``privacy_utility.py`` runs and what ``pu_ablation.py`` compares with."""
    if protocol == "target":
        settings = merge_settings(TARGET, QUICK_TARGET) if quick else copy.deepcopy(TARGET)
        if quick:  # tiny models trained here stand in for the pretrained file and the judge
            settings["public_model"] = copy.deepcopy(QUICK_TARGET["public_model"])
            settings["judge_model"] = copy.deepcopy(QUICK_TARGET["judge_model"])
        return settings
    settings = merge_settings(SETTINGS, QUICK) if quick else copy.deepcopy(SETTINGS)
    settings.pop("public_train", None)
    settings["public_model"] = public_settings(quick)
    return settings


def shared_root(kind: str, given: str | None, *, need: str = "") -> Path | None:
    """The shared ``data`` or ``models`` folder: ``given``, else ``../shared/<kind>`` next to the
    repo, else ``/work/shared/<kind>``; the first that is a folder (holding ``need`` when named)."""
    candidates = [Path(given).expanduser()] if given else [REPO.parent / "shared" / kind, Path("/work/shared") / kind]
    return next((c.resolve() for c in candidates if c.is_dir() and (not need or (c / need).exists())), None)


def apply_seeds(settings: dict[str, Any], seeds: int) -> dict[str, Any]:
    """``settings`` with ``--seeds N``: every row at most ``N`` seeds (``row_seeds`` capped too)."""
    out = dict(settings, seeds=int(seeds))
    out["row_seeds"] = {k: min(int(v), int(seeds)) for k, v in settings.get("row_seeds", {}).items()}
    return out


def row_seeds(name: str, settings: dict[str, Any]) -> list[int]:
    """Seeds of a row: ``base`` one, a row named in ``settings["row_seeds"]`` that many, the
    others ``settings["seeds"]``."""
    if name == "base":
        return [0]
    return list(range(int(settings.get("row_seeds", {}).get(name, settings["seeds"]))))


def finished_seeds(name: str, settings: dict[str, Any], units: dict[str, Any]) -> list[int]:
    """Seeds a row's summary reads: those this run asks for (:func:`row_seeds`) and every other seed
    whose unit is already finished. A ``--seeds 1`` run of some rows must not shrink the summary of
    the rows whose second seed landed earlier (issue 35's illumination table read 1 seed of 2)."""
    prefix = f"{name}/seed"
    done = {int(k[len(prefix):]) for k in units
            if k.startswith(prefix) and k[len(prefix):].isdigit() and unit_current(units[k], settings)}
    return sorted(set(row_seeds(name, settings)) | done)


def model_size(settings: dict[str, Any]) -> Any:
    """The public model's input size (an int or ``[H, W]``), trained or read from a file."""
    p = settings["public_model"]
    return p["train"]["size"] if "train" in p else p["size"]


def unit_key(name: str, seed: int) -> str:
    return f"{name}/seed{seed}"


def slug(name: str) -> str:
    return name.replace("ε=", "eps").replace(" ", "-")


def machine_info() -> dict[str, Any]:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__}


#: Rows by name: (method, baseline settings).
ROW_BY_NAME: dict[str, tuple[str | None, dict[str, Any]]] = {n: (m, b) for n, m, b in ROWS}
