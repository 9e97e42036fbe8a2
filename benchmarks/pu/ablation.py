"""Ablations of pfd inside the paper's method, on the CelebA scenario of ``privacy_utility.py``.

Each variant changes one group of settings of the benchmark's pfd row (K proxies per identity,
RTA iterations, λ_RTA, λ_BN and the first-layer BN weight, augmentation, the rotation's
initialisation and repulsion margin) and runs one (row, seed) unit exactly as the benchmark does:
distillation, downstream fine-tuning, utility on the CelebA test pairs, the 8 linkability figures
(proxies and reconstructions, public and insider attacker) and the membership audit. Utility is
reported as a difference against the benchmark's ``public-ft`` of the same seed (identity
bootstrap, :func:`pfd.card.stats.paired_difference`), membership as the a-priori AUC difference against
``base`` (:func:`pfd.card.stats.auc_difference`); both references are read from the main run's work dir
and results, so run ``privacy_utility.py --scenario celeba --rows base public-ft pfd`` first.

One seed per variant: a variant's utility difference is within the seed noise of the main table
(its sd) unless it exceeds it; the table says so beside each figure.

Usage:
    python -m benchmarks.pu_ablation --work DIR [--variants ipc1 iters120] [--force]
    python -m benchmarks.pu_ablation --list

Results: ``benchmarks/results/pu_ablation.json`` and ``.md`` (resumable per variant; a variant
whose settings changed is rerun). Run by hand, not in CI.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.io import atomic_write_json, atomic_write_text, jsonable
from benchmarks.pu.data import SCENARIOS, TARGET_SCENARIOS, Scenario
from benchmarks.pu.runner import make_resolver, read_shards, scores_root, train_judge, train_public, units_dir
from benchmarks.pu.settings import (TAR, MIA_STATS, RESULTS, ROWS, merge_settings, protocol_settings, row_view, settings_hash,
                                    shared_root, unit_current, unit_hash)
from pfd.card.stats import auc_difference, paired_difference, weighted_kfold_accuracy, weighted_tar_at_far
from benchmarks.pu.units import Bench

STRONG: dict[str, Any] = {"downstream": {"epochs": 6, "lr": 0.05}}
#: name -> (what changed, settings overrides merged into the benchmark's SETTINGS).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("the benchmark's pfd row", {}),
    "ipc1": ("K = 1 proxy per identity", {"rta": {"ipc": 1}}),
    "ipc4": ("K = 4 proxies per identity", {"rta": {"ipc": 4}}),
    # The yardstick of ipc4's utility: raw at the same K (method raw; no RTA, cheap).
    "raw-ipc4": ("raw release, K = 4 (not pfd: the yardstick for ipc4)", {"rta": {"ipc": 4}, "method": "raw"}),
    "raw-ipc10": ("raw release, K = 10 (not pfd: how much real data moves utility here)", {"rta": {"ipc": 10}, "method": "raw"}),
    "iters120": ("RTA 120 iterations", {"rta": {"iterations": 120}}),
    "lbn0": ("λ_BN 0 (no BN-statistic term)", {"rta": {"lambda_bn": 0.0}}),
    "bn1x": ("first-layer BN weight 1 (not 10)", {"rta": {"first_bn_multiplier": 1.0}}),
    "augment": ("RTA augmentation: crop 0.5-1, flip, shift 4", {"rta": {"crop_scale": [0.5, 1.0], "flip": True, "shift": 4}}),
    "init0.5": ("rotation init scale 0.5 (not 0.1)", {"ogp": {"init_scale": 0.5}}),
    "repm0": ("repulsion margin 0 (not 0.1)", {"ogp": {"rep_margin": 0.0}}),
    "repm0.2": ("repulsion margin 0.2", {"ogp": {"rep_margin": 0.2}}),
    # A stronger downstream training on the main run's seed-0 releases (no new distillation): does
    # the benchmark's light fine-tune (2 epochs, lr 0.02) compress utility and membership? Each is
    # compared with public-ft under the same training ("ds6-public-ft"), not the main one.
    "ds6-public-ft": ("downstream 6 epochs, lr 0.05: public-ft", STRONG | {"method": "public-ft", "reuse": True}),
    "ds6-raw": ("downstream 6 epochs, lr 0.05: raw (main run's release)", STRONG | {"method": "raw", "reuse": True}),
    "ds6-rta-only": ("downstream 6 epochs, lr 0.05: rta-only (main run's release)",
                     STRONG | {"method": "rta-only", "reuse": True}),
    "ds6-pfd": ("downstream 6 epochs, lr 0.05: pfd (main run's release)", STRONG | {"method": "pfd", "reuse": True}),
    "iters30": ("RTA 30 iterations", {"rta": {"iterations": 30}}),
    "lrta10": ("λ_RTA 10", {"rta": {"lambda_rta": 10.0}}),
    "lrta200": ("λ_RTA 200", {"rta": {"lambda_rta": 200.0}}),
    "lbn0.05": ("λ_BN 0.05", {"rta": {"lambda_bn": 0.05}}),
}


#: Variants of the target protocol (``--protocol target``, on ``surveillance``): the downstream
#: schedule on the main run's seed-0 releases (each against public-ft under the same schedule), and
#: pfd's own knobs on the public VisMatch excess the pilot saw (2.4 % at chance 1.4 %).
TWO_EPOCHS: dict[str, Any] = {"downstream": {"epochs": 2}}
HALF_PUBLIC: dict[str, Any] = {"downstream": {"public_images": 1200}}
TARGET_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("the benchmark's pfd row", {}),
    "ds2-public-ft": ("downstream 2 epochs: public-ft", TWO_EPOCHS | {"method": "public-ft", "reuse": "ds2"}),
    "ds2-raw": ("downstream 2 epochs: raw (main run's release)", TWO_EPOCHS | {"method": "raw", "reuse": "ds2"}),
    "ds2-pfd": ("downstream 2 epochs: pfd (main run's release)", TWO_EPOCHS | {"method": "pfd", "reuse": "ds2"}),
    "half-public-ft": ("downstream on 1,200 of the public images: public-ft",
                       HALF_PUBLIC | {"method": "public-ft", "reuse": "half"}),
    "half-raw": ("downstream on 1,200 public images + raw", HALF_PUBLIC | {"method": "raw", "reuse": "half"}),
    "half-pfd": ("downstream on 1,200 public images + pfd", HALF_PUBLIC | {"method": "pfd", "reuse": "half"}),
    # The public attacker's link runs through |cos(M e, e)| of an embedding and its rotation (eq. 3
    # keeps it under the repulsion margin m): a tighter margin (OGP then extends until 95 % of the
    # images are below it; m = 0 could never be met).
    "repm0.05": ("repulsion margin 0.05 (not 0.1)", {"ogp": {"rep_margin": 0.05}}),
    "iters120": ("RTA 120 iterations", {"rta": {"iterations": 120}}),
    "bn1x": ("first-layer BN weight 1 (not 10)", {"rta": {"first_bn_multiplier": 1.0}}),
    "lrta200": ("λ_RTA 200 (not 50)", {"rta": {"lambda_rta": 200.0}}),
    "lbn0.05": ("λ_BN 0.05 (not 0.01)", {"rta": {"lambda_bn": 0.05}}),
    # Issue 26's levers, each alone (the "default" row is the paper's method: noise start, eq. 10 only).
    "init-public": ("proxies start from public faces: CelebA's public people (the downstream's own)",
                    {"rta": {"init": "public", "init_data": "celeba:public"}}),
    "init-yalea": ("proxies start from public faces: Yale A (15 people the downstream never trains on)",
                   {"rta": {"init": "public", "init_data": "yale-a"}}),
    "spatial": ("spatial feature statistics, λ_sp 0.1 (4 x 4 regions per BN layer)", {"rta": {"lambda_spatial": 0.1}}),
    "delink": ("de-linking term against the public model, λ_dl 10 (refused on celeba and surveillance as the pfd "
               "row: target-v5/pfd_delink_units.json)", {"rta": {"lambda_delink": 10.0}}),
    # At λ_dl 10 the term made celeba's source ranks uniform but the hubness-corrected VisMatch leaked
    # (7.2 %): the term overshoots where the residual link is a small, release-wide shift (the public
    # source-rank histogram falls from 180 proxies in the nearest decile to 13 in the farthest).
    "delink1": ("de-linking term against the public model, λ_dl 1 (a tenth of the demo's)", {"rta": {"lambda_delink": 1.0}}),
    "lr0.25": ("RTA lr 0.25 (the paper's, as SRe2L; not 0.05)", {"rta": {"lr": 0.25}}),
    "combo": ("public-face start (CelebA public) + spatial statistics + de-linking term",
              {"rta": {"init": "public", "init_data": "celeba:public", "lambda_spatial": 0.1, "lambda_delink": 10.0}}),
    # Issue 35's lighting lever: BN statistics matched per lighting group (4 at most, each over >= 5
    # people) instead of the domain-level average, and each class's proxies spanning its source's groups.
    "lighting": ("lighting lever: BN statistics per lighting group (<= 4 groups of >= 5 people), proxies span them",
                 {"rta": {"lighting_clusters": 4}}),
    "lighting-spatial": ("lighting lever + spatial statistics per lighting group, λ_sp 0.1",
                         {"rta": {"lighting_clusters": 4, "lambda_spatial": 0.1}}),
    # Issue 35: a longer RTA from public starts (SRe2L recovers for 1,000+ iterations; the cosine
    # schedule is RTA's own), with the de-linking term that a public start needs (the combo screen).
    "public-long": ("public-face start (CelebA public) + de-linking term, RTA 240 iterations (4x)",
                    {"rta": {"init": "public", "init_data": "celeba:public", "lambda_delink": 10.0, "iterations": 240}}),
    # Issue 35 goal (e): the paper's method, one recipe away from today's defaults (eq. 8's K-means
    # prototypes as they are, no insider term), against the committed table's pfd figures.
    "paper": ("the paper's method: eq. 8 prototypes as they are, eq. 10 alone (no source ranks, no insider or "
              "de-linking term)", {"rta": {"source_ranks": "kmeans", "lambda_insider": 0.0, "lambda_delink": 0.0}}),
}

#: What each protocol's ablation runs on: (variants, the main run's results file, scenario).
PROTOCOLS: dict[str, tuple[dict[str, tuple[str, dict[str, Any]]], str, str]] = {
    "trained": (VARIANTS, "privacy_utility.json", "celeba"),
    "target": (TARGET_VARIANTS, "privacy_utility_target.json", "surveillance"),
}


def variant_settings(name: str, protocol: str = "trained", *, screen: bool = False) -> dict[str, Any]:
    """The benchmark's settings with variant ``name``'s overrides (one seed; ``screen``: :data:`SCREEN`)."""
    variants = PROTOCOLS[protocol][0]
    over = dict(variants[name][1])
    method = over.pop("method", "pfd")
    over.pop("reuse", None)
    # The variant changes the table's row as that row runs (its own settings merged in): the variant's
    # overrides win over the row's, so "paper" can take away a term the pfd row adds.
    s = merge_settings(row_view(protocol_settings(protocol), method), over)
    if screen:
        s = merge_settings(s, SCREEN)
    s["seeds"] = 1
    s.pop("row_seeds", None)
    for k in ("method", "reuse"):
        if k in variants[name][1]:
            s[k] = variants[name][1][k]
    return s


def _reference(main_doc: dict[str, Any], main_shards: Path, scenario: str) -> dict[str, Any]:
    """The main run's base and public-ft units of ``scenario`` and public-ft's scores, from its
    committed units folder (:func:`benchmarks.pu.runner.units_dir`)."""
    units = dict(main_doc.get("scenarios", {}).get(scenario, {}).get("units", {}))
    # Units of groups still running are in the main run's shards (same settings only).
    units.update(read_shards(main_shards, unit_hash(main_doc.get("settings", {}))).get(scenario, {}).get("units", {}))
    need = ["base/seed0", "public-ft/seed0"]
    missing = [k for k in need if k not in units]
    scores = scores_root(main_shards, scenario) / "public-ft" / "seed0" / "all.npy"
    if missing or not scores.is_file():
        raise SystemExit(f"the main run lacks {missing or [str(scores)]}; run privacy_utility.py --scenario "
                         f"{scenario} --rows base public-ft first (same --work)")
    return {"base": units["base/seed0"], "public_ft_scores": np.load(scores),
            "pfd": units.get("pfd/seed0"), "settings_hash": main_doc.get("settings_hash")}


#: ``--screen`` (issue 35): what a screen unit leaves to the full unit (membership; reconstructions only where a
#: release has no gate audit in its state dir to read them from: :meth:`benchmarks.pu.units.Bench.audit`).
SCREEN: dict[str, Any] = {"recon": {"seeds": 0}, "mia": {"enabled": False}}


def summarise(bench: Bench, unit: dict[str, Any], ref: dict[str, Any], scores: np.ndarray) -> dict[str, Any]:
    """Utility vs public-ft, linkability verdicts and membership vs base of one unit."""
    e, pairs = bench.s["eval"], bench.pairs["all"]
    y, w = pairs.issame, bench.weights["all"]
    acc = lambda sc, ww: weighted_kfold_accuracy(sc, y, ww, folds=e["folds"])  # noqa: E731
    tar = lambda sc, ww: weighted_tar_at_far(sc, y, ww, 1e-2)  # noqa: E731
    out: dict[str, Any] = {
        "accuracy": paired_difference(acc, [scores], [ref["public_ft_scores"]], w),
        TAR: paired_difference(tar, [scores], [ref["public_ft_scores"]], w),
        "links": {}, "membership": {},
    }
    for target, roles in unit.get("linkability", {}).items():
        if target not in ("proxies", "reconstructions"):
            continue
        for role, attacks in roles.items():
            for attack, r in attacks.items():
                out["links"][f"{target}/{role}/{attack}"] = {
                    "rate": r["rate"], "chance": r["chance"], "ci95": r["ci95"], "above_chance": r["ci95"][0] > r["chance"]}
    for target, roles in unit.get("linkability", {}).get("rank_uniformity", {}).items():
        for role, r in roles.items():
            out.setdefault("rank_uniform", {})[f"{target}/{role}"] = {"p": r["p"], "mean_rank": r["mean_rank"],
                                                                      "uniform": r["uniform"]}
    if ref.get("default_scores") is not None:  # a screen: paired against pfd's default on the same pairs and seed
        out["vs_default"] = {"accuracy": paired_difference(acc, [scores], [ref["default_scores"]], w),
                             TAR: paired_difference(tar, [scores], [ref["default_scores"]], w)}
    for st in (MIA_STATS if "membership" in unit else ()):
        base = ref["base"]["membership"]["scores"]
        sc = unit["membership"]["scores"][st]
        out["membership"][st] = auc_difference([(np.asarray(sc["members"]), np.asarray(sc["nonmembers"]))],
                                               (np.asarray(base[st]["members"]), np.asarray(base[st]["nonmembers"])),
                                               replicates=e["bootstrap"], seed=e["seed"])
    v = (unit.get("audit") or {}).get("verdict")
    if v:  # the one audit's verdict on this release (issue 33), what decides whether a variant may go on
        out["audit"] = {"publishable": v["publishable"], "leaks": v.get("leaks", []),
                        "failed_checks": v.get("failed_checks", []), "unresolved": v.get("unresolved", []),
                        "version": v.get("version"),
                        "largest_rate_over_chance": v.get("largest_rate_over_chance")}
    d = unit.get("distill", {})
    out["below_margin"] = (d.get("rates") or {}).get("below_margin")
    out["own_prototype"] = (d.get("rates") or {}).get("own_prototype")
    out["ogp_steps"] = (d.get("counts") or {}).get("ogp_steps")  # pfd only: the other methods run no OGP
    out["seconds"] = unit["times_s"]["total"]
    mem = unit.get("memory_gb") or {}
    out["peak_gb"] = max(mem.values()) if mem else None  # the unit's peak (issue 35: a screen unit <= 6 GB)
    return out


def reuse_release(bench: Bench, method: str, main_rows: Path) -> tuple[dict[str, Any], np.ndarray]:
    """Downstream training, utility and membership on the main run's seed-0 release of ``method``
    (``public-ft``: no release) under this variant's downstream settings; ``(unit, scores)``."""
    root = bench.work / "rows" / method / "seed0"
    root.mkdir(parents=True, exist_ok=True)
    release = None if method == "public-ft" else main_rows / method / "seed0" / "release"
    t0 = time.perf_counter()
    model = bench.downstream(release, root / "downstream", 0)
    unit = {"utility": bench.utility(model, root / "scores"), "membership": bench.membership(model)}
    unit["times_s"] = {"total": round(time.perf_counter() - t0, 1)}
    return jsonable(unit), np.load(root / "scores" / "all.npy")


def _store(doc: dict[str, Any], name: str, key: str, summary: dict[str, Any], ref: dict[str, Any], json_path: Path,
           md_path: Path, *, scores: np.ndarray | None = None) -> None:
    variants = PROTOCOLS[doc.get("protocol", "trained")][0]
    doc["variants"][name] = {"settings_hash": key, "overrides": variants[name][1], "summary": summary,
                             "main_settings_hash": ref["settings_hash"]}
    if scores is not None:  # a reference for the variants of its group
        doc["variants"][name]["scores"] = scores.tolist()
    doc["date"] = time.strftime("%Y-%m-%d %H:%M %Z")
    atomic_write_json(json_path, jsonable(doc), shared=True)
    atomic_write_text(md_path, markdown(doc), shared=True)
    a = summary["accuracy"]
    print(f"[ablation {name}] Δacc {100 * a['diff']:+.1f} pts, links above chance "
          f"{sum(x['above_chance'] for x in summary['links'].values())}/{len(summary['links'])}, "
          f"{summary['seconds']:.0f} s", flush=True)


def release_geometry(release: Path, model: Path) -> dict[str, float]:
    """How "solved" a release is for ``model``: mean cosine within and between labels, and the share
    of released images whose nearest other released image has the same label (``nn_same``)."""
    from pfd.attackers.loading import load_attacker
    from pfd.release.reader import read_release

    a = load_attacker(model, role="model", progress=False)
    faces = read_release(release, size=a.size)
    e = torch.nn.functional.normalize(a.embed(faces), dim=1)  # (n, D)
    y = torch.as_tensor(np.asarray(faces.labels))
    sim = e @ e.T  # (n, n)
    same = (y[:, None] == y[None, :]) & ~torch.eye(len(y), dtype=torch.bool)
    nn_sim = sim.clone().fill_diagonal_(-2.0)
    return {"within": float(sim[same].mean()), "between": float(sim[y[:, None] != y[None, :]].mean()),
            "nn_same": float((y[nn_sim.argmax(1)] == y).float().mean()), "n": len(y)}


def markdown(doc: dict[str, Any]) -> str:
    """The ablation table: one row per variant."""
    protocol = doc.get("protocol", "trained")
    variants, _, scenario = PROTOCOLS[protocol]
    scenario = doc.get("scenario", scenario)
    screen = bool(doc.get("screen"))
    head = ("| variant | change | Δacc vs public-ft (95 % CI) | " + ("Δacc vs pfd default, paired (95 % CI) | " if screen else "")
            + "ΔTAR@1e-2 | links above chance | largest link rate (chance) | "
            # a screen runs no membership audit: its column is the one audit's verdict instead
            + ("audit | " if screen else "ΔAUC vs base, max of 4 | ") + "below margin | s |")
    lines = [f"# pfd ablations on {scenario} ({protocol} protocol; one seed each{'; a screen' if screen else ''}; "
             f"{doc.get('date', '')})", "",
             "Utility differences are against `public-ft` seed 0; the main table's seed sd for pfd is the yardstick "
             "for whether a change is more than noise. A link is above chance when its clustered 95 % interval lies "
             "above the gallery's chance." + (" A screen measures utility and the release's linkability (the "
             "publication gate's audit, read from the state dir), no membership, each variant paired against the pfd "
             "default of the same seed over the same test pairs (identity bootstrap); the variants that pass go on to "
             "the full unit." if screen else ""),
             "", head, "|" + "---|" * (10 if screen else 9)]
    for name in variants:
        v = doc.get("variants", {}).get(name)
        if not v:
            continue
        s = v["summary"]
        a, t = s["accuracy"], s[TAR]
        links = s["links"]
        above = str(sum(x["above_chance"] for x in links.values())) if links else "– (same release)"
        top = max(links.items(), key=lambda kv: kv[1]["rate"] - kv[1]["chance"]) if links else None
        top_s = f"{100 * top[1]['rate']:.1f} ({100 * top[1]['chance']:.1f}) {top[0]}" if top else "–"
        if screen:
            au = s.get("audit")
            fails = ((au or {}).get("failed_checks", []) + (au or {}).get("leaks", [])
                     + [f"{u} (unresolved)" for u in (au or {}).get("unresolved", [])])
            last = ("publishable" if au["publishable"] else f"refused: {'; '.join(fails[:2])}"
                    + (f" and {len(fails) - 2} more" if len(fails) > 2 else "")) if au else "–"
        else:
            last = f"{max((m['diff'] for m in s['membership'].values()), default=float('nan')):+.3f}"
        bm = s.get("below_margin")
        vd = (s.get("vs_default") or {}).get("accuracy")
        paired = ("" if not screen else ("– (the reference) | " if name == "default" else "– | ") if vd is None else
                  f"{100 * vd['diff']:+.1f} ({100 * vd['ci95'][0]:+.1f}, {100 * vd['ci95'][1]:+.1f}) | ")
        lines.append(f"| {name} | {variants[name][0]} | {100 * a['diff']:+.1f} ({100 * a['ci95'][0]:+.1f}, "
                     f"{100 * a['ci95'][1]:+.1f}) | {paired}{100 * t['diff']:+.1f} | {above} | {top_s} | {last} | "
                     f"{'–' if bm is None else f'{bm:.3f}'} | {s['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocol", choices=sorted(PROTOCOLS), default="trained",
                    help="the main run's protocol: trained (celeba scenario, pu_ablation.json) or target "
                    "(surveillance scenario, pu_ablation_target.json)")
    ap.add_argument("--scenario", help="the main run's scenario to ablate (default: celeba for trained, surveillance "
                    "for target); results go to pu_ablation[_target][_SCENARIO].json")
    ap.add_argument("--work", help="the main run's --work folder (its base and public-ft units)")
    ap.add_argument("--results", help="the main run's results folder, where the ablation's go too (default: the "
                    "protocol's committed table, benchmarks/results/target-v5 for target)")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--models-root", default=None, help="folder of the target protocol's pretrained model")
    ap.add_argument("--variants", nargs="+", help="subset of the protocol's variants (--list)")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--screen", action="store_true",
                    help="a screen: utility and the release's linkability (public, insider, judge; the gate's audit), no "
                         "membership; each variant paired against the pfd default of the same seed (results: *_screen.json)")
    ap.add_argument("--geometry", action="store_true", help="print release_geometry of the main run's seed-0 "
                    "releases in the public model, and exit")
    args = ap.parse_args(argv)
    variants, main_json, default_sc = PROTOCOLS[args.protocol]
    sc_name = args.scenario or default_sc
    presets = TARGET_SCENARIOS if args.protocol == "target" else SCENARIOS
    if sc_name not in presets:
        ap.error(f"unknown scenario {sc_name!r} of the {args.protocol} protocol; choose from {sorted(presets)}")
    if args.list:
        for k, (what, over) in variants.items():
            print(f"{k:14s} {what}: {over}")
        return 0
    if not args.work:
        ap.error("--work is required: the main run's work folder")
    unknown = sorted(set(args.variants or []) - set(variants))
    if unknown:
        ap.error(f"unknown variant(s) {unknown}")
    torch.set_num_threads(args.threads)
    work, results = Path(args.work).expanduser(), Path(args.results) if args.results else RESULTS[args.protocol]
    data_root, models_root = shared_root("data", args.data_root), shared_root("models", args.models_root)
    if data_root is None:
        ap.error("no shared data folder; pass --data-root DIR")
    s0 = variant_settings("default", args.protocol, screen=args.screen)
    resolver = make_resolver(s0, data_root)
    public, _ = train_public(s0, resolver, work, progress=False, models_root=models_root)
    judge, _ = train_judge(s0, resolver, work, progress=False)
    rows_dir = work / sc_name / "rows"
    if args.geometry:
        for method in [m for _, m, _ in ROWS if m is not None]:
            if (rows_dir / method / "seed0" / "release").is_dir():
                g = release_geometry(rows_dir / method / "seed0" / "release", public)
                print(f"{method:9s} within {g['within']:.3f}  between {g['between']:.3f}  nn_same {g['nn_same']:.3f}  (n {g['n']})")
        return 0
    if (results / main_json).is_file():
        main_doc = json.loads((results / main_json).read_text())
    else:  # the main run has not finished a group yet: its units are in its shards, its settings are these
        main_settings = protocol_settings(args.protocol)
        main_doc = {"settings": main_settings, "settings_hash": settings_hash(main_settings), "scenarios": {}}
    main_shards = units_dir(results, Path(main_json).stem, unit_hash(main_doc["settings"]))
    ref = _reference(main_doc, main_shards, sc_name)
    stem = ("pu_ablation" + ("_target" if args.protocol == "target" else "") + ("" if sc_name == default_sc else f"_{sc_name}")
            + ("_screen" if args.screen else ""))
    json_path, md_path = results / f"{stem}.json", results / f"{stem}.md"
    doc: dict[str, Any] = json.loads(json_path.read_text()) if json_path.is_file() else {}
    doc.setdefault("variants", {})
    doc["protocol"], doc["scenario"] = args.protocol, sc_name
    sc0 = (TARGET_SCENARIOS if args.protocol == "target" else SCENARIOS)[sc_name]
    public_specs = tuple(s0["public_model"]["train"]["data"]) if "train" in s0["public_model"] else sc0.public
    scenario = Scenario(sc0.name, public_specs, sc0.private, sc0.test, sc0.light_subsets)
    # "default" last: it reuses the main run's pfd seed 0 when that has finished by then; a reuse
    # group's public-ft first: the group's other variants are measured against it.
    order = sorted(args.variants or list(variants), key=lambda n: (n == "default", not n.endswith("-public-ft")))
    if args.screen:  # the default first: every other variant is paired against it
        order = ["default"] + [n for n in order if n != "default" and not variants[n][1].get("reuse")]
    doc["screen"] = bool(args.screen)
    for name in order:
        s = variant_settings(name, args.protocol, screen=args.screen)
        key = settings_hash(s)
        have = doc["variants"].get(name)
        if have and have.get("settings_hash") == key and not args.force:
            continue
        bench = Bench(s, scenario, resolver=resolver, work=work / f"{sc_name}-ablation" / name, public=public,
                      progress=False, judge=judge, ogp_cache=work / f"{sc_name}-ablation" / "ogp-pfd")
        main_pfd = ref["pfd"]
        main_same = (unit_hash(s) == unit_hash(row_view(main_doc["settings"], "pfd"))
                     and unit_current(main_pfd, main_doc["settings"]))
        if args.screen and name != "default":
            d = doc["variants"].get("default") or {}
            ref = {**ref, "default_scores": np.asarray(d["scores"]) if d.get("scores") else None}
        if name == "default" and main_pfd is not None and main_same:
            unit = main_pfd  # the main run's pfd seed 0 is this variant: reuse it and its scores
            scores = np.load(scores_root(main_shards, sc_name) / "pfd" / "seed0" / "all.npy")
        elif s.get("reuse"):
            print(f"[ablation {name}] start {time.strftime('%H:%M:%S')}", flush=True)
            unit, scores = reuse_release(bench, s["method"], rows_dir)
            group = "ds6" if s["reuse"] is True else s["reuse"]
            if s["method"] == "public-ft":
                ds_scores = scores
            else:
                ds_ref = doc["variants"].get(f"{group}-public-ft")
                if ds_ref is None:
                    raise SystemExit(f"run the {group}-public-ft variant before the other {group} variants")
                ds_scores = np.asarray(ds_ref["scores"])
            summary = jsonable(summarise(bench, unit, {**ref, "public_ft_scores": ds_scores}, scores))
            _store(doc, name, key, summary, ref, json_path, md_path, scores=scores)
            continue
        else:
            print(f"[ablation {name}] start {time.strftime('%H:%M:%S')}", flush=True)
            method = variants[name][1].get("method", "pfd")
            unit = jsonable(bench.unit(method, method, {}, 0, None))
            scores = np.load(bench.work / "rows" / method / "seed0" / "scores" / "all.npy")
        summary = jsonable(summarise(bench, unit, ref, scores))
        _store(doc, name, key, summary, ref, json_path, md_path,
               scores=scores if args.screen and name == "default" else None)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
