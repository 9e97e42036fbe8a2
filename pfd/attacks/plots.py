"""Scorecard figures (matplotlib, Agg, no pyplot state): ROC curves, densities, match grids.

* :func:`plot_roc`: log-log ROC curves of the membership statistics (and of the fused
  classifier's out-of-fold scores), with the chance diagonal: the low-FPR region, where an
  attack is useful, is visible only on log axes.
* :func:`plot_densities`: member vs non-member distribution of each statistic, histogram plus a
  Gaussian kernel density estimate (as Fig. 2 of the geometric membership paper).
* :func:`plot_match_grid`: proxies beside their nearest private images (and reconstructions).

Figures are drawn on a ``matplotlib.figure.Figure`` with the Agg canvas (no display needed, no
global pyplot state, safe in threads) and written atomically as small PNGs.
"""

from __future__ import annotations

import io
import os
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pfd.attacks.membership.statistics import STATISTICS
from pfd.attacks.metrics import roc_points
from pfd.io import atomic_write_bytes

__all__ = ["kde", "plot_roc", "plot_densities", "plot_match_grid"]

_LABELS = {"pair_cos": "PairCos", "vmf_kappa": "vMF κ", "pen_logit": "PenLogit", "proto_ce": "ProtoCE"}
_DPI = 90


def _save(fig: Figure, path: str | os.PathLike) -> None:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


def kde(samples: Any, grid: np.ndarray) -> np.ndarray:
    """Gaussian kernel density estimate with Silverman's bandwidth, evaluated on ``grid``.

    ``h = 0.9 · min(σ, IQR/1.34) · n^{-1/5}`` (falls back to σ, then to 1e-3·(1+|mean|), for
    degenerate samples).

    Args:
        samples: ``(n,)`` values.
        grid: ``(G,)`` evaluation points.

    Returns:
        ``(G,)`` density values (integrating to ~1).
    """
    x = np.asarray(samples, dtype=np.float64).ravel()
    sd = x.std(ddof=1) if x.size > 1 else 0.0
    iqr = np.subtract(*np.percentile(x, [75, 25])) / 1.34
    spread = min(sd, iqr) if iqr > 0 else sd
    h = 0.9 * spread * x.size ** (-0.2) if spread > 0 else 1e-3 * (1 + abs(float(x.mean())))
    z = (grid[:, None] - x[None, :]) / h  # (G, n)
    return np.exp(-0.5 * z * z).sum(1) / (x.size * h * np.sqrt(2 * np.pi))


def _log_safe(v: np.ndarray, floor: float) -> np.ndarray:
    return np.maximum(v, floor)


def plot_roc(report: Mapping[str, Any], path: str | os.PathLike, *, title: str = "Membership ROC") -> None:
    """Log-log ROC curves of the four statistics (oriented) and the fused out-of-fold scores.

    Args:
        report: A :func:`pfd.attacks.membership.statistics.membership_report` dict.
        path: PNG destination.
        title: Figure title.
    """
    c = report["counts"]
    fx, fy = 0.5 / c["nonmembers"], 0.5 / c["members"]  # where "0" is drawn on log axes
    fig = Figure(figsize=(4.6, 4.0))
    ax = fig.add_subplot()
    for name in STATISTICS:
        s = report["statistics"][name]
        fpr, tpr = np.asarray(s["roc"]["fpr"]), np.asarray(s["roc"]["tpr"])
        ax.step(_log_safe(fpr, fx), _log_safe(tpr, fy), where="post",
                label=f"{_LABELS[name]} (AUC {s['auc']:.3f})")
    fusion = report.get("fusion", {})
    if "oof_score" in fusion:
        oof = np.asarray(fusion["oof_score"])
        m = c["members"]
        roc = roc_points(oof[:m], oof[m:])
        ax.step(_log_safe(roc["fpr"], fx), _log_safe(roc["tpr"], fy), where="post", color="black",
                linestyle="--", label=f"fused MLP (AUC {fusion['auc_mean']:.3f})")
    grid = np.logspace(np.log10(min(fx, fy)), 0, 50)
    ax.plot(grid, grid, color="grey", linewidth=0.8, linestyle=":", label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(fx, 1.0)
    ax.set_ylim(fy, 1.05)
    ax.set_xlabel("false-positive rate (non-members called members)")
    ax.set_ylabel("true-positive rate")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    _save(fig, path)


def plot_densities(report: Mapping[str, Any], path: str | os.PathLike, *, title: str = "Member / non-member") -> None:
    """Member vs non-member distributions of each statistic (histogram + KDE), 2 x 2 panels.

    Args:
        report: A membership report dict (with ``scores``).
        path: PNG destination.
        title: Figure title.
    """
    fig = Figure(figsize=(7.0, 5.4), layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    for ax, name in zip(axes, STATISTICS):
        mem = np.asarray(report["scores"][name]["members"], dtype=np.float64)
        non = np.asarray(report["scores"][name]["nonmembers"], dtype=np.float64)
        both = np.concatenate([mem, non])
        lo, hi = float(both.min()), float(both.max())
        pad = 0.1 * (hi - lo) if hi > lo else 1e-3 * (1 + abs(lo))
        grid = np.linspace(lo - pad, hi + pad, 200)
        bins = np.linspace(lo - pad, hi + pad, 25)
        for vals, colour, label in ((mem, "tab:red", "members"), (non, "tab:blue", "non-members")):
            ax.hist(vals, bins=bins, density=True, alpha=0.3, color=colour)
            ax.plot(grid, kde(vals, grid), color=colour, label=f"{label} ({vals.size})")
        ax.set_title(f"{_LABELS[name]}: AUC {report['statistics'][name]['auc']:.3f}", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    _save(fig, path)


def _rgb(x: torch.Tensor) -> np.ndarray:
    return x.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy()


def plot_match_grid(
    columns: Sequence[tuple[str, torch.Tensor]],
    path: str | os.PathLike,
    *,
    success: Sequence[bool] | None = None,
    title: str = "Proxies and their nearest private images",
) -> None:
    """A grid with one row per proxy and one column per image kind.

    Args:
        columns: ``[(heading, images (r, 3, H, W) in [0, 1]), ...]``, all with the same ``r``
            (sizes may differ per column).
        path: PNG destination.
        success: Per row, whether the match is of the proxy's source: the row is labelled
            "linked" (red) or "not linked" (green).
        title: Figure title.
    """
    rows = int(columns[0][1].shape[0])
    fig = Figure(figsize=(1.3 * len(columns), 1.35 * rows + 0.4))
    axes = np.atleast_2d(fig.subplots(rows, len(columns), squeeze=False))
    for j, (heading, images) in enumerate(columns):
        for i in range(rows):
            ax = axes[i, j]
            ax.imshow(_rgb(images[i]), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(heading, fontsize=8)
        if success is not None and j == 0:
            for i in range(rows):
                axes[i, 0].set_ylabel("linked" if success[i] else "not linked", fontsize=7,
                                      color="tab:red" if success[i] else "tab:green")
    fig.suptitle(title, fontsize=9)
    _save(fig, path)
