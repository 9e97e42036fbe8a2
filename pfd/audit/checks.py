"""The audit's pass/fail checks: what a release must be before any attack is worth running.

Registered before the attacks (:data:`pfd.audit.contract.CHECKS`), each returns one row of
``kind = "check"`` (:func:`pfd.audit.contract.check_row`) that the verdict counts outside the
family-wise test (:mod:`pfd.audit.verdict`):

* ``integrity``: the release on disk is what pfd writes and nothing else: every file listed in
  the manifest with a matching sha256 (a PNG changed under an old manifest fails), PNGs of pixels
  only (no metadata), no state file, labels that do not follow the source order, the state dir
  outside the release with private modes (:func:`pfd.release.lint.lint_release` without the
  private set). A release still in memory (the gate's, before it is written) has nothing to check
  yet: pfd's own writer writes it after the audit.
* ``private_copies``: no released image is a private photo of *any* private identity, exact,
  near-duplicate, or edited (rotated, shifted, cropped, pasted, tiled:
  :func:`pfd.release.private_copies.find_private_copies`), nor a near-duplicate in the public
  model's embedding.
* ``ogp_margin``: OGP's eq. 3 margin was reached (``pfd`` with ``ogp.repulsion``'s hinge: the
  share of private embeddings with ``|cos(M e, e)| < m`` reaches ``ogp.target_below_margin``).
* ``judge_competence``: the judge recognises the private people (leave-one-out identification
  clearly above chance), or its rows would vouch for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pfd.audit.contract import AuditInputs, Check, CheckResult, check_row, register_check
from pfd.audit.rows import AuditRow, rows_to_json
from pfd.audit.intervals import wilson_interval
from pfd.config import OGPConfig
from pfd.release.lint import lint_release
from pfd.release.private_copies import find_private_copies
from pfd.release.state_dir import StateDir

__all__ = ["ChecksResult", "IntegrityCheck", "PrivateCopiesCheck", "OgpMarginCheck", "JudgeCompetenceCheck",
           "competence", "JUDGE_COMPETENCE"]

#: A judge must identify the private people (leave one out) at this many times chance, the lower end of its
#: 95 % interval: a model that recognises nobody links nothing, and its rows would read "at chance".
JUDGE_COMPETENCE = 3.0


@dataclass
class ChecksResult(CheckResult):
    """One or more pass/fail rows and their JSON section."""

    key: str
    items: list[AuditRow] = field(default_factory=list)

    def rows(self) -> list[AuditRow]:
        return self.items

    def sections(self) -> dict[str, Any]:
        return {"checks": {self.key: rows_to_json(self.items)}}


@dataclass
class _NoConfig:
    def check(self) -> None:
        return None


@register_check
class IntegrityCheck(Check):
    """The release on disk is exactly what pfd writes (module docstring)."""

    name, title, config = "integrity", "Release integrity", _NoConfig
    stage, when_skipped = 0, "optional"  # only a written release has files to check

    def applicable(self, inputs: AuditInputs) -> str | None:
        if inputs.state.release is None:
            return "the release is still in memory (pfd's writer writes it only after the audit passes)"
        return None

    def run(self, inputs: AuditInputs) -> ChecksResult:
        with inputs.clock.stage("checks"):
            findings = lint_release(inputs.state.release, state_dir=inputs.state.state_dir)
        first = f"{findings[0].kind}: {findings[0].path}: {findings[0].detail}" if findings else ""
        detail = (f"{len(findings)} finding(s), first {first}; run pfd release lint" if findings
                  else "every file listed with its sha256, pixels only, no state, labels unordered")
        return ChecksResult("integrity", [check_row(self.title, not findings, detail, check=self.name, value=len(findings),
                                                    findings=[f.kind for f in findings[:20]])])


@register_check
class PrivateCopiesCheck(Check):
    """No released image is a copy of any private photo (module docstring)."""

    name, title, config = "private_copies", "No private photo in the release", _NoConfig
    stage = 0
    cost = "minutes"

    def applicable(self, inputs: AuditInputs) -> str | None:
        return None

    def run(self, inputs: AuditInputs) -> ChecksResult:
        released = inputs.sets.released_pixels()  # [(name, (H, W, 3) uint8)]
        # Each photo as the set opens it by default (its own size where the spec has one), not already shrunk
        # to the release's: a copy resized by another library is then found exactly (issue 54).
        private = inputs.sets.private(None)
        model = inputs.public.model if getattr(inputs.public, "has_batchnorm", False) else None
        with inputs.clock.stage("checks"):
            copies = find_private_copies(released, private, model=model)
        detail = (f"{len(copies)} released image(s) copy private photos, first {copies[0].file}: {copies[0].how} of "
                  f"{copies[0].private}; remove them and distill again" if copies
                  else f"none of {len(released)} images is a copy of any of {len(private)} private photos")
        return ChecksResult("private_copies", [check_row(self.title, not copies, detail, check=self.name, value=len(copies))])


@register_check
class OgpMarginCheck(Check):
    """OGP's eq. 3 margin was reached (pfd's hinge repulsion only)."""

    name, title, config = "ogp_margin", "OGP margin (eq. 3)", _NoConfig
    stage, when_skipped = 0, "optional"  # only pfd's own method has an OGP stage

    def applicable(self, inputs: AuditInputs) -> str | None:
        if _ogp(inputs) is None:
            return "the release was not rotated (no OGP margin to check)"
        return None

    def run(self, inputs: AuditInputs) -> ChecksResult:
        below, margin, target = _ogp(inputs)  # type: ignore[misc]
        return ChecksResult("ogp_margin", [check_row(
            self.title, below >= target, check=self.name,
            detail=f"{below:.3f} of the private embeddings below |cos(Me, e)| < {margin:g} "
            f"(target {target:.2f}); below it, rerun with --resume and a longer OGP schedule (--ogp-steps)",
            value=below, target=target)])


def _ogp(inputs: AuditInputs) -> tuple[float, float, float] | None:
    """``(share below the margin, margin, target)`` from the state dir, or ``None`` for a run without OGP."""

    path = StateDir.at(inputs.state.state_dir).prototypes
    if not path.is_file():
        return None
    protos = torch.load(path, map_location="cpu", weights_only=True)
    if not protos.get("rotated", False) or "cos_rotated" not in protos:
        return None
    ogp = (inputs.state.config.get("distill") or {}).get("ogp") or {}

    margin = float(ogp.get("rep_margin", OGPConfig.rep_margin))
    target = float(ogp.get("target_below_margin", OGPConfig.target_below_margin))
    below = float((protos["cos_rotated"].abs() < margin).float().mean())
    return below, margin, target


#: Probe images of the judge's competence: every private image up to this many, else a seeded sample of
#: this many against the whole set (the 95 % interval of 5,000 probes is ±1.4 points at most).
COMPETENCE_PROBES = 5000


def competence(private_emb: Any, private_labels: np.ndarray, *, multiple: float = JUDGE_COMPETENCE,
               probes: int = COMPETENCE_PROBES) -> dict[str, Any]:
    """Whether a model recognises the private people: leave-one-out rank-1 identification of the
    private images among all the others (each probe's nearest other image's identity), against chance.

    Memory grows by block: ``(b, m)`` similarities with ``b · m ≤ 2^22``, never ``m × m``. Up to
    ``probes`` images every image is a probe; a larger set (10^5 photos of 10^4 people) is probed by
    a seeded sample of ``probes`` images, each still against every other image, so the rate and its
    chance are the same quantities estimated from fewer trials.

    Args:
        private_emb: ``(m, D)`` normalised private embeddings by the model.
        private_labels: ``(m,)`` identities.
        multiple: The lower end of the 95 % interval must exceed this many times chance.
        probes: The most probe images (a seeded sample above it).

    Returns:
        ``rate``, ``count``, ``n`` (probes), ``chance`` (of naming the right identity by a random other
        image), ``ci95``, ``multiple`` and ``passed``.
    """
    e = private_emb.double()  # (m, D)
    labels = np.asarray(private_labels)
    m = labels.size
    rows = np.arange(m) if m <= probes else np.sort(np.random.default_rng(0).choice(m, probes, replace=False))
    nearest = np.empty(len(rows), dtype=np.int64)
    step = max(1, (1 << 22) // max(m, 1))
    for lo in range(0, len(rows), step):
        r = torch.from_numpy(rows[lo:lo + step])
        sims = e[r] @ e.T  # (b, m)
        sims[torch.arange(len(r)), r] = -float("inf")  # not itself
        nearest[lo:lo + len(r)] = sims.argmax(1).numpy()  # the first of equal maxima, as one m × m argmax
    hit = labels[nearest] == labels[rows]
    _, counts = np.unique(labels, return_counts=True)
    chance = float(((counts - 1) * counts).sum() / max(m * (m - 1), 1))  # a random other image of the same person
    n = len(rows)
    lo_, hi_ = wilson_interval(int(hit.sum()), n)
    return {"rate": float(hit.mean()) if n else 0.0, "count": int(hit.sum()), "n": int(n), "chance": chance,
            "ci95": [lo_, hi_], "multiple": float(multiple), "passed": bool(lo_ > multiple * chance)}


@register_check
class JudgeCompetenceCheck(Check):
    """The judge, a model no loss saw, recognises the private people."""

    name, title, config = "judge_competence", "Judge recognises the private people", _NoConfig
    stage, when_skipped = 0, "optional"  # only a run with a judge

    def applicable(self, inputs: AuditInputs) -> str | None:
        if not any(a.role == "judge" for a in inputs.attackers):
            return "no judge (the state dir has none)"
        return None

    def run(self, inputs: AuditInputs) -> ChecksResult:
        judge = next(a for a in inputs.attackers if a.role == "judge")
        e_judge = inputs.embeddings(judge)["private"]  # (m, D)
        c = competence(e_judge, inputs.labels)
        detail = (f"identifies {100 * c['rate']:.1f}% of the private images (95% CI {100 * c['ci95'][0]:.1f}-"
                  f"{100 * c['ci95'][1]:.1f}%, chance {100 * c['chance']:.1f}%; needs > {c['multiple']:g}x)")
        passed = c["passed"]
        if not passed:
            detail += "; its rows would vouch for nothing: pass a --judge that recognises these faces"
        # A judge that embeds the private photos as the public model does is the public model under another
        # file (re-saved, converted, a few steps of fine-tuning): the de-linking loss has seen it (issue 34).
        # The adapted model likewise: the insider term of RTA optimises against it (e.g. --judge state/adapted.pt).
        for other in inputs.attackers:
            if other.role not in ("public", "insider"):
                continue
            agree = public_agreement(e_judge, inputs.embeddings(other)["private"])
            if agree is not None and agree >= SAME_EMBEDDINGS:
                passed = False
                name = "the public model" if other.role == "public" else "the adapted model (insider)"
                detail += (f"; it embeds the private photos as {name} does (mean cosine {agree:.4f} >= "
                           f"{SAME_EMBEDDINGS}): it is {name} under another file; pass a judge that no loss has seen")
        return ChecksResult("judge_competence", [check_row(self.title, passed, detail, check=self.name, value=c["rate"], **{
            k: c[k] for k in ("count", "n", "multiple")})])


#: Mean cosine between the judge's and the public model's embeddings of the same private photos at
#: which the judge is the public model. Measured on the demo: its judge (trained apart) 0.02, the
#: adapted model (OGP's fine-tune of the public model, rotated) 0.73, the public model with every
#: weight perturbed by 1 %, 5 % or 10 % of its layer's mean size 0.9997, 0.997, 0.986.
SAME_EMBEDDINGS = 0.9


def public_agreement(judge: "torch.Tensor", public: "torch.Tensor") -> float | None:
    """Mean cosine between two models' unit embeddings of the same images ``(m, D)`` each (``None``
    when their dimensions differ: then they share no axes)."""
    if judge.shape != public.shape or len(judge) == 0:
        return None
    return float((judge.float() * public.float()).sum(1).mean())
