"""Markdown tables of a version-2 ``privacy_utility.json`` (scenarios, seeds, intervals).

One block per scenario: utility differences against ``public-ft`` with their identity-bootstrap
intervals, the 8 linkability figures (proxies / reconstructions × public / insider attacker ×
VisMatch / Re-ID) as mean ± sd over seeds with chance and the per-seed intervals' envelope, and
the membership AUC of each row against ``base``'s.
"""

from __future__ import annotations

from typing import Any, Mapping

from benchmarks.pu.data import TARGET_CONTROLS, TARGET_SCENARIOS
from benchmarks.pu.settings import TAR, MIA_STATS, ROW_KEY

__all__ = ["markdown_v2"]


def _pct(x: Any, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * float(x):.{digits}f}"


def _pts(d: Mapping[str, Any] | None) -> str:
    """``+2.1 (−0.4, +4.6)`` in percentage points."""
    if not d or d.get("diff") is None:
        return "–"  # not measurable (e.g. TAR@1e-2 with fewer than 100 impostor pairs)
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


def _seeds_text(sdoc: Mapping[str, Any], order: list[str]) -> str:
    """``base 1, public-ft 3, pfd 2, ...``: the seeds each row was run with (its units), in table order."""
    counts: dict[str, int] = {}
    for key in sdoc.get("units", {}):
        row = key.rsplit("/seed", 1)[0]
        counts[row] = counts.get(row, 0) + 1
    return ", ".join(f"{n} {counts[n]}" for n in order if n in counts) or "none yet"


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
             + ". Seeds per row: " + _seeds_text(sdoc, order)
             + ". Utility: row − public-ft in points with a 95 % "
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
            cells += [_mean_sd(u["accuracy"]), "ref" if ref else _pts(u["accuracy"]), _mean_sd(u.get(TAR)),
                      "ref" if ref else _pts(u.get(TAR))]
        lines.append(f"| {r['row']} | " + " | ".join(cells) + " |")
    linked = [r for r in rows if r.get("linkability")]
    if linked:
        chance = linked[0]["linkability"]["proxies"]["public"]["vismatch"]["chance"]
        lines += ["", f"Linkability in % (chance {_pct(chance, 2)} %): mean ± sd over seeds [envelope of the per-seed "
                  "95 % intervals]; reconstructions: first seed, one proxy per identity.", "",
                  "| Row | Proxies VisMatch pub | Proxies Re-ID pub | Proxies VisMatch ins | Proxies Re-ID ins | "
                  "Recon VisMatch pub | Recon Re-ID pub | Recon VisMatch ins | Recon Re-ID ins | Gate passed | "
                  "Audit publishable |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in linked:
            cells = [_link(r, t, role, a) for t in ("proxies", "reconstructions") for role in ("public", "insider")
                     for a in ("vismatch", "reid")]
            g, a = r.get("gate"), r.get("audit")
            cells.append(f"{g['passed']}/{g['of']}" if g else "–")
            cells.append(f"{a['publishable']}/{a['of']}" if a else "–")
            lines.append(f"| {r['row']} | " + " | ".join(cells) + " |")
    # The benchmark's order, not the JSON's (a results file written with sorted keys would reorder the columns).
    present = rows[0].get("membership", {})
    stats = [m for m in MIA_STATS if m in present] + [m for m in present if m not in MIA_STATS]
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
    goals = target_goals(sdoc)
    if goals and settings.get("protocol") == "target":
        head = ("The goals' rules on this no-shift control (not goals here: no release is expected to gain; "
                "(c) still says whether pfd's release is linkable):" if name in TARGET_CONTROLS else "Goals (issue 19):")
        lines += ["", head, ""] + [f"- ({k}) {'met' if ok else 'MISSED'}: {why}" for k, (ok, why) in goals.items()]
    return lines + [""]


def _inside_chance(link: Mapping[str, Any]) -> bool:
    """Every seed's 95 % interval of a linkability figure holds chance (nothing links above it)."""
    return all(lo <= link["chance"] for lo, _ in link["ci95_per_seed"])


def target_goals(sdoc: Mapping[str, Any]) -> dict[str, tuple[bool, str]]:
    """Issue 19's goals on one scenario, each ``(met, reason)``: (a) raw's accuracy gain over
    public-ft ≥ 5 points with an interval above 0; (b) pfd's ≥ half of raw's with an interval above
    0, and ≥ sre2l's and rta-only's; (c) each of pfd's 8 linkability figures with chance inside
    every seed's interval, the gate passing and the one audit publishable on every seed; (d) raw's membership AUC above
    base's (some statistic's interval above 0) and pfd's inside base's (every interval holds 0).
    Goals whose rows are not all done are left out."""
    rows = sdoc.get("rows", {})
    acc = {n: rows[n]["utility"]["all"]["accuracy"] for n in rows if n != "public-ft" and "utility" in rows[n]}
    out: dict[str, tuple[bool, str]] = {}
    # Two decimals on the estimate: one would print a 4.98 that misses the 5-point rule as "+5.0".
    pts = lambda d: f"{100 * d['diff']:+.2f} ({100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f})"  # noqa: E731
    if "raw" in acc:
        r = acc["raw"]
        out["a"] = (r["diff"] >= 0.05 and r["ci95"][0] > 0, f"raw {pts(r)} points over public-ft")
    if "raw" in acc and "pfd" in acc:
        r, p = acc["raw"], acc["pfd"]
        others = {n: acc[n]["diff"] for n in ("sre2l", "rta-only") if n in acc}
        ok = p["diff"] >= 0.5 * r["diff"] and p["ci95"][0] > 0 and all(p["diff"] >= v for v in others.values())
        share = p["diff"] / r["diff"] if r["diff"] > 0 else float("nan")
        out["b"] = (ok, f"pfd {pts(p)} = {100 * share:.0f} % of raw's gain; "
                    + (", ".join(f"{n} {100 * v:+.1f}" for n, v in others.items()) or "sre2l / rta-only not run"))
    pfd = rows.get("pfd", {})
    if pfd.get("linkability") and (pfd.get("gate") or pfd.get("audit")):
        figs = [(f"{t} {role} {a}", pfd["linkability"][t][role][a]) for t in ("proxies", "reconstructions")
                for role in pfd["linkability"].get(t, {}) for a in pfd["linkability"][t][role]]
        above = [name for name, f in figs if not _inside_chance(f)]
        ok, why = not above and len(figs) >= 8, (f"{len(figs) - len(above)}/{len(figs)} figures inside chance's interval"
                                                 + (f" (above: {', '.join(above)})" if above else ""))
        g = pfd.get("gate")
        if g:
            ok &= g["passed"] == g["of"]
            why += (f"; gate passed {g['passed']}/{g['of']} seeds"
                    + "".join(f"; seed {i} failed {', '.join(c)}" for i, c in enumerate(g["failed_checks"]) if c))
        a = pfd.get("audit")
        if a:  # the one audit of the written release (what pfd card says): every figure and check, its verdict
            ok &= a["publishable"] == a["of"]
            why += (f"; audit publishable {a['publishable']}/{a['of']} seeds"
                    + "".join(f"; seed {i} refused by {', '.join(c)}" for i, c in enumerate(a["failed_per_seed"]) if c))
        out["c"] = (ok, why)
    mem = {n: rows[n].get("membership") for n in ("raw", "pfd") if rows.get(n, {}).get("membership")}
    if len(mem) == 2:
        raw_above = [s for s, m in mem["raw"].items() if m["ci95"][0] > 0]
        pfd_out = [s for s, m in mem["pfd"].items() if not m["ci95"][0] <= 0 <= m["ci95"][1]]
        out["d"] = (bool(raw_above) and not pfd_out,
                    f"raw above base on {', '.join(raw_above) or 'no statistic'}; pfd "
                    + (f"outside base's interval on {', '.join(pfd_out)}" if pfd_out else "within base's on every statistic"))
    return out


def markdown_v2(doc: Mapping[str, Any]) -> str:
    """The tables a person reads, one block per scenario, then the public model and the machine."""
    order = doc.get("row_order") or []
    lines: list[str] = []
    for name, sdoc in doc.get("scenarios", {}).items():
        lines += _scenario(name, sdoc, order, doc.get("settings", {}))
    # Issue 35's goals are about the preset scenarios: a run on custom data (``--private``) has none.
    if (doc.get("settings") or {}).get("protocol") == "target" and set(doc.get("scenarios", {})) & set(TARGET_SCENARIOS):
        from benchmarks.pu.goals import format_goals, method_goals

        rec = doc.get("goal_records") or {}
        goals = method_goals(doc, screen=rec.get("screen"), paper=rec.get("paper"), card_s=rec.get("card_s"),
                             plan=tuple(rec["plan"]) if rec.get("plan") else None)
        lines += ["### Goals (issue 35)", "", *format_goals(goals), ""]
    own = (doc.get("settings") or {}).get(ROW_KEY) or {}
    if own:  # settings one row adds to the table's (benchmarks.pu.settings.ROW_KEY)
        lines += ["Rows' own settings: " + "; ".join(
            f"{row}: " + ", ".join(f"{sec}.{k} = {v}" for sec, kv in over.items() for k, v in kv.items())
            for row, over in own.items()) + "."]
    p = doc.get("public_model") or {}
    curve = ", ".join(f"{c['step']}: {c['loss']:.2f}" for c in p.get("curve", []))
    m = doc.get("machine", {})
    if p.get("checkpoint"):
        lines += [f"Public model: the pretrained {p['checkpoint']} (sha256 {p.get('sha256', '?')[:12]}…, "
                  f"{'x'.join(map(str, p.get('size', [])))}), read in place, not trained here."]
    else:
        lines += [f"Public model: {p.get('seconds', 0):.0f} s to train (0: cached); loss by step: {curve or '–'}."]
    for sc, pts in (p.get("verification_curve") or {}).items():
        lines.append(f"Public model on the {sc} test pairs by step (accuracy / TAR@1e-2, %): "
                     + ", ".join(f"{c['step']}: {_pct(c['accuracy'])} / {_pct(c.get(TAR))}" for c in pts) + ".")
    lines += [
              f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, torch {m.get('torch', '?')} with "
              f"{m.get('torch_threads', '?')} thread(s); date {doc.get('date', '?')}; last run {doc.get('last_run_s', 0):.0f} s."]
    return "\n".join(lines) + "\n"
