"""Write a scorecard: ``report.json`` (everything), ``report.md`` (one table first), PNG plots.

The summary table has one row per (attack, target, attacker) figure::

    | attack | attacker | success | chance | 95% CI | verdict |

``verdict`` says whether the figure is a leak at the 5 % level, with a rule whose false-LEAKS
rate under the null is tested by simulation (``tests/test_null_calibration.py``):

* **linkability** rows (rates): **LEAKS** when the whole 95 % interval lies above chance. The
  interval is the exact binomial interval at the effective sample size of the proxies, clustered
  by source identity (:func:`pfd.attacks.metrics.clustered_interval`); chance comes from the
  gallery's composition (:func:`pfd.attacks.metrics.composition_chance`).
* **attribute** rows: **LEAKS** when the one-sided identity-level permutation p-value is
  <= 0.05; the interval shown is a cluster bootstrap over source identities.
* **membership**: one row, the max-T permutation test over the four statistics (a-priori
  direction) and the fused classifier (:mod:`pfd.attacks.membership.permutation`); **LEAKS** when p <= 0.05.
  The cell shows p and the AUC the null exceeds 5 % of the time, and TPR at 1 % / 0.1 % FPR.
  **inconclusive** instead of LEAKS when the reference model (the public one in a scorecard)
  already separates members from non-members (:mod:`pfd.attacks.membership.reference`).

Otherwise **≈ chance** (or **below chance** when a rate's interval lies below it). Each row is a
separate test at the 5 % level, so with a dozen rows one "LEAKS" at the edge can be luck; the
detail sections give counts, p-values and settings.

``report.json`` layout: ``{"format": "pfd-attack-report", "version": 1, "summary": [rows],
"settings", "release", "private", "attackers", "linkability", "reconstruction", "attributes",
"membership", "skipped", "timings", "plots"}``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from pfd.attacks.membership.statistics import STATISTICS
from pfd.io import atomic_write_json, atomic_write_text, jsonable

__all__ = ["jsonable", "verdict", "summary_rows", "summary_table", "format_markdown", "write_report"]

_NAMES = {"vismatch": "VisMatch", "reid": "Rank-1 Re-ID", "pair_cos": "PairCos", "vmf_kappa": "vMF κ",
          "pen_logit": "PenLogit", "proto_ce": "ProtoCE"}


def verdict(ci: tuple[float, float] | list[float] | None, chance: float, *, p: float | None = None,
            alpha: float = 0.05) -> str:
    """The verdict of one figure.

    With a p-value (a test): ``"LEAKS"`` if ``p <= alpha``, else ``"≈ chance"``. Otherwise from the
    interval: ``"LEAKS"`` if it lies above chance, ``"below chance"`` if below, else ``"≈ chance"``.
    """
    if p is not None:
        return "LEAKS" if p <= alpha else "≈ chance"
    assert ci is not None
    lo, hi = float(ci[0]), float(ci[1])
    if lo > chance:
        return "LEAKS"
    if hi < chance:
        return "below chance"
    return "≈ chance"


def _row(attack: str, attacker: str, value: float, chance: float, ci: Any, kind: str, *,
         test_p: float | None = None, **extra: Any) -> dict[str, Any]:
    return {"attack": attack, "attacker": attacker, "value": float(value), "chance": float(chance),
            "ci95": None if ci is None else [float(ci[0]), float(ci[1])], "kind": kind,
            "verdict": verdict(ci, chance, p=test_p), **({"p": test_p} if test_p is not None else {}), **extra}


def membership_row(mem: Mapping[str, Any], attacker: str = "downstream") -> dict[str, Any] | None:
    """The summary row of a membership report: its permutation-test verdict (None for old reports)."""
    v = mem.get("verdict")
    if not v:
        return None
    name = _NAMES.get(v["statistic"], v["statistic"])
    t1, t01 = v["tpr_at_1pct_fpr"], v["tpr_at_0.1pct_fpr"]
    row = _row(f"Membership: max AUC of 4 statistics + fusion (a priori; best {name})", attacker, v["auc"], 0.5,
               None, "auc", test_p=v["p"], null95=v["null95"], tpr_at_1pct_fpr=t1["tpr"],
               tpr_at_01pct_fpr=t01["tpr"], tpr_resolvable=[t1["resolvable"], t01["resolvable"]])
    if v.get("inconclusive"):  # the reference model already separates the groups (pfd.attacks.membership.reference)
        row.update(verdict="inconclusive", reference_p=(mem.get("reference") or {}).get("p"))
    return row


def summary_rows(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The figures of the summary table, each with its chance level, 95 % interval and verdict.

    Args:
        data: :attr:`pfd.attacks.scorecard.run.Scorecard.data`.

    Returns:
        Rows ``{"attack", "attacker", "value", "chance", "ci95", "kind", "verdict", ...}``;
        ``kind`` is ``"rate"`` (count/n), ``"score"`` (a metric in [0, 1]) or ``"auc"``. Test
        rows carry ``p`` (their ``ci95`` is the descriptive interval, or None for membership).
    """
    rows: list[dict[str, Any]] = []
    for link in data.get("linkability", []):
        for key in ("vismatch", "reid"):
            r = link[key]
            rows.append(_row(f"{_NAMES[key]} ({link['target']})", link["attacker"], r["rate"], r["chance"],
                             r["ci95"], "rate", count=r["count"], n=r["n"], n_eff=r.get("n_eff")))
    per_attr = (data.get("attributes") or {}).get("per_attribute", {})
    for name, a in per_attr.items():
        rows.append(_row(f"Attribute {name}: balanced acc.", "public probe", a["balanced_accuracy"],
                         a["chance_balanced_accuracy"], a["ci95_balanced_accuracy"], "score",
                         test_p=a["p_balanced_accuracy"]))
        rows.append(_row(f"Attribute {name}: Macro-F1", "public probe", a["macro_f1"], a["chance_macro_f1"],
                         a["ci95_macro_f1"], "score", test_p=a["p_macro_f1"]))
    mem = data.get("membership") or {}
    if mem:
        row = membership_row(mem)
        if row is not None:
            rows.append(row)
    return rows


def _fmt(row: Mapping[str, Any], key: str = "value") -> str:
    v = row[key]
    return f"{v:.3f}" if row["kind"] == "auc" else f"{100 * v:.1f}%"


def _success(row: Mapping[str, Any]) -> str:
    if row["kind"] == "rate":
        return f"{_fmt(row)} ({row['count']}/{row['n']})"
    if "tpr_at_1pct_fpr" in row:
        flags = ["" if ok else "*" for ok in row.get("tpr_resolvable", [True, True])]
        return (f"AUC {_fmt(row)}; TPR {row['tpr_at_1pct_fpr']:.3f}{flags[0]} @1% / "
                f"{row['tpr_at_01pct_fpr']:.3f}{flags[1]} @0.1% FPR")
    return _fmt(row)


def _ci(row: Mapping[str, Any]) -> str:
    if row["ci95"] is None:
        return f"p = {row['p']:.3g} (null 95%: {row['null95']:.3f})"
    lo, hi = row["ci95"]
    text = f"[{lo:.3f}, {hi:.3f}]" if row["kind"] == "auc" else f"[{100 * lo:.1f}, {100 * hi:.1f}]%"
    return f"{text}, p = {row['p']:.3g}" if "p" in row else text


def summary_table(rows: list[dict[str, Any]]) -> list[str]:
    """The summary rows as markdown table lines (attack | attacker | success | chance | 95% CI | verdict)."""
    out = ["| attack | attacker | success | chance | 95% CI | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        v = f"**{r['verdict']}**" if r["verdict"] == "LEAKS" else r["verdict"]
        out.append(f"| {r['attack']} | {r['attacker']} | {_success(r)} | {_fmt(r, 'chance')} | {_ci(r)} | {v} |")
    return out


def _size_words(size: Any) -> str:
    """``32`` or ``112x96`` (height x width) of a manifest image size."""
    return f"{size[0]}x{size[1]}" if isinstance(size, (list, tuple)) else str(size)


def _setup_section(data: Mapping[str, Any]) -> list[str]:
    rel, priv = data["release"], data["private"]
    out = ["## Setup", "",
           f"- Release `{rel['path']}`: method `{rel['method']}`, {rel['num_classes']} classes, "
           f"{rel['num_images']} images of {_size_words(rel['image_size'])} px.",
           f"- Private set `{priv['spec']}`: {priv['identities']} identities ({priv['source_identities']} of them "
           f"sources of proxies), {priv['images']} images. Linkability chance: "
           "Σ over identities of (share of proxies) × (share of the gallery: images for VisMatch, templates "
           f"for Re-ID); 1/{priv['identities']} = {100 / priv['identities']:.2f}% when balanced.",
           "", "| attacker | model | kind | input | D | distance |", "|---|---|---|---|---|---|"]
    for a in data["attackers"]:
        conv = a.get("convention")
        inp = f"{_size_words(a['size'])} px"
        if conv:  # an outside attacker: its own input convention
            h, w = conv["size"]
            inp = (f"{h}×{w} {conv['resize']}, {conv['channels'].upper()}, (x − {_num(conv['mean'])}) / "
                   f"{_num(conv['std'])}")
        out.append(f"| {a['role']} | `{a['path']}` | {a['kind']} | {inp} | {a['embedding_dim']} | "
                   f"{a.get('distance', 'cosine')} |")
    return out


def _num(v: Any) -> str:
    vals = list(v) if isinstance(v, (list, tuple)) else [v]
    return f"{vals[0]:g}" if len(set(vals)) == 1 else "(" + ", ".join(f"{x:g}" for x in vals) + ")"


def _linkability_section(data: Mapping[str, Any]) -> list[str]:
    out = ["", "## Linkability", "",
           "VisMatch: is a proxy's nearest private image of its source identity? Rank-1 Re-ID: is the "
           "nearest identity template its source (cosine attackers: the normalised sum of the unit embeddings of "
           "the identity's images; Euclidean attackers: the plain mean of their raw embeddings, compared by "
           "distance)? The public attacker holds a "
           "public model and the private gallery; the insider also holds the publisher's adapted model "
           "(worst case); other rows are the auditor's own models. Intervals: exact, at the effective sample "
           "size of proxies clustered by source identity (report.json: n_eff, design_effect)."]
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
           f"(same domain, or the AUC also measures domain shift). Chance AUC = 0.5."]
    v = mem.get("verdict")
    if v:
        out += ["", f"**Verdict** (the test): the largest a-priori AUC (higher = member) over the four statistics"
                f"{' and the fused MLP' if 'fusion' in v['scores'] else ''} is {v['auc']:.3f} ({_NAMES.get(v['statistic'], v['statistic'])}); "
                f"permuting member/non-member labels {v['permutations']} times, the null exceeds {v['null95']:.3f} 5% of "
                f"the time: p = {v['p']:.3g}, **{'LEAKS' if v['leaks'] else 'no evidence of a leak'}**."]
        if v.get("reversed"):
            out.append(f"Members are *looser* than non-members for {', '.join(_NAMES[n] for n in v['reversed'])}: "
                       "not membership leakage in the a-priori direction; often non-members from another domain.")
    out += ["", "Description (not a test): the oriented AUC max(A, 1 − A), chosen after looking at the data, with a "
            "Hanley-McNeil interval; TPR at 1% / 0.1% FPR in that direction.", "",
            "| statistic | AUC a priori | oriented AUC | 95% CI (oriented) | members score | TPR@1%FPR | TPR@0.1%FPR |",
            "|---|---|---|---|---|---|---|"]
    for name in STATISTICS:
        s = mem["statistics"][name]
        t, t01 = s["tpr_at_1pct_fpr"], s["tpr_at_0.1pct_fpr"]
        out.append(f"| {_NAMES[name]} | {s['auc_a_priori']:.3f} | {s['auc']:.3f} | "
                   f"[{s['auc_ci95'][0]:.3f}, {s['auc_ci95'][1]:.3f}] | {s['direction']} | "
                   f"{t['tpr']:.3f}{'' if t['resolvable'] else '*'} | {t01['tpr']:.3f}{'' if t01['resolvable'] else '*'} |")
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
    out += ["", "LEAKS: linkability, the 95% interval (clustered by source identity) lies above chance; attributes "
            "and membership, a permutation test gives p <= 0.05 (see docs/attacks.md). ≈ chance: not so. "
            "* TPR at FPR 0: fewer non-members than 1/FPR.", ""]
    out += _setup_section(data) + _linkability_section(data) + _attribute_section(data) + _membership_section(data)
    if data.get("skipped"):
        out += ["", "## Skipped", ""] + [f"- {k}: {v}" for k, v in data["skipped"].items()]
    if plots:
        out += ["", "## Plots", ""] + [f"- [{k}]({v})" for k, v in plots.items()]
    t = data.get("timings", {})
    out += ["", "## Timings", "", ", ".join(f"{k} {v:.1f} s" for k, v in t.items()) or "-", ""]
    return "\n".join(out)


def write_report(card: Any, out: str | os.PathLike) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and the plots of a scorecard into ``out``.

    Args:
        card: A :class:`pfd.attacks.scorecard.run.Scorecard`.
        out: The report folder (created).

    Returns:
        ``{"json", "markdown", <plot name>...}`` -> written paths.
    """
    from pfd.attacks.scorecard.plots import plot_densities, plot_match_grid, plot_roc

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
