"""What the publication gate can rule out: its refusal rate under the null and under planted leaks.

A linkability figure of the audit (:class:`pfd.attacks.linkability.attacks.LinkabilityAttack`) sees, for each of
``N`` source identities, ``K`` proxies; an attack links each proxy with probability ``p``. The
gate used to refuse only when the 95 % interval lay above chance (LEAKS); it now also refuses when
the interval's upper end (the largest linkage rate the audit does not exclude) is more than
``M`` times chance. This script simulates releases at ``p = r · chance`` (``r = 1``: genuinely
unlinkable; ``r = 2, 3, 5``: planted leaks) with chance ``1/N`` and the gate's own clustered exact
interval, and prints, per ``(N, K, r)``, how often a check passes with LEAKS alone and with each
``M``: the power table of docs/distill.md. Each proxy's success is drawn independently (the
proxies of one source are not made to agree), which is what a release at chance looks like.

Reading: the expected number of chance successes is ``N · K · (1/N) = K``, so what a check can rule
out depends on the proxies per identity ``K``, hardly on ``N``. With ``K = 1`` no release can
rule out 5x chance; from ``K = 3`` a release at chance passes with ``M = 5`` in >= 95 % of draws
while a leak of 5x chance passes in <= 2 %.

Usage:
    python -m benchmarks.gate_power [--draws 2000] [--multiples 4 5 6]
    python -m benchmarks.gate_power --whole-gate [--ids 24] [--ipc 10] [--draws 1000] [--out FILE]

``--whole-gate`` runs :func:`pfd.attacks.null.simulate` instead: the one verdict (every registered
embedding attack of insider, public model and judge on simulated embeddings with clustered
proxies, decided at the audit's family-wise level) on releases at chance and with planted leaks,
and prints how often it refuses: the null's false-refusal rate and the power table of
docs/distill.md.

Pure simulation (seconds, no data, no model); run by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


from pfd.audit.intervals import clustered_interval


def pass_rates(n_ids: int, k: int, ratio: float, multiples: list[float], *, draws: int, seed: int) -> dict[str, float]:
    """Share of simulated checks that pass: LEAKS alone, and LEAKS plus ``upper <= M · chance`` per M."""
    rng = np.random.default_rng([seed, n_ids, k, int(ratio * 100)])
    chance = 1.0 / n_ids
    cluster = np.repeat(np.arange(n_ids), k)
    lo = np.empty(draws)
    hi = np.empty(draws)
    for d in range(draws):
        success = rng.random(n_ids * k) < min(1.0, ratio * chance)
        lo[d], hi[d] = clustered_interval(success, cluster)["ci95"]
    leaks = lo > chance
    out = {"leaks_only": float(np.mean(~leaks)), "median_bound": float(np.median(hi / chance))}
    for m in multiples:
        out[f"M={m:g}"] = float(np.mean(~leaks & (hi <= m * chance)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--multiples", type=float, nargs="+", default=[4.0, 5.0, 6.0])
    ap.add_argument("--ids", type=int, nargs="+", default=[10, 30, 150])
    ap.add_argument("--ipc", type=int, nargs="+", default=[1, 2, 3, 5, 10])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--whole-gate", action="store_true", help="simulate the one verdict at chance and under planted leaks")
    ap.add_argument("--leaks", type=float, nargs="+", default=[0.0, 0.5, 1.0, 1.5],
                    help="--whole-gate: pulls of each source's proxies towards its centre (0: at chance)")
    ap.add_argument("--out", default="", help="--whole-gate: JSON-lines file of finished rows (resumable)")
    args = ap.parse_args(argv)
    if args.whole_gate:
        return whole_gate(args)
    cols = ["leaks_only"] + [f"M={m:g}" for m in args.multiples]
    print(f"Share of checks that PASS ({args.draws} simulated releases each); r = true linkage / chance, chance = 1/N")
    print("| N | K | r | median upper / chance | " + " | ".join(cols) + " |")
    print("|---" * (4 + len(cols)) + "|")
    for k in args.ipc:
        for n in args.ids:
            for r in (1.0, 2.0, 3.0, 5.0):
                row = pass_rates(n, k, r, args.multiples, draws=args.draws, seed=args.seed)
                print(f"| {n} | {k} | {r:g} | {row['median_bound']:.1f} | " + " | ".join(f"{100 * row[c]:.0f} %" for c in cols) + " |")
    return 0


def whole_gate(args: argparse.Namespace) -> int:
    """Print the one verdict's refusal rate for each (N, K) and planted leak (0: at chance).

    Each row is :func:`pfd.attacks.null.simulate`: the registered linkability, hubness, source-rank
    and class-level attacks of three models (insider, public, judge) on simulated embeddings, decided by
    :func:`pfd.audit.verdict.decide` at its family-wise level. ``Re-ID / chance`` is what the
    planted pull amounts to (mean over audits and models), so rows near 2x and 3x read as power.
    Resumable: each finished row is appended to ``--out`` (JSON lines, with the audit's version) and
    skipped on a rerun of the same audit version.
    """
    import json
    import time

    from pfd.audit.intervals import clopper_pearson
    from pfd.attacks.null import simulate
    from pfd.audit.verdict import LEVEL, VERSION

    out = Path(args.out) if args.out else None
    done = {}
    if out is not None and out.is_file():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            if r.get("audit_version", 1) == VERSION:  # rows of another audit are history, not this table
                done[(r["N"], r["K"], r["leak"], r["draws"])] = r
    print(f"One verdict (family-wise {100 * LEVEL:g} %) on simulated audits ({args.draws} each; three models)")
    print("| N | K | leak | Re-ID / chance | refused | 95 % CI | through LEAKS / rule-out only | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.ids:
        for k in args.ipc:
            for leak in args.leaks:
                key = (n, k, leak, args.draws)
                if key not in done:
                    t0 = time.perf_counter()
                    r = simulate(n, k, draws=args.draws, seed=args.seed, leak=leak)
                    done[key] = {"N": n, "K": k, "leak": leak, "draws": args.draws, "audit_version": VERSION,
                                 "refused": r.refused,
                                 "leaks": r.leaks, "unresolved": r.unresolved, "reid_ratio": r.reid_ratio,
                                 "by_row": r.by_row, "seconds": round(time.perf_counter() - t0, 1)}
                    if out is not None:
                        out.parent.mkdir(parents=True, exist_ok=True)
                        with out.open("a") as f:
                            f.write(json.dumps(done[key]) + "\n")
                r = done[key]
                lo, hi = clopper_pearson(r["refused"], r["draws"])
                print(f"| {n} | {k} | {leak:g} | {r['reid_ratio']:.2f} | {r['refused']} ({100 * r['refused'] / r['draws']:.1f} %) | "
                      f"{100 * lo:.1f}-{100 * hi:.1f} % | {r['leaks']} / {r['unresolved']} | {r['seconds']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
