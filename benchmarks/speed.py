"""The performance ratios of the distill and attack issues in one run, per backbone.

For the demo backbone (IResNet-18 at width 0.25, 32 px, D = 64), IR-50 (112 px, D = 512) and
MobileFaceNet (112 x 96, D = 128):

* RTA iteration / bare forward + backward to the pixels (target <= 1.10), with and without
  SRe2L's augmentation (:func:`distill_speed.bench_rta`);
* OGP step / plain margin-loss fine-tuning step (target <= 1.15) (:func:`distill_speed.bench_ogp`);
* Embedder images/s / bare forward images/s (target >= 0.9) (:func:`embed_throughput.embed_ratio`);
* streamed exact top-1 / one plain GEMM + max over the same gallery, at the backbone's D
  (target >= 0.8) (:func:`attack_speed.top1_ratio`).

The process runs with the allocator the ``pfd`` command uses (:func:`pfd.allocator.tune_allocator`;
``PFD_ALLOCATOR=system`` measures glibc's defaults instead, recorded in the results).

The functions are those of ``distill_speed.py``, ``embed_throughput.py`` and
``attack_speed.py``, imported, so the figures are the same measurements. CPU by default
(``--threads`` 1: on a shared 2-core machine a second OpenMP thread mostly waits), CUDA when
present (or ``--device``). The ratios use process CPU time on the CPU (wall time on CUDA): on a
loaded machine CPU time is what the work costs. Each RTA/OGP ratio is the median of the per-pair
ratios of ``--repeats`` (15) interleaved pairs, printed with a 95 % bootstrap interval; two runs on
one machine should agree within the interval's half-width (a few hundredths). Writes ``benchmarks/results/speed.json`` and
``speed.md``.

Usage:
    python -m benchmarks.speed [--device cpu|cuda] [--only demo|ir50|mobilefacenet] [--repeats 15] [--merge]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent

from benchmarks.attack_speed import top1_ratio
from benchmarks.distill_speed import bench_ogp, bench_rta, bench_rta_speedup
from benchmarks.embed_throughput import embed_ratio

from pfd.allocator import tune_allocator
from pfd.io import atomic_write_json, atomic_write_text
from pfd.nn.backbones import create_backbone

#: name -> (arch, RTA batch, classes, RTA iterations, OGP batch, OGP steps, embed images, embed batch, top-1 queries x gallery)
BACKBONES: dict[str, dict[str, Any]] = {
    "demo": {"arch": {"name": "ir18", "width": 0.25, "size": 32, "embedding_dim": 64}, "label": "ir18 w0.25 32px D64",
             "rta_batch": 60, "classes": 24, "iters": 10, "ogp_batch": 48, "ogp_steps": 5, "embed_n": 512, "embed_batch": 128,
             "top1": (2000, 50000)},
    "ir50": {"arch": {"name": "ir50", "width": 1.0, "size": 112, "embedding_dim": 512}, "label": "ir50 112px D512",
             "rta_batch": 16, "classes": 150, "iters": 1, "ogp_batch": 16, "ogp_steps": 1, "embed_n": 64, "embed_batch": 32,
             "top1": (2000, 50000)},
    # The shared pretrained model's network: depthwise convs and 50 BatchNorm layers stress the
    # BN-statistic hooks differently from IResNet (one hook per thin layer).
    "mobilefacenet": {"arch": {"name": "mobilefacenet", "width": 1.0, "size": [112, 96], "embedding_dim": 128},
                      "label": "mobilefacenet 112x96 D128", "rta_batch": 32, "classes": 72, "iters": 2, "ogp_batch": 32,
                      "ogp_steps": 2, "embed_n": 128, "embed_batch": 64, "top1": (2000, 50000)},
}
TARGETS = {"rta": (1.10, "<="), "rta_aug": (1.10, "<="), "rta_sp": (1.10, "<="), "rta_speedup": (1.25, ">="),
           "ogp": (1.15, "<="), "embed": (0.9, ">="), "top1": (0.8, ">=")}
LABELS = {"rta": "RTA iteration / bare fwd+bwd", "rta_aug": "RTA+augmentation / bare fwd+bwd",
          "rta_sp": "RTA+spatial statistics / bare fwd+bwd", "rta_speedup": "RTA iteration before / now (PReLU)",
          "ogp": "OGP step / plain fine-tune step", "embed": "Embedder / bare forward (throughput)",
          "top1": "streamed top-1 / plain GEMM (throughput)"}


def _ok(key: str, value: float) -> bool:
    target, op = TARGETS[key]
    return value <= target if op == "<=" else value >= target


def measure(name: str, *, device: torch.device, repeats: int) -> dict[str, Any]:
    """Every ratio for one backbone; each entry holds the two sides and the ratio."""
    b = BACKBONES[name]
    arch, cpu = b["arch"], device.type == "cpu"
    reps, best_of = repeats, max(3, min(repeats, 5))  # pairs for the medians; alternations for the best-of throughput
    out: dict[str, Any] = {}

    def pair(key: str, r: dict[str, Any]) -> None:
        clock = "cpu" if cpu else "wall"
        num, den = r[f"a_{clock}"], r[f"b_{clock}"]
        out[key] = {"ours_ms": 1e3 * num, "bare_ms": 1e3 * den, "ratio": r[f"ratio_{clock}"], "interval": r[f"ci_{clock}"],
                    "wall_ratio": r["ratio_wall"], "clock": clock, "repeats": r["repeats"], "runs": r["runs"]}
        lo, hi = r[f"ci_{clock}"]
        print(f"  {LABELS[key]:<42} {out[key]['ratio']:6.3f}  [{lo:.3f}, {hi:.3f}]  ({1e3 * num:.1f} / {1e3 * den:.1f} ms, "
              f"{clock} time, {r['repeats']} pairs)", flush=True)

    for key, aug, sp in (("rta", False, 0.0), ("rta_aug", True, 0.0), ("rta_sp", False, 0.1)):
        pair(key, bench_rta(arch, batch=b["rta_batch"], classes=b["classes"], iters=b["iters"], repeats=reps, augment=aug,
                            device=device, lambda_spatial=sp))
    pair("rta_speedup", bench_rta_speedup(arch, batch=b["rta_batch"], classes=b["classes"], iters=b["iters"],
                                          repeats=reps, device=device))
    pair("ogp", bench_ogp(arch, batch=b["ogp_batch"], classes=b["classes"], steps=b["ogp_steps"], repeats=reps, device=device))
    model = create_backbone(**arch)
    e = embed_ratio(model, size=arch["size"], n=b["embed_n"], batch_size=b["embed_batch"], repeats=best_of, device=device)
    out["embed"] = {**e, "clock": "wall"}
    print(f"  {LABELS['embed']:<42} {e['ratio']:6.3f}", flush=True)
    q, g = b["top1"]
    out["top1"] = {**top1_ratio(q, g, arch["embedding_dim"], 4096, str(device), best_of), "clock": "wall"}
    return out


def markdown(doc: dict[str, Any]) -> str:
    names = list(doc["results"])
    lines = [
        "| ratio | target | " + " | ".join(BACKBONES[n]["label"] for n in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for key in TARGETS:
        target, op = TARGETS[key]
        cells = []
        for n in names:
            r = doc["results"][n][key]
            ci = f" [{r['interval'][0]:.3f}, {r['interval'][1]:.3f}]" if "interval" in r else ""
            cells.append(f"{r['ratio']:.3f}{ci} ({'ok' if _ok(key, r['ratio']) else 'misses'})")
        lines.append(f"| {LABELS[key]} | {op} {target} | " + " | ".join(cells) + " |")
    lines += ["", f"Device {doc['device']}, torch threads {doc['threads']}, {doc['cores']} cores ({doc['cpu']}); "
              f"malloc {doc.get('allocator', 'system')}; "
              f"load average {doc['load_start']} at the start, {doc['load_end']} at the end; {doc['date']}; "
              f"{doc['seconds']:.0f} s. RTA/OGP ratios from process CPU time on a CPU (wall time on CUDA): median of the "
              f"per-pair ratios of {doc['repeats']} interleaved pairs [95 % bootstrap interval]; throughput ratios from the "
              "best of alternating runs."]
    for e in doc.get("earlier", []):
        if e.get("backbones"):
            lines.append(f"Columns {', '.join(BACKBONES[n]['label'] for n in e['backbones'])} from an earlier run: {e.get('date')}, "
                         f"load average {e.get('load_start')} at the start, {e.get('load_end')} at the end, {e.get('seconds', 0):.0f} s.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", choices=sorted(BACKBONES), nargs="+", help="backbones to run (default: all)")
    ap.add_argument("--repeats", type=int, default=15, help="interleaved pairs per RTA/OGP ratio (>= 15 for a stable median)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--results", default=str(HERE / "results"), help="folder for speed.json and speed.md ('' = none)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other backbones' results already in speed.json (with --only: one backbone per run)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    # As the pfd command does: without it, glibc maps and faults the activation buffers in again
    # every step, and the page faults (7-9 ms of a 63 ms demo step) vary with malloc's history.
    allocator = tune_allocator()
    device = torch.device(args.device)
    t0, load0 = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    results = {}
    for name in args.only or list(BACKBONES):
        print(f"{BACKBONES[name]['label']} on {device}:", flush=True)
        results[name] = measure(name, device=device, repeats=args.repeats)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?") if Path("/proc/cpuinfo").is_file() else "?"
    doc = {"device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device), "threads": torch.get_num_threads(),
           "cores": os.cpu_count(), "cpu": cpu, "load_start": load0, "load_end": [round(x, 2) for x in os.getloadavg()],
           "date": time.strftime("%Y-%m-%d %H:%M %Z"), "allocator": allocator, "seconds": time.perf_counter() - t0, "repeats": args.repeats,
           "results": results}
    if args.merge and args.results and (Path(args.results) / "speed.json").is_file():
        old = json.loads((Path(args.results) / "speed.json").read_text())
        kept = {n: r for n, r in old.get("results", {}).items() if n not in results}
        runs = [{k: old[k] for k in ("date", "load_start", "load_end", "seconds") if k in old} | {"backbones": list(kept)}]
        doc["earlier"] = runs + old.get("earlier", []) if kept else []
        doc["results"] = {n: (kept[n] if n in kept else results[n]) for n in BACKBONES if n in kept or n in results}
    text = markdown(doc)
    print(text)
    if args.results:
        out = Path(args.results)
        atomic_write_json(out / "speed.json", doc, shared=True)
        atomic_write_text(out / "speed.md", text, shared=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
