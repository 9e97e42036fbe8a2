"""How time and memory grow with the work: ``pfd distill`` and ``pfd attack``, on a CPU, demo backbone.

Three sweeps, each point in a fresh subprocess so that its peak RSS (``os.wait4``'s
``ru_maxrss``) is its own:

* **distill vs identities**: ``pfd distill`` (method pfd, the demo recipe with budgets cut to one
  OGP epoch and a few RTA iterations, so that the sweep fits in minutes; cost per unit of work
  is unchanged) on ``synthetic:private,ids=N,imgs=20`` for N = 12 … 192, K = 5. Stage times come
  from the run's ``summary.json`` (``adapt`` = OGP, ``prototypes`` = embedding + K-means,
  ``rta``, ``release``), by default as CPU time (the pipeline's ``time.perf_counter`` is read as
  ``time.process_time`` in the measured, single-threaded process; ``--clock wall`` keeps wall
  time), plus the whole process's wall and CPU time and its peak RSS.
* **distill vs K** (proxies per identity) at N = 24: RTA's work is N·K proxies.
* **attack vs gallery size**: VisMatch and Rank-1 Re-ID (:mod:`pfd.attacks.linkability.matching`, the
  streamed exact top-1) of 1000 synthetic query embeddings against 10³ … 10⁶ synthetic gallery
  embeddings (D = 64, 20 per identity): time should be linear in the gallery and the memory
  beyond the gallery itself flat (the gallery is streamed in chunks); and the four geometric MIA
  statistics (:func:`pfd.attacks.membership.statistics.identity_statistics`) against the number of
  identities (10 embeddings each).

Each curve gets a least-squares exponent ``b`` of ``y ∝ x^b`` on log-log axes and a tail exponent
(the slope between the two largest points: fixed costs flatten the small end); the table flags a
stage whose time exponent exceeds 1.2 as super-linear (and memory exponents above 0.2 as not
flat). Writes ``benchmarks/results/scaling.json``, ``scaling.md`` and ``scaling.png``.

Usage:
    python -m benchmarks.scaling            # about 10-15 min on one core of a 2-core machine
    python -m benchmarks.scaling --quick    # smaller sweeps, 2-4 min
    python -m benchmarks.scaling --public runs/public.pt   # reuse a public checkpoint
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from benchmarks.audit_scaling import splice
from pfd.io import atomic_write_json, atomic_write_text
from pfd.release.state_dir import StateDir

FULL = {"ids": [12, 24, 48, 96, 192], "ks": [2, 5, 10, 20], "gallery": [10**3, 10**4, 10**5, 10**6],
        "mia_ids": [100, 300, 1000, 3000]}
QUICK = {"ids": [12, 24, 48], "ks": [2, 5, 10], "gallery": [10**3, 10**4, 10**5], "mia_ids": [100, 300, 1000]}
#: The demo recipe with budgets cut so that the sweep fits in minutes (cost per unit of work unchanged).
SHORT = {"ogp_epochs": 2, "rta_iterations": 20}
SUPERLINEAR, NOT_FLAT = 1.2, 0.2


def fit_exponent(x: list[float], y: list[float]) -> float:
    """Least-squares slope of ``log y`` on ``log x`` (the exponent b of ``y ∝ x^b``); NaN with < 2 points."""
    xs, ys = np.log(np.asarray(x, dtype=float)), np.log(np.maximum(np.asarray(y, dtype=float), 1e-9))
    if len(xs) < 2:
        return float("nan")
    return float(np.polyfit(xs, ys, 1)[0])


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> tuple[int, float, float, str, float]:
    """Run ``cmd``; ``(returncode, wall seconds, peak RSS MiB, output tail, CPU seconds)`` of that process."""
    t = time.perf_counter()
    log = cwd / "log.txt"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (proc.returncode, time.perf_counter() - t, usage.ru_maxrss / 1024, log.read_text()[-1500:],
            usage.ru_utime + usage.ru_stime)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}


def _recipe(path: Path) -> Path:
    """The demo recipe with :data:`SHORT` budgets."""
    import tomllib

    doc = tomllib.loads((ROOT / "recipes" / "demo.toml").read_text())
    doc["distill"]["ogp"]["epochs"] = SHORT["ogp_epochs"]
    doc["distill"]["ogp"]["warmup_epochs"] = 0.0
    # A fixed number of epochs, so that OGP's time measures its growth with the data: the 200-step
    # floor would make every point of the identity sweep the same length, and the margin extension
    # would add a data-dependent number of steps. The short release may then fail the publication
    # gate, which is beside the point here.
    doc["distill"]["ogp"]["min_steps"] = 0
    doc["distill"]["ogp"]["step_cap"] = 0
    doc["distill"].setdefault("release", {})["allow_linkable"] = True
    doc["distill"]["rta"]["iterations"] = SHORT["rta_iterations"]

    def dump(prefix: str, table: dict[str, Any]) -> str:
        flat = "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items() if not isinstance(v, dict))
        nested = "".join(dump(f"{prefix}.{k}", v) for k, v in table.items() if isinstance(v, dict))
        return f"[{prefix}]\n{flat}\n{nested}"

    path.write_text("".join(dump(k, v) for k, v in doc.items()))
    return path


#: ``python -m pfd`` with the pipeline's stage clock (``time.perf_counter``) read as this process's CPU
#: time: the run is single-threaded, so a stage's CPU time is its work, whatever the neighbours do.
CPU_CLOCK_DRIVER = (
    "import runpy, sys, time; time.perf_counter = time.process_time; "
    "sys.argv = ['pfd'] + sys.argv[1:]; runpy.run_module('pfd', run_name='__main__', alter_sys=True)"
)


def distill_point(workdir: Path, recipe: Path, *, ids: int, k: int, public: str | None, clock: str = "cpu") -> dict[str, Any]:
    """One ``pfd distill`` run; stage times (CPU or wall), whole-process wall and CPU time, peak RSS."""
    workdir.mkdir(parents=True, exist_ok=True)
    launcher = [sys.executable, "-c", CPU_CLOCK_DRIVER] if clock == "cpu" else [sys.executable, "-m", "pfd"]
    cmd = [*launcher, "distill", "--recipe", str(recipe), "--private",
           f"synthetic:private,ids={ids},imgs=20", "--out", "release", "--state-dir", "state", "--threads", "1",
           "--ipc", str(k)]
    if public:
        cmd += ["--public", public]
    rc, wall, rss, tail, cpu = _run(cmd, cwd=workdir, env=_env())
    summary = StateDir.at(workdir / "state").summary
    if not summary.is_file():
        raise RuntimeError(f"pfd distill ids={ids} k={k} failed (exit {rc}):\n{tail}")
    times = json.loads(summary.read_text())["times_s"]
    return {"ids": ids, "k": k, "images": ids * 20, "stage_clock": clock, "proxies": ids * k, "exit": rc, "wall_s": wall, "cpu_s": cpu,
            "peak_rss_mib": rss,
            "stages_s": {s: float(v) for s, v in times.items() if s not in ("total", "public")}}


_ATTACK_CHILD = r"""
import json, resource, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from pfd.attacks.linkability.matching import visual_matching, rank1_reid
g, q, d, per = (int(a) for a in sys.argv[1:5])
rng = np.random.default_rng(0)
ids = g // per
centres = rng.standard_normal((ids, d)).astype(np.float32)
labels = np.repeat(np.arange(ids), per)[:g]
gallery = np.empty((g, d), dtype=np.float32)  # filled in blocks: the RSS high-water mark is the gallery, not temporaries
for lo in range(0, g, 65536):
    blk = centres[labels[lo : lo + 65536]] + 0.7 * rng.standard_normal((len(labels[lo : lo + 65536]), d)).astype(np.float32)
    gallery[lo : lo + len(blk)] = blk / np.linalg.norm(blk, axis=1, keepdims=True)
src = rng.integers(0, ids, q)
query = centres[src] + 0.7 * rng.standard_normal((q, d)).astype(np.float32)
query /= np.linalg.norm(query, axis=1, keepdims=True)
gallery_t, query_t = torch.from_numpy(gallery), torch.from_numpy(query)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.process_time(); visual_matching(query_t, src, gallery_t, labels); vm = time.process_time() - t
peak_vm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # high-water mark: VisMatch first
t = time.process_time(); rank1_reid(query_t, src, gallery_t, labels); rr = time.process_time() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"gallery": g, "queries": q, "vismatch_s": vm, "reid_s": rr, "input_mib": gallery.nbytes / 2**20,
                  "rss_before_mib": base, "peak_rss_mib": peak, "extra_mib": peak - base,
                  "vismatch_extra_mib": peak_vm - base}))
"""

_MIA_CHILD = r"""
import json, resource, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from pfd.attacks.membership.statistics import identity_statistics
c, k, d = (int(a) for a in sys.argv[1:4])
rng = np.random.default_rng(0)
centres = rng.standard_normal((c, d))
labels = np.repeat(np.arange(c), k)
emb = centres[labels] + 0.7 * rng.standard_normal((c * k, d))
emb /= np.linalg.norm(emb, axis=1, keepdims=True)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.process_time(); identity_statistics(emb, labels); s = time.process_time() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"identities": c, "embeddings": c * k, "mia_s": s, "extra_mib": peak - base, "peak_rss_mib": peak}))
"""


def child_json(code: str, args: list[Any], workdir: Path) -> dict[str, Any]:
    """Run a measuring snippet in a fresh interpreter; its last stdout line is JSON."""
    workdir.mkdir(parents=True, exist_ok=True)
    rc, _, _, tail, _ = _run([sys.executable, "-c", code, *map(str, args)], cwd=workdir, env=_env())
    if rc != 0:
        raise RuntimeError(f"measurement {args} failed (exit {rc}):\n{tail}")
    return json.loads(tail.strip().splitlines()[-1])


def curves(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every (x, y) curve of the sweeps with its fitted exponent and verdict."""
    out = []

    def add(sweep: str, xname: str, yname: str, x: list[float], y: list[float], kind: str) -> None:
        b, tail = fit_exponent(x, y), fit_exponent(x[-2:], y[-2:])
        # Fixed costs flatten the small end of a curve; the slope between the two largest points says how it grows.
        if kind == "time":
            verdict = "super-linear" if max(b, tail) > SUPERLINEAR else "linear or better"
        else:
            verdict = "grows" if max(b, tail) > NOT_FLAT else "flat"
        out.append({"sweep": sweep, "x": xname, "y": yname, "xs": x, "ys": y, "exponent": b, "tail_exponent": tail,
                    "kind": kind, "verdict": verdict})

    for sweep, xkey in (("distill_ids", "ids"), ("distill_k", "k")):
        pts = doc.get(sweep) or []
        if len(pts) < 2:
            continue
        xs = [p[xkey] for p in pts]
        for stage in pts[0]["stages_s"]:
            add(sweep, xkey, f"{stage} time", xs, [p["stages_s"].get(stage, 0.0) for p in pts], "time")
        add(sweep, xkey, "process wall time", xs, [p["wall_s"] for p in pts], "time")
        add(sweep, xkey, "process CPU time", xs, [p["cpu_s"] for p in pts], "time")
        add(sweep, xkey, "peak RSS", xs, [p["peak_rss_mib"] for p in pts], "memory-total")
    pts = doc.get("attack_gallery") or []
    if len(pts) >= 2:
        xs = [p["gallery"] for p in pts]
        add("attack_gallery", "gallery", "VisMatch time", xs, [p["vismatch_s"] for p in pts], "time")
        add("attack_gallery", "gallery", "Re-ID time", xs, [p["reid_s"] for p in pts], "time")
        add("attack_gallery", "gallery", "VisMatch memory beyond the gallery", xs,
            [max(p.get("vismatch_extra_mib", p["extra_mib"]), 1.0) for p in pts], "memory")
        add("attack_gallery", "gallery", "VisMatch + Re-ID memory beyond the gallery", xs, [max(p["extra_mib"], 1.0) for p in pts],
            "memory")
    pts = doc.get("attack_mia") or []
    if len(pts) >= 2:
        xs = [p["identities"] for p in pts]
        add("attack_mia", "identities", "MIA statistics time", xs, [p["mia_s"] for p in pts], "time")
    return out


def markdown(doc: dict[str, Any]) -> str:
    """Tables of the sweeps and the exponents."""
    lines = ["## pfd distill against the number of private identities (20 images each, K = 5)", "",
             "| identities | images | proxies | " + " | ".join(f"{s} s" for s in doc["stages"]) + " | process s | process CPU s | peak RSS MiB |",
             "|---|---|---|" + "---|" * (len(doc["stages"]) + 3)]
    for p in doc.get("distill_ids", []):
        lines.append(f"| {p['ids']} | {p['images']} | {p['proxies']} | "
                     + " | ".join(f"{p['stages_s'].get(s, 0):.1f}" for s in doc["stages"])
                     + f" | {p['wall_s']:.1f} | {p['cpu_s']:.1f} | {p['peak_rss_mib']:.0f} |")
    lines += ["", "## pfd distill against K (proxies per identity), 24 identities", "",
              "| K | proxies | " + " | ".join(f"{s} s" for s in doc["stages"]) + " | process s | process CPU s | peak RSS MiB |",
              "|---|---|" + "---|" * (len(doc["stages"]) + 3)]
    for p in doc.get("distill_k", []):
        lines.append(f"| {p['k']} | {p['proxies']} | " + " | ".join(f"{p['stages_s'].get(s, 0):.1f}" for s in doc["stages"])
                     + f" | {p['wall_s']:.1f} | {p['cpu_s']:.1f} | {p['peak_rss_mib']:.0f} |")
    lines += ["", "## pfd attack: linkability against gallery size (1000 queries, D = 64), MIA against identities", "",
              "| gallery | VisMatch s | Re-ID s | gallery MiB | peak RSS MiB | beyond the gallery: VisMatch MiB | "
              "VisMatch + Re-ID MiB |", "|---|---|---|---|---|---|---|"]
    for p in doc.get("attack_gallery", []):
        lines.append(f"| {p['gallery']:,} | {p['vismatch_s']:.3f} | {p['reid_s']:.3f} | {p['input_mib']:.1f} | "
                     f"{p['peak_rss_mib']:.0f} | {p.get('vismatch_extra_mib', float('nan')):.1f} | {p['extra_mib']:.1f} |")
    lines += ["", "| identities (10 embeddings each) | MIA statistics s | RSS beyond input MiB |", "|---|---|---|"]
    for p in doc.get("attack_mia", []):
        lines.append(f"| {p['identities']:,} | {p['mia_s']:.3f} | {p['extra_mib']:.1f} |")
    lines += ["", "## Fitted exponents (y ∝ x^b: least squares on log-log over all points; tail: the two largest)", "",
              "| sweep | y | x | b | tail b | verdict |", "|---|---|---|---|---|---|"]
    for c in doc["curves"]:
        lines.append(f"| {c['sweep']} | {c['y']} | {c['x']} | {c['exponent']:.2f} | {c['tail_exponent']:.2f} | {c['verdict']} |")
    lines += ["", f"{doc['mode']} sweep; distill budgets cut to {SHORT['ogp_epochs']} OGP epoch(s) and "
              f"{SHORT['rta_iterations']} RTA iterations per batch; one thread per process; stage times from "
              f"summary.json measured as {doc.get('stage_clock', 'wall')} time (CPU: the pipeline's clock read as process "
              "CPU time, which a loaded machine does not inflate); "
              f"{doc['cpu']}, "
              f"load average {doc['load_start']} at the start and {doc['load_end']} at the end; {doc['date']}; "
              f"{doc['seconds']:.0f} s."]
    m = doc.get("merged_from")
    if m:
        lines.append(f"Sweeps not rerun in this run come from the {m.get('mode')} run of {m.get('date')} (load average "
                     f"{m.get('load_start')} at the start, {m.get('load_end')} at the end, {m.get('seconds', 0):.0f} s).")
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> None:
    """Log-log plot of every time curve (one panel per sweep)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    sweeps = [s for s in ("distill_ids", "distill_k", "attack_gallery", "attack_mia") if any(c["sweep"] == s for c in doc["curves"])]
    fig, axes = plt.subplots(1, len(sweeps), figsize=(4.2 * len(sweeps), 3.6), squeeze=False)
    for ax, s in zip(axes[0], sweeps):
        for c in doc["curves"]:
            if c["sweep"] != s or c["kind"] == "memory-total":
                continue
            ax.loglog(c["xs"], c["ys"], "o-", label=f"{c['y']} (b={c['exponent']:.2f})")
        xs = next(c["xs"] for c in doc["curves"] if c["sweep"] == s)
        ax.set_xlabel(xs and next(c["x"] for c in doc["curves"] if c["sweep"] == s))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # minor tick labels overlap on short ranges
        ax.set_ylabel("seconds (MiB for memory)")
        ax.set_title(s)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sweeps (2-4 min)")
    ap.add_argument("--public", help="public checkpoint for pfd distill (default: the demo's, pretrained once and cached)")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="stage times as process CPU time (default; steady on a shared machine) or wall time")
    ap.add_argument("--only", nargs="+", choices=["distill", "attack"], help="sweeps to run (default both)")
    ap.add_argument("--results", default=str(HERE / "results"), help="folder for scaling.{json,md,png} ('' = none)")
    ap.add_argument("--merge", action="store_true", help="with --only: keep the other sweeps already in scaling.json")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    only = set(args.only or ["distill", "attack"])
    t0, load0 = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?") if Path("/proc/cpuinfo").is_file() else "?"
    doc: dict[str, Any] = {"mode": "quick" if args.quick else "full", "cpu": cpu, "load_start": load0,
                           "date": time.strftime("%Y-%m-%d %H:%M %Z"), "short_budgets": SHORT, "stage_clock": args.clock}
    with tempfile.TemporaryDirectory(prefix="pfd-scaling-") as tmp:
        work = Path(tmp)
        if "distill" in only:
            recipe = _recipe(work / "scaling.toml")
            doc["distill_ids"], doc["distill_k"] = [], []
            for n in sizes["ids"]:
                p = distill_point(work / f"ids{n}", recipe, ids=n, k=5, public=args.public, clock=args.clock)
                doc["distill_ids"].append(p)
                print(f"distill ids={n:4d}: " + ", ".join(f"{s} {v:.1f}s" for s, v in p["stages_s"].items())
                      + f"; process {p['wall_s']:.1f}s ({p['cpu_s']:.1f}s CPU), peak RSS {p['peak_rss_mib']:.0f} MiB", flush=True)
            for k in sizes["ks"]:
                p = distill_point(work / f"k{k}", recipe, ids=24, k=k, public=args.public, clock=args.clock)
                doc["distill_k"].append(p)
                print(f"distill K={k:3d}: " + ", ".join(f"{s} {v:.1f}s" for s, v in p["stages_s"].items())
                      + f"; process {p['wall_s']:.1f}s ({p['cpu_s']:.1f}s CPU), peak RSS {p['peak_rss_mib']:.0f} MiB", flush=True)
        if "attack" in only:
            doc["attack_gallery"], doc["attack_mia"] = [], []
            for g in sizes["gallery"]:
                p = child_json(_ATTACK_CHILD, [g, 1000, 64, 20], work / f"gallery{g}")
                doc["attack_gallery"].append(p)
                print(f"linkability gallery={g:>9,}: VisMatch {p['vismatch_s']:.3f}s, Re-ID {p['reid_s']:.3f}s, "
                      f"RSS beyond the gallery {p['vismatch_extra_mib']:.1f} MiB (VisMatch), {p['extra_mib']:.1f} MiB (+ Re-ID)",
                      flush=True)
            for c in sizes["mia_ids"]:
                p = child_json(_MIA_CHILD, [c, 10, 64], work / f"mia{c}")
                doc["attack_mia"].append(p)
                print(f"MIA statistics identities={c:>6,}: {p['mia_s']:.3f}s, RSS beyond input {p['extra_mib']:.1f} MiB",
                      flush=True)
    old_path = Path(args.results) / "scaling.json" if args.results else None
    if args.merge and old_path is not None and old_path.is_file():
        old = json.loads(old_path.read_text())
        for key in ("distill_ids", "distill_k", "attack_gallery", "attack_mia"):
            if key not in doc and key in old:
                doc[key] = old[key]
        doc["merged_from"] = {k: old.get(k) for k in ("date", "load_start", "load_end", "seconds", "mode")}
    stages: list[str] = []
    for p in doc.get("distill_ids", []) + doc.get("distill_k", []):
        stages += [s for s in p["stages_s"] if s not in stages]
    doc["stages"] = stages
    doc["curves"] = curves(doc)
    doc["load_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["seconds"] = time.perf_counter() - t0
    text = markdown(doc)
    print(text)
    if args.results:
        out = Path(args.results)
        atomic_write_json(out / "scaling.json", doc, shared=True)
        audit = out / "audit_scaling.md"  # the audit's section (benchmarks.audit_scaling) stays in the file
        atomic_write_text(out / "scaling.md", splice(text, audit.read_text()) if audit.is_file() else text, shared=True)
        plot(doc, out / "scaling.png")
        print(f"wrote {out / 'scaling.json'}, scaling.md, scaling.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
