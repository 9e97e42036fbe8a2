"""What the publication gate can rule out: its refusal rate under the null and under planted leaks.

A linkability check of the gate (:func:`pfd.distill.gate.linkability_check`) sees, for each of
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
    python -m benchmarks.gate_power --whole-gate [--ids 24] [--ipc 5 10] [--draws 10000]

``--whole-gate`` runs :func:`pfd.distill.gate_null.null_refusals` instead: the whole gate (every
linkability check of insider, public model and judge, on simulated embeddings with clustered
proxies) on releases at chance, once with the gate's family-wise level and once with every check
tested at 95 % on its own (the gate before issue 27), and prints how often each refuses.

Pure simulation (seconds, no data, no model); run by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


from pfd.attacks.metrics import clustered_interval


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
    ap.add_argument("--whole-gate", action="store_true", help="simulate the whole gate on releases at chance")
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
    """Print the whole gate's refusal rate at chance for each (N, K), family-wise and per check."""
    import time

    from pfd.distill.gate import ATTACKS
    from pfd.distill.gate_null import null_refusals

    m = 3 * len(ATTACKS)  # insider, public and judge, each with every attack
    print(f"Whole gate on releases at chance ({args.draws} simulated audits each; {m} linkability checks with a judge)")
    print("| N | K | gate | refused | 95 % upper | of which LEAKS | unresolved | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.ids:
        for k in args.ipc:
            for label, alpha in (("family-wise 0.1 %", 0.001), ("each check at 95 %", 0.025 * m)):
                t0 = time.perf_counter()
                r = null_refusals(n, k, draws=args.draws, seed=args.seed, alpha=alpha)
                from pfd.attacks.metrics import clopper_pearson

                hi = clopper_pearson(r.refused, r.draws)[1]
                print(f"| {n} | {k} | {label} | {r.refused} ({100 * r.rate:.2f} %) | {100 * hi:.2f} % | {r.leaks} | "
                      f"{r.unresolved} | {time.perf_counter() - t0:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
