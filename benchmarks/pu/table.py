"""Markdown tables of a version-2 ``privacy_utility.json`` (scenarios, seeds, intervals).

One block per scenario: utility differences against ``public-ft`` with their identity-bootstrap
intervals, the 8 linkability figures (proxies / reconstructions × public / insider attacker ×
VisMatch / Re-ID) as mean ± sd over seeds with chance and the per-seed intervals' envelope, and
the membership AUC of each row against ``base``'s.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["markdown_v2"]


def _pct(x: Any, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * float(x):.{digits}f}"


def _pts(d: Mapping[str, Any] | None) -> str:
    """``+2.1 (−0.4, +4.6)`` in percentage points."""
    if not d:
        return "–"
    lo, hi = d["ci95"]
    return f"{100 * d['diff']:+.1f} ({100 * lo:+.1f}, {100 * hi:+.1f})"


def _mean_sd(d: Mapping[str, Any] | None) -> str:
    if not d:
        return "–"
    return f"{_pct(d['row_mean'])} ± {_pct(d['row_sd'])}"


def _link(row: Mapping[str, Any], target: str, role: str, attack: str) -> str:
    r = ((row.get("linkability") or {}).get(target) or {}).get(role, {}).get(attack)
    if not r:
        return "–"
    los, his = [c[0] for c in r["ci95_per_seed"]], [c[1] for c in r["ci95_per_seed"]]
    sd = f" ± {_pct(r['rate_sd'])}" if len(los) > 1 else ""
    return f"{_pct(r['rate_mean'])}{sd} [{_pct(min(los))}–{_pct(max(his))}]"


def _scenario(name: str, sdoc: Mapping[str, Any], order: list[str], settings: Mapping[str, Any]) -> list[str]:
    rows = [sdoc["rows"][n] for n in order if n in sdoc.get("rows", {})]
    data = sdoc.get("data", {})
    priv, test = data.get("private", {}), data.get("test", {})
    pairs = data.get("pairs", {})
    lines = [f"### {name}", "",
             f"Private: {len(priv.get('identities', []))} identities ({priv.get('images', '?')} images); test: "
             f"{len(test.get('identities', []))} identities ({test.get('images', '?')} images); pairs: "
             + "; ".join(f"{k} {v['used']} genuine + {v['used']} impostor" + (" (every genuine pair)" if v.get("all_genuine") else "")
                         for k, v in pairs.items())
             + f". Seeds per row (base: 1): {settings.get('seeds')}. Utility: row − public-ft in points with a 95 % "
             "identity-bootstrap interval; absolute values mean ± sd over seeds.", ""]
    if not rows:
        return lines + ["(no complete rows yet)", ""]
    kinds = list(rows[0]["utility"])
    head = "| Row |" + "".join(f" Acc {k} | Δ acc {k} | TAR@1e-2 {k} | Δ TAR {k} |" for k in kinds)
    lines += [head, "|---|" + "---|" * (4 * len(kinds))]
    for r in rows:
        cells = []
        for k in kinds:
            u = r["utility"][k]
            ref = r["row"] == "public-ft"  # the reference itself: no difference to show
            cells += [_mean_sd(u["accuracy"]), "ref" if ref else _pts(u["accuracy"]), _mean_sd(u.get("tar@far=0.01")),
                      "ref" if ref else _pts(u.get("tar@far=0.01"))]
        lines.append(f"| {r['row']} | " + " | ".join(cells) + " |")
    linked = [r for r in rows if r.get("linkability")]
    if linked:
        chance = linked[0]["linkability"]["proxies"]["public"]["vismatch"]["chance"]
        lines += ["", f"Linkability in % (chance {_pct(chance, 2)} %): mean ± sd over seeds [envelope of the per-seed "
                  "95 % intervals]; reconstructions: first seed, one proxy per identity.", "",
                  "| Row | Proxies VisMatch pub | Proxies Re-ID pub | Proxies VisMatch ins | Proxies Re-ID ins | "
                  "Recon VisMatch pub | Recon Re-ID pub | Recon VisMatch ins | Recon Re-ID ins |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in linked:
            cells = [_link(r, t, role, a) for t in ("proxies", "reconstructions") for role in ("public", "insider")
                     for a in ("vismatch", "reid")]
            lines.append(f"| {r['row']} | " + " | ".join(cells) + " |")
    stats = list(rows[0].get("membership", {}))
    if stats:
        verdict = any(r.get("membership_verdict") for r in rows)
        lines += ["", "Membership (a-priori AUC, higher = member; chance 0.5): row AUC (mean over seeds) and row − base "
                  "with a 95 % stratified identity-bootstrap interval"
                  + ("; verdict: seeds whose calibrated test (permutation p <= 0.05) says LEAKS." if verdict else "."), "",
                  "| Row | " + " | ".join(f"{s} AUC | Δ {s} vs base" for s in stats) + (" | LEAKS |" if verdict else " |"),
                  "|---|" + "---|---|" * len(stats) + ("---|" if verdict else "")]
        groups = sdoc.get("groups") or {}
        confounded = bool(groups.get("separates"))
        for r in rows:
            v = r.get("membership_verdict")
            cells = []
            for s in stats:
                m = r["membership"][s]
                cells += [f"{m['auc']:.2f}", f"{m['diff']:+.2f} ({m['ci95'][0]:+.2f}, {m['ci95'][1]:+.2f})"]
            if verdict:
                cell = f"{v['leaks']}/{v['of']}" if v else "–"
                cells.append(cell + (" inconclusive" if confounded and v and v["leaks"] else ""))
            lines.append(f"| {r['row']} | " + " | ".join(cells) + " |")
        if groups:
            lines += ["", f"Before training: base (which saw neither group) {'separates' if confounded else 'does not separate'} "
                      f"the private from the test identities (two-sided max-T permutation p = {groups['p']:.3g}, "
                      f"{groups['statistic']} AUC {groups['auc']:.2f})"
                      + ("; the groups differ a priori, so a LEAKS count is inconclusive, not evidence of membership: "
                         "read Δ vs base." if confounded else "; the LEAKS column's 5 % false-LEAKS bound applies.")]
    return lines + [""]


def markdown_v2(doc: Mapping[str, Any]) -> str:
    """The tables a person reads, one block per scenario, then the public model and the machine."""
    order = doc.get("row_order") or []
    lines: list[str] = []
    for name, sdoc in doc.get("scenarios", {}).items():
        lines += _scenario(name, sdoc, order, doc.get("settings", {}))
    p = doc.get("public_model") or {}
    curve = ", ".join(f"{c['step']}: {c['loss']:.2f}" for c in p.get("curve", []))
    m = doc.get("machine", {})
    lines += [f"Public model: {p.get('seconds', 0):.0f} s to train (0: cached); loss by step: {curve or '–'}."]
    for sc, pts in (p.get("verification_curve") or {}).items():
        lines.append(f"Public model on the {sc} test pairs by step (accuracy / TAR@1e-2, %): "
                     + ", ".join(f"{c['step']}: {_pct(c['accuracy'])} / {_pct(c.get('tar@far=0.01'))}" for c in pts) + ".")
    lines += [
              f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, torch {m.get('torch', '?')} with "
              f"{m.get('torch_threads', '?')} thread(s); date {doc.get('date', '?')}; last run {doc.get('last_run_s', 0):.0f} s."]
    return "\n".join(lines) + "\n"
