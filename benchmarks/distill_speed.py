"""Overhead of the distillation loops over the bare network work they wrap, printed as ratios.

* RTA: one :class:`~pfd.distill.rta.ProxyDistiller` iteration (augmentation, frozen backbone
  forward with BatchNorm hooks, margin head, eq. 9, eq. 6, backward to the pixels, Adam step,
  clamp) / a bare forward + backward of the frozen backbone to the pixels of the same batch.
  Target <= 1.10.
* OGP: one :class:`~pfd.distill.ogp.OGPStep` training step (M = exp(A − Aᵀ) once, 2B rows
  through a 2N-class head, eq. 3-5, backward, SGD) / one plain margin-loss fine-tuning step
  (:class:`~pfd.train.MarginStep`, N-class head, SGD) on the same batch. Target <= 1.15.

Both members of a pair run interleaved (A, B, A, B, ...) so that they share the machine's load,
and the median of the per-pair ratios is printed with a 95 % bootstrap interval over the pairs
(:func:`ratio_interval`; 15 pairs by default, the number at which two runs on one machine agree
to a few hundredths); process CPU time is reported next to wall time because
a shared machine makes wall time noisy (CPU time is what the work costs). The demo backbone by
default; ``--full`` adds IR-50 at 112 px, D = 512 (the paper's setting; slow on a CPU).

Usage:
    python -m benchmarks.distill_speed [--full] [--threads 1] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import numpy as np

import torch
import torch.nn.functional as F


from pfd.allocator import tune_allocator
from pfd.config import RTAConfig
from pfd.data.shape import image_hw
from pfd.distill.ogp import OGPStep, Rotation, ogp_param_groups
from pfd.distill.rta import ProxyDistiller
from pfd.nn.heads import create_head
from pfd.nn.backbones import create_backbone
from pfd.train import MarginStep


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _clock(fn: Callable[[], None], device: torch.device) -> tuple[float, float]:
    _sync(device)
    w, c = time.perf_counter(), time.process_time()
    fn()
    _sync(device)
    return time.perf_counter() - w, time.process_time() - c


def ratio_interval(a: list[float], b: list[float], *, level: float = 0.95, draws: int = 4000,
                   seed: int = 0) -> tuple[float, float, float]:
    """Median of the per-pair ratios ``a_i / b_i`` and a bootstrap percentile interval for it.

    The pairs are resampled (each pair shares the machine's load of its moment), so the interval
    reflects the spread between repeats; with 15 or more pairs it is what says whether two runs
    agree.

    Returns:
        ``(median, low, high)``.
    """
    r = np.asarray(a, dtype=np.float64) / np.asarray(b, dtype=np.float64)  # (n,)
    idx = np.random.default_rng(seed).integers(0, len(r), size=(draws, len(r)))
    meds = np.median(r[idx], axis=1)  # (draws,)
    lo, hi = np.quantile(meds, [(1 - level) / 2, (1 + level) / 2])
    return float(np.median(r)), float(lo), float(hi)


def _pair(a: Callable[[], None], b: Callable[[], None], repeats: int, device: torch.device) -> dict[str, Any]:
    """Interleaved runs of ``a`` and ``b`` (after one warm-up each): medians, per-pair ratios, intervals.

    Returns the medians ``a_wall, b_wall, a_cpu, b_cpu`` (seconds), the median per-pair ratios
    ``ratio_wall, ratio_cpu`` with 95 % bootstrap intervals ``ci_wall, ci_cpu``, and the raw
    times ``runs`` (``[[a_wall, a_cpu, b_wall, b_cpu], ...]``).
    """
    a(), b()
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(_clock(a, device))
        tb.append(_clock(b, device))
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    out: dict[str, Any] = {"a_wall": med(ta, 0), "b_wall": med(tb, 0), "a_cpu": med(ta, 1), "b_cpu": med(tb, 1),
                           "repeats": repeats, "runs": [[*x, *y] for x, y in zip(ta, tb)]}
    for i, clock in enumerate(("wall", "cpu")):
        m, lo, hi = ratio_interval([x[i] for x in ta], [y[i] for y in tb])
        out[f"ratio_{clock}"], out[f"ci_{clock}"] = m, [lo, hi]
    return out


def _per(r: dict[str, Any], n: int) -> dict[str, Any]:
    """Times per iteration/step (the ratios and raw runs are unchanged)."""
    return {k: (v / n if k in ("a_wall", "b_wall", "a_cpu", "b_cpu") else v) for k, v in r.items()}


def _calibrated(arch: dict, batch: int, device: torch.device) -> torch.nn.Module:
    """A frozen backbone whose BatchNorm running statistics come from a few random batches.

    An untrained deep network in eval mode with the default running statistics (0, 1) blows up
    its activations (IR-50's reach inf), which no trained model does.
    """
    model = create_backbone(**arch).to(device).train()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum = None  # cumulative average
    with torch.no_grad():
        for _ in range(2):
            model(torch.rand(batch, 3, *image_hw(arch["size"]), device=device))
    return model.eval().requires_grad_(False)


def _rta_step(arch: dict, *, batch: int, classes: int, iters: int, augment: bool, dev: torch.device,
              lambda_bn: float = 0.01, lambda_spatial: float = 0.0, fast_prelu: bool = True,
              backbone: torch.nn.Module | None = None) -> tuple[Callable[[], None], torch.nn.Module]:
    """One RTA batch of ``iters`` iterations as a callable (and the frozen backbone it runs through)."""
    size, dim = arch["size"], arch["embedding_dim"]
    backbone = backbone if backbone is not None else _calibrated(arch, batch, dev)
    head = create_head("adaface", embedding_dim=dim, num_classes=2 * classes).to(dev).eval().requires_grad_(False)
    P = F.normalize(torch.randn(classes * 2, dim, generator=torch.Generator().manual_seed(1)), dim=1)  # NK prototypes (K = 2)
    aug = {} if augment else {"crop_scale": (1.0, 1.0), "flip": False, "shift": 0}
    cfg = RTAConfig(iterations=iters, batch_size=batch, lambda_rta=50.0, lambda_bn=lambda_bn,
                    lambda_spatial=lambda_spatial, **aug)
    spatial = None
    if lambda_spatial > 0:  # domain-level targets of a few random batches (the cost does not depend on them)
        from pfd.nn.spatial_stats import spatial_targets

        spatial = spatial_targets(backbone, [torch.rand(batch, 3, *image_hw(size), device=dev)], grid=cfg.spatial_grid)
    distiller = ProxyDistiller(backbone, head, P, size=size, cfg=cfg, device=dev, spatial=spatial, fast_prelu=fast_prelu)
    rows = torch.arange(batch) % len(P)
    cls = rows // 2 + classes
    return (lambda: distiller.distill_batch(rows, cls, batch_index=0)), backbone


def bench_rta(arch: dict, *, batch: int, classes: int, iters: int, repeats: int, augment: bool,
              device: str | torch.device = "cpu", lambda_bn: float = 0.01, lambda_spatial: float = 0.0) -> dict[str, Any]:
    """RTA iteration vs bare forward + backward to the pixels (aten's own layers), per iteration (seconds)."""
    torch.manual_seed(0)
    dev = torch.device(device)
    rta, backbone = _rta_step(arch, batch=batch, classes=classes, iters=iters, augment=augment, dev=dev,
                              lambda_bn=lambda_bn, lambda_spatial=lambda_spatial)
    x = torch.rand(batch, 3, *image_hw(arch["size"]), device=dev)

    def bare() -> None:
        for _ in range(iters):
            s = x.clone().requires_grad_(True)
            backbone(s).float().sum().backward()

    return _per(_pair(rta, bare, repeats, dev), iters)


def bench_rta_speedup(arch: dict, *, batch: int, classes: int, iters: int, repeats: int,
                      device: str | torch.device = "cpu") -> dict[str, Any]:
    """An RTA iteration as it was before issue 26 (aten's PReLU backward, which also computes the frozen
    slopes' gradient) vs now (:mod:`pfd.nn.frozen_prelu`), per iteration: the ratio is the speed-up."""
    torch.manual_seed(0)
    dev = torch.device(device)
    now, backbone = _rta_step(arch, batch=batch, classes=classes, iters=iters, augment=False, dev=dev)
    before, _ = _rta_step(arch, batch=batch, classes=classes, iters=iters, augment=False, dev=dev, fast_prelu=False,
                          backbone=backbone)
    return _per(_pair(before, now, repeats, dev), iters)


def bench_ogp(arch: dict, *, batch: int, classes: int, steps: int, repeats: int,
              device: str | torch.device = "cpu") -> dict[str, Any]:
    """OGP training step vs plain margin-loss fine-tuning step, per step (seconds)."""
    torch.manual_seed(0)
    dev = torch.device(device)
    dim = arch["embedding_dim"]
    x = torch.rand(batch, 3, *image_hw(arch["size"]), device=dev)
    y = torch.arange(batch, device=dev) % classes

    def make(ogp: bool):
        backbone = create_backbone(**arch).train()
        if ogp:
            head = create_head("adaface", embedding_dim=dim, num_classes=2 * classes)
            rot = Rotation(dim, seed=0)
            step = OGPStep(backbone, head, rot, num_identities=classes, rep_margin=0.1, lambda_rep=5.0)
            groups = ogp_param_groups(backbone, head, rot, lr=0.01)
        else:
            step = MarginStep(backbone, create_head("adaface", embedding_dim=dim, num_classes=classes))
            groups = [{"params": list(step.parameters())}]
        step.to(dev)
        opt = torch.optim.SGD(groups, lr=0.01, momentum=0.9, weight_decay=5e-4)

        def run() -> None:
            for _ in range(steps):
                out = step(x, y)
                opt.zero_grad(set_to_none=True)
                out.loss.backward()
                opt.step()

        return run

    return _per(_pair(make(True), make(False), repeats, dev), steps)


def _report(name: str, r: dict[str, Any], target: float) -> None:
    ok = "ok" if r["ci_cpu"][1] <= target else ("ok (median)" if r["ratio_cpu"] <= target else "MISSES TARGET")
    print(f"{name:<34} wall {r['a_wall'] * 1e3:8.1f} / {r['b_wall'] * 1e3:8.1f} ms = {r['ratio_wall']:5.3f}   "
          f"cpu {r['a_cpu'] * 1e3:8.1f} / {r['b_cpu'] * 1e3:8.1f} ms = {r['ratio_cpu']:5.3f} "
          f"[{r['ci_cpu'][0]:.3f}, {r['ci_cpu'][1]:.3f}]   (target <= {target:.2f}: {ok})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="also IR-50 at 112 px, D = 512 (slow on a CPU)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: stable on a shared box)")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"malloc {tune_allocator()}")
    demo = {"name": "ir18", "width": 0.25, "size": 32, "embedding_dim": 64}
    configs = [("demo ir18 w0.25 32px D64", demo, 60, 24, 10, 48)]
    if args.full:
        configs.append(("ir50 112px D512", {"name": "ir50", "width": 1.0, "size": 112, "embedding_dim": 512}, 16, 150, 1, 16))
    print(f"threads {torch.get_num_threads()}, repeats {args.repeats}; ratio = ours / bare, median of interleaved "
          "pairs [95 % bootstrap interval]")
    for name, arch, rta_b, n_cls, iters, ogp_b in configs:
        reps = args.repeats
        _report(f"RTA iter / fwd+bwd    [{name}]", bench_rta(arch, batch=rta_b, classes=n_cls, iters=iters, repeats=reps, augment=False), 1.10)
        _report(f"RTA, no L_bn / fwd+bwd[{name}]", bench_rta(arch, batch=rta_b, classes=n_cls, iters=iters, repeats=reps, augment=False, lambda_bn=0.0), 1.10)
        _report(f"RTA+aug iter / fwd+bwd[{name}]", bench_rta(arch, batch=rta_b, classes=n_cls, iters=iters, repeats=reps, augment=True), 1.10)
        _report(f"OGP step / margin step[{name}]", bench_ogp(arch, batch=ogp_b, classes=n_cls, steps=max(1, iters // 2), repeats=reps), 1.15)


if __name__ == "__main__":
    main()
