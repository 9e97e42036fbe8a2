"""Is the synthetic set learnable, and not by raw pixels? (target: >= 0.90 test verification)

Trains a small CNN (7 conv-BN-PReLU layers, CosFace head s=30 m=0.35, SGD + cosine schedule,
random flips) on ``synthetic:public`` for a fixed number of epochs on CPU and reports, on the
identity-disjoint ``synthetic:test`` split:

* raw-pixel baselines: best-threshold verification accuracy of cosine similarity between
  mean-centred pixel vectors, and nearest-neighbour identification (first 8 images of each
  identity as gallery, the rest as probes);
* the CNN's best-threshold verification accuracy (all genuine pairs, as many random impostor
  pairs; embeddings of image + mirror) and its nearest-neighbour identification.

Usage::

    python -m benchmarks.synthetic_learnability                      # 48 px, 5 epochs, 2 threads
    python -m benchmarks.synthetic_learnability --size 64 --epochs 8 --domain lowres

The renderer's nuisance and identity-cue strengths were tuned with this script; run it again
after changing them. Timing depends on the machine (a shared 2-core box takes ~2-6 minutes).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


from pfd.data.synthetic import DOMAINS, SyntheticFaces

TARGET = 0.90


def materialise(faces: SyntheticFaces) -> tuple[torch.Tensor, torch.Tensor]:
    """All images as uint8 ``(n, 3, S, S)`` and labels ``(n,)``."""
    x = np.stack([faces.render(i) for i in range(len(faces))])
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(faces.labels)


def small_cnn(width: int, size: int, dim: int = 128) -> nn.Module:
    def block(i: int, o: int, s: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o), nn.PReLU(o))

    w = width
    return nn.Sequential(
        block(3, w, 1), block(w, w, 2), block(w, w, 1), block(w, 2 * w, 2), block(2 * w, 2 * w, 1),
        block(2 * w, 4 * w, 2), block(4 * w, 4 * w, 1), block(4 * w, 4 * w, 2),
        nn.Flatten(), nn.Linear(4 * w * (size // 16) ** 2, dim, bias=False), nn.BatchNorm1d(dim),
    )


def verification_accuracy(emb: torch.Tensor, labels: torch.Tensor, seed: int = 0) -> float:
    """Best-threshold accuracy over all genuine pairs and as many random impostor pairs."""
    sim, y = (emb @ emb.T).numpy(), labels.numpy()
    iu = np.triu_indices(len(y), 1)
    same = y[iu[0]] == y[iu[1]]
    genuine, impostor = sim[iu][same], sim[iu][~same]
    impostor = np.random.default_rng(seed).choice(impostor, size=len(genuine), replace=False)
    scores = np.concatenate([genuine, impostor])
    truth = np.concatenate([np.ones(len(genuine)), np.zeros(len(impostor))])[np.argsort(-scores)]
    tp, fp = np.cumsum(truth), np.cumsum(1 - truth)
    return float(((tp + len(impostor) - fp) / len(truth)).max())


def nn_top1(emb: torch.Tensor, labels: torch.Tensor, gallery_per_id: int) -> float:
    """Nearest-neighbour identification: first images of each identity are the gallery."""
    y = labels.numpy()
    pos = np.arange(len(y)) - np.searchsorted(y, y)  # index within the identity (labels sorted)
    g, q = pos < gallery_per_id, pos >= gallery_per_id
    pred = y[g][(emb[q] @ emb[g].T).argmax(1).numpy()]
    return float((pred == y[q]).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=48)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--domain", default="clean", choices=DOMAINS, help="domain of the test split")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    t0 = time.perf_counter()
    public = SyntheticFaces("public", size=a.size)
    test = SyntheticFaces("test", size=a.size, domain=a.domain)
    xtr, ytr = materialise(public)
    xte, yte = materialise(test)
    print(f"rendered {len(public)} public + {len(test)} test images at {a.size} px in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)

    pix = xte.float().flatten(1) / 255
    pix = F.normalize(pix - pix.mean(1, keepdim=True), dim=1)
    print(f"raw pixels: verification {verification_accuracy(pix, yte):.3f}, "
          f"NN top-1 {nn_top1(pix, yte, 8):.3f} ({test.num_classes} ids, chance {1 / test.num_classes:.3f})")

    net = small_cnn(a.width, a.size)
    proto = nn.Parameter(torch.randn(public.num_classes, 128) * 0.01)
    opt = torch.optim.SGD([*net.parameters(), proto], lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    scale, margin, batch = 30.0, 0.35, a.batch_size
    steps_per_epoch = len(xtr) // batch
    total = a.epochs * steps_per_epoch

    def embed(x: torch.Tensor) -> torch.Tensor:
        net.eval()
        with torch.no_grad():
            out = [F.normalize(net(b.float() / 255) + net(b.float().flip(3) / 255), dim=1) for b in x.split(256)]
        net.train()
        return torch.cat(out)

    t0, step = time.perf_counter(), 0
    for epoch in range(a.epochs):
        for idx in torch.randperm(len(xtr))[: steps_per_epoch * batch].view(steps_per_epoch, batch):
            for group in opt.param_groups:
                group["lr"] = 0.1 * 0.5 * (1 + math.cos(math.pi * step / total))
            xb, yb = xtr[idx].float() / 255, ytr[idx]
            flip = torch.rand(len(xb)) < 0.5
            xb[flip] = xb[flip].flip(3)
            cos = F.normalize(net(xb), dim=1) @ F.normalize(proto, dim=1).T  # (B, C)
            loss = F.cross_entropy(scale * (cos - margin * F.one_hot(yb, public.num_classes)), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        acc = verification_accuracy(embed(xte), yte)
        print(f"epoch {epoch + 1}: loss {loss.item():.2f}, test verification {acc:.3f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    emb = embed(xte)
    acc = verification_accuracy(emb, yte)
    print(f"CNN after {a.epochs} epochs: test verification {acc:.3f} ({acc / TARGET:.2f}x target {TARGET}), "
          f"NN top-1 {nn_top1(emb, yte, 8):.3f}; train time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
