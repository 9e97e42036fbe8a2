"""Model audits: was this person in the training set (geometric MIA)? Was this dataset (Algorithm 1)?

These run on *any* face-recognition model an auditor can query, release or no release:

* :func:`membership_audit` embeds a member set and a non-member set (``k >= 2`` images per
  identity) and calls :func:`pfd.attacks.membership.statistics.membership_report` (geometric MIA paper §3,
  §5.4): four per-identity statistics, their AUCs, TPR at low FPR, and the fused classifier.
* :func:`dataset_audit` embeds candidate datasets and ranks them with
  :func:`pfd.attacks.membership.dataset.dataset_membership` (dataset membership paper, Algorithm 1).

``pfd attack mia`` / ``pfd attack dataset`` are thin wrappers over :func:`run_mia` and
:func:`run_dataset`; the scorecard reuses :func:`membership_audit` for the release's own
membership leakage.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from pfd.attacks.membership.dataset import dataset_membership
from pfd.attacks.membership.statistics import STATISTICS, membership_report
from pfd.attackers.loading import Attacker, checkpoint_head, load_attacker
from pfd.attacks.report_folder import check_report_folder, report_folder
from pfd.data.faceset import FaceSet
from pfd.data.sources import open_faces
from pfd.data.shape import same_size
from pfd.errors import PfdError
from pfd.io import atomic_write_json, jsonable, same_path
from pfd.attacks.membership.dataset import dataset_caveats

__all__ = [
    "HEAD_MARGINS",
    "resolve_head",
    "membership_audit",
    "dataset_audit",
    "format_membership_table",
    "format_dataset_table",
    "run_mia",
    "run_dataset",
]

#: Default margin of each head for the grey-box statistics (scale 64 for all). MagFace's margin
#: depends on the feature norm in training (m ∈ [0.45, 0.8]); unit embeddings lose the norm, so
#: its lower bound is used unless a margin is given.
HEAD_MARGINS: dict[str, float] = {"arcface": 0.5, "cosface": 0.4, "adaface": 0.4, "magface": 0.45}


def resolve_head(
    model_path: str | os.PathLike | None, head: str | None, scale: float | None, margin: float | None
) -> tuple[str, float, float, str]:
    """Head, scale and margin for PenLogit/ProtoCE: given values, else the checkpoint's, else ArcFace.

    Returns:
        ``(head, scale, margin, source)`` with ``source`` in ``{"given", "checkpoint", "default"}``.

    Raises:
        PfdError: For an unknown head name.
    """
    stored = checkpoint_head(model_path) if model_path and head is None else None
    source = "given" if head is not None else "checkpoint" if stored else "default"
    kind = (head or (stored or {}).get("kind") or "arcface").lower()
    if kind not in HEAD_MARGINS:
        raise PfdError(f"unknown head {kind!r} (--head); choose one of {', '.join(HEAD_MARGINS)}")
    s = scale if scale is not None else (stored or {}).get("scale") or 64.0
    m = margin if margin is not None else (stored or {}).get("margin")
    m = m if m is not None else HEAD_MARGINS[kind]
    return kind, float(s), float(m), source


def membership_audit(
    attacker: Attacker,
    members: FaceSet,
    nonmembers: FaceSet,
    *,
    head: str = "arcface",
    scale: float = 64.0,
    margin: float = 0.5,
    folds: int = 5,
    seed: int = 0,
    permutations: int = 2000,
    reference: Attacker | None = None,
    reference_sets: tuple[FaceSet, FaceSet] | None = None,
    reference_member_emb: Any = None,
) -> dict[str, Any]:
    """Identity-level geometric MIA of one model on a member and a non-member set.

    Args:
        attacker: The model under audit.
        members: Identities believed to be in its training set (opened at ``attacker.size``).
        nonmembers: Identities known not to be, ideally of the same domain (§5.3).
        head: Head of PenLogit / ProtoCE; ``scale``, ``margin``: its hyper-parameters.
        folds: Cross-validation folds of the fusion classifier.
        seed: Seed of the fusion classifier and the verdict's permutations.
        permutations: Label permutations of the verdict's null.
        reference: Optional model that trained on neither group (e.g. the backbone the audited
            model was fine-tuned from): the check of :mod:`pfd.attacks.membership.reference`.
        reference_sets: The same members and non-members opened at the reference's size (default:
            ``members`` and ``nonmembers``).
        reference_member_emb: The reference's embeddings of the members when the caller already
            has them (a scorecard's public gallery); they are not embedded again.

    Returns:
        :func:`~pfd.attacks.membership.statistics.membership_report`'s dict plus ``model`` and ``seconds``.

    Raises:
        PfdError: Mismatched sizes, an identity with fewer than 2 images (named), or a bad model.
    """
    t0 = time.perf_counter()
    emb_m = attacker.embed(members)
    emb_n = attacker.embed(nonmembers)
    ref_m = ref_n = None
    if reference is not None:
        rm, rn = reference_sets or (members, nonmembers)
        ref_m = reference.embed(rm) if reference_member_emb is None else reference_member_emb
        ref_n = reference.embed(rn)
    rep = membership_report(
        emb_m, members.labels, emb_n, nonmembers.labels, head=head, scale=scale, margin=margin, folds=folds,
        seed=seed, permutations=permutations, member_names=members.identities, nonmember_names=nonmembers.identities,
        reference_member_emb=ref_m, reference_nonmember_emb=ref_n,
    )
    rep["model"] = attacker.describe()
    if reference is not None:
        rep["reference"]["model"] = reference.describe()
    rep["seconds"] = time.perf_counter() - t0
    return rep


def dataset_audit(
    attacker: Attacker, candidates: Mapping[str, FaceSet], *, n: int = 500, seed: int = 0, per_identity: str = "mean"
) -> list[dict[str, Any]]:
    """Rank candidate datasets by how likely each trained ``attacker`` (Algorithm 1).

    Args:
        attacker: The model under audit.
        candidates: ``{name: FaceSet}`` (at least 3), each opened at ``attacker.size``.
        n: Gallery (= probe) identities per candidate (paper: 500; capped by the smallest set).
        seed: Sampling seed.
        per_identity: ``"mean"`` or ``"sample"`` (see :mod:`pfd.attacks.membership.dataset`).

    Returns:
        Rows sorted by robust z (rank 1 = most likely training set).
    """
    embedded = {name: (attacker.embed(f), f.labels) for name, f in candidates.items()}
    return dataset_membership(embedded, n=n, seed=seed, per_identity=per_identity)  # type: ignore[arg-type]


def _pct(v: float) -> str:
    return f"{v:.3f}"


def format_membership_table(report: Mapping[str, Any]) -> str:
    """A terminal table of a membership report: one row per statistic, then the fused classifier."""
    c = report["counts"]
    lines = [f"members {c['members']} identities ({c['member_images']} images), non-members "
             f"{c['nonmembers']} ({c['nonmember_images']} images); chance AUC 0.5",
             f"{'statistic':<11} {'AUC':>6} {'95% CI':>15} {'dir':>6} {'TPR@1%FPR':>10} {'TPR@0.1%FPR':>12}"]
    for name in STATISTICS:
        s = report["statistics"][name]
        lo, hi = s["auc_ci95"]
        t1, t01 = s["tpr_at_1pct_fpr"], s["tpr_at_0.1pct_fpr"]
        flag1 = "" if t1["resolvable"] else "*"
        flag01 = "" if t01["resolvable"] else "*"
        lines.append(f"{name:<11} {s['auc']:>6.3f} {f'[{lo:.3f}, {hi:.3f}]':>15} {s['direction']:>6} "
                     f"{_pct(t1['tpr']) + flag1:>10} {_pct(t01['tpr']) + flag01:>12}")
    fusion = report.get("fusion", {})
    if "auc_mean" in fusion:
        best = fusion["best_single"]
        lines.append(f"fused MLP   {fusion['auc_mean']:>6.3f} ± {fusion['auc_std']:.3f} over {fusion['folds']} folds "
                     f"(best single on the same folds: {best['statistic']} {best['auc_mean']:.3f})")
    elif "skipped" in fusion:
        lines.append(f"fused MLP   skipped: {fusion['skipped']}")
    v = report.get("verdict")
    if v:
        word = "LEAKS" if v["leaks"] else "INCONCLUSIVE" if v.get("inconclusive") else "no evidence of membership leakage"
        lines.append(f"verdict     max a-priori AUC {v['auc']:.3f} ({v['statistic']}), permutation p = {v['p']:.3g} "
                     f"(null 95% {v['null95']:.3f}): {word}; "
                     f"TPR {v['tpr_at_1pct_fpr']['tpr']:.3f} @1% / {v['tpr_at_0.1pct_fpr']['tpr']:.3f} @0.1% FPR")
        ref = report.get("reference")
        if ref:
            lines.append(f"reference   the model before training on either group {'SEPARATES' if ref['separates'] else 'does not separate'}"
                         f" them (two-sided p = {ref['p']:.3g}, {ref['statistic']} AUC {ref['auc']:.3f})"
                         + (": the groups differ a priori, so the verdict is INCONCLUSIVE, not evidence of membership"
                            if ref["separates"] else ""))
        lines.append("AUC/dir above: oriented max(A, 1-A), a description chosen after the fact, not the test")
    if any(not report["statistics"][n]["tpr_at_1pct_fpr"]["resolvable"] for n in STATISTICS):
        lines.append("* fewer non-members than 1/FPR: the figure is TPR at FPR = 0")
    return "\n".join(lines)


def format_dataset_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A terminal table of the dataset ranking (rank 1 = most likely training set)."""
    width = max([len(str(r["name"])) for r in rows] + [9])
    lines = [f"{'rank':>4} {'z':>8} {'x':>8} {'N':>5}  {'candidate':<{width}}"]
    for r in rows:
        mark = "  <- most likely training set" if r["rank"] == 1 else ""
        lines.append(f"{r['rank']:>4} {r['z']:>8.2f} {r['x']:>8.4f} {r['n']:>5}  {str(r['name']):<{width}}{mark}")
    lines.append("x: mean probe-to-centroid cosine; z: robust z-score against the other candidates (lowest = trained on)")

    lines += [f"caveat: {c}" for c in dataset_caveats(list(rows))]
    return "\n".join(lines)


def _report_claim(report: str | os.PathLike | None) -> contextlib.AbstractContextManager:
    """The report folder claimed for this audit (:func:`pfd.attacks.report_folder.report_folder`), or nothing."""
    return report_folder(report) if report else contextlib.nullcontext()


def run_mia(
    model: str | os.PathLike,
    members: str,
    nonmembers: str,
    *,
    head: str | None = None,
    scale: float | None = None,
    margin: float | None = None,
    model_size: int | None = None,
    folds: int = 5,
    seed: int = 0,
    batch_size: int = 256,
    report: str | os.PathLike | None = None,
    progress: bool = False,
    skip_bad: bool = False,
    reference: str | os.PathLike | None = None,
    reference_size: int | None = None,
) -> dict[str, Any]:
    """``pfd attack mia``: load a model, open both sets at its size, audit, optionally write a report.

    Args:
        model: Checkpoint or TorchScript file.
        members: Dataset spec of the member identities.
        nonmembers: Dataset spec of the non-member identities.
        head: Head of the grey-box statistics (default: the checkpoint's head, else ArcFace).
        scale: Head scale (default: the checkpoint's, else 64).
        margin: Head margin (default: the checkpoint's, else the head's usual value).
        model_size: Input size of a TorchScript model.
        folds: Fusion CV folds.
        seed: Fusion seed.
        batch_size: Embedding batch size.
        report: Folder for ``membership.json``, ``membership_roc.png`` and ``membership_density.png``.
        progress: Progress bars.
        skip_bad: Skip (and list) unreadable images of identity-folder sets.
        reference: Optional model that trained on neither group (the audited model's starting
            point): adds the reference check (:mod:`pfd.attacks.membership.reference`).
        reference_size: Input size of a TorchScript, ONNX or Python reference model.

    Returns:
        The membership report (plus ``members``/``nonmembers`` specs and ``head_source``).
    """
    if folds < 2:
        raise PfdError(f"--folds {folds}: the fused classifier's cross-validation needs at least 2 folds")
    if report:
        check_report_folder(report)  # the folder's errors first: they name what the user typed last
    if same_path(members, nonmembers):
        raise PfdError(f"{members}: given as both the members and the non-members; the audit compares two "
                       "disjoint groups of people: pass the held-out people as --nonmembers")
    with _report_claim(report):  # the folder is this audit's until it has written
        attacker = load_attacker(model, role="model", size=model_size, batch_size=batch_size, progress=progress)
        kind, s, m, source = resolve_head(model, head, scale, margin)
        mem = open_faces(members, size=attacker.size, skip_bad=skip_bad)
        non = open_faces(nonmembers, size=attacker.size, skip_bad=skip_bad)
        ref = ref_sets = None
        if reference is not None:
            ref = load_attacker(reference, role="model", size=reference_size, batch_size=batch_size, progress=progress)
            if not same_size(ref.size, attacker.size):
                ref_sets = (open_faces(members, size=ref.size, skip_bad=skip_bad),
                            open_faces(nonmembers, size=ref.size, skip_bad=skip_bad))
                if [len(x) for x in ref_sets] != [len(mem), len(non)]:
                    raise PfdError(f"{reference}: at its input size {ref.size} the sets hold other images than at "
                                   f"{attacker.size}; pass --skip-bad consistently or fix the unreadable images")
        rep = membership_audit(attacker, mem, non, head=kind, scale=s, margin=m, folds=folds, seed=seed,
                               reference=ref, reference_sets=ref_sets)
        rep.update(members=str(members), nonmembers=str(nonmembers), head_source=source)
        if report:
            from pfd.attacks.plots import plot_densities, plot_roc

            out = Path(report)
            atomic_write_json(out / "membership.json", jsonable(rep))
            plot_roc(rep, out / "membership_roc.png", title=f"Geometric MIA: {Path(model).name}")
            plot_densities(rep, out / "membership_density.png", title=f"Member / non-member statistics: {Path(model).name}")
            rep["written_to"] = str(out)
        return rep


def run_dataset(
    model: str | os.PathLike,
    candidates: Sequence[str],
    *,
    n: int = 500,
    seed: int = 0,
    per_identity: str = "mean",
    model_size: int | None = None,
    batch_size: int = 256,
    report: str | os.PathLike | None = None,
    progress: bool = False,
    skip_bad: bool = False,
) -> list[dict[str, Any]]:
    """``pfd attack dataset``: rank candidate dataset specs; optionally write ``dataset.json``.

    ``skip_bad`` skips (and lists) unreadable images of identity-folder candidates.

    Raises:
        PfdError: Fewer than 3 candidates, a repeated candidate, or a bad model/dataset.
    """
    if len(candidates) < 3:
        raise PfdError(f"dataset MIA needs at least 3 candidate datasets, got {len(candidates)}; add candidates")
    for i, a in enumerate(candidates):
        for b in candidates[:i]:
            if a == b or same_path(a, b):  # ./A and A, a symlink and its target
                raise PfdError(f"{a}: the candidate dataset {b} is given twice; list each once")
    with _report_claim(report):  # the folder is this audit's until it has written
        attacker = load_attacker(model, role="model", size=model_size, batch_size=batch_size, progress=progress)
        sets = {str(c): open_faces(c, size=attacker.size, skip_bad=skip_bad) for c in candidates}
        rows = dataset_audit(attacker, sets, n=n, seed=seed, per_identity=per_identity)
        if report:

            doc = {"model": attacker.describe(), "n": n, "seed": seed, "per_identity": per_identity, "ranking": rows,
                   "caveats": dataset_caveats(rows)}
            atomic_write_json(Path(report) / "dataset.json", jsonable(doc))
        return rows
