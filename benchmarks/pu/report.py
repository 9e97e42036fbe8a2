"""Markdown tables of ``privacy_utility.json`` (written by ``privacy_utility.py``), and re-scoring.

Rows written before the calibrated verdicts (no ``membership.verdict``, no ``n_eff`` in the
linkability figures) are re-scored from what the json stores, without rerunning anything:

* **membership**: the verdict is a max-T permutation test over the four statistics' a-priori
  AUCs and the fused MLP's out-of-fold score (:mod:`pfd.attacks.membership.permutation`). Old rows keep
  only the AUCs, not the per-identity statistics, so the permutation p cannot be recomputed; but
  ``p_maxT >= P_null(AUC_j >= T)`` for every single score ``j``, and that tail is the exact
  Mann-Whitney null (no ties). When this lower bound exceeds 0.05 the verdict is "≈ chance"
  exactly; otherwise it is undetermined from the stored data (shown as such).
* **linkability**: the clustered interval needs each source identity's successes, which old rows
  do not store. The design effect is at most ``K`` (proxies per source, equal here), so the exact
  interval at ``n_eff = n / K`` is conservative (never narrower than the true clustered one); with
  every private identity a source of ``K`` proxies, chance is ``1/N`` for both attacks.

``python -m benchmarks.pu_report [json]`` (default: the v1 results, ``privacy_utility_v1.json``;
version-2 results are scored when written) re-scores the json in place (adds ``rescored`` to each
row) and rewrites the markdown beside it.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from benchmarks.pu.settings import TAR


def _pct(x: Any, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * float(x):.{digits}f}"


def _auc(x: Any) -> str:
    return "–" if x is None else f"{float(x):.2f}"


def _link(row: Mapping[str, Any], role: str, attack: str, *, ci: bool = False) -> str:
    r = (row.get("linkability") or {}).get(role, {}).get(attack)
    if not r:
        return "–"
    text = _pct(r["rate"])
    if ci:
        lo, hi = r["ci95"]
        text += f" ({_pct(lo)}–{_pct(hi)}; {r['count']}/{r['n']})"
    return text


def _fused(row: Mapping[str, Any]) -> Any:
    fusion = row.get("membership", {}).get("fusion", {})
    return fusion.get("auc_mean", fusion.get("auc"))


def _lint_text(findings: Any) -> str:
    """``pass`` or ``private-image x300, link x1``: findings by kind (a list of kinds in older units)."""
    if not findings:
        return "pass"
    counts = findings if isinstance(findings, dict) else {k: list(findings).count(k) for k in sorted(set(findings))}
    return ", ".join(f"{k} x{n}" for k, n in counts.items())


@lru_cache(maxsize=None)
def _mann_whitney_counts(n1: int, n2: int) -> tuple[int, ...]:
    """Number of orderings of n1 members and n2 non-members with each value of U (no ties)."""
    # f(i, j)[u]: orderings of i members and j non-members with U = u; the largest element is a
    # member (it beats all j non-members: u - j) or a non-member (u unchanged).
    prev = [[1] + [0] * (n1 * n2) for _ in range(n2 + 1)]  # i = 0
    for i in range(1, n1 + 1):
        cur = [[1] + [0] * (n1 * n2)]  # j = 0: U = 0 only
        for j in range(1, n2 + 1):
            row = [0] * (n1 * n2 + 1)
            for u in range(i * j + 1):
                row[u] = (prev[j][u - j] if u >= j else 0) + cur[j - 1][u]
            cur.append(row)
        prev = cur
    return tuple(prev[n2])


def mann_whitney_tail(auc: float, n1: int, n2: int) -> float:
    """Exact one-sided null probability ``P(AUC >= auc)`` for n1 members, n2 non-members, no ties."""
    counts = _mann_whitney_counts(n1, n2)
    u = int(np.ceil(auc * n1 * n2 - 1e-9))
    return float(sum(counts[u:]) / sum(counts))


def _roc_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def rescore_membership(mem: Mapping[str, Any], alpha: float = 0.05) -> dict[str, Any]:
    """Verdict of a stored membership report: its own ``verdict``, else the bound described above."""
    if mem.get("verdict"):
        v = mem["verdict"]
        return {"auc": v["auc"], "statistic": v["statistic"], "p": v["p"], "exact": True,
                "verdict": "LEAKS" if v["p"] <= alpha else "≈ chance"}
    c = mem["counts"]
    n1, n2 = int(c["members"]), int(c["nonmembers"])
    aucs = {k: float(v["auc_a_priori"]) for k, v in mem["statistics"].items()}
    oof = (mem.get("fusion") or {}).get("oof_score")
    if oof is not None and len(oof) == n1 + n2:
        o = np.asarray(oof, dtype=np.float64)  # joint pool order: members first
        aucs["fusion"] = _roc_auc(o[:n1], o[n1:])
    best = max(aucs, key=aucs.get)
    p_low = mann_whitney_tail(aucs[best], n1, n2)
    return {"auc": aucs[best], "statistic": best, "aucs": aucs, "p_lower_bound": p_low, "exact": False,
            "verdict": "≈ chance" if p_low > alpha else "undetermined (needs the per-identity statistics)"}


def rescore_link(r: Mapping[str, Any], k: int) -> dict[str, Any]:
    """Conservative clustered interval (design effect K) of a stored linkability figure."""
    from pfd.audit.intervals import clopper_pearson

    if "n_eff" in r:
        lo, hi = r["ci95"]
        n_eff = r["n_eff"]
    else:
        n_eff = r["n"] / k
        lo, hi = clopper_pearson(r["rate"] * n_eff, n_eff)
    chance = r["chance"]
    verdict = "LEAKS" if lo > chance else "below chance" if hi < chance else "≈ chance"
    return {"ci95": [lo, hi], "n_eff": n_eff, "chance": chance, "verdict": verdict}


def rescore(doc: dict[str, Any]) -> dict[str, Any]:
    """Add ``rescored`` (membership verdict, linkability intervals and verdicts) to every row."""
    for row in doc.get("rows", {}).values():
        out: dict[str, Any] = {}
        if row.get("membership"):
            out["membership"] = rescore_membership(row["membership"])
        k = int(((row.get("distill") or {}).get("counts") or {}).get("ipc") or 1)
        links = row.get("linkability") or {}
        if links:
            out["linkability"] = {role: {a: rescore_link(r, k) for a, r in atk.items()} for role, atk in links.items()}
        row["rescored"] = out
    return doc


def _verdict_cell(v: Mapping[str, Any] | None, *, link: bool = False) -> str:
    if not v:
        return "–"
    if link:
        lo, hi = v["ci95"]
        return f"{_pct(lo)}–{_pct(hi)}: {v['verdict']}"
    p = f"p = {v['p']:.3g}" if v.get("exact") else f"p ≥ {v['p_lower_bound']:.3g}"
    return f"{v['auc']:.2f} ({v['statistic']}), {p}: {v['verdict']}"


def verdict_table(doc: Mapping[str, Any]) -> list[str]:
    """Markdown lines of the calibrated verdicts (re-scored rows)."""
    order = doc.get("row_order") or sorted(doc.get("rows", {}))
    rows = [doc["rows"][n] for n in order if n in doc.get("rows", {}) and "rescored" in doc["rows"][n]]
    if not rows:
        return []
    lines = ["", "Calibrated verdicts (docs/attacks.md): membership = max-T permutation test over the a-priori AUCs of "
             "the four statistics and the fused MLP (stored rows: exact lower bound of its p); linkability = exact "
             "interval at the effective sample size of proxies clustered by source (stored rows: n_eff = n / K, "
             "conservative), in %:", "",
             "| Row | Membership (max a-priori AUC) | VisMatch (public) | Re-ID (public) | VisMatch (insider) | "
             "Re-ID (insider) |", "|---|---|---|---|---|---|"]
    for r in rows:
        rs = r["rescored"]
        li = rs.get("linkability") or {}
        cells = [_verdict_cell((li.get(role) or {}).get(a), link=True) for role in ("public", "insider")
                 for a in ("vismatch", "reid")]
        lines.append(f"| {r['row']} | {_verdict_cell(rs.get('membership'))} | " + " | ".join(cells) + " |")
    return lines


def markdown(doc: Mapping[str, Any]) -> str:
    """The tables a person reads: utility, linkability and membership per row; details below."""
    if doc.get("version") == 2:  # scenarios and seeds: pu.table
        from benchmarks.pu.table import markdown_v2

        return markdown_v2(doc)
    order = doc.get("row_order") or sorted(doc.get("rows", {}))
    rows = [doc["rows"][n] for n in order if n in doc.get("rows", {})]
    if not rows:
        return "(no rows yet)\n"
    n_private = len(doc["data"]["private"]["identities"])
    chance = 1.0 / n_private
    e = doc["settings"]["eval"]
    pairs, mod_pairs = e["pairs"], e.get("moderate_pairs")
    lines = [
        f"Private: {n_private} Extended Yale B identities ({doc['data']['private']['images']} images); test: "
        f"{len(doc['data']['test']['identities'])} identities, {pairs} genuine + {pairs} impostor pairs over all their "
        f"images (\"all\")" + (f", {mod_pairs} + {mod_pairs} over subsets 1-3 (light within {e['moderate_light']:g}° of "
                               f"the camera axis, \"S1-3\")" if mod_pairs else "") +
        f". Linkability chance 1/{n_private} = {_pct(chance)} %. Rates in %.",
        "",
        "| Row | Acc S1-3 | TAR@1e-2 S1-3 | Acc all | TAR@1e-2 all | VisMatch (public) | Re-ID (public) | "
        "VisMatch (insider) | Re-ID (insider) | MIA AUC PairCos | MIA AUC fused | Time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        u = r["utility"]
        mod = u.get("moderate") or {}
        stats = r.get("membership", {}).get("statistics", {})
        pair = stats.get("pair_cos", {}).get("auc_a_priori")
        lines.append(
            f"| {r['row']} | {_pct(mod.get('accuracy'))} | {_pct(mod.get(TAR))} | {_pct(u['accuracy'])} | "
            f"{_pct(u.get(TAR))} | "
            f"{_link(r, 'public', 'vismatch')} | {_link(r, 'public', 'reid')} | {_link(r, 'insider', 'vismatch')} | "
            f"{_link(r, 'insider', 'reid')} | {_auc(pair)} | {_auc(_fused(r))} | {r['times_s']['total']:.0f} |"
        )
    lines += ["", "Linkability with the 95 % intervals as stored (Wilson on proxies for rows run before the clustered "
              "intervals; see the calibrated verdicts below) and counts:", "",
              "| Row | VisMatch (public) | Re-ID (public) | VisMatch (insider) | Re-ID (insider) |", "|---|---|---|---|---|"]
    for r in rows:
        if r.get("linkability"):
            lines.append(f"| {r['row']} | {_link(r, 'public', 'vismatch', ci=True)} | {_link(r, 'public', 'reid', ci=True)} | "
                         f"{_link(r, 'insider', 'vismatch', ci=True)} | {_link(r, 'insider', 'reid', ci=True)} |")
    lines += ["", "Release diagnostics (adapted model, from the pipeline summary) and membership detail:", "",
              "| Row | own prototype | insider source top-1 | baseline | lint | MIA best single (oriented, description) | distill / downstream (s) |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r.get("distill") or {}
        rates = d.get("rates") or {}
        base = d.get("baseline") or {}
        param = ", ".join(f"{k} {v:g}" for k, v in base.items() if k != "method" and isinstance(v, (int, float)))
        best = r.get("membership", {}).get("best_single", {})
        t = r["times_s"]
        lint = "–" if "lint_findings" not in r else _lint_text(r["lint_findings"])
        lines.append(
            f"| {r['row']} | {_pct(rates.get('own_prototype'))} | {_pct(rates.get('source_top1'))} | {param or '–'} | {lint} | "
            f"{best.get('statistic', '–')} {_auc(best.get('auc'))} | {t.get('distill', 0):.0f} / {t.get('downstream', 0):.0f} |"
        )
    lines += verdict_table(doc)
    m = doc.get("machine", {})
    lines += ["", f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, torch {m.get('torch', '?')} with "
              f"{m.get('torch_threads', '?')} thread(s); date {doc.get('date', '?')}; public model "
              f"{doc.get('public_model_s', 0):.0f} s, shared plain fine-tune {doc.get('shared_finetune_s', 0):.0f} s; "
              f"load average at row starts: " + ", ".join(f"{r['row']} {r['load_start'][0]:.1f}" for r in rows) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Re-score a results json in place and rewrite its markdown; print the verdicts."""
    from pfd.io import atomic_write_json, atomic_write_text

    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else Path(__file__).resolve().parents[1] / "results" / "privacy_utility_v1.json")
    doc = rescore(json.loads(path.read_text()))
    atomic_write_json(path, doc, shared=True)
    atomic_write_text(path.with_suffix(".md"), markdown(doc), shared=True)
    print("\n".join(verdict_table(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
