"""Is the one verdict calibrated at every size and class tightness? Simulated audits through the registered checks.

Each cell of the grid is a number of simulated audits (:func:`pfd.attacks.null.simulate`: every
registered embedding attack of the insider, the public model and the judge on simulated
embeddings, decided by :func:`pfd.audit.verdict.decide`) of a release of ``n_ids`` people × ``k``
proxies whose classes have spread ``sigma`` (0.02: the K proxies of a source nearly one point, as
real pfd proxies in the adapted model; 0.5: classes barely tighter than identities), either at
chance (``leak = "null"``) or with a planted leak: ``linked-5`` / ``linked-10`` link 5 % / 10 % of
the people (their proxies are copies of their own photos in every model: ``pfd.attacks.null.PLANT``), ``times-2`` / ``times-3``
link (r − 1) people beyond the one that chance links (a rate of r × chance when classes are tight).

The grid (issue 57): N ∈ {24, 72, 300, 1000, 10000}, K ∈ {5, 10} (K 5 only at N ≤ 72), sigma ∈
{0.02, 0.05, 0.1, 0.5}; null draws ≥ 200 at N ≤ 72, ≥ 50 at 300, ≥ 20 at 1000, ≥ 5 at 10^4, and
fewer for the planted leaks (power is far from its bar or far below it). Each finished cell is
appended to ``<out>.jsonl`` (resumable: a cell already there is not run again; at N 10^4, minutes a
draw, each draw is appended as it lands and pooled with the cell's earlier ones), and the summary
``<out>.json`` (a list ``cells`` with ``n_ids, k, sigma, leak, draws, refused``, the refusal
rate's exact 95 % interval, the audits refused through LEAKS and through an unresolved design, the
seconds), ``<out>.md`` and ``<out>.png`` are rewritten from it.

Goals (issue 57): null refusals ≤ 1 % (point estimate) in every cell and no cell of ≥ 200 draws
whose interval's upper end exceeds 3 %; power ≥ 90 % against ``linked-10`` at N = 72 and
``linked-5`` at N ≥ 300, in every sigma.

Usage:
    python -m benchmarks.verdict_calibration                  # the whole grid, resumable (~10 core-hours)
    python -m benchmarks.verdict_calibration --quick --out /tmp/cal   # ~2 minutes: N 24 and 72, K 10, few draws
    python -m benchmarks.verdict_calibration --max-ids 1000   # the grid up to N = 1000
    python -m benchmarks.verdict_calibration --summarise      # rewrite json/md/png from the jsonl
    python -m benchmarks.verdict_calibration --shard 0/2 & python -m benchmarks.verdict_calibration --shard 1/2 &
                                                              # two processes (one per core), disjoint cells
    pfd attack --release release --state-dir state --report /tmp/demo-audit
    python -m benchmarks.verdict_calibration --real demo=/tmp/demo-audit/report.json
                                                              # what a real release's classes measure, in sigma

Where real releases sit on the grid: ``--real NAME=REPORT`` reads the class-level section of an audit's
``report.json`` (``pfd attack``; or the gate's ``audit.json`` in a state dir; :func:`pfd.attacks.linkability.spread.class_spread` per model: the
mean within-class cosine of the proxies and of the private photos over two unrelated ones, and the
simulation's sigma with the same excess) into ``<out>_real.json``, which the table's last section lists.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from pfd.audit.intervals import clopper_pearson
from pfd.attacks.null import PLANT, simulate
from pfd.audit.verdict import BOUND, LEVEL, RULE_OUT, VERSION, design_share
from pfd.io import atomic_write_json, atomic_write_text

OUT = Path(__file__).parent / "results" / "verdict_calibration"
SIZES = (24, 72, 300, 1000, 10_000)
SIGMAS = (0.02, 0.05, 0.1, 0.5)
LEAKS = ("null", "linked-5", "linked-10", "times-2", "times-3")
#: Draws per cell: (null, planted leak) by the largest N they apply to. The null cells at N <= 72 were
#: first run with 200 draws and are topped up to 600 (every one of them, whatever it showed: a top-up
#: of only the cells near the goal would be optional stopping); a top-up's draws have their own seed.
DRAWS = ((72, 600, 50), (300, 50, 20), (1000, 20, 10), (10_000, 5, 3))
QUICK_DRAWS = ((72, 10, 4),)
#: Cells of this many people or more are run and recorded one draw at a time (minutes a draw).
PART_FROM = 10_000
QUICK_SIGMAS = (0.05, 0.5)
QUICK_LEAKS = ("null", "linked-10")
#: At N >= PART_FROM (a draw takes core-minutes) the cells run by leak kind: the nulls, the power goal's
#: linked shares, then the multiples of chance that are only reported.
_GOAL_ORDER = {"null": 0, "linked": 1, "times": 2}


def grid(*, max_ids: int = 10_000, quick: bool = False) -> list[dict[str, Any]]:
    """The cells, cheapest first: ``{"n_ids", "k", "sigma", "leak", "draws"}``."""
    table = QUICK_DRAWS if quick else DRAWS
    cells = []
    for n in SIZES:
        if n > max_ids or (quick and n > 72):
            continue
        null_draws, leak_draws = next((d0, d1) for top, d0, d1 in table if n <= top)
        for k in ((5, 10) if n <= 72 and not quick else (10,)):
            pairs = [(sigma, leak) for sigma in (QUICK_SIGMAS if quick else SIGMAS)
                     for leak in (QUICK_LEAKS if quick else LEAKS)]
            if n >= PART_FROM:
                pairs.sort(key=lambda sl: _GOAL_ORDER[sl[1].split("-")[0]])
            for sigma, leak in pairs:
                cells.append({"n_ids": n, "k": k, "sigma": sigma, "leak": leak,
                              "draws": null_draws if leak == "null" else leak_draws})
    return cells


def shard(cells: list[dict[str, Any]], spec: str) -> list[dict[str, Any]]:
    """The cells of shard ``"I/N"`` of the grid: its cells I, I+N, ... (by grid order, so that processes started
    at different times split the same list; a cell is never run by two)."""
    try:
        i, n = (int(v) for v in spec.split("/"))
    except ValueError:
        raise SystemExit(f"--shard {spec!r}: give I/N, e.g. 0/2 and 1/2 for two processes") from None
    if not 0 <= i < n:
        raise SystemExit(f"--shard {spec!r}: I must be in 0..N-1")
    return cells[i::n]


def _key(cell: dict[str, Any]) -> tuple:
    return cell["n_ids"], cell["k"], cell["sigma"], cell["leak"]


def planted(leak: str, n_ids: int) -> float:
    """The share of the people a leak links (``simulate``'s ``linked``)."""
    if leak == "null":
        return 0.0
    kind, amount = leak.split("-")
    if kind == "linked":
        return int(amount) / 100
    return max(int(amount) - 1, 1) / n_ids  # r x chance with tight classes: r - 1 people beyond chance's one


def run_cell(cell: dict[str, Any], *, seed: int = 0, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """Simulate one cell (or the draws a recorded one lacks); the record that the jsonl holds.

    Args:
        cell: The cell, with the draws the grid asks for.
        seed: The benchmark's seed.
        before: The cell's record with fewer draws: only the missing draws run, with a seed of their
            own (the part's number), and the two are pooled.
    """
    t0 = time.perf_counter()
    part = len(before.get("seeds", [before["seed"]])) if before else 0
    cell_seed = _seed(cell, seed) + 1_000_003 * part
    draws = cell["draws"] - (before["draws"] if before else 0)
    r = simulate(cell["n_ids"], cell["k"], draws=draws, sigma=cell["sigma"],
                 linked=planted(cell["leak"], cell["n_ids"]), seed=cell_seed)
    refused, leaks, unresolved, by_row = r.refused, r.leaks, r.unresolved, dict(r.by_row)
    reid, seconds, seeds = r.reid_ratio * draws, time.perf_counter() - t0, [cell_seed]
    if before:
        refused, leaks, unresolved = refused + before["refused"], leaks + before["leaks"], unresolved + before["unresolved"]
        for k, v in before["by_row"].items():
            by_row[k] = by_row.get(k, 0) + v
        reid += before["reid_ratio"] * before["draws"]
        seconds += before["seconds"]
        seeds = before.get("seeds", [before["seed"]]) + seeds
    n = cell["draws"]
    lo, hi = clopper_pearson(refused, n, alpha=0.05)
    return {**cell, "refused": refused, "rate": refused / n, "ci95": [lo, hi], "leaks": leaks,
            "unresolved": unresolved, "by_row": by_row, "reid_ratio": reid / n,
            "linked": planted(cell["leak"], cell["n_ids"]), "plant": PLANT, "seed": seeds[0], "seeds": seeds, "verdict_version": VERSION,
            "rules_out_share": design_share(1 / cell["n_ids"], cell["n_ids"]), "seconds": round(seconds, 2)}


def _seed(cell: dict[str, Any], seed: int) -> int:
    """A seed per cell that does not depend on Python's hash salt."""
    n, k, sigma, leak = _key(cell)
    return (seed * 7919 + n * 131 + k * 17 + int(sigma * 1000) * 3 + LEAKS.index(leak)) % (2**31)


def load(jsonl: Path) -> list[dict[str, Any]]:
    """The finished cells of the current verdict version and plant (later lines replace earlier ones)."""
    if not jsonl.is_file():
        return []
    done: dict[tuple, dict[str, Any]] = {}
    for line in jsonl.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            # A planted-leak cell of an older plant measured another leak (plant 1 realised ~1/6 of its
            # links at sigma 0.5): run again. Null cells plant nothing and stand.
            if rec.get("verdict_version") == VERSION and (rec["leak"] == "null" or rec.get("plant", 1) == PLANT):
                done[_key(rec)] = rec
    return list(done.values())


def real_path(out: Path) -> Path:
    """Where the real releases' measured spreads are kept (``--real``)."""
    return out.with_name(out.name + "_real.json")


def read_real(report: Path) -> dict[str, Any]:
    """One audit's class spreads per model, from its ``report.json`` (``class_link`` entries)."""
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"--real: cannot read {report}: {e}; give the report.json that pfd attack wrote "
                         "or a state dir's audit.json") from None
    entries = [e for e in data.get("class_link") or [] if e.get("spread")]
    if not entries:
        raise SystemExit(f"--real: {report} has no class spreads (written by a pfd older than the class_link "
                         "spread); run pfd attack on the release again")
    first = entries[0]
    return {"n_ids": first["identities"], "classes": first["classes"],
            "models": [{"attacker": e["attacker"], **{part: e["spread"].get(part) for part in ("proxies", "private")}}
                       for e in entries]}


def add_real(out: Path, name: str, report: Path) -> None:
    """Record (or replace) one real release's spreads under ``name``."""
    path = real_path(out)
    real = json.loads(path.read_text()) if path.is_file() else {}
    real[name] = {**read_real(report), "measured": time.strftime("%Y-%m-%d", time.gmtime())}
    atomic_write_json(path, real)


def real_lines(real: dict[str, Any]) -> list[str]:
    """The table's section on real releases: each model's proxy and photo spread, in sigma."""
    if not real:
        return []
    def cell(s: dict[str, Any] | None) -> str:
        if not s:
            return "–"
        sigma = "no class structure" if s["sigma"] is None else f"sigma {s['sigma']:.3g}"
        strangers = f"{s['between']:.3f}".replace("-0.000", "0.000")
        return f"{sigma} (cos {s['within']:.3f}, strangers {strangers})"
    out = ["## Where real releases sit (class tightness measured, `--real`)", "",
           "Each model's mean cosine between two proxies of one class (two photos of one person), against two "
           "unrelated ones, mapped to the simulation's sigma with the same excess "
           "(`pfd.attacks.linkability.spread`).", "",
           "| release | N | model | proxies | private photos |", "|---|---|---|---|---|"]
    for name, r in sorted(real.items()):
        for m in r["models"]:
            out.append(f"| {name} | {r['n_ids']} | {m['attacker']} | {cell(m.get('proxies'))} | {cell(m.get('private'))} |")
    return out + [""]


def goals(cells: list[dict[str, Any]]) -> list[str]:
    """Each goal of issue 57 that the finished cells can speak to, met or missed."""
    null = [c for c in cells if c["leak"] == "null"]
    out = []
    if null:
        worst = max(null, key=lambda c: (c["rate"], c["ci95"][1]))
        big = [c for c in null if c["draws"] >= 200]
        worst_hi = max((c["ci95"][1] for c in big), default=0.0)
        ok = all(c["rate"] <= 0.01 for c in null) and worst_hi <= 0.03
        out.append(f"- null refusals <= 1 % in every cell, upper end <= 3 % where draws >= 200: "
                   f"{'met' if ok else 'MISSED'} (worst cell N {worst['n_ids']}, K {worst['k']}, sigma {worst['sigma']}: "
                   f"{worst['refused']}/{worst['draws']}, CI {100 * worst['ci95'][0]:.1f}-{100 * worst['ci95'][1]:.1f} %; "
                   f"largest upper end at >= 200 draws {100 * worst_hi:.1f} %)")
    power = [c for c in cells if (c["leak"] == "linked-10" and c["n_ids"] == 72) or
             (c["leak"] == "linked-5" and c["n_ids"] >= 300)]
    if power:
        weakest = min(power, key=lambda c: c["rate"])
        ok = all(c["rate"] >= 0.9 for c in power)
        out.append(f"- power >= 90 % (10 % of the people linked at N = 72, 5 % at N >= 300): {'met' if ok else 'MISSED'} "
                   f"(weakest: N {weakest['n_ids']}, K {weakest['k']}, sigma {weakest['sigma']}, {weakest['leak']}: "
                   f"{weakest['refused']}/{weakest['draws']})")
    return out


def markdown(cells: list[dict[str, Any]], real: dict[str, Any] | None = None) -> str:
    """The table: one row per (N, K, sigma), the refusal rate per leak; then the real releases' spreads."""
    rows = sorted({(c["n_ids"], c["k"], c["sigma"]) for c in cells})
    by = {_key(c): c for c in cells}
    lines = [f"# Verdict calibration (verdict version {VERSION})", "",
             f"Simulated audits (`pfd.attacks.null.simulate`, three attackers, D 64, 20 private images a person) decided "
             f"by `pfd.audit.verdict.decide` at family-wise {100 * LEVEL:g} %; a design is resolved when it rules out "
             f"{100 * BOUND:g} % of the people or {RULE_OUT:g}x chance. Each entry: audits refused / audits (rate, exact "
             "95 % interval; for a planted leak, the mean Rank-1 Re-ID over chance it realised). null: at chance; "
             "linked-5/10: 5 %/10 % of the people linked (their proxies copies of their own photos); times-2/3: r - 1 "
             "people linked beyond chance's one. Regenerate: `python -m benchmarks.verdict_calibration --summarise`.", "",
             "| N | K | sigma | rules out (people) | " + " | ".join(LEAKS) + " |",
             "|---|---|---|---|" + "---|" * len(LEAKS)]
    for n, k, sigma in rows:
        cellstr = []
        for leak in LEAKS:
            c = by.get((n, k, sigma, leak))
            realised = "" if c is None or leak == "null" else f"; Re-ID {c['reid_ratio']:.1f}x"
            cellstr.append("" if c is None else f"{c['refused']}/{c['draws']} ({100 * c['rate']:.1f} %, "
                           f"{100 * c['ci95'][0]:.1f}-{100 * c['ci95'][1]:.1f}{realised})")
        lines.append(f"| {n} | {k} | {sigma:g} | {100 * design_share(1 / n, n):.2f} % | " + " | ".join(cellstr) + " |")
    secs = sum(c["seconds"] for c in cells)
    lines += ["", "## Goals (issue 57)", "", *goals(cells), "",
              f"{len(cells)} cells, {secs / 3600:.1f} core-hours of simulation.", "", *real_lines(real or {})]
    return "\n".join(lines)


def plot(cells: list[dict[str, Any]], path: Path) -> None:
    """Refusal rate against N, one line per (leak, sigma)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, leaks, title in ((axes[0], ("null",), "at chance (null)"),
                             (axes[1], ("linked-5", "linked-10", "times-2", "times-3"), "planted leaks")):
        for leak in leaks:
            for sigma in SIGMAS:
                pts = sorted((c["n_ids"], c["rate"]) for c in cells if c["leak"] == leak and c["sigma"] == sigma
                             and c["k"] == 10)
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=f"{leak}, sigma {sigma:g}")
        ax.set_xscale("log")
        ax.set_xlabel("people N (K 10)")
        ax.set_ylabel("audits refused")
        ax.set_title(title)
        ax.set_ylim(-0.02, 1.02)
        if leaks == ("null",):
            ax.axhline(LEVEL, color="grey", ls="--", lw=1)
        if ax.get_legend_handles_labels()[0]:  # a panel with no cell yet (a quick run) has nothing to name
            ax.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarise(out: Path) -> list[dict[str, Any]]:
    """Rewrite ``<out>.json``, ``.md`` and ``.png`` from ``<out>.jsonl``."""
    cells = sorted(load(out.with_suffix(".jsonl")), key=lambda c: (c["n_ids"], c["k"], c["sigma"], LEAKS.index(c["leak"])))
    real = json.loads(real_path(out).read_text()) if real_path(out).is_file() else {}
    atomic_write_json(out.with_suffix(".json"), {"verdict_version": VERSION, "level": LEVEL, "bound": BOUND,
                                                 "rule_out": RULE_OUT, "cells": cells, "real": real})
    atomic_write_text(out.with_suffix(".md"), markdown(cells, real))
    if cells:
        plot(cells, out.with_suffix(".png"))
    return cells


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT, help="results stem (.jsonl, .json, .md, .png)")
    p.add_argument("--quick", action="store_true", help="N 24 and 72 with few draws (minutes)")
    p.add_argument("--max-ids", type=int, default=10_000, help="skip cells with more people")
    p.add_argument("--summarise", action="store_true", help="only rewrite the summary from the jsonl")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard", default="0/1", metavar="I/N",
                   help="run only the grid's cells I, I+N, I+2N, ... (one process per core: each appends its own cells)")
    p.add_argument("--real", action="append", default=[], metavar="NAME=REPORT",
                   help="record a real release's class spreads from its audit's report.json (pfd attack) or a state dir's "
                        "audit.json (the gate), then summarise")
    args = p.parse_args(argv)
    for spec in args.real:
        name, sep, report = spec.partition("=")
        if not sep or not name or not report:
            raise SystemExit(f"--real {spec!r}: give NAME=REPORT, e.g. demo=/tmp/audit/report.json")
        add_real(args.out, name, Path(report))
    if not args.summarise and not args.real:
        jsonl = args.out.with_suffix(".jsonl")
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        done = {_key(c): c for c in load(jsonl)}
        mine = shard(grid(max_ids=args.max_ids, quick=args.quick), args.shard)
        todo = [c for c in mine if _key(c) not in done or done[_key(c)]["draws"] < c["draws"]]
        print(f"{len(todo)} cells to run or top up ({len(done)} recorded)", flush=True)
        for i, cell in enumerate(todo, 1):
            rec = done.get(_key(cell))
            while rec is None or rec["draws"] < cell["draws"]:
                # A draw at N 10^4 takes minutes: its cells are recorded draw by draw (each part pooled with
                # a seed of its own, as a top-up), so a kill loses one draw, not the cell.
                upto = cell["draws"] if cell["n_ids"] < PART_FROM else (rec["draws"] if rec else 0) + 1
                rec = run_cell({**cell, "draws": upto}, seed=args.seed, before=rec)
                with jsonl.open("a") as f:  # one line per finished part: a kill loses at most the part in flight
                    f.write(json.dumps(rec) + "\n")
            print(f"[{i}/{len(todo)}] N {rec['n_ids']} K {rec['k']} sigma {rec['sigma']:g} {rec['leak']}: "
                  f"{rec['refused']}/{rec['draws']} refused ({rec['leaks']} leaks, {rec['unresolved']} unresolved), "
                  f"{rec['seconds']:.0f} s", flush=True)
            summarise(args.out)
    for line in goals(summarise(args.out)):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
