"""Fusion of the geometric membership statistics by a small MLP (geometric MIA paper §5.4).

The paper trains "a two-hidden-layer MLP (64 → 32 units, ReLU, BatchNorm, dropout 0.3; Adam with
η = 1e-3) on all four cluster statistics" under five-fold stratified cross-validation,
"reserving 15 % of each training fold as a validation set for early stopping", and compares
the fold-averaged MLP AUC with the best single statistic. This module does exactly that on a
``(n_identities, n_features)`` matrix, on the CPU and deterministically for a given seed.

Choices the paper leaves open (documented here so that figures can be reproduced):

* layer order ``Linear → BatchNorm → ReLU → Dropout``; output one logit, BCE loss;
* mini-batches of ``max(64, ⌈n_fit/32⌉)`` rows — 64 for the paper's few thousand identities,
  larger beyond so that an epoch is at most ~32 steps (a final batch of one row is merged into
  the previous one, since BatchNorm cannot train on a single row); at most 200 epochs; early stopping on the validation
  BCE with patience 20, restoring the best weights;
* features standardised with the mean/std of the training fold only (never the test fold);
* the single-statistic baseline is scored on the *same* test folds; its direction (higher or
  lower = member) is chosen on the training fold, as the MLP's is. The "best single" is the
  statistic with the highest fold-mean AUC, chosen after the fact — which favours the baseline,
  so ``fusion ≥ best single`` is a conservative comparison.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn

from pfd.errors import PfdError

__all__ = ["FusionMLP", "fusion_cv"]


class FusionMLP(nn.Sequential):
    """``F → 64 → 32 → 1`` with BatchNorm, ReLU and dropout after each hidden layer (§5.4).

    Args:
        in_features: Number of input statistics (4 in the paper).
        hidden: Hidden widths.
        dropout: Dropout probability.
    """

    def __init__(self, in_features: int = 4, *, hidden: Sequence[int] = (64, 32), dropout: float = 0.3) -> None:
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        layers.append(nn.Linear(width, 1))
        super().__init__(*layers)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    # A 4->64->32->1 MLP is all per-op overhead: more intra-op threads only add synchronisation
    # (measured ~7x slower with 2 threads on a busy 2-core machine). The setting is restored.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _batches(n: int, batch_size: int, gen: torch.Generator) -> list[torch.Tensor]:
    parts = list(torch.randperm(n, generator=gen).split(batch_size))
    if len(parts) > 1 and len(parts[-1]) == 1:  # BatchNorm needs >= 2 rows in train mode
        parts[-2:] = [torch.cat(parts[-2:])]
    return parts


def _fit(
    x_tr: np.ndarray,
    y_tr: np.ndarray,
    x_va: np.ndarray,
    y_va: np.ndarray,
    *,
    seed: int,
    lr: float,
    batch_size: int,
    max_epochs: int,
    patience: int,
) -> tuple[FusionMLP, int]:
    """Train one MLP with early stopping; returns the best-validation model and its epoch."""
    xt, yt = torch.as_tensor(x_tr, dtype=torch.float32), torch.as_tensor(y_tr, dtype=torch.float32)
    xv, yv = torch.as_tensor(x_va, dtype=torch.float32), torch.as_tensor(y_va, dtype=torch.float32)
    torch.manual_seed(seed)  # init and dropout; the caller forks the global RNG
    gen = torch.Generator().manual_seed(seed)
    model = FusionMLP(xt.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.BCEWithLogitsLoss()
    best, best_state, best_epoch, wait = float("inf"), copy.deepcopy(model.state_dict()), 0, 0
    for epoch in range(1, max_epochs + 1):
        model.train()
        for idx in _batches(len(xt), batch_size, gen):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(xt[idx])[:, 0], yt[idx]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            val = float(loss_fn(model(xv)[:, 0], yv))
        if val < best - 1e-7:
            best, best_state, best_epoch, wait = val, copy.deepcopy(model.state_dict()), epoch, 0
        else:
            wait += 1
            if wait >= patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    return model, best_epoch


def fusion_cv(
    features: np.ndarray,
    is_member: np.ndarray,
    *,
    folds: int = 5,
    seed: int = 0,
    val_fraction: float = 0.15,
    lr: float = 1e-3,
    batch_size: int | None = None,
    max_epochs: int = 200,
    patience: int = 20,
    feature_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Stratified k-fold CV of the fusion MLP beside every single statistic (§5.4).

    For each fold of ``StratifiedKFold(folds, shuffle=True, random_state=seed)``: split off a
    stratified ``val_fraction`` of the training fold for early stopping, standardise with the
    training fold's statistics, train :class:`FusionMLP`, and score the held-out fold by AUC.

    Args:
        features: ``(n, F)`` per-identity statistics.
        is_member: ``(n,)`` bool, True for members.
        folds: Number of folds (paper: 5).
        seed: Seed of the fold split, the validation split, the initialisation and dropout.
        val_fraction: Fraction of each training fold held out for early stopping (paper: 0.15).
        lr: Adam learning rate (paper: 1e-3).
        batch_size: Mini-batch size; ``None`` = ``max(64, ceil(n_fit / 32))``.
        max_epochs: Upper bound on epochs.
        patience: Epochs without validation improvement before stopping.
        feature_names: Names of the feature columns (default ``f0, f1, ...``).

    Returns:
        ``{"auc_mean", "auc_std", "fold_auc": [...], "epochs": [...], "oof_score": [...],
        "single": {name: {"auc_mean", "auc_std", "fold_auc"}}, "best_single": {"statistic",
        "auc_mean", "auc_std"}, "gain": auc_mean − best single, "chance": 0.5, "folds", "seed"}``;
        ``oof_score`` is each identity's out-of-fold member probability (for a pooled ROC).

    Raises:
        PfdError: If shapes mismatch, features are not finite, or a class has <= ``folds`` rows.
    """
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(is_member).astype(bool).ravel()
    if x.ndim != 2 or x.shape[0] != y.size:
        raise PfdError(f"fusion: features {x.shape} do not match {y.size} membership flags")
    if not np.isfinite(x).all():
        raise PfdError("fusion: features contain NaN or inf; check the per-identity statistics")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if min(n_pos, n_neg) <= folds:
        raise PfdError(
            f"fusion with {folds} folds needs more than {folds} members and non-members "
            f"(have {n_pos} and {n_neg}); add identities or lower folds"
        )
    names = list(feature_names) if feature_names is not None else [f"f{j}" for j in range(x.shape[1])]
    yi = y.astype(np.int64)
    skf = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    fold_auc: list[float] = []
    epochs: list[int] = []
    single: dict[str, list[float]] = {n: [] for n in names}
    oof = np.zeros(yi.size)
    with torch.random.fork_rng(devices=[]), _one_thread():
        for f, (tr, te) in enumerate(skf.split(x, yi)):
            n_val = max(2, int(round(val_fraction * tr.size)))
            fit, val = train_test_split(tr, test_size=n_val, stratify=yi[tr], random_state=seed + f)
            scaler = StandardScaler().fit(x[tr])
            bs = batch_size if batch_size is not None else max(64, -(-fit.size // 32))
            model, ep = _fit(
                scaler.transform(x[fit]), yi[fit], scaler.transform(x[val]), yi[val],
                seed=seed * 1000 + f, lr=lr, batch_size=bs, max_epochs=max_epochs, patience=patience,
            )
            with torch.no_grad():
                p = torch.sigmoid(model(torch.as_tensor(scaler.transform(x[te]), dtype=torch.float32))[:, 0]).numpy()
            oof[te] = p
            fold_auc.append(float(roc_auc_score(yi[te], p)))
            epochs.append(ep)
            for j, n in enumerate(names):
                # Direction from the training fold, as the MLP learns its own from it.
                sign = 1.0 if roc_auc_score(yi[tr], x[tr, j]) >= 0.5 else -1.0
                single[n].append(float(roc_auc_score(yi[te], sign * x[te, j])))

    singles = {n: {"auc_mean": float(np.mean(v)), "auc_std": float(np.std(v)), "fold_auc": v} for n, v in single.items()}
    best = max(names, key=lambda n: singles[n]["auc_mean"])
    mean = float(np.mean(fold_auc))
    return {
        "auc_mean": mean,
        "auc_std": float(np.std(fold_auc)),
        "fold_auc": fold_auc,
        "epochs": epochs,
        "oof_score": oof.tolist(),
        "single": singles,
        "best_single": {"statistic": best, "auc_mean": singles[best]["auc_mean"], "auc_std": singles[best]["auc_std"]},
        "gain": mean - singles[best]["auc_mean"],
        "chance": 0.5,
        "folds": folds,
        "seed": seed,
    }
