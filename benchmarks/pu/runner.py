"""Running the units: the public model, (scenario, seed) groups in workers, shards, merging, re-summarising.

Part of the privacy-utility benchmark (``benchmarks/privacy_utility.py``; :mod:`pu`).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.config import TrainConfig, build_config, config_to_dict
from pfd.data.faceset import ConcatFaces
from pfd.io import atomic_write_json, atomic_write_text, sha256_file
from pfd.io import jsonable
from pfd.nn.checkpoints import load_checkpoint
from pfd.train import train
from pfd.allocator import tune_allocator
from benchmarks.pu.augment import AugmentedFaces
from benchmarks.pu.data import Scenario, SpecResolver
from benchmarks.pu.goals import PAIRED
from benchmarks.pu.report import markdown
from benchmarks.pu.settings import (TAR, ROWS, PLAIN_FINETUNE, ROW_BY_NAME, finished_seeds, load_average, model_size,
                                    settings_hash, slug, unit_key)
from benchmarks.pu.units import Bench, group_check

def _same_training(path: Path, cfg: TrainConfig) -> bool:
    if not path.is_file():
        return False
    stored = dict((load_checkpoint(path).get("config") or {}).get("train") or {})
    # Where it was written is not what it is: a work dir moved or copied elsewhere keeps its model.
    stored.pop("out", None)
    return bool(stored) and stored == {k: v for k, v in config_to_dict(cfg).items() if k != "out"}


def public_dir(settings: dict[str, Any], work: Path) -> Path:
    # One folder per recipe and data: the CelebA split and centre crop change what celeba:public holds.
    return work / f"public-{settings_hash({**settings['public_model'], 'split': settings['split']})[:8]}"


def public_path(settings: dict[str, Any], work: Path, models_root: Path | None) -> Path:
    """Where the run's public model is: the pretrained file under ``models_root`` (target
    protocol) or the model trained in the work dir."""
    p = settings["public_model"]
    if "checkpoint" in p:
        return (models_root or Path(".")) / p["checkpoint"]
    return public_dir(settings, work) / "model.pt"


def train_public(settings: dict[str, Any], resolver: SpecResolver, work: Path, *, progress: bool,
                 models_root: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Train (or reuse) the public model of ``settings["public_model"]``; ``(path, info)`` with the
    seconds spent (0 when cached) and the loss curve (mean loss per tenth of the run).

    A ``checkpoint`` public model (the target protocol) is not trained: the pretrained file under
    ``models_root`` is used in place, and its SHA-256 recorded."""
    p = settings["public_model"]
    if "checkpoint" in p:
        path = public_path(settings, work, models_root)
        return path, {"path": str(path), "checkpoint": p["checkpoint"], "sha256": sha256_file(path), "size": p["size"],
                      "seconds": 0.0, "curve": []}
    return _train_model(p, public_dir(settings, work), resolver, progress=progress)


def _train_model(p: dict[str, Any], out: Path, resolver: SpecResolver, *, progress: bool) -> tuple[Path, dict[str, Any]]:
    """Train (or reuse) the model of ``p`` (``{"train": [train] table, "augment": {...}}``) into ``out``."""
    cfg = build_config(TrainConfig, p["train"], {"out": str(out), "mixed_precision": "no", "threads": 0})
    augment = p.get("augment") or {}
    info: dict[str, Any] = {"path": str(out / "model.pt"), "config": config_to_dict(cfg), "augment": augment}
    if _same_training(out / "model.pt", cfg):
        info["seconds"] = 0.0
    else:
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        faces = ConcatFaces([resolver(spec) for spec in cfg.data])
        data = AugmentedFaces(faces, augment, seed=cfg.seed) if augment else faces
        train(cfg, faces=data, progress=progress)
        info["seconds"] = round(time.perf_counter() - t0, 1)
    info["curve"] = _loss_curve(out / "metrics.jsonl")
    return out / "model.pt", info


def train_judge(settings: dict[str, Any], resolver: SpecResolver, work: Path, *,
                progress: bool) -> tuple[Path | None, dict[str, Any]]:
    """Train (or reuse) the benchmark's judge (``settings["judge_model"]``): a face model that no loss
    of pfd ever sees, of another architecture than the public model, trained here on the public
    people. It joins every unit's linkability figures and the publication gate (``release.judge``).
    ``(None, {})`` when the settings have none (the protocols before issue 26)."""
    p = settings.get("judge_model")
    if not p:
        return None, {}
    return _train_model(p, judge_dir(settings, work), resolver, progress=progress)


def judge_dir(settings: dict[str, Any], work: Path) -> Path:
    """The folder of the run's judge (one per judge recipe and data split)."""
    return work / f"judge-{settings_hash({**settings['judge_model'], 'split': settings['split']})[:8]}"


def cached_models(settings: dict[str, Any], work: Path) -> dict[str, bool]:
    """Which models the run trains are already trained in ``work`` (``--plan`` counts them as 0)."""
    out = {"public": "checkpoint" in settings["public_model"] or (public_dir(settings, work) / "model.pt").is_file()}
    if settings.get("judge_model"):
        out["judge"] = (judge_dir(settings, work) / "model.pt").is_file()
    return out


def _loss_curve(path: Path, points: int = 10) -> list[dict[str, float]]:
    if not path.is_file():
        return []
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not recs:
        return []
    chunks = np.array_split(np.arange(len(recs)), min(points, len(recs)))
    return [{"step": recs[c[-1]]["step"], "loss": float(np.mean([recs[i]["loss"] for i in c]))} for c in chunks]


def unit_groups(todo: dict[str, list[tuple[str, int]]], *, cost: dict[str, float] | None = None) -> list[tuple[str, int, list[str]]]:
    """The run's units as independent groups ``(scenario, seed, [row, ...])``, costliest first.

    A (scenario, seed) group shares nothing with another but the public model and the data on
    disk: its shared plain fine-tune, releases, downstream models and scores live in their own
    folders, so groups run in parallel processes. ``cost`` weights a scenario's units (default 1
    each); the order (longest first) is what keeps two workers evenly loaded.
    """
    groups: dict[tuple[str, int], list[str]] = {}
    for sc, units in todo.items():
        for name, seed in units:
            groups.setdefault((sc, seed), []).append(name)
    w = cost or {}
    return sorted(((sc, seed, names) for (sc, seed), names in groups.items()),
                  key=lambda g: (-w.get(g[0], 1.0) * len(g[2]), g[0], g[1]))


def units_dir(results: Path, stem: str, key: str) -> Path:
    """The committed folder of a table's finished units (issue 35: a table that accrues unit by unit).

    ``results/units/<stem>-<key>/`` holds one shard per (scenario, seed) group,
    ``<scenario>-seed<k>.json``, rewritten the moment each of its units finishes, and each unit's
    per-pair scores, ``<scenario>/<row>/seed<k>/<kind>.npy``, which the paired intervals are computed
    from. Committed as they land, they let the next run, perhaps on a fresh machine, continue from
    what is committed: models and releases are rebuilt on demand, finished units are not rerun.
    ``key`` is the unit hash of the settings, so another version of the settings starts a new folder.
    """
    return results / "units" / f"{stem}-{key}"


def shard_path(shards: Path, scenario: str, seed: int) -> Path:
    return shards / f"{slug(scenario)}-seed{seed}.json"


def scores_root(shards: Path, scenario: str) -> Path:
    """Where a scenario's units keep their per-pair scores (:class:`benchmarks.pu.units.Bench`'s ``scores_root``)."""
    return shards / slug(scenario)


def read_shards(shards: Path, key: str) -> dict[str, dict[str, Any]]:
    """Units, data summaries and public-model curves of finished work in the shards folder ``shards``
    (:func:`units_dir`) made with the settings ``key``, by scenario: what an interrupted run has done
    (shards of other settings are ignored)."""
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(shards.glob("*.json")):
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # written atomically, so only a foreign file gets here
        if doc.get("settings_hash") != key:
            continue
        sc = out.setdefault(doc["scenario"], {"units": {}, "curve": None, "data": None})
        sc["units"].update(doc.get("units", {}))
        if doc.get("data") is not None:  # the scenario's data summary, for a table made from shards alone
            sc["data"] = doc["data"]
        if doc.get("curve") is not None:
            sc["curve"] = doc["curve"]
    return out


def make_resolver(settings: dict[str, Any], data_root: Path | None) -> SpecResolver:
    """The spec resolver of ``settings`` (the public model's image size, the split settings)."""
    cs = settings["split"]
    return SpecResolver(data_root, size=model_size(settings), celeba=cs["celeba"],
                        yale_seed=cs["yale_seed"], yale_private=cs["yale_private"],
                        celeba_center=cs.get("celeba_center", 1.0))


def run_group(job: dict[str, Any]) -> tuple[str, int]:
    """One (scenario, seed) group of units, in this process: the worker of a parallel run.

    Each finished unit is written at once to the group's shard in the committed units folder
    (:func:`units_dir`), so an interrupted run loses at most the unit in progress; the parent merges
    the shards into the table.
    """
    torch.set_num_threads(job["threads"])
    tune_allocator()  # as the pfd command does (pfd.allocator: no page faults per training step)
    settings, sc, seed, key = job["settings"], job["scenario"], job["seed"], job["key"]
    resolver = make_resolver(settings, job["data_root"])
    bench = Bench(settings, sc, resolver=resolver, work=job["work"] / sc.name, public=job["public"],
                  progress=job["progress"], judge=job.get("judge"), scores_root=scores_root(job["shards"], sc.name))
    path = shard_path(job["shards"], sc.name, seed)
    shard: dict[str, Any] = {"settings_hash": key, "scenario": sc.name, "seed": seed, "units": {}, "curve": None}
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("settings_hash") == key:
            shard = old
    shard["data"] = {**bench.data_info, "named": resolver.info}
    if job["curve"]:
        shard["curve"] = bench.public_curve(job["public"].parent)
        print(f"[{sc.name}] public model on the test pairs by step: " + ", ".join(
            f"{c['step']}: {100 * c['accuracy']:.1f} %" for c in shard["curve"]), flush=True)
        atomic_write_json(path, jsonable(shard), shared=True)
    plain: tuple[Path, float] | None = None
    for name in job["rows"]:
        method, baseline = ROW_BY_NAME[name]
        k = unit_key(name, seed)
        if method in PLAIN_FINETUNE and plain is None:
            plain = bench.plain_finetune(seed)
        print(f"[{sc.name} {k}] start, load {load_average()}", flush=True)
        shard["units"][k] = res = jsonable(bench.unit(name, method, baseline, seed, plain))
        atomic_write_json(path, jsonable(shard), shared=True)
        u = res["utility"]["all"]
        tar = u.get(TAR)
        tar_text = "n/a (too few impostor pairs)" if tar is None else f"{tar:.3f}"
        print(f"[{sc.name} {k}] done in {res['times_s']['total']:.0f}s: acc {u['accuracy']:.3f}, "
              f"TAR@1e-2 {tar_text}, load {res['load_end']}", flush=True)
    return sc.name, seed


def merge_results(json_path: Path, other_path: Path, key: str) -> int:
    """Copy ``other_path``'s scenarios (and their public-model curves) into ``json_path``: one table
    from scenarios run in parallel processes. Both must hold the current settings (same hash)."""
    doc, other = (json.loads(p.read_text()) for p in (json_path, other_path))
    bad = [str(p) for p, d in ((json_path, doc), (other_path, other)) if d.get("settings_hash") != key]
    if bad:
        raise SystemExit(f"{', '.join(bad)}: made with other settings than this script's; rerun it, do not merge")
    for name, sdoc in other.get("scenarios", {}).items():
        doc["scenarios"][name] = sdoc
        curve = (other.get("public_model") or {}).get("verification_curve", {}).get(name)
        if curve is not None:
            doc.setdefault("public_model", {}).setdefault("verification_curve", {})[name] = curve
        print(f"merged scenario {name} ({len(sdoc.get('units', {}))} units) from {other_path}")
    doc.setdefault("merged_runs_s", {})[str(other_path)] = other.get("last_run_s")
    atomic_write_json(json_path, jsonable(doc), shared=True)
    atomic_write_text(json_path.with_suffix(".md"), markdown(doc), shared=True)
    return 0


def summarise(doc: dict[str, Any], scenarios: list[Scenario], settings: dict[str, Any], *, resolver: SpecResolver,
              work: Path, public: Path, shards: Path, judge: Path | None = None) -> None:
    """Recompute every row's summary (:meth:`Bench.aggregate`) and the groups check
    (:func:`group_check`) of ``scenarios`` from the stored units and their committed scores (``shards``)."""
    for sc in scenarios:
        sdoc = doc["scenarios"].get(sc.name)
        if not sdoc:
            continue
        bench = Bench(settings, sc, resolver=resolver, work=work / sc.name, public=public, progress=False, judge=judge,
                      scores_root=scores_root(shards, sc.name))
        for name in [r[0] for r in ROWS]:
            agg = bench.aggregate(name, sdoc["units"], finished_seeds(name, settings, sdoc["units"]))
            if agg is not None:
                sdoc["rows"][name] = jsonable(agg)
        for row, ref in PAIRED:  # issue 35 (c): pfd - dp-pix on the same pairs
            pair = bench.paired(row, ref, sdoc["units"])
            if pair is not None:
                sdoc.setdefault("paired", {})[f"{row} - {ref}"] = jsonable({"accuracy": pair["all"], "by_pairs": pair})
        sep = group_check(sdoc["units"])
        if sep is not None:
            sdoc["groups"] = jsonable(sep)


def run_group_safe(job: dict[str, Any]) -> tuple[str, int, str | None]:
    """:func:`run_group` that reports a failure instead of raising: the other groups go on."""
    try:
        run_group(job)
        return job["scenario"].name, job["seed"], None
    except Exception:  # noqa: BLE001 - reported with its traceback, the run continues
        import traceback

        return job["scenario"].name, job["seed"], traceback.format_exc()
