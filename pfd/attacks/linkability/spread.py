"""How tight a release's classes are in a model, in the units of the verdict's null simulation.

The verdict's calibration (:func:`pfd.attacks.null.simulate`, ``python -m benchmarks.verdict_calibration``)
draws each identity's photos, and each source's K proxies, around a centre of their own with a spread
``sigma`` in ``D = 64`` dimensions: ``x = (c + sigma g) / |c + sigma g|`` with ``c`` a unit centre and
``g ~ N(0, I_D)``. Two members of one class then have an expected cosine of about
``1 / (1 + sigma² D)`` (the centre's unit weight against the noise's ``sigma² D``), and members of
different classes about 0. How tight real classes are decides which of the calibration's cells a
real release resembles: tight classes (a source's proxies nearly one point) make every rate count
about one trial per class, which is what the rule-out was redesigned for (issue 57).

A real model is anisotropic: two unrelated faces have a positive mean cosine ``b``. The mean
within-class cosine ``w`` is therefore measured against it, ``w' = (w - b) / (1 - b)`` (the share of
the cosine that the class adds over an unrelated pair, 0 for no class structure and 1 for identical
members), and mapped to the simulation's spread by inverting the expectation above:
``sigma = sqrt((1 / w' - 1) / D)``.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import numpy as np
import torch

from pfd.attacks.linkability.matching import _as_tensor, _unit
from pfd.errors import PfdError

#: The embedding dimension of the verdict's null simulation (:func:`pfd.attacks.null.simulate`'s ``dim``).
SIM_DIM = 64

__all__ = ["SIM_DIM", "ClassSpread", "class_spread", "simulation_sigma"]


class ClassSpread(TypedDict):
    """How tight a set's classes are in one model (:func:`class_spread`).

    Attributes:
        within: Mean over classes of the mean cosine between two members of the class.
        between: Mean cosine between members of different classes.
        excess: ``(within - between) / (1 - between)``: what the class adds over an unrelated pair.
        sigma: The null simulation's spread with the same ``excess`` (``inf``: no class structure).
        classes: Classes with at least two members (the only ones that say anything).
    """

    within: float
    between: float
    excess: float
    sigma: float
    classes: int


def simulation_sigma(excess: float, *, dim: int = SIM_DIM) -> float:
    """The null simulation's spread whose members share ``excess`` of their cosine.

    Args:
        excess: The within-class cosine over an unrelated pair's, ``(w - b) / (1 - b)``, in (0, 1].
        dim: The simulation's embedding dimension.

    Returns:
        ``sqrt((1 / excess - 1) / dim)``; ``inf`` where ``excess <= 0`` (members no closer than strangers).
    """
    if not excess > 0:  # also NaN
        return math.inf
    return math.sqrt(max(1.0 / min(excess, 1.0) - 1.0, 0.0) / dim)


def class_spread(emb: Any, labels: Any, *, dim: int = SIM_DIM) -> ClassSpread | None:
    """How tight the classes of ``emb`` are, and the null simulation's matching spread.

    Every pairwise mean comes from class sums (``|Σ x|² = n + Σ_{i≠j} x_i·x_j`` for unit rows), so the
    cost is one pass over the rows, whatever the number of classes.

    Args:
        emb: ``(n, D)`` embeddings (normalised here).
        labels: ``(n,)`` class of each row.
        dim: The simulation's embedding dimension.

    Returns:
        A :class:`ClassSpread`; ``None`` where there is nothing to measure (fewer than two classes, or
        no class with two members: a release of one proxy per identity).

    Raises:
        PfdError: Embeddings that are not a finite ``(n, D)`` matrix, or not one label per row.
    """
    x = _unit(_as_tensor(emb, "embeddings").to(torch.float64))  # (n, D)
    uniq, group = np.unique(np.asarray(labels).ravel(), return_inverse=True)
    if len(group) != len(x):
        raise PfdError(f"{len(x)} embeddings but {len(group)} class labels; pass one label per row")
    sums = torch.zeros(len(uniq), x.shape[1], dtype=torch.float64).index_add_(0, torch.as_tensor(group), x)  # (C, D)
    counts = np.bincount(group, minlength=len(uniq)).astype(np.float64)  # (C,)
    own = (sums * sums).sum(1).numpy()  # (C,) |Σ_class x|² = n_c + Σ_{i≠j} cos
    pairs = counts * (counts - 1)
    ok = pairs > 0
    if len(uniq) < 2 or not ok.any():
        return None
    within = float(np.mean((own[ok] - counts[ok]) / pairs[ok]))
    total = float((sums.sum(0) ** 2).sum())  # |Σ x|²
    cross = len(x) ** 2 - float((counts ** 2).sum())  # ordered pairs from different classes
    between = (total - float(own.sum())) / cross
    excess = (within - between) / (1.0 - between) if between < 1 else 0.0
    return ClassSpread(within=within, between=between, excess=excess, sigma=simulation_sigma(excess, dim=dim),
                       classes=int(ok.sum()))
