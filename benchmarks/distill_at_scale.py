"""One real ``pfd distill`` at a publisher's size: 1,000 identities of the built-in synthetic set, end to end.

The demo's recipe and models (its cached public model and judge), its private population at
``ids`` identities × 20 photos (low resolution, as the demo's), K = 10 proxies each, started from a
pool of public faces with one person per class as the demo's (``ids`` people instead of 24): OGP, the
prototypes, RTA over every batch, the release and the publication gate's whole audit, with the
verdict the gate gave, each stage's time and resident-memory peak (``summary.json``: the stages'
clock read as the process's CPU time, as ``benchmarks.scaling`` reads it, so that other work on the
machine does not inflate it, and :class:`pfd.memory.StagePeaks`), and the process's wall time.

A run of hours: started in the background, it is resumable (``pfd distill --resume`` continues from
the last finished RTA batch), and the result is written to ``benchmarks/results/distill_at_scale.{json,md}``
when the run has finished (issue 57). Each invocation's output is kept (``invocation-<n>.log`` in the work
folder) and its start and end are logged (``invocations.jsonl``; a kill by SIGTERM is logged too), so
that a run spread over invocations reports every stage's time: a resumed ``pfd distill`` reports
only its own (the stages it skipped at 0 s), so the stage times are added up from every invocation's
lines (``stage X: done in``, each RTA batch's line where an invocation ended inside RTA, and the copy
check of the initialisation pool, which runs before the stages).

Usage:
    nohup python -m benchmarks.distill_at_scale --work ~/pfd-scale > distill_at_scale.log 2>&1 &
    python -m benchmarks.distill_at_scale --work /tmp/s --ids 48     # the same path in minutes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.scaling import CPU_CLOCK_DRIVER
from pfd.io import atomic_write_json, atomic_write_text
from pfd.release.state_dir import StateDir

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "distill_at_scale"


def command(ids: int, k: int, *, resume: bool, threads: int) -> list[str]:
    """The ``pfd distill`` command line of the unit (stage times on the process's CPU clock)."""
    cmd = [sys.executable, "-c", CPU_CLOCK_DRIVER, "distill", "--recipe", "demo", "--private",
           f"synthetic:private,ids={ids},imgs=20,domain=lowres,size=16", "--ipc", str(k), "--out", "release",
           # The demo's pool of public starting faces has one person per class (24): here as many as classes.
           "--init-data", f"synthetic:public,seed=7,ids={ids},imgs=10",
           "--state-dir", "state", "--threads", str(threads)]
    return cmd + (["--resume"] if resume else [])


#: The lines of a pfd distill log that carry a time (CPU seconds under :data:`CPU_CLOCK_DRIVER`).
STAGE_LINE = re.compile(r"stage (\w+): done in ([\d.]+) s")
BATCH_LINE = re.compile(r"RTA batch \d+: .*done in ([\d.]+) s")
POOL_LINE = re.compile(r"copy check of the initialisation pool .*: done in ([\d.]+) s")


def stage_times(logs: list[str]) -> dict[str, float]:
    """Each stage's seconds added up over the invocations' logs (in order), with ``pool_check``.

    An invocation that ended inside RTA (killed, or still running) leaves no ``stage rta`` line: its
    finished batches count instead. One that finished RTA counts its stage line, which holds its
    batches and their setup.
    """
    out: dict[str, float] = {}
    for text in logs:
        stages = {m.group(1): float(m.group(2)) for m in STAGE_LINE.finditer(text)}
        if "rta" not in stages:
            batches = [float(m.group(1)) for m in BATCH_LINE.finditer(text)]
            if batches:
                stages["rta"] = sum(batches)
        stages["pool_check"] = sum(float(m.group(1)) for m in POOL_LINE.finditer(text))
        for k, v in stages.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(f"terminated by signal {signum}")


def run(work: Path, *, ids: int, k: int, threads: int) -> dict[str, Any]:
    """Run (or continue) the unit in ``work``; every invocation's output and wall time are logged there."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "invocations.jsonl"
    st = StateDir.at(work / "state")
    resume = st.root.is_dir()
    n = len(list(work.glob("invocation-*.log"))) + 1
    out = work / f"invocation-{n}.log"
    with log.open("a") as f:
        f.write(json.dumps({"invocation": n, "resume": resume, "start": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}) + "\n")
    signal.signal(signal.SIGTERM, _terminated)  # a kill is logged with its wall time, as an exit
    t0, code = time.perf_counter(), None
    try:
        with out.open("w") as o:
            code = subprocess.run(command(ids, k, resume=resume, threads=threads), cwd=work, stdout=o,
                                  stderr=subprocess.STDOUT).returncode
    finally:
        with log.open("a") as f:
            f.write(json.dumps({"invocation": n, "exit": code, "wall_s": time.perf_counter() - t0,
                                "end": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}) + "\n")
    if not st.summary.is_file():
        raise SystemExit(f"pfd distill exited {code} without a summary; rerun this command to continue")
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    ends = [e for e in events if "wall_s" in e]
    logs = [p.read_text(errors="replace") for p in sorted(work.glob("invocation-*.log"),
                                                          key=lambda p: int(p.stem.split("-")[1]))]
    summary = json.loads(st.summary.read_text())
    gate = summary.get("gate") or {}
    verdict = gate.get("verdict") or {}
    return {"ids": ids, "k": k, "images": ids * 20, "proxies": ids * k, "exit": code,
            "invocations": len({e["invocation"] for e in events if "invocation" in e}),
            "invocations_timed": len(ends), "wall_s": sum(e["wall_s"] for e in ends),
            "stages_s": stage_times(logs), "last_invocation_stages_s": summary.get("times_s", {}),
            "memory_gb": summary.get("memory_gb", {}),
            "verdict": {key: verdict.get(key) for key in ("publishable", "text", "version") if key in verdict},
            # Every figure of the gate's audit: a refusal is read by its effect sizes, not only its p-values.
            "rows": gate.get("checks") or [],
            "published": gate.get("published"),
            "threads": threads, "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(doc: dict[str, Any]) -> str:
    """The result as a short page."""
    lines = [f"## pfd distill of {doc['ids']:,} identities (the demo's recipe and models; {doc['images']:,} photos, "
             f"K = {doc['k']}: {doc['proxies']:,} proxies)", "",
             "CPU seconds of each stage added up over the invocations; the memory peak is the last invocation's.", "",
             "| stage | CPU seconds | peak GB |", "|---|---|---|"]
    mem = doc.get("memory_gb") or {}
    for stage, sec in doc["stages_s"].items():
        m = mem.get(stage)
        lines.append(f"| {stage} | {float(sec):.0f} | {'' if m is None else f'{float(m):.2f}'} |")
    v = doc.get("verdict") or {}
    failing = [r for r in doc.get("rows") or [] if r.get("family") == "leaks"]
    if failing:
        lines += ["", "The figures that fail (family-wise):", "", "| figure | attacker | value | chance | 95 % interval | p |",
                  "|---|---|---|---|---|---|"]
        for r in failing:
            ci = r.get("ci95")
            lines.append(f"| {r['attack']} | {r['attacker']} | {_num(r.get('value'))} | {_num(r.get('chance'))} | "
                         f"{'' if not ci else f'{_num(ci[0])} to {_num(ci[1])}'} | {_num(r.get('p'))} |")
    lines += ["", f"Verdict of the publication gate: {v.get('text', '(no audit recorded)')} (audit version "
              f"{v.get('version', '?')}); exit status {doc['exit']}.",
              f"Wall time {doc['wall_s'] / 3600:.2f} h over {doc['invocations_timed']} timed of {doc['invocations']} "
              "invocation(s), "
              f"{doc['threads']} thread(s) on {doc['cores']} cores ({doc['cpu']}); {doc['date']}."]
    return "\n".join(lines) + "\n"


def _num(v: Any) -> str:
    return "" if v is None else f"{float(v):.3g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="work folder (kept: the run resumes from it)")
    ap.add_argument("--ids", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="threads of pfd distill (stage times are CPU time)")
    ap.add_argument("--out", type=Path, default=OUT, help="results stem (.json, .md); '' for none")
    a = ap.parse_args(argv)
    doc = run(a.work.expanduser(), ids=a.ids, k=a.k, threads=a.threads)
    text = markdown(doc)
    print(text)
    if str(a.out):
        atomic_write_json(a.out.with_suffix(".json"), doc)
        atomic_write_text(a.out.with_suffix(".md"), text)
    return 0 if doc["exit"] in (0, 3) else 1


if __name__ == "__main__":
    raise SystemExit(main())
