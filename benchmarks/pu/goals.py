"""Issue 35's goals, read off the target table (and the screen's records): each met, missed or pending.

The goals span scenarios, so they are judged on the whole document, not per scenario (the per-
scenario rules of issue 19 stay in :func:`benchmarks.pu.table.target_goals`):

* (a) **no shift** (celeba): pfd passes the one audit on every seed, every linkability figure
  (public, insider, judge; proxies and reconstructions) with chance inside each seed's interval;
* (b) **illumination**: pfd ≥ +3.0 points of accuracy over public-ft, its interval above 0;
* (c) **surveillance**: pfd ≥ 90 % of raw's gain; its point estimate ≥ blur's, dp-pix's and
  ncfm's; within public-ft's seed sd of rta-only's and sre2l's; and the paired difference
  pfd − dp-pix with its interval (reported, no threshold);
* (d) **everywhere**: the audit passes pfd on every seed of every scenario, and the source's rank
  is uniform for every attacker: no source-rank test of pfd's proxies (every scenario, seed,
  attacker, by cos and by ``|cos|``) rejects at family-wise :data:`RANK_LEVEL` (Holm), since one
  question asked of many tests needs a family-wise level (the audit's own is 1 %);
* (e) the paper's method (the ``paper`` variant of ``pu_ablation``) reproduces the committed pfd
  figures of the table it was measured for, within that table's interval;
* (f) a screen unit ≤ 10 min and ≤ 6 GB (the screen's default unit), the card's 30-person unit
  ≤ 10 min, ``--plan`` within 25 % of the measured wall time.

A goal whose rows or records are not there yet is ``pending`` with what it waits for: the table
accrues unit by unit, and a goal is never called met on part of its evidence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["method_goals", "format_goals", "goal_records", "holm", "PAIRED", "RANK_LEVEL"]

#: Paired utility differences the summary computes on the same pairs (row, reference row).
PAIRED: tuple[tuple[str, str], ...] = (("pfd", "dp-pix"),)

#: Goal (d)'s family-wise level over every source-rank test of pfd (scenarios x seeds x attackers).
#: Read one test at a time at 5 %, a release at chance would "miss" (d) in most tables: 3 scenarios
#: x 2 seeds x 6 attackers (cos and |cos|) are 36 tests, 1.8 false alarms expected.
RANK_LEVEL = 0.05

#: Goal (f)'s limits: a screen unit's seconds and GB, the card's seconds, ``--plan``'s relative error.
SCREEN_S, SCREEN_GB, CARD_S, PLAN_ERROR = 600.0, 6.0, 600.0, 0.25


def _acc(rows: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    r = rows.get(name) or {}
    return ((r.get("utility") or {}).get("all") or {}).get("accuracy")


def _pts(d: Mapping[str, Any]) -> str:
    return f"{100 * d['diff']:+.1f} ({100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f})"


def _figures_above_chance(row: Mapping[str, Any]) -> tuple[list[str], int]:
    """The linkability figures whose interval on some seed lies above chance, and how many figures there are."""
    link = row.get("linkability") or {}
    figs = [(f"{t} {role} {a}", f) for t in ("proxies", "reconstructions") for role in link.get(t, {})
            for a, f in link[t][role].items()]
    return [n for n, f in figs if any(lo > f["chance"] for lo, _ in f["ci95_per_seed"])], len(figs)


def _audit(row: Mapping[str, Any]) -> tuple[bool, str] | None:
    a = row.get("audit")
    if not a:
        return None
    fails = "".join(f"; seed {i}: {', '.join(c)}" for i, c in enumerate(a.get("failed_per_seed", [])) if c)
    return a["publishable"] == a["of"], f"audit publishable on {a['publishable']}/{a['of']} seeds{fails}"


def _rank_tests(row: Mapping[str, Any]) -> list[tuple[str, float]] | None:
    """The source-rank uniformity tests of a row's proxies: ``("<role> seed <k>", p)`` per seed, or ``None``."""
    tests = ((row.get("linkability") or {}).get("rank_uniformity") or {}).get("proxies")
    if not tests:
        return None
    return [(f"{role} seed {k}", float(p)) for role, t in sorted(tests.items()) for k, p in enumerate(t["p_per_seed"])]


def holm(ps: Sequence[float], *, level: float) -> list[bool]:
    """Holm's step-down rejections of ``ps`` at family-wise ``level`` (True: rejected)."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out = [False] * len(ps)
    for k, i in enumerate(order):
        if ps[i] > level / (len(ps) - k):
            break
        out[i] = True
    return out


def method_goals(doc: Mapping[str, Any], *, screen: Mapping[str, Any] | None = None,
                 paper: Mapping[str, Any] | None = None, card_s: float | None = None,
                 plan: tuple[float, float] | None = None) -> dict[str, tuple[str, str]]:
    """Issue 35's goals on the target table (module docstring).

    Args:
        doc: The target table (``privacy_utility_target.json``).
        screen: The screen's results (``pu_ablation_target_<scenario>_screen.json``), for (f).
        paper: ``{"scenario", "diff", "reference": {"diff", "ci95"}}``: the ``paper`` variant's
            accuracy gain and the committed pfd figure it should reproduce, for (e).
        card_s: Seconds of ``pfd card`` on the 30-person surveillance unit, measured idle, for (f).
        plan: ``(planned, measured)`` wall seconds of one run, for (f).

    Returns:
        ``{goal: (status, reason)}`` with status ``"met"``, ``"MISSED"`` or ``"pending"``.
    """
    sc = doc.get("scenarios") or {}
    rows = {name: (s.get("rows") or {}) for name, s in sc.items()}
    out: dict[str, tuple[str, str]] = {}

    celeba = rows.get("celeba", {}).get("pfd")
    if not celeba or _audit(celeba) is None:
        out["a"] = ("pending", "celeba's pfd row is not complete")
    else:
        ok, why = _audit(celeba)  # type: ignore[misc]
        above, n = _figures_above_chance(celeba)
        ok &= not above and n > 0
        out["a"] = ("met" if ok else "MISSED", f"{why}; {n - len(above)}/{n} figures inside chance's interval"
                    + (f" (above: {', '.join(above)})" if above else ""))

    p = _acc(rows.get("illumination", {}), "pfd")
    if p is None:
        out["b"] = ("pending", "illumination's pfd row is not complete")
    else:
        ok = p["diff"] >= 0.03 and p["ci95"][0] > 0
        out["b"] = ("met" if ok else "MISSED", f"pfd {_pts(p)} points over public-ft (goal: >= +3.0, interval above 0)")

    srows = rows.get("surveillance", {})
    need = ("pfd", "raw", "blur", "dp-pix", "ncfm", "rta-only", "sre2l")
    missing = [n for n in need if _acc(srows, n) is None]
    if missing:
        out["c"] = ("pending", "surveillance rows not complete: " + ", ".join(missing))
    else:
        a = {n: _acc(srows, n) for n in need}
        pd, rd, sd = a["pfd"]["diff"], a["raw"]["diff"], a["pfd"].get("ref_sd", 0.0)  # type: ignore[index]
        checks = [(pd >= 0.9 * rd, f"pfd {_pts(a['pfd'])} = {100 * pd / rd:.0f} % of raw's {100 * rd:+.1f}" if rd > 0
                   else f"pfd {_pts(a['pfd'])}, raw {100 * rd:+.1f} (no gain to share)")]  # type: ignore[arg-type]
        checks += [(pd >= a[n]["diff"], f"{n} {100 * a[n]['diff']:+.1f}") for n in ("blur", "dp-pix", "ncfm")]  # type: ignore[index]
        checks += [(abs(pd - a[n]["diff"]) <= sd, f"{n} {100 * a[n]['diff']:+.1f} (public-ft seed sd {100 * sd:.1f})")  # type: ignore[index]
                   for n in ("rta-only", "sre2l")]
        pair = ((sc.get("surveillance") or {}).get("paired") or {}).get("pfd - dp-pix")
        why = "; ".join(("" if ok else "NOT ") + text for ok, text in checks)
        why += f"; paired pfd - dp-pix {_pts(pair['accuracy'])}" if pair else "; paired pfd - dp-pix not computed"
        out["c"] = ("met" if all(ok for ok, _ in checks) else "MISSED", why)

    parts, pending, ok_all, ranks = [], [], True, []
    for name in ("celeba", "illumination", "surveillance"):
        row = rows.get(name, {}).get("pfd")
        audit, tests = (_audit(row), _rank_tests(row)) if row else (None, None)
        if audit is None or tests is None:
            pending.append(name)
            continue
        ok_all &= audit[0]
        parts.append(f"{name}: {audit[1]}")
        ranks += [(name, role, p) for role, p in tests]
    if ranks:
        reject = holm([p for _, _, p in ranks], level=RANK_LEVEL)
        bad = [f"{n} {role} p = {p:.2g}" for (n, role, p), r in zip(ranks, reject) if r]
        ok_all &= not bad
        low = min(ranks, key=lambda t: t[2])
        nominal = sum(p <= 0.05 for _, _, p in ranks)
        parts.append(f"source rank {'NOT uniform: ' + ', '.join(bad) if bad else 'uniform'} (Holm, family-wise "
                     f"{100 * RANK_LEVEL:g} % over {len(ranks)} tests; smallest p = {low[2]:.2g}, {low[0]} {low[1]}; "
                     f"{nominal} at p <= 0.05, {0.05 * len(ranks):.1f} expected at chance)")
    out["d"] = (("pending" if pending else "met" if ok_all else "MISSED"),
                "; ".join(parts + ([f"waiting for pfd on {', '.join(pending)}"] if pending else [])))

    if paper is None:
        out["e"] = ("pending", "the paper variant (pu_ablation --variants paper) has not run")
    else:
        lo, hi = paper["reference"]["ci95"]
        ok = lo <= paper["diff"] <= hi
        out["e"] = ("met" if ok else "MISSED", f"{paper['scenario']}: the paper's method {100 * paper['diff']:+.1f} vs the "
                    f"committed pfd {100 * paper['reference']['diff']:+.1f} ({100 * lo:+.1f}, {100 * hi:+.1f})")

    facts, status = [], "met"
    unit = (((screen or {}).get("variants") or {}).get("default") or {}).get("summary")
    if unit is None:
        status = "pending"
        facts.append("no screen unit recorded")
    else:
        secs, gb = unit.get("seconds"), unit.get("peak_gb")
        ok = secs is not None and secs <= SCREEN_S and gb is not None and gb <= SCREEN_GB
        status = status if ok else "MISSED"
        facts.append(f"screen unit {secs if secs is None else round(secs)} s, peak {gb} GB")
    for what, value, limit in (("card", card_s, CARD_S),):
        if value is None:
            status = "pending" if status == "met" else status
            facts.append(f"{what} not measured")
        else:
            status = status if value <= limit else "MISSED"
            facts.append(f"{what} {value:.0f} s")
    if plan is None:
        status = "pending" if status == "met" else status
        facts.append("--plan not compared")
    else:
        err = abs(plan[0] - plan[1]) / plan[1]
        status = status if err <= PLAN_ERROR else "MISSED"
        facts.append(f"--plan {plan[0]:.0f} s vs {plan[1]:.0f} s measured ({100 * err:.0f} %)")
    out["f"] = (status, "; ".join(facts) + " (limits: 600 s and 6 GB, 600 s, 25 %)")
    return out


def format_goals(goals: Mapping[str, tuple[str, str]]) -> list[str]:
    """Markdown lines: one bullet per goal, ``- (b) MISSED: …``."""
    return [f"- ({k}) {status}: {why}" for k, (status, why) in goals.items()]


def goal_records(results: Path, *, scenario: str = "illumination") -> dict[str, Any]:
    """What (e) and (f) read beside the table in ``results``: the screen of ``scenario`` (and its
    ``paper`` variant against the committed table one folder up), and ``timings.json`` (the card's
    and ``--plan``'s measured seconds, and a screen unit's idle seconds and peak memory, each with
    where it was measured; they replace the screen file's own). Absent files: absent keys.
    """
    import json

    results = Path(results)
    out: dict[str, Any] = {}
    screen = results / f"pu_ablation_target_{scenario}_screen.json"
    if screen.is_file():
        doc = json.loads(screen.read_text())
        default = ((doc.get("variants") or {}).get("default") or {}).get("summary") or {}
        out["screen"] = {"variants": {"default": {"summary": {k: default.get(k) for k in ("seconds", "peak_gb")}}}}
        paper = ((doc.get("variants") or {}).get("paper") or {}).get("summary")
        committed = results.parent / "privacy_utility_target.json"
        if paper and committed.is_file():
            ref = _acc((json.loads(committed.read_text())["scenarios"].get(scenario) or {}).get("rows") or {}, "pfd")
            if ref is not None:
                out["paper"] = {"scenario": scenario, "diff": paper["accuracy"]["diff"],
                                "reference": {"diff": ref["diff"], "ci95": ref["ci95"]}}
    timings = results / "timings.json"
    if timings.is_file():
        t = json.loads(timings.read_text())
        unit = t.get("screen_unit") or {}
        if unit:  # measured where it says (idle seconds and peak memory may come from two runs of one unit)
            out["screen"] = {"variants": {"default": {"summary": {"seconds": unit.get("seconds"),
                                                                  "peak_gb": unit.get("peak_gb")}}}}
        out["card_s"] = (t.get("card") or {}).get("seconds")
        plan = t.get("plan") or {}
        if plan.get("planned_s") and plan.get("measured_s"):
            out["plan"] = [plan["planned_s"], plan["measured_s"]]
    return out
