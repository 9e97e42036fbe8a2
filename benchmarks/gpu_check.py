"""One GPU check of the paper's cross-age recipe shape, ready to run when a GPU is at hand.

IR-50 at 112 px, D = 512, 150 identities × 10 proxies (``recipes/cross-age.toml``), on the built-in
synthetic faces, with bf16 autocast and channels_last on CUDA: a fixed number of OGP steps
(:class:`~pfd.distill.ogp.OGPStep`, the pipeline's step) and RTA iterations
(:class:`~pfd.distill.rta.ProxyDistiller`, the pipeline's loop, BatchNorm statistics included).
It prints

* images/s of OGP and of RTA;
* the extrapolated time of the full recipe: OGP ``epochs × ⌈N·imgs / B⌉`` steps and RTA
  ``⌈N·K / B⌉`` batches × the recipe's iterations (1000, SRe2L's and the paper's budget);
* peak GPU memory of each phase (``torch.cuda.max_memory_allocated``);
* achieved TFLOP/s (FLOPs of one step counted by :class:`torch.utils.flop_counter.FlopCounterMode`)
  against the device's dense bf16 peak (:data:`BF16_PEAK_TFLOPS`, by device name);
* RTA iteration / bare forward + backward to the pixels and OGP step / plain margin-loss step,
  wall time with CUDA synchronisation, medians of interleaved pairs with 95 % intervals
  (:func:`benchmarks.distill_speed.ratio_interval`);

and, when two or more GPUs exist, runs a shortened recipe with a 2-process
``accelerate launch -m pfd distill`` and reports its time. Results go to
``benchmarks/results/gpu_check.{json,md}`` (not for ``--tiny``, unless ``--results`` is given).

``--tiny`` runs the same code on the demo backbone (IR-18 at width 0.25, 32 px, D = 64) with a
few identities, steps and iterations, on the CPU in seconds: the test suite runs it so that the
script cannot rot while no GPU is around.

Usage:
    python -m benchmarks.gpu_check                 # on a GPU, about 5 minutes on an H100/H200
    python -m benchmarks.gpu_check --tiny          # CPU smoke run, seconds
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from benchmarks.distill_speed import _pair

from pfd.config import RTAConfig
from pfd.data.synthetic import SyntheticFaces
from pfd.distill.ogp import OGPStep, Rotation, ogp_param_groups
from pfd.release.state_dir import StateDir
from pfd.distill.rta import ProxyDistiller
from pfd.io import atomic_write_json, atomic_write_text
from pfd.nn.heads import create_head
from pfd.nn.backbones import create_backbone
from pfd.train import MarginStep

#: Dense bf16 tensor-core peak in TFLOP/s by a substring of ``torch.cuda.get_device_name`` (first
#: match wins; SXM figures, no sparsity). Unknown devices report no fraction of peak.
BF16_PEAK_TFLOPS: list[tuple[str, float]] = [
    ("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("H800", 989.0), ("GH200", 989.0),
    ("B200", 2250.0), ("B100", 1750.0), ("A100", 312.0), ("A800", 312.0), ("A30", 165.0),
    ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0), ("A10G", 70.0), ("A10", 125.0), ("A6000", 155.0),
    ("RTX 4090", 165.0), ("RTX 3090", 71.0), ("V100", 0.0), ("T4", 0.0),  # no bf16 tensor cores
]

TINY = {"arch": {"name": "ir18", "width": 0.25, "size": 32, "embedding_dim": 64}, "ids": 6, "imgs": 4, "ipc": 2,
        "ogp_batch": 12, "rta_batch": 12, "ogp_steps": 2, "rta_iters": 2, "repeats": 2}


def bf16_peak(name: str) -> float | None:
    """Dense bf16 peak TFLOP/s of a device name, ``None`` when unknown or without bf16 tensor cores."""
    for key, peak in BF16_PEAK_TFLOPS:
        if key.lower() in name.lower():
            return peak or None
    return None


def recipe_shape(path: Path) -> dict[str, Any]:
    """The sizes of a distillation recipe that set the cost (backbone, N, images, K, batches, budgets)."""
    doc = tomllib.loads(path.read_text())
    tr, dis = doc["train"], doc["distill"]
    ogp, rta = dis["ogp"], dis["rta"]
    spec = dict(kv.split("=", 1) for kv in dis["private"].split(",")[1:] if "=" in kv)
    return {"arch": {"name": tr["backbone"], "width": float(tr.get("width", 1.0)), "size": int(dis.get("size", tr["size"])),
                     "embedding_dim": int(tr["embedding_dim"])},
            "ids": int(spec.get("ids", 150)), "imgs": int(spec.get("imgs", 50)), "ipc": int(rta["ipc"]),
            "ogp_batch": int(ogp["batch_size"]), "ogp_epochs": float(ogp["epochs"]), "ogp_scale": float(ogp["scale"]),
            "ogp_margin": float(ogp["margin"]), "rta_batch": int(rta["batch_size"]), "rta_iterations": int(rta["iterations"]),
            "rta": {k: rta[k] for k in ("lr", "betas", "lambda_rta", "lambda_bn", "first_bn_multiplier", "crop_scale",
                                        "flip", "shift")}}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], None], device: torch.device) -> float:
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t


def _count_flops(fn: Callable[[], None]) -> float:
    """FLOPs of one call of ``fn`` (matmuls and convolutions, forward and backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def _peak_memory(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _synthetic_batch(shape: dict[str, Any], n: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images of the built-in synthetic private set (cross-age domain), cycling over identities."""
    size = shape["arch"]["size"]
    faces = SyntheticFaces("private", identities=shape["ids"], images_per_identity=shape["imgs"], domain="age",
                           seed=seed, size=size)
    # One image per identity first, so a batch spans as many identities as it can (as a shuffled epoch does).
    order = [(i % shape["ids"]) * shape["imgs"] + (i // shape["ids"]) % shape["imgs"] for i in range(n)]
    imgs, labels = [], []
    for j in order:
        item = faces[j]
        img, label = (item[0], item[1]) if isinstance(item, (tuple, list)) else (item["image"], item["label"])
        imgs.append(torch.as_tensor(img))
        labels.append(int(label))
    x = torch.stack(imgs).float()
    if x.max() > 1.5:  # uint8 range
        x = x / 255.0
    return x, torch.tensor(labels)


def _calibrate(model: torch.nn.Module, x: torch.Tensor, device: torch.device | None = None) -> torch.nn.Module:
    """Running BatchNorm statistics from the data (an untrained deep net in eval mode blows up otherwise)."""
    device = device or torch.device("cpu")
    model.to(device).train()
    x = x.to(device)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum = None
    with torch.no_grad():
        for chunk in x.split(64):
            model(chunk)
    return model


def run_check(shape: dict[str, Any], *, device: torch.device, ogp_steps: int, rta_iters: int, repeats: int,
              amp: bool, channels_last: bool) -> dict[str, Any]:
    """OGP and RTA throughput, ratios, memory and FLOP/s for one recipe shape (see the module docstring)."""
    torch.manual_seed(0)
    arch, dim, n_id = shape["arch"], shape["arch"]["embedding_dim"], shape["ids"]
    amp_dtype = torch.bfloat16 if amp else None
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x_all, y_all = _synthetic_batch(shape, max(shape["ogp_batch"], shape["rta_batch"]))
    out: dict[str, Any] = {}

    # ---- OGP: the pipeline's step (rotation expm once, 2B rows through a 2N-class head) vs a plain step
    x = x_all[: shape["ogp_batch"]].to(device).contiguous(memory_format=fmt)
    y = y_all[: shape["ogp_batch"]].to(device)

    def make(ogp: bool) -> tuple[Callable[[], None], Callable[[], None]]:
        backbone = _calibrate(create_backbone(**arch), x_all[: shape["ogp_batch"]], device).to(memory_format=fmt).train()
        if ogp:
            head = create_head("adaface", embedding_dim=dim, num_classes=2 * n_id, scale=shape["ogp_scale"],
                               margin=shape["ogp_margin"])
            rot = Rotation(dim, seed=0)
            step: torch.nn.Module = OGPStep(backbone, head, rot, num_identities=n_id, rep_margin=0.1, lambda_rep=5.0,
                                            amp_dtype=amp_dtype)
            groups = ogp_param_groups(backbone, head, rot, lr=0.01)
        else:
            step = MarginStep(backbone, create_head("adaface", embedding_dim=dim, num_classes=n_id,
                                                    scale=shape["ogp_scale"], margin=shape["ogp_margin"]),
                              amp_dtype=amp_dtype)
            groups = [{"params": list(step.parameters())}]
        step.to(device)
        opt = torch.optim.SGD(groups, lr=0.01, momentum=0.9, weight_decay=5e-4)

        def one() -> None:
            res = step(x, y)
            opt.zero_grad(set_to_none=True)
            res.loss.backward()
            opt.step()

        def run() -> None:
            for _ in range(ogp_steps):
                one()

        return run, one

    ogp_run, ogp_one = make(True)
    plain_run, _ = make(False)
    _reset_peak(device)
    ogp_run()  # warm-up (cudnn autotuning, allocator)
    t = _timed(ogp_run, device)
    out["ogp"] = {"steps": ogp_steps, "batch": shape["ogp_batch"], "seconds_per_step": t / ogp_steps,
                  "images_per_s": shape["ogp_batch"] * ogp_steps / t, "peak_gib": _peak_memory(device),
                  "flops_per_step": _count_flops(ogp_one)}
    r = _pair(ogp_run, plain_run, repeats, device)
    out["ogp"]["ratio_vs_plain"] = {"median": r["ratio_wall"], "interval": r["ci_wall"], "pairs": repeats, "clock": "wall"}
    del ogp_run, ogp_one, plain_run
    if device.type == "cuda":
        torch.cuda.empty_cache()

    # ---- RTA: ProxyDistiller (augmentation, BN statistics, margin head, eq. 9, Adam, clamp) vs bare fwd+bwd
    size, b = arch["size"], shape["rta_batch"]
    backbone = _calibrate(create_backbone(**arch), x_all[:b], device).to(memory_format=fmt).eval().requires_grad_(False)
    n_proto = n_id * shape["ipc"]
    head = create_head("adaface", embedding_dim=dim, num_classes=2 * n_id).to(device).eval().requires_grad_(False)
    P = F.normalize(torch.randn(n_proto, dim), dim=1)  # (NK, D)
    cfg = RTAConfig(iterations=rta_iters, batch_size=b, ipc=shape["ipc"], **shape["rta"])
    distiller = ProxyDistiller(backbone, head, P, size=size, cfg=cfg, device=device, amp=amp)
    rows = torch.arange(b) % n_proto
    cls = rows // shape["ipc"] + n_id
    xb = x_all[:b].to(device)

    def rta() -> None:
        distiller.distill_batch(rows, cls, batch_index=0)

    def bare_one() -> None:
        s = xb.clone().requires_grad_(True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            feats = backbone(s)
        feats.float().sum().backward()

    def bare() -> None:
        for _ in range(rta_iters):
            bare_one()

    _reset_peak(device)
    rta()
    t = _timed(rta, device)
    flops_iter = _count_flops(lambda: ProxyDistiller(backbone, head, P, size=size, device=device, amp=amp,
                                                     cfg=RTAConfig(iterations=1, batch_size=b, ipc=shape["ipc"],
                                                                   **shape["rta"])).distill_batch(rows, cls, batch_index=0))
    out["rta"] = {"iterations": rta_iters, "batch": b, "seconds_per_iteration": t / rta_iters,
                  "images_per_s": b * rta_iters / t, "peak_gib": _peak_memory(device), "flops_per_iteration": flops_iter}
    r = _pair(rta, bare, repeats, device)
    out["rta"]["ratio_vs_bare"] = {"median": r["ratio_wall"], "interval": r["ci_wall"], "pairs": repeats, "clock": "wall"}

    # ---- the full recipe, extrapolated
    ogp_total = shape["ogp_epochs"] * math.ceil(shape["ids"] * shape["imgs"] / shape["ogp_batch"])
    rta_batches = math.ceil(n_proto / b)
    out["recipe"] = {"ogp_steps": ogp_total, "rta_batches": rta_batches, "rta_iterations": shape["rta_iterations"],
                     "ogp_seconds": ogp_total * out["ogp"]["seconds_per_step"],
                     "rta_seconds": rta_batches * shape["rta_iterations"] * out["rta"]["seconds_per_iteration"]}
    out["recipe"]["total_seconds"] = out["recipe"]["ogp_seconds"] + out["recipe"]["rta_seconds"]
    for k, flops, sec in (("ogp", out["ogp"]["flops_per_step"], out["ogp"]["seconds_per_step"]),
                          ("rta", out["rta"]["flops_per_iteration"], out["rta"]["seconds_per_iteration"])):
        out[k]["tflops"] = flops / sec / 1e12
    return out


def short_recipe(shape: dict[str, Any], workdir: Path) -> tuple[Path, Path]:
    """The cross-age recipe cut to 1 OGP epoch and 20 RTA iterations on ``ids`` × 10 synthetic images,
    and a public checkpoint of the recipe's backbone (BatchNorm calibrated on the synthetic faces).

    Returns:
        ``(recipe path, public checkpoint path)`` inside ``workdir``.
    """
    from pfd.nn.checkpoints import save_checkpoint

    doc = tomllib.loads((ROOT / "recipes" / "cross-age.toml").read_text())
    ogp, rta = dict(doc["distill"]["ogp"]), dict(doc["distill"]["rta"])
    ogp["batch_size"] = min(int(ogp["batch_size"]), shape["ids"] * 10)  # a batch must fit in one epoch
    rta["batch_size"] = min(int(rta["batch_size"]), shape["ids"] * int(rta["ipc"]))
    public = workdir / "public.pt"
    x, _ = _synthetic_batch(shape, 64)
    save_checkpoint(public, backbone=_calibrate(create_backbone(**shape["arch"]), x).eval())
    text = (
        "[distill]\n"
        f"private = \"synthetic:private,ids={shape['ids']},imgs=10,domain=age\"\n"
        f"method = \"pfd\"\nout = \"{workdir / 'release'}\"\nstate_dir = \"{workdir / 'state'}\"\n"
        f"size = {shape['arch']['size']}\nmin_images = 0\n\n[distill.ogp]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in ogp.items() if k != "epochs")
        # One epoch, no step floor or margin extension: a short run of the recipe's shape, which the
        # publication gate may refuse (allow_linkable: this checks the multi-process path, not privacy).
        + "epochs = 1\nmin_steps = 0\nstep_cap = 0\n\n[distill.rta]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in rta.items() if k != "iterations")
        + "iterations = 20\n\n[distill.release]\nlabel_seed = 0\nallow_linkable = true\n"
    )
    path = workdir / "cross-age-short.toml"
    path.write_text(text)
    return path, public


def distributed_run(shape: dict[str, Any], workdir: Path, *, timeout: int, processes: int = 2) -> dict[str, Any]:
    """A shortened cross-age recipe through ``accelerate launch --num_processes 2 -m pfd distill``."""
    exe = shutil.which("accelerate")
    if exe is None:
        return {"skipped": "accelerate is not on PATH"}
    recipe, public = short_recipe(shape, workdir)
    cmd = [exe, "launch", "--multi_gpu", "--num_processes", str(processes), "-m", "pfd", "distill",
           "--recipe", str(recipe), "--public", str(public), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"command": " ".join(cmd), "returncode": None, "seconds": time.perf_counter() - t,
                "tail": f"timed out after {timeout} s"}
    seconds = time.perf_counter() - t
    summary = StateDir.at(workdir / "state").summary
    times = json.loads(summary.read_text()).get("times_s") if summary.is_file() else None
    return {"command": " ".join(cmd), "returncode": proc.returncode, "seconds": seconds, "stages_s": times,
            "tail": (proc.stdout + proc.stderr)[-2000:]}


def markdown(doc: dict[str, Any]) -> str:
    """The check's results as a short markdown report."""
    o, r, rec = doc["ogp"], doc["rta"], doc["recipe"]
    peak = doc.get("bf16_peak_tflops")

    def frac(tf: float) -> str:
        return (f"{tf:.1f} TFLOP/s" if tf >= 1 else f"{1e3 * tf:.2f} GFLOP/s") + (f" ({100 * tf / peak:.0f} % of {peak:.0f} bf16 peak)" if peak else "")

    def mem(g: float | None) -> str:
        return f"{g:.1f} GiB" if g is not None else "n/a (CPU)"

    def ratio(d: dict[str, Any]) -> str:
        return f"{d['median']:.3f} [{d['interval'][0]:.3f}, {d['interval'][1]:.3f}]"

    lines = [
        f"GPU check on {doc['device']} ({doc['shape_label']}; amp {doc['amp']}, channels_last {doc['channels_last']}; "
        f"{doc['date']}, {doc['seconds']:.0f} s)",
        "",
        "| phase | images/s | step | peak memory | achieved | ratio (wall, median of pairs [95 %]) |",
        "|---|---|---|---|---|---|",
        f"| OGP (B = {o['batch']}) | {o['images_per_s']:.1f} | {1e3 * o['seconds_per_step']:.1f} ms | {mem(o['peak_gib'])} | "
        f"{frac(o['tflops'])} | OGP / plain step {ratio(o['ratio_vs_plain'])} |",
        f"| RTA (B = {r['batch']}) | {r['images_per_s']:.1f} | {1e3 * r['seconds_per_iteration']:.1f} ms | {mem(r['peak_gib'])} | "
        f"{frac(r['tflops'])} | RTA / bare fwd+bwd {ratio(r['ratio_vs_bare'])} |",
        "",
        f"Full recipe, extrapolated: OGP {rec['ogp_steps']:.0f} steps {rec['ogp_seconds'] / 60:.1f} min + RTA "
        f"{rec['rta_batches']} batches × {rec['rta_iterations']} iterations {rec['rta_seconds'] / 60:.1f} min = "
        f"{rec['total_seconds'] / 60:.1f} min on one device.",
    ]
    dist = doc.get("distributed")
    if dist:
        if "skipped" in dist:
            lines += ["", f"2-process run: skipped ({dist['skipped']})."]
        else:
            stages = ", ".join(f"{k} {v:.0f} s" for k, v in (dist.get("stages_s") or {}).items())
            lines += ["", f"2-process `accelerate launch` of a shortened recipe (1 OGP epoch, 20 RTA iterations): exit "
                          f"{dist['returncode']}, {dist['seconds']:.0f} s" + (f" ({stages})" if stages else "") + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="demo backbone, a few steps: a CPU smoke run in seconds")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--recipe", default=str(ROOT / "recipes" / "cross-age.toml"), help="recipe whose shape to run")
    ap.add_argument("--ogp-steps", type=int, default=20, help="timed OGP steps (after one warm-up run)")
    ap.add_argument("--rta-iters", type=int, default=20, help="timed RTA iterations (after one warm-up run)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved pairs per ratio")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (CPU runs; 1 is steadiest on a shared box)")
    ap.add_argument("--no-amp", action="store_true", help="no bf16 autocast on CUDA")
    ap.add_argument("--no-channels-last", action="store_true")
    ap.add_argument("--no-distributed", action="store_true", help="skip the 2-process accelerate run")
    ap.add_argument("--results", default=None,
                    help="folder for gpu_check.json/.md (default benchmarks/results on CUDA, none for --tiny/CPU; '' = none)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if not cuda:
        torch.set_num_threads(args.threads)
    if cuda and not torch.cuda.is_available():
        print("gpu_check: --device cuda but torch sees no CUDA device; run with --tiny (CPU) or on a GPU machine")
        return 2
    if args.tiny:
        shape = {**recipe_shape(Path(args.recipe)), **{k: v for k, v in TINY.items() if k not in ("ogp_steps", "rta_iters",
                                                                                                   "repeats")}}
        ogp_steps, rta_iters, repeats = TINY["ogp_steps"], TINY["rta_iters"], TINY["repeats"]
        label = "tiny: ir18 w0.25 32 px D64"
    else:
        shape = recipe_shape(Path(args.recipe))
        ogp_steps, rta_iters, repeats = args.ogp_steps, args.rta_iters, args.repeats
        a = shape["arch"]
        label = f"{a['name']} {a['size']} px D{a['embedding_dim']}, {shape['ids']} ids × {shape['ipc']} proxies"
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    amp, cl = cuda and not args.no_amp, cuda and not args.no_channels_last
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    print(f"gpu_check: {label} on {name}; OGP {ogp_steps} steps, RTA {rta_iters} iterations, {repeats} pairs per ratio",
          flush=True)
    t0 = time.perf_counter()
    res = run_check(shape, device=device, ogp_steps=ogp_steps, rta_iters=rta_iters, repeats=repeats, amp=amp,
                    channels_last=cl)
    doc: dict[str, Any] = {"device": name, "shape_label": label, "shape": shape, "amp": amp, "channels_last": cl,
                           "bf16_peak_tflops": bf16_peak(name) if cuda else None, "torch": torch.__version__,
                           "date": time.strftime("%Y-%m-%d %H:%M %Z"), **res}
    if cuda and torch.cuda.device_count() >= 2 and not args.no_distributed and not args.tiny:
        with tempfile.TemporaryDirectory(prefix="pfd-gpu-check-") as tmp:
            doc["distributed"] = distributed_run(shape, Path(tmp), timeout=240)
    elif cuda and not args.tiny:
        doc["distributed"] = {"skipped": f"{torch.cuda.device_count()} GPU(s); the 2-process run needs 2"}
    doc["seconds"] = time.perf_counter() - t0
    text = markdown(doc)
    print(text, flush=True)
    results = args.results if args.results is not None else (str(HERE / "results") if cuda and not args.tiny else "")
    if results:
        atomic_write_json(Path(results) / "gpu_check.json", doc, shared=True)
        atomic_write_text(Path(results) / "gpu_check.md", text, shared=True)
        print(f"wrote {Path(results) / 'gpu_check.json'} and gpu_check.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
