"""Attack speed: streamed top-1 search against a plain GEMM, and membership statistics vs identities.

Prints two things (timings on a shared machine are noisy: read the ratios, run twice):

1. Throughput of :func:`pfd.attacks.linkability.matching.streamed_top1` (exact top-1 over gallery chunks,
   memory ``query_chunk × chunk``) divided by that of one plain ``(Q Gᵀ).max(1)`` over the whole
   gallery (memory ``q × g``). Target: ratio >= 0.8, i.e. streaming costs at most ~20 %.
2. Seconds of :func:`pfd.attacks.membership.statistics.identity_statistics` (all four statistics) as the
   number of identities grows (k images each); ProtoCE is O(n·C·D), so expect ~quadratic growth.

Usage::

    python -m benchmarks.attack_speed                      # defaults sized for a laptop CPU
    python -m benchmarks.attack_speed --queries 4000 --gallery 200000 --ids 1000 5000 20000 --device cuda
"""

from __future__ import annotations

import argparse
import time

import torch


from pfd.attacks.linkability.matching import streamed_top1
from pfd.attacks.membership.statistics import identity_statistics


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def top1_ratio(queries: int, gallery: int, dim: int, chunk: int, device: str, repeats: int) -> dict[str, float]:
    """Throughput of :func:`streamed_top1` over that of one plain GEMM + max (prints and returns it)."""
    g = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(queries, dim, generator=g), dim=1).to(device)
    gal = torch.nn.functional.normalize(torch.randn(gallery, dim, generator=g), dim=1).to(device)

    def plain() -> None:
        (q @ gal.T).max(dim=1)

    def streamed() -> None:
        streamed_top1(q, gal, chunk=chunk, normalize=False, device=device)

    plain()
    streamed()  # warm-up
    t_plain, t_stream = _best_of(plain, repeats), _best_of(streamed, repeats)
    pairs = queries * gallery
    print(f"top-1 {queries} x {gallery} (D={dim}, chunk={chunk}, {device}): plain GEMM {pairs / t_plain / 1e9:.2f} "
          f"Gpairs/s, streamed {pairs / t_stream / 1e9:.2f} Gpairs/s, ratio {t_plain / t_stream:.2f} (target >= 0.8)")
    return {"plain_gpairs_s": pairs / t_plain / 1e9, "streamed_gpairs_s": pairs / t_stream / 1e9, "ratio": t_plain / t_stream}


def membership_scaling(ids: list[int], k: int, dim: int, device: str) -> None:
    g = torch.Generator().manual_seed(1)
    for c in ids:
        centres = torch.randn(c, dim, generator=g)
        emb = centres.repeat_interleave(k, 0) + 0.5 * torch.randn(c * k, dim, generator=g)  # (C·k, D)
        labels = torch.arange(c).repeat_interleave(k)
        t0 = time.perf_counter()
        identity_statistics(emb, labels, device=device)
        print(f"membership statistics: {c:>6} identities x {k} images (D={dim}, ProtoCE on {device}): "
              f"{time.perf_counter() - t0:.2f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--gallery", type=int, default=50000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--chunk", type=int, default=4096)
    p.add_argument("--ids", type=int, nargs="+", default=[1000, 2000, 5000, 10000, 20000])
    p.add_argument("--images", type=int, default=5, help="images per identity for the membership statistics")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    top1_ratio(a.queries, a.gallery, a.dim, a.chunk, a.device, a.repeats)
    membership_scaling(a.ids, a.images, a.dim, a.device)


if __name__ == "__main__":
    main()
