"""Embedding throughput of :class:`pfd.embed.Embedder` against the bare backbone forward.

Both sides see the same CPU image batches: the bare loop moves each batch to the device and runs
the model (same precision and memory format as the Embedder: bf16 autocast + channels_last on
CUDA, fp32 on CPU) and synchronises at the end; the Embedder additionally checks the pixel range,
L2-normalises, concatenates and returns the embeddings on the CPU. The printed ratio is
``Embedder images/s ÷ bare images/s`` (target >= 0.9). Runs alternate and the best time of each
side is kept, which damps noise on a shared machine; treat the figures as indicative anyway.

Usage:
    python -m benchmarks.embed_throughput [--backbone ir18 --width 0.25 --size 64 --n 512]

Uses ``pfd.nn.iresnet.create_backbone`` when it is importable, otherwise a small local conv net
(printed either way).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn


from pfd.data.shape import image_hw
from pfd.embed import Embedder, default_device


class SmallConvNet(nn.Module):
    """Fallback backbone: four stages (stride-2 and stride-1 conv-BN-PReLU) and a linear layer."""

    def __init__(self, *, width: float = 0.25, size: int = 64, embedding_dim: int = 512) -> None:
        super().__init__()
        chans = [3] + [max(8, int(c * width)) for c in (64, 128, 256, 512)]
        layers: list[nn.Module] = []
        for cin, cout in zip(chans[:-1], chans[1:]):
            for c_in, stride in ((cin, 2), (cout, 1)):
                layers += [nn.Conv2d(c_in, cout, 3, stride=stride, padding=1, bias=False)]
                layers += [nn.BatchNorm2d(cout), nn.PReLU(cout)]
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(chans[-1] * (size // 16) ** 2, embedding_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 3, S, S) in [0, 1] -> (B, D)
        return self.fc(self.body((x - 0.5) / 0.5).flatten(1))


def build_model(name: str, *, width: float, size: int, dim: int) -> tuple[nn.Module, str]:
    """The requested iresnet if pfd.nn.iresnet exists, else :class:`SmallConvNet`."""
    try:
        from pfd.nn.backbones import create_backbone
    except ImportError:
        return SmallConvNet(width=width, size=size, embedding_dim=dim), f"fallback SmallConvNet (width {width})"
    return create_backbone(name, width=width, size=size, embedding_dim=dim), f"pfd.nn.iresnet {name} (width {width})"


def bare_pass(model: nn.Module, images: torch.Tensor, *, batch_size: int, device: torch.device) -> float:
    """Seconds for the bare forward over all batches."""
    cuda = device.type == "cuda"
    _sync(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, images.shape[0], batch_size):
            x = images[i : i + batch_size].to(device, non_blocking=True)
            if cuda:
                x = x.contiguous(memory_format=torch.channels_last)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    model(x)
            else:
                model(x)
    _sync(device)
    return time.perf_counter() - t0


def embed_pass(embedder: Embedder, images: torch.Tensor) -> float:
    """Seconds for the Embedder over all images (its result lands on the CPU, so it is synced)."""
    t0 = time.perf_counter()
    embedder(images)
    return time.perf_counter() - t0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def embed_ratio(
    model: nn.Module, *, size: int, n: int, batch_size: int, repeats: int, flip: bool = False,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Embedder images/s and bare-forward images/s on the same random images (best of ``repeats``).

    Returns:
        ``{"bare_ips", "embed_ips", "ratio", "bare_s", "embed_s"}`` (ratio = Embedder / bare).
    """
    device = torch.device(device) if device is not None else default_device()
    model.eval().to(device)
    if device.type == "cuda":
        model.to(memory_format=torch.channels_last)
    images = torch.rand(n, 3, *image_hw(size))  # (n, 3, H, W)
    embedder = Embedder(model, batch_size=batch_size, flip=flip, device=device)
    bare_images = torch.cat([images, images.flip(3)]) if flip else images
    bare_pass(model, bare_images, batch_size=batch_size, device=device)  # warm-up
    embed_pass(embedder, images)
    t_bare, t_emb = [], []
    for _ in range(repeats):  # alternate so that load changes hit both sides alike
        t_bare.append(bare_pass(model, bare_images, batch_size=batch_size, device=device))
        t_emb.append(embed_pass(embedder, images))
    bare_ips, emb_ips = n / min(t_bare), n / min(t_emb)  # source images per second (with flip both views ran)
    return {"bare_ips": bare_ips, "embed_ips": emb_ips, "ratio": emb_ips / bare_ips,
            "bare_s": sorted(t_bare)[len(t_bare) // 2], "embed_s": sorted(t_emb)[len(t_emb) // 2]}


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", default="ir18")
    ap.add_argument("--width", type=float, default=0.25)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--n", type=int, default=512, help="images per pass")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5, help="timed passes per side (best kept)")
    ap.add_argument("--flip", action="store_true", help="time flip fusion (bare side runs both views too)")
    ap.add_argument("--device", default=None, help="default: CUDA if available, else CPU")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (machine is shared)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device) if args.device else default_device()
    model, what = build_model(args.backbone, width=args.width, size=args.size, dim=args.dim)
    print(f"backbone: {what}, {args.size}px, D={args.dim}; device {device}; {torch.get_num_threads()} thread(s)")
    print(f"{args.n} images, batch {args.batch_size}, flip={args.flip}, best of {args.repeats}")
    r = embed_ratio(model, size=args.size, n=args.n, batch_size=args.batch_size, repeats=args.repeats,
                    flip=args.flip, device=device)
    print(f"bare forward : {r['bare_ips']:10.1f} img/s  (median {r['bare_s']:.3f} s)")
    print(f"Embedder     : {r['embed_ips']:10.1f} img/s  (median {r['embed_s']:.3f} s)")
    print(f"ratio Embedder/bare = {r['ratio']:.3f}  (target >= 0.9: {'ok' if r['ratio'] >= 0.9 else 'BELOW'})")
    return r["ratio"]


if __name__ == "__main__":
    main()
