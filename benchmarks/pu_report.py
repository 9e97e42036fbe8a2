"""Markdown tables of ``privacy_utility.json`` (written by ``privacy_utility.py``)."""

from __future__ import annotations

from typing import Any, Mapping


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


def markdown(doc: Mapping[str, Any]) -> str:
    """The tables a person reads: utility, linkability and membership per row; details below."""
    if doc.get("version") == 2:  # scenarios and seeds: pu_table
        from pu_table import markdown_v2

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
            f"| {r['row']} | {_pct(mod.get('accuracy'))} | {_pct(mod.get('tar@far=0.01'))} | {_pct(u['accuracy'])} | "
            f"{_pct(u.get('tar@far=0.01'))} | "
            f"{_link(r, 'public', 'vismatch')} | {_link(r, 'public', 'reid')} | {_link(r, 'insider', 'vismatch')} | "
            f"{_link(r, 'insider', 'reid')} | {_auc(pair)} | {_auc(_fused(r))} | {r['times_s']['total']:.0f} |"
        )
    lines += ["", "Linkability with 95 % Wilson intervals and counts:", "",
              "| Row | VisMatch (public) | Re-ID (public) | VisMatch (insider) | Re-ID (insider) |", "|---|---|---|---|---|"]
    for r in rows:
        if r.get("linkability"):
            lines.append(f"| {r['row']} | {_link(r, 'public', 'vismatch', ci=True)} | {_link(r, 'public', 'reid', ci=True)} | "
                         f"{_link(r, 'insider', 'vismatch', ci=True)} | {_link(r, 'insider', 'reid', ci=True)} |")
    lines += ["", "Release diagnostics (adapted model, from the pipeline summary) and membership detail:", "",
              "| Row | own prototype | insider source top-1 | baseline | lint | MIA best single | distill / downstream (s) |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r.get("distill") or {}
        rates = d.get("rates") or {}
        base = d.get("baseline") or {}
        param = ", ".join(f"{k} {v:g}" for k, v in base.items() if k != "method" and isinstance(v, (int, float)))
        best = r.get("membership", {}).get("best_single", {})
        t = r["times_s"]
        lint = "–" if "lint_findings" not in r else ("pass" if not r["lint_findings"] else ", ".join(r["lint_findings"]))
        lines.append(
            f"| {r['row']} | {_pct(rates.get('own_prototype'))} | {_pct(rates.get('source_top1'))} | {param or '–'} | {lint} | "
            f"{best.get('statistic', '–')} {_auc(best.get('auc'))} | {t.get('distill', 0):.0f} / {t.get('downstream', 0):.0f} |"
        )
    m = doc.get("machine", {})
    lines += ["", f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, torch {m.get('torch', '?')} with "
              f"{m.get('torch_threads', '?')} thread(s); date {doc.get('date', '?')}; public model "
              f"{doc.get('public_model_s', 0):.0f} s, shared plain fine-tune {doc.get('shared_finetune_s', 0):.0f} s; "
              f"load average at row starts: " + ", ".join(f"{r['row']} {r['load_start'][0]:.1f}" for r in rows) + "."]
    return "\n".join(lines) + "\n"
