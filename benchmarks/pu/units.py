"""One scenario's units: data, pairs, releases, downstream models and every figure of a (row, seed).

Part of the privacy-utility benchmark (``benchmarks/privacy_utility.py``; :mod:`pu`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.attacks.membership.audit import resolve_head
from pfd.attacks.membership.reference import group_separation
from pfd.attacks.membership.statistics import membership_report
from pfd.attackers.loading import load_attacker
from pfd.audit.verdict import REFUSING
from pfd.config import DistillConfig, build_config, config_to_dict, load_recipe
from pfd.data.faceset import ConcatFaces, to_memory
from pfd.release.reader import read_release
from pfd.release.format import MANIFEST
from pfd.release.state_dir import StateDir, new_run_id, write_marker
from pfd.distill.pipeline import Distillation, distill
from pfd.release.private_set import private_set_record, record_private_set
from pfd.embed import Embedder
from pfd.io import atomic_write_text, sha256_file
from pfd.memory import StagePeaks
from pfd.nn.checkpoints import load_backbone, load_checkpoint
from pfd.verify import tar_at_far, verification_metrics
from benchmarks.pu.data import Scenario, SpecResolver
from pfd.data.pair_sampling import adaptive_pairs, pair_identities
from benchmarks.pu.settings import (TAR, PLAIN_FINETUNE, MIA_STATS, ROW_KEY, code_digest, finished_seeds, load_average,
                                    row_overrides, row_view, unit_key, slug)
from pfd.card.downstream import downstream_config, finetune, pair_scores, sample_images, utility_gain, verification
from pfd.card.stats import auc_difference, identity_bootstrap_weights
from benchmarks.pu.yale import moderate_light

class Bench:
    """One scenario: its data, pairs and per-row work folders; the public model is shared."""

    def __init__(self, settings: dict[str, Any], scenario: Scenario, *, resolver: SpecResolver, work: Path,
                 public: Path, progress: bool, judge: Path | None = None, ogp_cache: Path | None = None,
                 scores_root: Path | None = None) -> None:
        self.s, self.sc, self.work, self.public, self.progress = settings, scenario, work, public, progress
        #: Where each unit's per-pair scores go (``<row>/seed<k>/<kind>.npy``): the committed units folder
        #: of the run (:func:`benchmarks.pu.runner.units_dir`), so that a table's paired intervals can be
        #: recomputed on a fresh machine from what is committed; default: the work dir.
        self.scores_root = scores_root
        #: Where pfd's OGP stage is kept per seed and OGP settings (:meth:`pfd_finetune`); an ablation
        #: shares one folder between its variants.
        self.ogp_cache = ogp_cache if ogp_cache is not None else work / "ogp-pfd"
        #: A face model no loss sees (:func:`benchmarks.pu.runner.train_judge`): a third attacker and the gate's judge.
        self.judge = judge
        self.resolver = resolver
        self.size = resolver.size
        self._emb: dict[tuple[str, str, bool], torch.Tensor] = {}
        self.public_sets = [resolver(spec) for spec in scenario.public]
        #: The public part of every downstream model's data: a fixed seeded sample of the public
        #: images (``downstream.public_images``; 0 = all), so that the release is a real share of it.
        self.downstream_public = sample_images(ConcatFaces(self.public_sets), settings["downstream"]["public_images"])
        self.private, self.test = resolver(scenario.private), resolver(scenario.test)
        e = settings["eval"]
        pairs, info = adaptive_pairs(self.test, num_pairs=e["pairs"], seed=e["seed"], folds=e["folds"])
        #: Pair sets the utility is measured on: every test image (and Yale B's subsets 1-3).
        self.pairs = {"all": pairs}
        self.data_info: dict[str, Any] = {
            "specs": {"public": list(scenario.public), "private": scenario.private, "test": scenario.test},
            "public": [{"spec": s, "identities": f.num_classes, "images": len(f)} for s, f in zip(scenario.public, self.public_sets)],
            "private": {"identities": list(self.private.identities), "images": len(self.private)},
            "test": {"identities": list(self.test.identities), "images": len(self.test)},
            "pairs": {"all": info},
        }
        if scenario.light_subsets:
            lit = moderate_light(self.test, max_angle=e["moderate_light"])
            self.pairs["moderate"], self.data_info["pairs"]["moderate"] = adaptive_pairs(
                lit, num_pairs=e["moderate_pairs"], seed=e["seed"], folds=e["folds"])
            self.data_info["test"]["moderate_light_images"] = len(lit)
        #: Identity-bootstrap replicate weights per pair set (the same for every row: paired).
        self.weights = {k: identity_bootstrap_weights(*pair_identities(p), replicates=e["bootstrap"], seed=e["seed"])
                        for k, p in self.pairs.items()}

    # -- training ---------------------------------------------------------------------------
    def downstream(self, release: Path | None, out: Path, seed: int) -> Path:
        """One downstream model (:func:`pfd.card.downstream.finetune`, the card's protocol)."""
        pub = self.s["public_model"].get("train", {})  # a trained public model names its architecture
        cfg = downstream_config(self.s["downstream"], public_model=self.public, data=self.sc.public, size=self.size,
                                out=out, seed=seed, release=release is not None,
                                model={k: pub[k] for k in ("backbone", "width", "embedding_dim") if k in pub})
        rel = to_memory(read_release(release, size=self.size)) if release is not None else None
        return finetune(cfg, self.downstream_public, rel, progress=self.progress)

    # -- distillation ---------------------------------------------------------------------
    def distill_config(self, method: str, baseline: dict[str, Any], *, root: Path, seed: int, resume: bool) -> DistillConfig:
        rta = dict(self.s["rta"], seed=seed, kmeans_seed=seed)
        return build_config(DistillConfig, {
            "private": f"{self.sc.private} (in memory)", "public": str(self.public), "method": method,
            "out": str(root / "release"), "state_dir": str(root / "state"), "resume": resume, "size": self.size,
            "mixed_precision": "no", "threads": torch.get_num_threads(),
            # The private set's embeddings by the public model (every unit) and by a shared
            # fine-tune (five methods a seed) are computed once, on disk for all workers.
            "embed_cache": str(self.work / "embed-cache"),
            "ogp": dict(self.s["ogp"], seed=seed), "rta": rta, "baseline": dict(baseline, seed=seed),
            # Every row is measured, linkable or not; the gate's verdict is kept in the summary.
            "release": {"allow_linkable": True, "judge": str(self.judge) if self.judge is not None else ""},
        })  # fmt: skip

    def _released(self, method: str, baseline: dict[str, Any], seed: int) -> bool:
        """Whether this distillation's release is finished on disk (other downstream settings made it)."""
        droot = self.release_dir(method, baseline, seed)
        return StateDir.at(droot / "state").summary.is_file() and (droot / "release" / MANIFEST).is_file()

    def release_dir(self, method: str, baseline: dict[str, Any], seed: int) -> Path:
        """Where a distillation's release and state dir live: keyed by everything the release
        depends on (method, seed, OGP/RTA/baseline settings, public model, split, private spec, and
        the pfd code that distils it: :func:`code_digest`), not by the downstream or evaluation
        settings, so a change of those reuses the releases."""
        s = self.s
        key = hashlib.sha256(json.dumps({
            "method": method, "baseline": baseline, "seed": seed, "ogp": s["ogp"], "rta": s["rta"],
            "public_model": s["public_model"], "split": s["split"], "private": self.sc.private,
            "shared_finetune": method in PLAIN_FINETUNE, "code": code_digest(),
            # The judge decides the gate's verdict stored with the release (older runs had none).
            **({"judge_model": s["judge_model"]} if s.get("judge_model") else {}),
        }, sort_keys=True).encode()).hexdigest()[:12]  # fmt: skip
        return self.work / "releases" / slug(method) / f"seed{seed}-{key}"

    def plain_finetune(self, seed: int) -> tuple[Path, float]:
        """The fine-tuning shared by the non-rotating methods (identical runs), once per seed."""
        root = self.work / "finetune-plain" / f"seed{seed}-{code_digest()}"  # another pfd: another fine-tune
        cfg = self.distill_config("raw", {}, root=root, seed=seed, resume=False)
        st = StateDir.at(root / "state")
        if st.adapted.is_file() and st.config.is_file():
            if load_recipe(st.config).get("distill") == _toml_roundtrip(config_to_dict(cfg)):
                return st.adapted, 0.0
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        run = Distillation(cfg, faces=self.private, progress=self.progress)
        run.public()
        run.adapt()
        return st.adapted, time.perf_counter() - t0

    def pfd_finetune(self, seed: int) -> tuple[Path, float]:
        """pfd's OGP stage (adapted model + rotation), once per seed and OGP settings, shared by every
        pfd row and ablation variant that changes only what comes after it (issue 35: a variant that
        changes only RTA pays only RTA). Keyed by what OGP depends on: its settings, the public model's
        recipe and bytes, the split, the private spec, the image size, the seed and the pfd code.

        Returns:
            ``(adapted.pt, seconds spent)``, 0 when reused.
        """
        key_doc = {"ogp": self.s["ogp"], "public_model": self.s["public_model"], "public_sha": sha256_file(self.public),
                   "code": code_digest(),
                   "split": self.s["split"], "private": self.sc.private, "size": self.size, "seed": seed}
        key = hashlib.sha256(json.dumps(key_doc, sort_keys=True, default=str).encode()).hexdigest()[:12]
        root = self.ogp_cache / f"seed{seed}-{key}"
        st = StateDir.at(root / "state")
        done = root / "ogp.json"
        if done.is_file() and st.adapted.is_file():
            return st.adapted, 0.0
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        run = Distillation(self.distill_config("pfd", {}, root=root, seed=seed, resume=False), faces=self.private,
                           progress=self.progress)
        try:
            run.public()
            run.adapt()
        finally:
            run.close()
        atomic_write_text(done, json.dumps(key_doc, sort_keys=True, default=str))  # written last: the stage finished
        return st.adapted, time.perf_counter() - t0

    def distill_row(self, method: str, baseline: dict[str, Any], root: Path, seed: int,
                    shared: Path | None) -> dict[str, Any]:
        """Run the pipeline for one method; a shared fine-tuned model is seeded into the state dir."""
        if shared is not None:
            st = StateDir.at(root / "state")
            st.root.mkdir(parents=True)
            write_marker(st.root, new_run_id())  # a pfd state dir that --resume may continue
            record_private_set(st.private_set, private_set_record(self.private))  # what --resume checks
            shutil.copyfile(self.public, st.public_model)
            shutil.copyfile(shared, st.adapted)  # the pipeline's resume skips fine-tuning
        cfg = self.distill_config(method, baseline, root=root, seed=seed, resume=shared is not None)
        init = self.s["rta"].get("init_data") if self.s["rta"].get("init") == "public" else None
        return distill(cfg, faces=self.private, progress=self.progress,
                       init_faces=self.resolver(init) if init else None).summary

    # -- measurements -----------------------------------------------------------------------
    def embed(self, model_path: Path, which: str, *, flip: bool) -> torch.Tensor:
        """``(n, D)`` embeddings of the private or test set (or a tensor's name) by a checkpoint,
        cached by the file's content: the public model's and a shared fine-tune's gallery are
        embedded once, and a downstream model's test embeddings serve utility and MIA alike."""
        key = (sha256_file(model_path), which, flip)
        if key not in self._emb:
            if len(self._emb) >= 8:  # a few models at a time; the oldest goes
                self._emb.pop(next(iter(self._emb)))
            a = load_attacker(model_path, role="model", flip=flip, progress=False)
            self._emb[key] = a.embed(self.private if which == "private" else self.test)
        return self._emb[key]

    def utility(self, model_path: Path, scores_dir: Path) -> dict[str, Any]:
        """Verification on each pair set; the per-pair scores are kept in ``scores_dir`` (.npy) for
        the paired bootstrap against public-ft."""
        e = self.s["eval"]
        out: dict[str, Any] = {}
        scores_dir.mkdir(parents=True, exist_ok=True)
        for kind, pairs in self.pairs.items():
            if pairs.faces is self.test:
                emb = self.embed(model_path, "test", flip=e["flip"])  # (n, D)
            else:
                emb = Embedder(load_backbone(model_path), flip=e["flip"], progress=False)(pairs.faces)
            scores = pair_scores(emb, pairs)  # (P,)
            np.save(scores_dir / f"{kind}.npy", scores)
            metrics = verification(scores, pairs.issame, folds=e["folds"], fars=e["fars"])
            out[kind] = metrics
        return out

    def public_curve(self, out: Path) -> list[dict[str, Any]]:
        """Verification of the public model's checkpoints (and final model) on this scenario's test
        pairs: the training curve in the figure that matters (accuracy, TAR@1e-2)."""
        pairs, e = self.pairs["all"], self.s["eval"]
        curve = []
        for path in sorted((out / "checkpoints").glob("step_*.pt")) + [out / "model.pt"]:
            emb = self.embed(path, "test", flip=e["flip"])
            scores = (emb[pairs.left] * emb[pairs.right]).sum(1).double().numpy()
            m = verification_metrics(scores, pairs.issame, folds=e["folds"])
            step = load_checkpoint(path).get("step") if path.name == "model.pt" else int(path.stem.split("_")[1])
            curve.append({"step": step, "accuracy": m["accuracy"], "auc": m.get("auc"),
                          TAR: tar_at_far(scores, pairs.issame, 1e-2)[0]})
        return curve

    def audit(self, root: Path, *, reconstruct: bool) -> dict[str, Any]:
        """The one audit of the release: every registered check by the public model, the insider and
        the judge, and its verdict.

        The publication gate audited exactly these pixels before writing them, with ``pfd attack``'s
        own settings (reconstructions included), and kept every figure in the state dir
        (``state/audit.json``): that audit is read, not run again (about 2-4 minutes a unit). A
        state dir without it (made before) is audited here with
        :func:`pfd.audit.engine.run_scorecard` at the benchmark's reconstruction budget.

        Returns:
            ``{"audit": {"verdict", "summary", "skipped", "source"}, "linkability": ...}``: the verdict
            and every row as :func:`pfd.audit.verdict.decide` marked them, and the link figures in the
            table's layout (:func:`link_layout`).
        """
        gate = StateDir.at(root / "state").audit
        if gate.is_file():
            data = json.loads(gate.read_text())
            out = link_layout(data)
            out["audit"] = {"verdict": data["verdict"], "summary": data["summary"], "skipped": data.get("skipped", {}),
                            "seconds": 0.0, "source": "the publication gate (state/audit.json)"}
            if data.get("reconstruction"):
                out["linkability"]["reconstruction"] = {k: v for k, v in data["reconstruction"].items()
                                                        if isinstance(v, (int, float, str))}
            return out
        from pfd.audit.engine import run_scorecard
        from pfd.config import AttackConfig, build_config

        r = self.s["recon"]
        per_id = r["per_identity"]
        attacks = {
            # The benchmark's inversion budget: about ``per_identity`` proxies per private identity
            # (a seeded sample) at its own steps, on the first ``recon.seeds`` seeds only.
            "reconstruction": {"enabled": reconstruct, "iterations": r["iterations"], "batch_size": r["batch_size"],
                               "lr": r["lr"], "lambda_bn": r["lambda_bn"],
                               "limit": per_id * self.private.num_classes if per_id > 0 else 0},
        }
        cfg = build_config(AttackConfig, {"attacks": attacks}, {
            "release": str(root / "release"), "state_dir": str(root / "state"),
            "private": f"{self.sc.private} (in memory)", "report": str(root / "audit")})
        t0 = time.perf_counter()
        card = run_scorecard(cfg, progress=self.progress, private=self.private)
        data = card.data
        out = link_layout(data)
        out["audit"] = {"verdict": data["verdict"], "summary": data["summary"], "skipped": data.get("skipped", {}),
                        "seconds": round(time.perf_counter() - t0, 1), "source": "pfd attack on the written release"}
        if reconstruct and data.get("reconstruction"):
            out["linkability"]["reconstruction"] = {k: v for k, v in data["reconstruction"].items()
                                                    if isinstance(v, (int, float, str))}
        return out

    def membership(self, model_path: Path) -> dict[str, Any]:
        """:func:`pfd.attacks.membership.audit.membership_audit` on the cached embeddings (same report)."""
        m, flip = self.s["mia"], self.s["eval"]["flip"]
        kind, s, margin, _ = resolve_head(model_path, None, None, None)
        t0 = time.perf_counter()
        rep = membership_report(self.embed(model_path, "private", flip=flip), self.private.labels,
                                self.embed(model_path, "test", flip=flip), self.test.labels, head=kind, scale=s,
                                margin=margin, folds=m["folds"], seed=m["seed"], member_names=self.private.identities,
                                nonmember_names=self.test.identities)
        rep["seconds"] = time.perf_counter() - t0
        # The per-identity statistics ("scores") stay: the AUC-vs-base bootstrap resamples them.
        for st in rep["statistics"].values():
            st.pop("roc", None)
        return rep

    # -- one (row, seed) unit ---------------------------------------------------------------
    def unit(self, name: str, method: str | None, baseline: dict[str, Any], seed: int,
             plain: tuple[Path, float] | None) -> dict[str, Any]:
        """Every figure of row ``name`` at ``seed``, with the row's own settings (:func:`row_view`),
        which the unit records (``row_settings``) so that a later change of them runs it again."""
        if ROW_KEY not in self.s:
            return self._unit(name, method, baseline, seed, plain)
        bench = copy.copy(self)  # shares the loaded data and pairs: a row changes only rta/ogp (ROW_SECTIONS)
        bench.s = row_view(self.s, name)
        return {**bench._unit(name, method, baseline, seed, plain), "row_settings": row_overrides(self.s, name)}

    def _unit(self, name: str, method: str | None, baseline: dict[str, Any], seed: int,
              plain: tuple[Path, float] | None) -> dict[str, Any]:
        root = self.work / "rows" / slug(name) / f"seed{seed}"
        shutil.rmtree(root, ignore_errors=True)  # an unfinished unit starts over
        root.mkdir(parents=True)
        res: dict[str, Any] = {"row": name, "seed": seed, "method": method or name, "load_start": load_average()}
        times: dict[str, float] = {}
        peaks = StagePeaks()  # resident-memory peak per stage of the unit (issue 35's <= 6 GB)
        t0 = time.perf_counter()
        release = None
        if method is not None:
            shared = plain[0] if plain and method in PLAIN_FINETUNE else None
            ogp_s = 0.0
            if method == "pfd" and not self._released(method, baseline, seed):
                shared, ogp_s = self.pfd_finetune(seed)
            t = time.perf_counter()
            droot = self.release_dir(method, baseline, seed)
            reused = self._released(method, baseline, seed)
            if reused:  # the same distillation was done for other downstream settings: same release
                summary = json.loads(StateDir.at(droot / "state").summary.read_text())
            else:
                shutil.rmtree(droot, ignore_errors=True)  # an unfinished distillation starts over
                droot.mkdir(parents=True)
                summary = self.distill_row(method, baseline, droot, seed, shared)
            for part in ("release", "state"):  # the unit's folder names them as before
                (root / part).symlink_to(droot / part, target_is_directory=True)
            times["distill"] = time.perf_counter() - t
            peaks.end("distill")
            if not reused:  # the pipeline resets the mark at each of its stages: its largest stage is the peak
                peaks.peaks_gb["distill"] = max([peaks.peaks_gb.get("distill", 0.0), *summary.get("memory_gb", {}).values()])
            res["distill"] = {"times_s": summary["times_s"], "rates": summary["rates"], "counts": summary["counts"],
                              "gate": summary.get("gate"), "losses": summary["losses"],
                              "baseline": summary.get("baseline"), "reused_release": reused,
                              "shared_finetune_s": (ogp_s if method == "pfd" else plain[1]) if shared is not None else None}
            release = root / "release"
        if name == "base":
            model = self.public
        else:
            t = time.perf_counter()
            model = self.downstream(release, root / "downstream", seed)
            times["downstream"] = time.perf_counter() - t
            peaks.end("downstream")
        t = time.perf_counter()
        shutil.rmtree(self._scores(name, seed), ignore_errors=True)  # no scores of an unfinished unit stay
        res["utility"] = self.utility(model, self._scores(name, seed))
        times["utility"] = time.perf_counter() - t
        peaks.end("utility")
        if release is not None:
            t = time.perf_counter()
            # The real folders, not the unit's symlinks to them (the audit's integrity check refuses a
            # symlinked release); raw, dp-pix and blur release private photos by design and fail it.
            res.update(self.audit(self.release_dir(method, baseline, seed), reconstruct=seed < self.s["recon"]["seeds"]))
            times["linkability"] = time.perf_counter() - t
            peaks.end("linkability")
        if self.s["mia"].get("enabled", True):  # a screen (issue 35) leaves membership to the full unit
            t = time.perf_counter()
            res["membership"] = self.membership(model)
            times["membership"] = time.perf_counter() - t
            peaks.end("membership")
        times["total"] = time.perf_counter() - t0
        res.update(times_s={k: round(v, 1) for k, v in times.items()}, load_end=load_average(),
                   memory_gb=dict(peaks.peaks_gb), stage_peaks=peaks.resettable)
        return res

    # -- aggregation ------------------------------------------------------------------------
    def aggregate(self, name: str, units: dict[str, Any], seeds: list[int]) -> dict[str, Any] | None:
        """Mean ± sd over seeds, utility vs public-ft and membership vs base with intervals; None
        until every unit it needs is done (and its scores are in the work dir)."""
        mine = [units.get(unit_key(name, s)) for s in seeds]
        ref_seeds = finished_seeds("public-ft", self.s, units)
        ref = [units.get(unit_key("public-ft", s)) for s in ref_seeds]
        base = units.get(unit_key("base", 0))
        if any(u is None for u in mine + ref) or base is None:
            return None
        e = self.s["eval"]
        out: dict[str, Any] = {"row": name, "seeds": seeds, "utility": {}, "membership": {}}
        try:
            for kind, pairs in self.pairs.items():
                y = pairs.issame
                row_s = [np.load(self._scores(name, s) / f"{kind}.npy") for s in seeds]
                ref_s = [np.load(self._scores("public-ft", s) / f"{kind}.npy") for s in ref_seeds]
                block = utility_gain(row_s, ref_s, y, self.weights[kind], folds=e["folds"], fars=e["fars"])
                out["utility"][kind] = block
        except FileNotFoundError as err:  # the scores were removed: keep the summary the results hold
            print(f"[{self.sc.name} {name}] not summarised: {err.filename} is missing; rerun the "
                  f"row's units with --force --rows {name}", flush=True)
            return None
        base_scores = base["membership"]["scores"]
        for st in MIA_STATS:
            row = [(np.asarray(u["membership"]["scores"][st]["members"]), np.asarray(u["membership"]["scores"][st]["nonmembers"]))
                   for u in mine]
            b = (np.asarray(base_scores[st]["members"]), np.asarray(base_scores[st]["nonmembers"]))
            out["membership"][st] = auc_difference(row, b, replicates=e["bootstrap"], seed=e["seed"])
        verdicts = [u["membership"]["verdict"] for u in mine if u["membership"].get("verdict")]
        if verdicts:  # the attack suite's calibrated test (a permutation p), where this pfd has it
            out["membership_verdict"] = {"p_per_seed": [v.get("p") for v in verdicts],
                                         "leaks": sum(bool(v.get("p") is not None and v["p"] <= 0.05) for v in verdicts),
                                         "of": len(verdicts)}
        links = [u.get("linkability") for u in mine if u.get("linkability")]
        if links:
            out["linkability"] = _link_summary(links)
        audits = [u.get("audit") for u in mine]
        if any(a is not None for a in audits):  # the one audit's verdict on each seed's written release
            out["audit"] = {"publishable": sum(bool(a and a["verdict"]["publishable"]) for a in audits), "of": len(audits),
                            "text_per_seed": [a["verdict"]["text"] if a else None for a in audits],
                            "failed_per_seed": [_failed_rows(a) for a in audits]}
        gates = [(u.get("distill") or {}).get("gate") for u in mine]
        if any(g is not None for g in gates):  # the publication gate's verdict on each seed's release
            out["gate"] = {"passed": sum(bool(g and g.get("passed")) for g in gates), "of": len(gates),
                           "failed_checks": [_failed_rows({"summary": (g or {}).get("checks", [])}) for g in gates]}
        out["times_s"] = {"total_mean": float(np.mean([u["times_s"]["total"] for u in mine]))}
        return out

    def paired(self, row: str, ref: str, units: dict[str, Any]) -> dict[str, Any] | None:
        """``row`` minus ``ref`` on the same pairs (each over its own seeds, identity bootstrap), as
        :meth:`aggregate`'s utility against public-ft; None until both rows' units and scores are there."""
        seeds = {n: finished_seeds(n, self.s, units) for n in (row, ref)}
        if any(units.get(unit_key(n, s)) is None for n in seeds for s in seeds[n]):
            return None
        e = self.s["eval"]
        try:
            return {kind: utility_gain([np.load(self._scores(row, s) / f"{kind}.npy") for s in seeds[row]],
                                       [np.load(self._scores(ref, s) / f"{kind}.npy") for s in seeds[ref]],
                                       pairs.issame, self.weights[kind], folds=e["folds"], fars=e["fars"])["accuracy"]
                    for kind, pairs in self.pairs.items()}
        except FileNotFoundError:
            return None

    def _scores(self, name: str, seed: int) -> Path:
        if self.scores_root is None:
            return self.work / "rows" / slug(name) / f"seed{seed}" / "scores"
        return self.scores_root / slug(name) / f"seed{seed}"


def group_check(units: dict[str, Any], *, permutations: int = 2000) -> dict[str, Any] | None:
    """Do the private and test identities differ *before* training? :func:`group_separation` on
    ``base``'s per-identity statistics (the public model saw neither group). When base separates
    them, the groups are not exchangeable and a LEAKS verdict of the calibrated test is not
    evidence of membership (``pfd attack mia --reference`` reports it inconclusive)."""
    base = units.get(unit_key("base", 0))
    if not base or "scores" not in base.get("membership", {}):
        return None
    sc = base["membership"]["scores"]
    stats = {s: np.r_[sc[s]["members"], sc[s]["nonmembers"]] for s in MIA_STATS}
    is_member = np.r_[np.ones(len(sc[MIA_STATS[0]]["members"]), bool), np.zeros(len(sc[MIA_STATS[0]]["nonmembers"]), bool)]
    return group_separation(stats, is_member, permutations=permutations, seed=0)


def _link_summary(links: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (target, role, attack): rate mean ± sd over seeds, chance, and each seed's interval."""
    out: dict[str, Any] = {}
    for target in ("proxies", "reconstructions"):
        have = [lk[target] for lk in links if target in lk]
        if not have:
            continue
        out[target] = {}
        for role in have[0]:
            out[target][role] = {}
            for attack in have[0][role]:
                rs = [h[role][attack] for h in have]
                rates = np.array([r["rate"] for r in rs])
                out[target][role][attack] = {
                    "rate_mean": float(rates.mean()), "rate_sd": float(rates.std(ddof=1)) if len(rs) > 1 else 0.0,
                    "chance": rs[0]["chance"], "ci95_per_seed": [r["ci95"] for r in rs],
                    "count_n_per_seed": [[r["count"], r["n"]] for r in rs]}
    tests = [lk["rank_uniformity"] for lk in links if "rank_uniformity" in lk]
    if tests:  # the source-rank uniformity test per (target, role): p per seed, how many seeds uniform
        out["rank_uniformity"] = {}
        for target in ("proxies", "reconstructions"):  # reconstructions are made on the first seed only
            for role in sorted({r for t in tests for r in t.get(target, {})}):
                have = [t[target][role] for t in tests if role in t.get(target, {})]
                out["rank_uniformity"].setdefault(target, {})[role] = {
                    "p_per_seed": [h["p"] for h in have], "mean_rank_per_seed": [h["mean_rank"] for h in have],
                    "uniform": sum(bool(h["uniform"]) for h in have), "of": len(have)}
    return out


def _failed_rows(audit: dict[str, Any] | None) -> list[str]:
    """The rows the one verdict failed (a leaking figure or a failed check): ``"<attack> [<attacker>]"``."""
    if not audit:
        return []
    return [f"{r['attack']} [{r['attacker']}]" for r in audit["summary"] if r.get("family") in REFUSING]


def link_layout(data: dict[str, Any]) -> dict[str, Any]:
    """The audit's link figures in the benchmark's layout: ``{"linkability": {target: {role: {attack: figure}},
    "rank_uniformity": {target: {role: test}}}}``.

    Read by shape, not by attack name, so that a newly registered attack's figures join the table: every
    entry of a ``report.json`` section that names an ``attacker`` (and a ``target``, default the proxies)
    contributes each of its figures (an object with a ``rate``, under its own ``attack`` name where it
    has one: the source rank's ``reid_last`` is rank-last or orthogonal Re-ID), and an entry that is a
    rank test (``p`` and ``mean_rank``) its test, under ``"<role> |cos|"`` for the test by ``|cos|``.
    """
    link: dict[str, Any] = {}
    ranks: dict[str, Any] = {}
    for section in data.values():
        if not isinstance(section, list):
            continue
        for entry in section:
            if not isinstance(entry, dict) or "attacker" not in entry:
                continue
            target = entry.get("target", "proxies")
            for key, figure in entry.items():
                if isinstance(figure, dict) and "rate" in figure:
                    link.setdefault(target, {}).setdefault(entry["attacker"], {})[figure.get("attack", key)] = figure
            if "p" in entry and "mean_rank" in entry:
                role = entry["attacker"] + (" |cos|" if entry.get("by") == "abs" else "")
                ranks.setdefault(target, {})[role] = {k: entry[k] for k in ("p", "mean_rank", "mean_rank_ci95", "uniform",
                                                                             "statistic", "permutations") if k in entry}
    out: dict[str, Any] = {"linkability": link}
    if ranks:
        link["rank_uniformity"] = ranks
    return out


def per_identity(source: np.ndarray, k: int, *, seed: int) -> np.ndarray:
    """Indices of ``k`` proxies per source identity (seeded); all when ``k <= 0``."""
    if k <= 0:
        return np.arange(len(source))
    rng = np.random.default_rng(seed)
    return np.sort(np.concatenate([rng.permutation(np.flatnonzero(source == c))[:k] for c in np.unique(source)]))


def _toml_roundtrip(d: dict[str, Any]) -> dict[str, Any]:
    """What a config dict reads back as from config.toml (tuples as lists, no None values)."""
    return {k: _toml_roundtrip(v) if isinstance(v, dict) else list(v) if isinstance(v, tuple) else v
            for k, v in d.items() if v is not None}
