"""Does the audit scale to a publisher's size? Every check the gate runs on embeddings, at 10^2-10^4 identities.

Each point runs ONE registered check (``pfd.audit.contract.CHECKS``: the same class and default
settings as ``pfd distill``'s gate, ``pfd attack`` and ``pfd card``) in a fresh process on simulated
embeddings of three attackers (insider, public, judge) of a release of N identities × K proxies,
with ``imgs`` private photos per identity (2 × 10^5 photos at N = 10^4): wall time on the
process's threads, and peak resident memory beyond the loaded embeddings (``ru_maxrss`` after the
check minus before it). The embeddings are drawn once per N into a work folder and memory-mapped,
so the measured peak is the check's own. Then the verdict (:func:`pfd.audit.verdict.decide`) over
all the checks' rows. Exponents are fitted on log-log (all points and the two largest), and 10^5
identities is extrapolated from the tail.

Results: ``benchmarks/results/audit_scaling.jsonl`` (one line per finished point; resumable: a point
already there is not run again), ``audit_scaling.json`` (points and fits), and the section "The audit
against the number of identities" of ``scaling.md`` (rewritten from ``scaling.json`` + this json).

Goals (issue 57): the whole audit at 10^4 identities on 2 cores within 30 minutes and 8 GB; at 10^3
within 2 minutes. Keep the machine otherwise idle while it runs: the times are wall times.

Usage:
    python -m benchmarks.audit_scaling                       # N 300, 1000, 3000, 10000 (~40 min on 2 cores)
    python -m benchmarks.audit_scaling --sizes 300 1000 --out /tmp/as   # a few minutes
    python -m benchmarks.audit_scaling --summarise           # rewrite json and scaling.md from the jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pfd.io import atomic_write_json, atomic_write_text

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "audit_scaling"
SIZES = (300, 1000, 3000, 10_000)
#: The registered checks the gate runs on embeddings alone (membership trains a model; the
#: integrity, private-copy and attribute checks read images; OGP's margin reads the state dir).
CHECK_NAMES = ("linkability", "hubness", "source_rank", "class_link", "judge_competence")
ROLES = ("insider", "public", "judge")
GOAL_S = {1000: 120.0, 10_000: 1800.0}
GOAL_MIB = 8 * 1024

_DRAW = r"""
import sys, torch
n, k, imgs, dim, seed, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
g = torch.Generator().manual_seed(seed)
unit = lambda x: x / x.norm(dim=1, keepdim=True)
out = {}
for role in ("insider", "public", "judge"):
    centres = unit(torch.randn(n, dim, generator=g))
    private = unit(centres.repeat_interleave(imgs, 0) + 0.5 * torch.randn(n * imgs, dim, generator=g))
    own = unit(torch.randn(n, dim, generator=g))  # at chance: each source's proxies around a centre of their own
    proxies = unit(own.repeat_interleave(k, 0) + 0.5 * torch.randn(n * k, dim, generator=g))
    out[role + "/private"], out[role + "/proxies"] = private.contiguous(), proxies.contiguous()
torch.save(out, path)
"""

_CHILD = r"""
import json, resource, sys, time
from types import SimpleNamespace
import numpy as np, torch
name, n, k, imgs, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
import pfd.attacks.linkability.attacks, pfd.audit.checks  # registers the checks
from pfd.audit.contract import CHECKS, AuditInputs
emb = torch.load(path, mmap=True)
roles = ("insider", "public", "judge")
inputs = AuditInputs(cfg=SimpleNamespace(seed=0), state=None, sets=None,
                     attackers=[SimpleNamespace(role=r, distance="cosine") for r in roles],
                     source=np.repeat(np.arange(n), k), labels=np.repeat(np.arange(n), imgs),
                     private_spec="simulated", progress=False)
for r in roles:
    inputs._emb[r] = {"private": emb[r + "/private"], "proxies": emb[r + "/proxies"]}
    for t in inputs._emb[r].values():
        float(t.sum())  # pages the mapped embeddings in: the baseline holds them
cls = CHECKS[name]
check = cls(cls.config())
assert check.applicable(inputs) is None, check.applicable(inputs)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0, c0 = time.perf_counter(), time.process_time()
rows = check.run(inputs).rows()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT " + json.dumps({"wall_s": wall, "cpu_s": cpu, "base_mib": base, "peak_mib": peak,
                              "extra_mib": max(0.0, peak - base), "threads": torch.get_num_threads(),
                              "rows": [r.as_dict() for r in rows]},
                             default=str))
"""


def _key(p: dict[str, Any]) -> tuple:
    return p["n_ids"], p["k"], p["dim"], p["imgs"], p["check"]


def load(jsonl: Path) -> list[dict[str, Any]]:
    """The finished points."""
    if not jsonl.exists():
        return []
    return [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]


def _child(code: str, args: list[Any], env: dict[str, str]) -> str:
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError(f"child failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def run_point(name: str, n: int, *, k: int, imgs: int, dim: int, path: Path, env: dict[str, str]) -> dict[str, Any]:
    """One check at one size in a fresh process."""
    out = _child(_CHILD, [name, n, k, imgs, path], env)
    res = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    rows = res.pop("rows")
    return {"n_ids": n, "k": k, "dim": dim, "imgs": imgs, "check": name, **res,
            "figures": len(rows), "commit": _commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _commit() -> str:
    """The code that measured a point: the commit, ``-dirty`` if pfd/ or a benchmark script differs from it
    (results being written do not count); '' outside a checkout."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
    if head.returncode:
        return ""
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "../pfd", ".",
                              ":(exclude)results"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + ("-dirty" if changed else "")


def fit(x: list[float], y: list[float]) -> tuple[float, float]:
    """``(b over all points, b over the two largest)`` of ``y ∝ x^b``."""
    lx, ly = [math.log(v) for v in x], [math.log(max(v, 1e-9)) for v in y]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    b = sum((a - mx) * (c - my) for a, c in zip(lx, ly)) / sxx if sxx else float("nan")
    tail = (ly[-1] - ly[-2]) / (lx[-1] - lx[-2]) if len(lx) > 1 else float("nan")
    return b, tail


def summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per size: each check's time and memory, the audit's total; per check: exponents and 10^5."""
    sizes = sorted({p["n_ids"] for p in points})
    by = {(p["n_ids"], p["check"]): p for p in points}
    totals = []
    for n in sizes:
        have = [by[(n, c)] for c in CHECK_NAMES if (n, c) in by]
        if len(have) == len(CHECK_NAMES):
            wall = sum(p["wall_s"] for p in have)
            peak = max(p["peak_mib"] for p in have)
            goal = GOAL_S.get(n)
            totals.append({"n_ids": n, "wall_s": wall, "peak_mib": peak,
                           "extra_mib": max(p["extra_mib"] for p in have),
                           "goal_s": goal, "met": None if goal is None else bool(wall <= goal and peak <= GOAL_MIB)})
    fits = []
    for c in (*CHECK_NAMES, "audit"):
        pts = ([(t["n_ids"], t["wall_s"], t["extra_mib"]) for t in totals] if c == "audit"
               else [(n, by[(n, c)]["wall_s"], by[(n, c)]["extra_mib"]) for n in sizes if (n, c) in by])
        if len(pts) < 2:
            continue
        xs, ts, ms = zip(*pts)
        bt, tail_t = fit(list(xs), list(ts))
        bm, tail_m = fit(list(xs), [max(m, 1.0) for m in ms])
        fits.append({"check": c, "time_exponent": bt, "time_tail_exponent": tail_t,
                     "memory_exponent": bm, "memory_tail_exponent": tail_m,
                     "time_at_1e5_s": ts[-1] * (1e5 / xs[-1]) ** tail_t,
                     "memory_at_1e5_mib": ms[-1] * (1e5 / xs[-1]) ** max(tail_m, 0.0)})
    return {"sizes": sizes, "checks": list(CHECK_NAMES), "points": points, "totals": totals, "fits": fits}


_TITLES = {"linkability": "VisMatch + Re-ID", "hubness": "CSLS (hubness)", "source_rank": "source rank",
           "class_link": "class-level", "judge_competence": "judge competence"}


def markdown(doc: dict[str, Any]) -> str:
    """The section of ``scaling.md``."""
    pts = doc["points"]
    if not pts:
        return ""
    p0 = pts[0]
    lines = [f"{HEADER} (K = {p0['k']}, {p0['imgs']} photos each, D = "
             f"{p0['dim']}, three attackers; each check in a fresh process)", "",
             "| identities | photos | proxies | " + " | ".join(f"{_TITLES[c]} s / MiB" for c in CHECK_NAMES)
             + " | audit s | peak RSS MiB | goal |", "|---|---|---|" + "---|" * (len(CHECK_NAMES) + 3)]
    by = {(p["n_ids"], p["check"]): p for p in pts}
    tot = {t["n_ids"]: t for t in doc["totals"]}
    for n in doc["sizes"]:
        cells = [f"{by[(n, c)]['wall_s']:.1f} / {by[(n, c)]['extra_mib']:.0f}" if (n, c) in by else "-" for c in CHECK_NAMES]
        t = tot.get(n)
        goal = "" if not t or t["goal_s"] is None else (
            f"{'met' if t['met'] else 'MISSED'} (≤ {t['goal_s'] / 60:g} min, ≤ {GOAL_MIB // 1024} GB)")
        lines.append(f"| {n:,} | {n * p0['imgs']:,} | {n * p0['k']:,} | " + " | ".join(cells)
                     + (f" | {t['wall_s']:.0f} | {t['peak_mib']:.0f} | {goal} |" if t else " | - | - | |"))
    lines += ["", "| check | time b (all / tail) | memory b (all / tail) | 10^5 identities, extrapolated |",
              "|---|---|---|---|"]
    for f in doc["fits"]:
        lines.append(f"| {_TITLES.get(f['check'], 'the whole audit')} | {f['time_exponent']:.2f} / "
                     f"{f['time_tail_exponent']:.2f} | {f['memory_exponent']:.2f} / {f['memory_tail_exponent']:.2f} | "
                     f"{f['time_at_1e5_s'] / 60:.0f} min, {f['memory_at_1e5_mib'] / 1024:.1f} GB beyond the inputs |")
    env = doc.get("machine", {})
    lines += ["", f"Wall time on {env.get('threads', '?')} threads ({env.get('cpu', '?')}; the machine otherwise idle); "
              "MiB: peak resident memory beyond the loaded embeddings; peak RSS: the largest process's, embeddings "
              "included. Source-rank and class-level tests at their default 20,000 permutations. Run by "
              "`python -m benchmarks.audit_scaling`."]
    commits = sorted({p["commit"] for p in by.values() if p.get("commit")})
    if commits:  # points measured before a speed-up keep their old code's figures until re-measured (--redo)
        older = any(not p.get("commit") for p in by.values())
        lines += ["", "Points measured by commit " + ", ".join(commits)
                  + (" (the others before commits were recorded)." if older else ".")]
    return "\n".join(lines) + "\n"


HEADER = "## The audit against the number of identities"


def splice(text: str, section: str) -> str:
    """``scaling.md``'s text with its audit section replaced by ``section`` (before the exponents' table)."""
    if HEADER in text:  # drop the old section, up to the next header
        head, rest = text.split(HEADER, 1)
        nxt = rest.find("\n## ")
        text = head.rstrip("\n") + ("\n\n" + rest[nxt + 1:] if nxt >= 0 else "\n")
    if not section:
        return text
    at = text.find("## Fitted exponents")
    return text.rstrip("\n") + "\n\n" + section if at < 0 else text[:at] + section + "\n" + text[at:]


def write(out: Path) -> dict[str, Any]:
    """Rewrite ``<out>.json``, ``<out>.md`` and, for the committed results, the section of ``scaling.md``."""
    doc = summary(load(out.with_suffix(".jsonl")))
    doc["machine"] = {"cpu": platform.processor() or platform.machine(), "threads": os.cpu_count()}
    atomic_write_json(out.with_suffix(".json"), doc)
    section = markdown(doc)
    atomic_write_text(out.with_suffix(".md"), section)
    md = out.parent / "scaling.md"
    if md.is_file():
        atomic_write_text(md, splice(md.read_text(), section))
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--checks", nargs="+", default=list(CHECK_NAMES), choices=CHECK_NAMES)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--imgs", type=int, default=20, help="private photos per identity")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--out", type=Path, default=OUT, help="results stem (.jsonl, .json)")
    ap.add_argument("--summarise", action="store_true", help="only rewrite the summaries")
    ap.add_argument("--redo", action="store_true",
                    help="measure the given sizes and checks again (after a change to the code): the new points are "
                         "appended and replace the old ones in the summaries")
    a = ap.parse_args(argv)
    jsonl = a.out.with_suffix(".jsonl")
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    if not a.summarise:
        done = set() if a.redo else {_key(p) for p in load(jsonl)}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
        with tempfile.TemporaryDirectory() as tmp:
            for n in sorted(a.sizes):
                todo = [c for c in a.checks if (n, a.k, a.dim, a.imgs, c) not in done]
                if not todo:
                    continue
                path = Path(tmp) / f"emb_{n}.pt"
                _child(_DRAW, [n, a.k, a.imgs, a.dim, 0, path], env)
                for c in todo:
                    p = run_point(c, n, k=a.k, imgs=a.imgs, dim=a.dim, path=path, env=env)
                    with jsonl.open("a") as f:  # one line per finished point: an interrupted sweep resumes here
                        f.write(json.dumps(p) + "\n")
                    print(f"N {n:>6} {c:<17} {p['wall_s']:8.1f} s  +{p['extra_mib']:7.0f} MiB  (peak {p['peak_mib']:.0f})",
                          flush=True)
                path.unlink()
    doc = write(a.out)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
