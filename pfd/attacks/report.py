"""Write a scorecard: ``report.json`` (everything), ``report.md`` (one table first), PNG plots.

The summary table has one row per (attack, target, attacker) figure::

    | attack | attacker | success | chance | 95% CI | verdict |

``verdict`` compares the 95 % interval of the figure with its chance level: **LEAKS** when the
whole interval lies above chance, **≈ chance** when it contains chance, **below chance** when it
lies below. Intervals: Wilson for linkability rates, percentile bootstrap over proxies for the
attribute metrics, Hanley-McNeil for membership AUCs. Each row is a separate test at the 5 %
level, so with a dozen rows one "LEAKS" at the edge of its interval can be luck; the detail
sections give counts, p-values and settings.

``report.json`` layout: ``{"format": "pfd-attack-report", "version": 1, "summary": [rows],
"settings", "release", "private", "attackers", "linkability", "reconstruction", "attributes",
"membership", "skipped", "timings", "plots"}``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping

from pfd.attacks.membership import STATISTICS
from pfd.io import atomic_write_json, atomic_write_text

__all__ = ["jsonable", "verdict", "summary_rows", "summary_table", "format_markdown", "write_report"]

_NAMES = {"vismatch": "VisMatch", "reid": "Rank-1 Re-ID", "pair_cos": "PairCos", "vmf_kappa": "vMF κ",
          "pen_logit": "PenLogit", "proto_ce": "ProtoCE"}


def verdict(ci: tuple[float, float] | list[float], chance: float) -> str:
    """``"LEAKS"`` if the interval lies above chance, ``"below chance"`` if below, else ``"≈ chance"``."""
    lo, hi = float(ci[0]), float(ci[1])
    if lo > chance:
        return "LEAKS"
    if hi < chance:
        return "below chance"
    return "≈ chance"


def _row(attack: str, attacker: str, value: float, chance: float, ci: Any, kind: str, **extra: Any) -> dict[str, Any]:
    return {"attack": attack, "attacker": attacker, "value": float(value), "chance": float(chance),
            "ci95": [float(ci[0]), float(ci[1])], "kind": kind, "verdict": verdict(ci, chance), **extra}


def summary_rows(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The figures of the summary table, each with its chance level, 95 % interval and verdict.

    Args:
        data: :attr:`pfd.attacks.scorecard.Scorecard.data`.

    Returns:
        Rows ``{"attack", "attacker", "value", "chance", "ci95", "kind", "verdict", ...}``;
        ``kind`` is ``"rate"`` (count/n), ``"score"`` (a metric in [0, 1]) or ``"auc"``.
    """
    rows: list[dict[str, Any]] = []
    for link in data.get("linkability", []):
        for key in ("vismatch", "reid"):
            r = link[key]
            rows.append(_row(f"{_NAMES[key]} ({link['target']})", link["attacker"], r["rate"], r["chance"],
                             r["ci95"], "rate", count=r["count"], n=r["n"]))
    per_attr = (data.get("attributes") or {}).get("per_attribute", {})
    for name, a in per_attr.items():
        rows.append(_row(f"Attribute {name}: balanced acc.", "public probe", a["balanced_accuracy"],
                         a["chance_balanced_accuracy"], a["ci95_balanced_accuracy"], "score", p=a["p_balanced_accuracy"]))
        rows.append(_row(f"Attribute {name}: Macro-F1", "public probe", a["macro_f1"], a["chance_macro_f1"],
                         a["ci95_macro_f1"], "score", p=a["p_macro_f1"]))
    mem = data.get("membership") or {}
    if mem:
        best = mem["best_single"]["statistic"]
        s = mem["statistics"][best]
        rows.append(_row(f"Membership: {_NAMES[best]} AUC (best of 4)", "downstream", s["auc"], 0.5, s["auc_ci95"], "auc"))
        fusion = mem.get("fusion", {})
        if "auc_mean" in fusion:
            from pfd.attacks.metrics import auc_standard_error

            c = mem["counts"]
            se = auc_standard_error(fusion["auc_mean"], c["members"], c["nonmembers"])
            ci = (max(0.0, fusion["auc_mean"] - 1.96 * se), min(1.0, fusion["auc_mean"] + 1.96 * se))
            rows.append(_row("Membership: fused MLP AUC (5-fold CV)", "downstream", fusion["auc_mean"], 0.5, ci, "auc"))
    return rows


def _fmt(row: Mapping[str, Any], key: str = "value") -> str:
    v = row[key]
    return f"{v:.3f}" if row["kind"] == "auc" else f"{100 * v:.1f}%"


def _success(row: Mapping[str, Any]) -> str:
    if row["kind"] == "rate":
        return f"{_fmt(row)} ({row['count']}/{row['n']})"
    return _fmt(row)


def _ci(row: Mapping[str, Any]) -> str:
    lo, hi = row["ci95"]
    if row["kind"] == "auc":
        return f"[{lo:.3f}, {hi:.3f}]"
    return f"[{100 * lo:.1f}, {100 * hi:.1f}]%"


def summary_table(rows: list[dict[str, Any]]) -> list[str]:
    """The summary rows as markdown table lines (attack | attacker | success | chance | 95% CI | verdict)."""
    out = ["| attack | attacker | success | chance | 95% CI | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        v = f"**{r['verdict']}**" if r["verdict"] == "LEAKS" else r["verdict"]
        out.append(f"| {r['attack']} | {r['attacker']} | {_success(r)} | {_fmt(r, 'chance')} | {_ci(r)} | {v} |")
    return out


def _setup_section(data: Mapping[str, Any]) -> list[str]:
    rel, priv = data["release"], data["private"]
    out = ["## Setup", "",
           f"- Release `{rel['path']}`: method `{rel['method']}`, {rel['num_classes']} classes, "
           f"{rel['num_images']} images of {rel['image_size']} px.",
           f"- Private set `{priv['spec']}`: {priv['identities']} identities, {priv['images']} images "
           f"({priv['source_identities']} of them are sources of proxies). Linkability chance = "
           f"1/{priv['identities']} = {100 / priv['identities']:.2f}%.",
           "", "| attacker | model | kind | input | D |", "|---|---|---|---|---|"]
    for a in data["attackers"]:
        out.append(f"| {a['role']} | `{a['path']}` | {a['kind']} | {a['size']} px | {a['embedding_dim']} |")
    return out


def _linkability_section(data: Mapping[str, Any]) -> list[str]:
    out = ["", "## Linkability", "",
           "VisMatch: is a proxy's nearest private image of its source identity? Rank-1 Re-ID: is the "
           "nearest identity template (normalised mean embedding) its source? The public attacker holds a "
           "public model and the private gallery; the insider also holds the publisher's adapted model "
           "(worst case)."]
    rec = data.get("reconstruction") or {}
    if rec:
        extra = (f", final cosine to the targets {rec['final_cosine_mean']:.3f}" if "final_cosine_mean" in rec else "")
        out += ["", f"Reconstructions: `{rec.get('method')}` on {rec.get('n')} of {rec.get('of')} proxies "
                f"(public-model embeddings){extra}. A BN-prior inversion matches the public model's embedding by "
                "construction, so the public row on reconstructions mostly repeats the direct attack; the insider "
                "row shows whether the reconstructions carry identity to another model."]
    return out


def _attribute_section(data: Mapping[str, Any]) -> list[str]:
    attrs = data.get("attributes") or {}
    if not attrs:
        return []
    out = ["", "## Attribute recovery", "",
           f"Probe: logistic regression on public-model embeddings, fitted on `{attrs['aux']}` (the attacker's "
           "own labelled data). A proxy's label is compared with the majority label of its source's private "
           "images. Chance = mean of the permutation null; p = one-sided permutation p-value.", "",
           "| attribute | classes | balanced acc. | chance | p | Macro-F1 | chance | p | probe train acc. |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name, a in attrs["per_attribute"].items():
        out.append(f"| {name} | {len(a['observed_classes'])}/{a['num_classes']} | {100 * a['balanced_accuracy']:.1f}% | "
                   f"{100 * a['chance_balanced_accuracy']:.1f}% | {a['p_balanced_accuracy']:.3g} | "
                   f"{100 * a['macro_f1']:.1f}% | {100 * a['chance_macro_f1']:.1f}% | {a['p_macro_f1']:.3g} | "
                   f"{100 * a['probe_train_accuracy']:.1f}% |")
    return out


def _membership_section(data: Mapping[str, Any]) -> list[str]:
    mem = data.get("membership") or {}
    if not mem:
        return []
    c = mem["counts"]
    ds = mem.get("downstream", {})
    out = ["", "## Membership of the release", "",
           f"A downstream model ({ds.get('backbone')} ×{ds.get('width')}, {ds.get('size')} px) trained on "
           f"`{ds.get('data', ['?'])[0]}` + the release{' (reused)' if mem.get('downstream_reused') else ''}; members: "
           f"the {c['members']} private identities, non-members: {c['nonmembers']} identities of `{mem.get('nonmembers', '?')}` "
           f"(same domain, or the AUC also measures domain shift). Chance AUC = 0.5. The AUC is oriented "
           "(> 0.5 = separation in either direction) and is a lower bound on what the embeddings leak.", "",
           "| statistic | AUC | 95% CI | members score | TPR@1%FPR |", "|---|---|---|---|---|"]
    for name in STATISTICS:
        s = mem["statistics"][name]
        t = s["tpr_at_1pct_fpr"]
        out.append(f"| {_NAMES[name]} | {s['auc']:.3f} | [{s['auc_ci95'][0]:.3f}, {s['auc_ci95'][1]:.3f}] | "
                   f"{s['direction']} | {t['tpr']:.3f}{'' if t['resolvable'] else ' (FPR 0)'} |")
    fusion = mem.get("fusion", {})
    if "auc_mean" in fusion:
        out.append(f"\nFused MLP: {fusion['auc_mean']:.3f} ± {fusion['auc_std']:.3f} over {fusion['folds']} folds "
                   f"(best single statistic on the same folds: {fusion['best_single']['statistic']} "
                   f"{fusion['best_single']['auc_mean']:.3f}).")
    elif "skipped" in fusion:
        out.append(f"\nFused MLP skipped: {fusion['skipped']}.")
    return out


def format_markdown(data: Mapping[str, Any], rows: list[dict[str, Any]], plots: Mapping[str, str]) -> str:
    """The ``report.md`` text: the summary table first, then short sections."""
    out = ["# pfd attack scorecard", ""]
    out += summary_table(rows) if rows else ["No attack could run; see Skipped."]
    out += ["", "LEAKS: the 95% interval lies above chance. ≈ chance: it contains chance.", ""]
    out += _setup_section(data) + _linkability_section(data) + _attribute_section(data) + _membership_section(data)
    if data.get("skipped"):
        out += ["", "## Skipped", ""] + [f"- {k}: {v}" for k, v in data["skipped"].items()]
    if plots:
        out += ["", "## Plots", ""] + [f"- [{k}]({v})" for k, v in plots.items()]
    t = data.get("timings", {})
    out += ["", "## Timings", "", ", ".join(f"{k} {v:.1f} s" for k, v in t.items()) or "-", ""]
    return "\n".join(out)


def jsonable(obj: Any) -> Any:
    """Plain JSON values: numpy scalars/arrays to Python, NaN/inf (e.g. ROC thresholds) to None."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_report(card: Any, out: str | os.PathLike) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and the plots of a scorecard into ``out``.

    Args:
        card: A :class:`pfd.attacks.scorecard.Scorecard`.
        out: The report folder (created).

    Returns:
        ``{"json", "markdown", <plot name>...}`` -> written paths.
    """
    from pfd.attacks.plots import plot_densities, plot_match_grid, plot_roc

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    data = dict(card.data)
    plots: dict[str, str] = {}
    grid = card.grid
    if grid:
        cols = [("proxy", grid["proxies"])]
        if "reconstructions" in grid:
            cols.append(("reconstruction", grid["reconstructions"]))
        cols += [("nearest private", grid["matches"]), ("true source", grid["sources"])]
        plot_match_grid(cols, folder / "matches.png", success=grid["success"],
                        title="Proxies and their nearest private images (public model)")
        plots["matches"] = "matches.png"
    mem = data.get("membership") or {}
    if mem:
        plot_roc(mem, folder / "membership_roc.png", title="Release membership: ROC (log-log)")
        plot_densities(mem, folder / "membership_density.png", title="Release membership: member vs non-member")
        plots["membership_roc"] = "membership_roc.png"
        plots["membership_density"] = "membership_density.png"
    rows = summary_rows(data)
    data["summary"] = rows
    data["plots"] = plots
    atomic_write_json(folder / "report.json", jsonable({"summary": rows, **data}))
    atomic_write_text(folder / "report.md", format_markdown(data, rows, plots))
    return {"json": folder / "report.json", "markdown": folder / "report.md", **{k: folder / v for k, v in plots.items()}}
