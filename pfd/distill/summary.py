"""The figures of a distillation run (``state/summary.json``) and the table ``pfd distill`` prints.

Rates, all in the publisher's adapted model and computed from the released (uint8) pixels:

* ``own_prototype``: proxies whose embedding is nearer (cosine) to their own prototype row of P
  than to any other of the NK rows (eq. 8's space: E Mᵀ for ``pfd``, E otherwise);
* ``own_identity``: proxies whose nearest prototype belongs to their own identity;
* ``source_cos`` / ``source_top1``: mean cosine between a proxy and its source identity's
  *original-space* prototype (the normalised mean of the identity's E, no rotation), and the
  fraction of proxies for which that source is the nearest of the N identities: an insider
  Rank-1 Re-ID with the adapted model (chance ``1/N``). PFD's claim is that these are low for
  ``pfd`` and high for ``rta-only``;
* ``below_margin``: private images with ``|cos(M e, e)| < m`` (eq. 3's margin) after OGP.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfd.config import DistillConfig
from pfd.memory import StagePeaks
from pfd.distill.batches import BatchFile
from pfd.distill.gate import format_checks
from pfd.distill.prototype_stage import LightingTargets, Prototypes

__all__ = ["STAGES", "proxy_rates", "build_summary", "format_summary"]

#: Stages in order, as timed in the summary.
STAGES = ("public", "adapt", "prototypes", "rta", "release")


def proxy_rates(
    emb: torch.Tensor, rows: torch.Tensor, P: torch.Tensor, proto_identity: torch.Tensor, centers: torch.Tensor
) -> dict[str, float]:
    """Own-prototype / own-identity rates and the insider source linkage (see the module docs).

    Args:
        emb: Normalised proxy embeddings ``(n, D)``.
        rows: Prototype row of each proxy ``(n,)``.
        P: Prototypes ``(NK, D)``.
        proto_identity: Identity of each prototype row ``(NK,)``.
        centers: Original-space identity prototypes ``(N, D)``, normalised.

    Returns:
        ``own_prototype``, ``own_identity``, ``source_cos``, ``source_top1`` and ``chance``.
    """
    nearest = (emb @ P.T).argmax(1)  # (n,)
    src = proto_identity[rows]  # (n,)
    to_centers = emb @ centers.T  # (n, N)
    return {
        "own_prototype": float((nearest == rows).float().mean()),
        "own_identity": float((proto_identity[nearest] == src).float().mean()),
        "source_cos": float(to_centers.gather(1, src[:, None]).mean()),
        "source_top1": float((to_centers.argmax(1) == src).float().mean()),
        "chance": 1.0 / centers.shape[0],
    }


def build_summary(
    cfg: DistillConfig,
    *,
    docs: list[BatchFile],
    rows: torch.Tensor,
    protos: Prototypes,
    ogp_losses: dict[str, float],
    times: dict[str, float],
    peaks: StagePeaks | None = None,
    skipped: list[str],
    num_private: int,
    processes: int,
    release: Path,
    state_dir: Path,
) -> dict[str, Any]:
    """The content of ``summary.json``.

    Args:
        cfg: The run's settings.
        docs: The batch files, in batch order.
        rows: Prototype row of each proxy, in the same order ``(NK,)``.
        protos: ``prototypes.pt`` (:class:`~pfd.distill.prototype_stage.Prototypes`).
        ogp_losses: Last logged fine-tuning metrics.
        times: Seconds per stage (0 when skipped).
        peaks: Resident-memory peak per stage (:class:`pfd.memory.StagePeaks`), if measured.
        skipped: Stages skipped on resume.
        num_private: Private images.
        processes: Processes of the run.
        release: Release folder.
        state_dir: State dir.
    """
    emb = torch.cat([d["embeddings"] for d in docs])
    rates = proxy_rates(emb, rows, protos.P, protos.proto_identity, protos.centers)
    rotated = bool(protos.rotated)
    cos_rot = protos.cos_rotated.abs()
    keys = sorted({k for d in docs for k in d["history"]})
    rta = {k: float(np.mean([d["history"][k] for d in docs if k in d["history"]])) for k in keys}
    firsts = [d["history"]["dominance_first"] for d in docs if "dominance_first" in d["history"]]
    if firsts:  # the guard's margin is the worst batch's, not the mean's
        rta["dominance_max"] = float(max(firsts))
    n_id = len(protos.identities)
    return {
        "method": cfg.method,
        "release": str(release.resolve()),
        "state_dir": str(state_dir.resolve()),
        "counts": {
            "identities": n_id,
            "private_images": int(num_private),
            "ipc": cfg.rta.ipc,
            "proxies": int(len(rows)),
            "batches": len(docs),
            "processes": int(processes),
        },
        "times_s": {**{s: round(times.get(s, 0.0), 3) for s in STAGES}, "total": round(sum(times.values()), 3)},
        # GB per stage that ran; "stage_peaks" False: lifetime peaks (an upper bound per stage).
        "memory_gb": dict(peaks.peaks_gb) if peaks is not None else {},
        "stage_peaks": bool(peaks.resettable) if peaks is not None else False,
        "skipped": list(skipped),
        "losses": {"ogp": ogp_losses, "rta": rta},
        "rates": {
            **rates,
            # |cos(M e, e)| < m over every private image (eq. 3); there is no rotation otherwise.
            "below_margin": float((cos_rot < cfg.ogp.rep_margin).float().mean()) if rotated else None,
            "mean_abs_cos_rotated": float(cos_rot.mean()) if rotated else None,
            "rep_margin": cfg.ogp.rep_margin,
        },
        "lighting": _lighting(protos.lighting),
    }


def _lighting(light: LightingTargets | None) -> dict[str, list[dict[str, int]]] | None:
    """What the lighting lever made of the private set: per group, its images, people and proxies (aggregates only)."""
    if light is None:
        return None
    groups, pg = light.group.numpy(), light.proto_group.numpy()
    people = list(light.identities)
    return {"groups": [{"images": int((groups == g).sum()), "proxies": int((pg == g).sum()),
                        **({"identities": int(people[g])} if g < len(people) else {})}
                       for g in range(int(groups.max()) + 1)]}


def _f(x: Any, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def format_summary(summary: dict[str, Any], *, private: str = "SPEC", skip_bad: bool = False) -> str:
    """The plain-text table ``pfd distill`` prints: times, losses, counts, rates, next commands.

    Args:
        summary: ``summary.json`` content.
        private: The private dataset spec, for the suggested commands.
        skip_bad: The run skipped unreadable private images: the suggested attack must too.
    """
    t, c, r = summary["times_s"], summary["counts"], summary["rates"]
    ogp, rta = summary["losses"].get("ogp", {}), summary["losses"].get("rta", {})
    skipped = set(summary.get("skipped", []))
    stage = "  ".join(f"{s} {'skipped' if s in skipped else f'{t[s]:.1f}s'}" for s in STAGES)
    lines = [
        f"method      {summary['method']}",
        f"time        {stage}  | total {t['total']:.1f}s",
        f"counts      {c['identities']} identities, {c['private_images']} private images -> {c['proxies']} proxies "
        f"({c['ipc']} per class) in {c['batches']} batches, {c['processes']} process(es)",
    ]
    mem = summary.get("memory_gb") or {}
    if mem:
        what = "peak memory" if summary.get("stage_peaks") else "peak memory so far"
        lines.insert(2, f"memory      {what}: " + "  ".join(f"{s} {mem[s]:.1f} GB" for s in STAGES if s in mem)
                     + f"  | max {max(mem.values()):.1f} GB")
    if ogp:
        parts = [f"L_cls {_f(ogp.get('cls'))}"]
        if "rep" in ogp:
            parts += [f"L_rep {_f(ogp.get('rep'))}", f"L_iso {_f(ogp.get('iso'))}"]
        lines.append("fine-tune   final " + ", ".join(parts))
    if rta:
        lines.append(
            f"RTA         L_cls {_f(rta.get('cls_first'))} -> {_f(rta.get('cls_last'))}, "
            f"L_RTA {_f(rta.get('rta_first'))} -> {_f(rta.get('rta_last'))}, "
            f"L_bn {_f(rta.get('bn_first'), '.1f')} -> {_f(rta.get('bn_last'), '.1f')}"
            + (f", L_dl {_f(rta.get('delink_first'))} -> {_f(rta.get('delink_last'))}" if "delink_last" in rta else "")
            + (f", L_sp {_f(rta.get('spatial_first'), '.1f')} -> {_f(rta.get('spatial_last'), '.1f')}"
               if "spatial_last" in rta else "")
            + " (mean over batches)"
        )
    light = summary.get("lighting")
    if light:
        lines.append("lighting    " + ", ".join(
            f"group {g}: {x['images']} images" + (f" of {x['identities']} people" if "identities" in x else "")
            + f", {x['proxies']} proxies" for g, x in enumerate(light["groups"])))
    lines.append(
        f"rates       own prototype {_f(r['own_prototype'])}, own identity {_f(r['own_identity'])}"
        + (f", |cos(Me,e)| < {r['rep_margin']}: {_f(r['below_margin'])}" if r.get("below_margin") is not None else "")
    )
    lines.append(
        f"linkage     insider (adapted model): cos to source {_f(r['source_cos'])}, "
        f"source is nearest {_f(r['source_top1'])} (chance {_f(r['chance'])})"
    )
    gate = summary.get("gate")
    if gate:

        head = "passed" if gate["passed"] else ("FAILED, published with --allow-linkable" if gate["published"] else "FAILED, not published")
        lines.append(f"gate        {head}: {(gate.get('verdict') or {}).get('text', '')}")
        lines += ["            " + line for line in format_checks(gate["checks"]).splitlines()]
    if gate and not gate["published"]:
        lines.append(f"state       {summary['state_dir']}  (private: never publish)")
        return "\n".join(lines)
    lines += [
        f"release     {summary['release']}  (publish this: {summary['counts']['proxies']} proxies, manifest.json and the "
        "dataset card README.md)",
        f"state       {summary['state_dir']}  (private: never publish)",
        "next        pfd release lint " + _rel(summary["release"]) + " --state-dir " + _rel(summary["state_dir"]),
        f"            pfd attack --release {_rel(summary['release'])} --private {shlex.quote(private)} "
        f"--state-dir {_rel(summary['state_dir'])}" + (" --skip-bad" if skip_bad else ""),
    ]
    return "\n".join(lines)


def _rel(path: str) -> str:
    """``path`` relative to the working directory when it lies below it."""
    p = Path(path)
    try:
        return shlex.quote(str(p.relative_to(Path.cwd().resolve())))
    except ValueError:
        return shlex.quote(str(p))
