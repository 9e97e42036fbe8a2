"""Privacy-utility benchmark: what a release is worth to train on, and what it leaks (Table 3 / Fig. 3
of the PFD paper, on a CPU), on any publisher's faces.

Two **protocols**. ``target`` (the default; the paper's setting, :data:`benchmarks.pu.settings.TARGET`): the
public model is the shared pretrained MobileFaceNet (``../shared/models/mobilefacenet-casia.ckpt``,
read in place; nothing is trained before the units), the public data are CelebA's 150 public people
at full resolution, and the private and test people come from a domain the public model is weak
on: ``surveillance`` (CelebA's private and test people at 16 x 19 pixels and back up, the
``+lowres`` spec option), ``illumination`` (Extended Yale B) and the ``celeba`` control (no shift).
Releases at K = 10 per identity; the downstream is the pretrained model fine-tuned for one epoch on
the public people + the release (head at the class means); public-ft, raw and pfd run on two seeds,
the other rows on one (``row_seeds``). Results: ``benchmarks/results/target-v5/privacy_utility_target.json``
(the protocol's folder, :data:`benchmarks.pu.settings.RESULTS`).
``trained`` (``--protocol trained``; the v2 table, ``privacy_utility.json``) is described next.

A **scenario** (:mod:`benchmarks.pu.data`) names the public data, the private identities and the held-out test
identities as dataset specs. Presets of the trained protocol: ``celeba`` (private and test = CelebA identities, 72 + 72)
and ``yaleb`` (private and test = Extended Yale B, 28 + 10: a lighting domain the public data
lacks); ``--public/--private/--test`` replace parts of a preset (identity folders, RecordIO,
``synthetic:...``), so a publisher can make this table for their own data before publishing.
Both presets share one **public model** (``recipes/celeba-public.toml``: ``synthetic:public`` +
the CelebA public identities + Yale A), trained once and cached in the work dir.

Rows: ``base`` (the public model), ``public-ft`` (fine-tuned on the public data alone: the control
for the extra training), ``raw``, ``blur``, ``dp-pix``, ``sre2l``, ``rta-only`` and ``pfd`` (each a
release of the private identities by :func:`pfd.distill.pipeline.distill`, then the public model
fine-tuned on public data + the release). Every row but ``base`` runs for ``seeds`` seeds
(distillation, noise and downstream training seeded alike; mean ± sd).

* **Utility**: 10-fold verification accuracy and TAR@FAR=1e-2 on the test identities' pairs
  (:func:`pfd.data.pair_sampling.adaptive_pairs`; Yale B also on its subsets 1-3), each as a difference against
  ``public-ft`` with a 95 % identity-bootstrap interval (:func:`pfd.card.stats.paired_difference`).
* **Privacy**: the one audit of each written release (:func:`pfd.audit.engine.run_scorecard`,
  what ``pfd attack`` and ``pfd card`` run, with the benchmark's in-memory private set passed in):
  integrity and private-copy checks, VisMatch and Rank-1 Re-ID of the proxies and their
  hubness-corrected forms, rank-last and orthogonal Re-ID, the source-rank tests by cos and |cos|,
  and the links of reconstructions (BN-prior inversion through the public model, first seed only,
  a seeded sample of one proxy per source identity on average), by the public model, the insider
  (adapted model) and the judge; the verdict of :func:`pfd.audit.verdict.decide` per seed
  (``audit`` in the json; goal (c) needs it publishable on every seed).
* **Membership**: the geometric MIA (:func:`pfd.attacks.membership.audit.membership_audit`) of each
  downstream model, members = private identities, non-members = test identities; each
  statistic's a-priori AUC (mean over seeds) against ``base``'s with a stratified identity
  bootstrap interval (:func:`pfd.card.stats.auc_difference`). The calibrated verdict's count of LEAKS
  seeds is read beside :func:`group_check`: whether ``base`` (which saw neither group) already
  separates them, in which case a LEAKS count is inconclusive.

Units run in ``--jobs`` worker processes (default one per core), one (scenario, seed) group at a
time, longest first; the public model trains before them on every core. Each finished unit goes
at once to its group's shard in the committed units folder, ``<results>/units/<table>-<settings
hash>/`` (its per-pair scores beside it, :func:`benchmarks.pu.runner.units_dir`), and into
``<results>/privacy_utility_target.json`` (and a markdown table beside it) when its group
ends. Commit the units folder as units land: a rerun, on this machine or a fresh clone elsewhere,
skips every unit already there with the same settings and re-summarises the table from them
without training anything (``--force`` recomputes). Models, releases and state dirs live in
``--work`` (default ``$PFD_CACHE_DIR/bench/privacy_utility``), outside the repository, and are
rebuilt on demand. Run by hand, not in CI.
docs/benchmarks.md describes the protocol.

This script is the entry point; the parts live in the package ``benchmarks/pu/``: :mod:`benchmarks.pu.data`
(scenarios and the data split), :mod:`benchmarks.pu.settings`, :mod:`benchmarks.pu.units` (one (row, seed) unit),
:mod:`pfd.card.stats` (identity-bootstrap intervals), :mod:`benchmarks.pu.plan` (``--plan``), :mod:`benchmarks.pu.runner`
(workers, shards, merging), :mod:`benchmarks.pu.report` / :mod:`benchmarks.pu.table` (the markdown) and
:mod:`benchmarks.pu.ablation` (``python -m benchmarks.pu_ablation``).

Usage:
    python -m benchmarks.privacy_utility --plan                 # estimated minutes by stage, runs nothing
    python -m benchmarks.privacy_utility --scenario surveillance illumination   # the target table (resumable)
    python -m benchmarks.privacy_utility --protocol trained ... # the v2 table's protocol
    python -m benchmarks.privacy_utility --public-only          # train / reuse the public model
    python -m benchmarks.privacy_utility [--scenario celeba yaleb] [--rows pfd raw] [--seeds 3] [--force]
    python -m benchmarks.privacy_utility --scenario celeba --private DIR --test DIR --name mine
    python -m benchmarks.privacy_utility --quick                # smoke test on synthetic data
    python -m benchmarks.privacy_utility --summarise            # re-summarise committed units, train nothing
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch


from pfd.errors import PfdError
from pfd.io import atomic_write_json, atomic_write_text, jsonable
from benchmarks.pu.data import SCENARIOS, TARGET_SCENARIOS, Scenario, shared_folders
from benchmarks.pu.plan import THROUGHPUT, minutes, plan_passes, print_plan, rates
from benchmarks.pu.goals import goal_records
from benchmarks.pu.report import markdown
from benchmarks.pu.runner import (
    make_resolver,
    merge_results,
    public_path,
    read_shards,
    run_group_safe,
    scores_root,
    shard_path,
    summarise,
    units_dir,
    cached_models,
    train_judge,
    train_public,
    unit_groups,
)
from benchmarks.pu.settings import (
    QUICK_SCENARIO,
    REPO,
    RESULTS,
    ROWS,
    load_average,
    machine_info,
    apply_seeds,
    protocol_settings,
    row_seeds,
    settings_hash,
    unit_current,
    unit_hash,
    shared_root,
    slug,
    unit_key,
)


def _scenarios(args: argparse.Namespace, settings: dict[str, Any]) -> list[Scenario]:
    presets = TARGET_SCENARIOS if args.protocol == "target" else SCENARIOS
    if args.quick and not args.scenario:
        base = [QUICK_SCENARIO]
    else:
        names = args.scenario or list(presets)
        base = []
        for n in names:
            if n not in presets and not (n == "synthetic" and args.quick):
                raise PfdError(f"unknown scenario {n!r} of the {args.protocol} protocol; choose from {sorted(presets)}")
            sc = QUICK_SCENARIO if n == "synthetic" else presets[n]
            if "train" in settings["public_model"]:
                # The trained protocol's presets train on the recipe's data; custom public specs replace it below.
                sc = Scenario(sc.name, tuple(settings["public_model"]["train"]["data"]), sc.private, sc.test,
                              sc.light_subsets)
            base.append(sc)
    if args.public or args.private or args.test:
        if len(base) != 1:
            raise PfdError("--public/--private/--test replace parts of one scenario; pass a single --scenario")
        sc = base[0]
        base = [Scenario(args.name or f"{sc.name}-custom", tuple(args.public) if args.public else sc.public,
                         args.private or sc.private, args.test or sc.test,
                         sc.light_subsets and not (args.private or args.test))]
    return base


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", choices=("target", "trained"), default="target",
                    help="target (default): the pretrained MobileFaceNet meets a domain only the private set covers, "
                    f"scenarios {sorted(TARGET_SCENARIOS)}; trained: a public model trained here, scenarios "
                    f"{sorted(SCENARIOS)} (the v2 table, benchmarks/results/privacy_utility.json)")
    ap.add_argument("--scenario", nargs="+", help="presets to run (default: all of the protocol's)")
    ap.add_argument("--public", nargs="+", help="public data specs (replace the preset's; the public model and every "
                    "downstream model train on them)")
    ap.add_argument("--private", help="private identities spec (identity folder, RecordIO, synthetic:..., or a named "
                    "part such as celeba:private)")
    ap.add_argument("--test", help="held-out test identities spec (verification pairs, MIA non-members)")
    ap.add_argument("--name", help="results key of a scenario with replaced parts (default <preset>-custom)")
    ap.add_argument("--data-root", help="folder holding celeba-faces/, extended-yale-b-cropped/ and yale-a/ "
                    "(default: ../shared/data next to the repo, then /work/shared/data)")
    ap.add_argument("--models-root", help="folder holding the target protocol's pretrained model (default: "
                    "../shared/models next to the repo, then /work/shared/models)")
    ap.add_argument("--work", help="folder for models, releases, state dirs and scores (outside the repo)")
    ap.add_argument("--results", help="where the .json, the .md and the units go (default: the protocol's committed "
                    "table, benchmarks/results/target-v5 for target, benchmarks/results for trained; --quick: the work dir)")
    ap.add_argument("--rows", nargs="+", help="only these rows (names as in the table)")
    ap.add_argument("--seeds", type=int, help="seeds per row except base, at most (the target protocol's default: "
                    "2 for pfd; its row_seeds give public-ft and raw 3 and the baselines 1, each capped at --seeds: "
                    "--seeds 1 runs every row once)")
    ap.add_argument("--force", action="store_true", help="recompute units already in the results")
    ap.add_argument("--public-only", action="store_true", help="train (or reuse) the public model and measure base")
    ap.add_argument("--quick", action="store_true", help="smoke test on tiny synthetic settings (results in the work dir)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker (1: best on 2 cores)")
    ap.add_argument("--jobs", type=int, default=0, help="worker processes, each running (scenario, seed) groups of "
                    "units (default: one per core, at most one per group; 1 runs in this process)")
    ap.add_argument("--plan", action="store_true", help="print the estimated cost of the run by stage and exit")
    ap.add_argument("--speed", type=float, default=1.0, help="--plan: this machine's speed relative to the assumed "
                    f"throughputs {THROUGHPUT} (images/s)")
    ap.add_argument("--merge-from", metavar="JSON", help="copy the scenarios of another results json made with the "
                    "same settings (e.g. a scenario run in a second process with --results DIR) into this one, and exit")
    ap.add_argument("--summarise", action="store_true", help="recompute the row summaries and checks from the units "
                    "and their scores in the committed units folder (after a change to how they are summarised), "
                    "train nothing")
    ap.add_argument("--export", nargs=2, metavar=("SPEC", "DIR"), help="write a scenario spec's images (e.g. "
                    "celeba:private+lowres, which lives only in memory) to DIR as an identity folder, so that pfd attack "
                    "--private DIR can audit a release of it, and exit")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    try:
        return _main(ap, args)
    except PfdError as e:  # bad input: one line, not a traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


def _check_specs(scenarios: list[Scenario], resolver: Any) -> None:
    """Open every scenario's private and test specs now (a bad one fails before any work) and refuse
    a scenario whose test people are its private people."""
    from pfd.io import same_path

    for sc in scenarios:
        for spec, what in ((sc.private, "--private"), (sc.test, "--test")):
            try:
                resolver(spec)
            except PfdError as e:
                raise PfdError(f"{what} {spec}: {e}") from None
        if sc.private == sc.test or same_path(sc.private, sc.test):
            raise PfdError(f"{sc.private}: given as both the private and the test people; the test people must be "
                           "others of the same domain (utility is measured on people the release does not hold)")


def _main(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from pfd.io import check_writable

    if args.seeds is not None and args.seeds < 1:
        ap.error(f"--seeds {args.seeds}: at least 1")
    torch.set_num_threads(args.threads)
    settings = protocol_settings(args.protocol, quick=args.quick)
    if args.seeds is not None:
        settings = apply_seeds(settings, args.seeds)
    if args.public and "train" in settings["public_model"] and not args.quick:
        # The trained protocol: the publisher's public data trains the public model too.
        settings["public_model"]["train"]["data"] = list(args.public)
    try:
        scenarios = _scenarios(args, settings)
    except PfdError as e:
        ap.error(str(e))
    data_root = shared_root("data", args.data_root)
    if args.export:
        from pfd.data.synthetic import write_synthetic

        spec, out = args.export
        if Path(out).exists() and (not Path(out).is_dir() or any(Path(out).iterdir())):
            raise PfdError(f"{out}: exists and is not an empty folder; --export writes into a new or empty folder")
        faces = make_resolver(settings, data_root)(spec)
        write_synthetic(out, faces, progress=not args.no_progress and None)
        print(f"wrote {len(faces)} images of {faces.num_classes} identities ({spec}) to {out}")
        return 0
    needed = shared_folders([s for sc in scenarios for s in (*sc.public, sc.private, sc.test)])
    missing = sorted(n for n in needed if data_root is None or not (data_root / n).is_dir())
    if missing:
        print(f"SKIP: {', '.join(m + '/' for m in missing)} not under {data_root or args.data_root or REPO.parent / 'shared' / 'data'}; pass --data-root DIR "
              "(or --quick, which needs no data)")
        return 0
    models_root = None
    if "checkpoint" in settings["public_model"]:
        ckpt = settings["public_model"]["checkpoint"]
        models_root = shared_root("models", args.models_root, need=ckpt)
        if models_root is None:
            print(f"SKIP: {ckpt} not under {args.models_root or REPO.parent / 'shared' / 'models'}; pass --models-root "
                  "DIR (or --quick, which needs no model)")
            return 0
    cache = Path(os.environ.get("PFD_CACHE_DIR", Path.home() / ".cache" / "pfd")).expanduser()
    stem = "privacy_utility" + ("_target" if args.protocol == "target" else "")
    work = Path(args.work).expanduser() if args.work else cache / "bench" / (stem + ("_quick" if args.quick else ""))
    results = Path(args.results) if args.results else work / "results" if args.quick else RESULTS[args.protocol]
    json_path, md_path = results / f"{stem}.json", results / f"{stem}.md"
    for folder, option in ((work, "--work"), (results, "--results")):  # before any work, not after it
        check_writable(folder, option)
    key, ukey = settings_hash(settings), unit_hash(settings)
    shards = units_dir(results, stem, ukey)  # committed as units land (issue 35)
    doc: dict[str, Any] = json.loads(json_path.read_text()) if json_path.is_file() else {}
    # A table's units stay when only the seed counts changed: an added seed joins them.
    if unit_hash(doc.get("settings", {})) != ukey or doc.get("version") != 2:
        doc = {"scenarios": {}}
    names = [r[0] for r in ROWS]
    unknown = sorted(set(args.rows or []) - set(names))
    if unknown:
        ap.error(f"unknown row(s) {unknown}; choose from {names}")
    rows = [r for r in ROWS if not args.rows or r[0] in args.rows]
    progress = not args.no_progress and sys.stderr.isatty()
    resolver = make_resolver(settings, data_root)
    if not args.merge_from:
        _check_specs(scenarios, resolver)
    doc.update(format="pfd-privacy-utility", version=2, settings=settings, settings_hash=key, machine=machine_info(),
               row_order=names)
    if args.public_only:
        rows = [r for r in ROWS if r[0] == "base"]
    if args.merge_from:
        return merge_results(json_path, Path(args.merge_from), key)
    if args.plan:
        print_plan(settings, scenarios, resolver, [r[0] for r in rows], speed=args.speed,
                   jobs=args.jobs or min(os.cpu_count() or 1, len(scenarios) * settings["seeds"]),
                   budget_min=180.0 if args.protocol == "target" else 90.0, cached=cached_models(settings, work))
        return 0
    def save() -> None:
        doc["date"] = time.strftime("%Y-%m-%d %H:%M %Z")
        if args.protocol == "target":  # issue 35's goals (e) and (f) read the screen and timings beside the table
            doc["goal_records"] = goal_records(json_path.parent)
        atomic_write_json(json_path, jsonable(doc), shared=True)
        atomic_write_text(md_path, markdown(doc), shared=True)

    if args.force and not args.rows:
        # A full --force run starts these scenarios afresh (their finished shards too), at once, so
        # that an interrupted run continues with a plain rerun and never mixes in older units.
        for sc in scenarios:
            doc["scenarios"].pop(sc.name, None)
            for p in shards.glob(f"{slug(sc.name)}-seed*.json"):
                p.unlink()
            shutil.rmtree(scores_root(shards, sc.name), ignore_errors=True)
        save()
    # Units an interrupted run finished in its workers' shards but never merged into the table.
    recovered: set[str] = set()
    for name, part in read_shards(shards, ukey).items():
        if any(sc.name == name for sc in scenarios):
            sdoc = doc["scenarios"].setdefault(name, {"units": {}, "rows": {}})
            if any(sdoc["units"].get(k) != u for k, u in part["units"].items()) or ("data" not in sdoc and part.get("data")):
                recovered.add(name)
            sdoc["units"].update(part["units"])
            if part.get("data") is not None:
                sdoc.setdefault("data", part["data"])
    todo = {sc.name: [(name, seed) for name, _, _ in rows for seed in row_seeds(name, settings)
                      if args.force or not unit_current(doc["scenarios"].get(sc.name, {}).get("units", {})
                                                        .get(unit_key(name, seed)), settings)]
            for sc in scenarios}
    if args.summarise or (recovered and not any(todo.values())):
        # Nothing to run (or only to re-summarise): no model is trained or loaded, the units and their
        # scores are all in the committed units folder, so this works from a fresh clone and work dir.
        if any(todo.values()):
            print(f"{sum(map(len, todo.values()))} unit(s) are missing from {json_path}; run them first (no --summarise)")
            return 1
        public = public_path(settings, work, models_root)  # named, never loaded
        summarise(doc, [sc for sc in scenarios if args.summarise or sc.name in recovered], settings, resolver=resolver,
                  work=work, public=public, shards=shards)
        save()
        print(markdown(doc))
        return 0
    if not any(todo.values()) and not recovered:
        print(f"every unit is already in {json_path} with these settings (--force recomputes them):\n")
        print(markdown(doc))
        return 0
    t_start = time.perf_counter()
    # Minutes per unit of each scenario (the --plan cost model): the longest groups start first.
    cost = {}
    for sc in scenarios:
        priv, test = resolver(sc.private), resolver(sc.test)
        passes = plan_passes(settings, private_ids=priv.num_classes, private_images=len(priv), test_images=len(test),
                             public_images=sum(len(resolver(s)) for s in sc.public),
                             rows=names)
        cost[sc.name] = sum(minutes(v, rates(settings)) for v in passes.values())
    groups = unit_groups(todo, cost=cost)
    jobs = max(1, min(args.jobs or os.cpu_count() or 1, len(groups)))
    print(f"data {data_root}; work {work}; {sum(map(len, todo.values()))} unit(s) in {len(groups)} group(s) on "
          f"{jobs} worker(s) of {args.threads} thread(s); load {load_average()}", flush=True)
    # Nothing else runs while the public model trains: it gets every core.
    torch.set_num_threads(os.cpu_count() or 1)
    public, pinfo = train_public(settings, resolver, work, progress=progress, models_root=models_root)
    judge, jinfo = train_judge(settings, resolver, work, progress=progress)
    torch.set_num_threads(args.threads)
    if pinfo["seconds"] or "public_model" not in doc:
        doc["public_model"] = pinfo
    if judge is not None and (jinfo["seconds"] or "judge_model" not in doc):
        doc["judge_model"] = jinfo
    print(f"public model {public} ({pinfo['seconds']:.0f} s; 0 = cached)"
          + (f"; judge {judge} ({jinfo['seconds']:.0f} s)" if judge is not None else ""), flush=True)
    curves = doc["public_model"].setdefault("verification_curve", {})

    by_name = {sc.name: sc for sc in scenarios}
    # The curve of a model trained here by checkpoint (a pretrained file has one point: base's row).
    curve_for = {sc.name for sc in scenarios if "train" in settings["public_model"]
                 and (pinfo["seconds"] or sc.name not in curves)}
    payloads = []
    for sc_name, seed, group_rows in groups:
        payloads.append({"settings": settings, "scenario": by_name[sc_name], "seed": seed, "rows": group_rows,
                         "key": ukey, "data_root": data_root, "work": work, "shards": shards, "public": public,
                         "judge": judge,
                         "threads": args.threads,
                         "progress": progress and jobs == 1, "curve": sc_name in curve_for})
        curve_for.discard(sc_name)  # one group per scenario measures the curve

    def collect(sc_name: str, seed: int) -> None:
        shard = json.loads(shard_path(shards, sc_name, seed).read_text())
        sdoc = doc["scenarios"].setdefault(sc_name, {"units": {}, "rows": {}})
        sdoc["units"].update(shard["units"])
        sdoc["data"] = shard["data"]
        if shard.get("curve") is not None:
            curves[sc_name] = shard["curve"]
        save()

    failed = []
    pool = None
    if jobs == 1 or not payloads:
        results: Any = map(run_group_safe, payloads)
    else:
        pool = multiprocessing.get_context("spawn").Pool(jobs, maxtasksperchild=1)
        results = pool.imap_unordered(run_group_safe, payloads)
        # A killed run stops its workers too (SIGTERM would otherwise leave them running on).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for sc_name, seed, err in results:
            if err is not None:
                failed.append(f"[{sc_name} seed{seed}] {err}")
                print(f"[{sc_name} seed{seed}] FAILED (finished units are kept; rerun to continue):\n{err}", flush=True)
            if shard_path(shards, sc_name, seed).is_file():
                collect(sc_name, seed)
    except BaseException:
        if pool is not None:
            pool.terminate()
        raise
    if pool is not None:
        pool.close()
        pool.join()
    # Units changed: every row's summary is recomputed from the units and the stored scores.
    summarise(doc, [sc for sc in scenarios if todo[sc.name] or sc.name in recovered], settings,
              resolver=resolver, work=work, public=public, shards=shards, judge=judge)
    doc["last_run_s"] = round(time.perf_counter() - t_start, 1)
    doc["last_run"] = {"jobs": jobs, "threads_per_job": args.threads, "groups": len(groups),
                       "public_model_s": pinfo["seconds"]}
    save()
    print(markdown(doc))
    if failed:
        print(f"{len(failed)} group(s) failed; rerun the same command to continue them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
