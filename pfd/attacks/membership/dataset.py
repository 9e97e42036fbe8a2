"""Dataset-level membership inference by robust z-scores (Borsukiewicz et al. 2026, Algorithm 1).

Which of K candidate datasets trained a face-recognition model? The hypothesis of the paper is
that a model separates the identities of its own training data best, so their embeddings are
spread most evenly over the sphere and a probe identity is *least* similar to the centroid of
other identities. Algorithm 1:

1. For each candidate ``D_k``: sample ``N`` gallery identities ``I_k`` and ``N`` disjoint probe
   identities ``P_k``; ``c_k = Σ_{i∈I_k} f(i) / ‖Σ_{i∈I_k} f(i)‖``;
   ``x_k = N^{-1} Σ_{j∈P_k} ⟨f(j)/‖f(j)‖, c_k⟩`` (mean probe-to-centroid cosine).
2. For each ``t``: ``x̃ = median_{i≠t} x_i``, ``MAD = median_{i≠t} |x_i − x̃|``,
   ``z̃_t = 0.6745 (x_t − x̃) / MAD``.
3. Rank ascending: the lowest ``z̃`` is the most likely training set.

Readings and choices (the algorithm leaves them open):

* ``f(i)`` for an *identity* ``i``: by default the identity's template, the normalised mean of
  its image embeddings (``per_identity="mean"``), which weights identities equally whatever their
  image counts and removes within-identity noise; ``per_identity="sample"`` uses one random image
  per identity, the literal single-``f(i)`` reading.
* One ``N = min(n, min_k ⌊C_k/2⌋)`` for all candidates: ``‖Σ f(i)‖/N`` shrinks with ``N``, so
  ``x_k`` is only comparable across candidates at equal ``N``.
* ``MAD = 0`` (more than half the other candidates tie): fall back to the mean absolute deviation
  scaled to σ, ``z̃ = (x_t − x̃) / (1.2533·MeanAD)`` (for normal data ``σ ≈ 1.4826·MAD ≈
  1.2533·MeanAD``, so both scales agree); if that is 0 too (all others equal), ``z̃ = ±inf``,
  or 0 when ``x_t`` equals them. Each row says which scale was used.
* At least 3 candidates: with 2, the "others" are one value and have no spread.
"""

from __future__ import annotations

import zlib
from typing import Any, Literal, Mapping

import numpy as np
import torch

from pfd.errors import PfdError

__all__ = [
    "dataset_caveats",
    "identity_templates",
    "probe_centroid_similarity",
    "robust_z",
    "dataset_membership",
    "most_likely",
]

_MAD_TO_Z = 0.6745  # Φ^{-1}(0.75): MAD of a standard normal
_MEANAD_TO_SIGMA = 1.253314  # sqrt(π/2): σ / mean absolute deviation of a normal


def _unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(n, 1e-12)


def identity_templates(
    emb: Any, labels: Any, *, per_identity: Literal["mean", "sample"] = "mean", rng: np.random.Generator | None = None
) -> np.ndarray:
    """One unit vector per identity, in ``np.unique(labels)`` order.

    Args:
        emb: ``(n, D)`` embeddings (numpy or torch).
        labels: ``(n,)`` identity labels.
        per_identity: ``"mean"`` = normalised mean of the identity's normalised embeddings;
            ``"sample"`` = one of its embeddings drawn with ``rng``.
        rng: Generator for ``"sample"``.

    Returns:
        ``(C, D)`` float64 unit rows.

    Raises:
        PfdError: For mismatched shapes or an unknown ``per_identity``.
    """
    e = np.asarray(emb.detach().cpu() if torch.is_tensor(emb) else emb, dtype=np.float64)
    lab = np.asarray(labels.cpu() if torch.is_tensor(labels) else labels).ravel()
    if e.ndim != 2 or e.shape[0] != lab.size or lab.size == 0:
        raise PfdError(f"embeddings {e.shape} and labels ({lab.size},) do not match; pass (n, D) and n labels")
    if not np.isfinite(e).all():
        raise PfdError("embeddings contain NaN or inf; re-run the embedder (check the model and images)")
    _, inv = np.unique(lab, return_inverse=True)
    e = _unit(e)
    if per_identity == "mean":
        sums = np.zeros((inv.max() + 1, e.shape[1]))
        np.add.at(sums, inv, e)  # segment sums
        return _unit(sums)
    if per_identity == "sample":
        rng = rng if rng is not None else np.random.default_rng(0)
        # A random key per row; the row with the smallest key in each identity is its sample.
        order = np.lexsort((rng.random(inv.size), inv))
        first = order[np.r_[True, inv[order][1:] != inv[order][:-1]]]
        return e[first]
    raise PfdError(f"per_identity must be 'mean' or 'sample', got {per_identity!r}")


def probe_centroid_similarity(gallery: np.ndarray, probes: np.ndarray) -> float:
    """Mean probe-to-centroid cosine ``x = N^{-1} Σ_j ⟨f(j)/‖f(j)‖, c⟩`` (Algorithm 1, step 1).

    Args:
        gallery: ``(N, D)`` gallery identity embeddings; ``c = Σ f(i)/‖Σ f(i)‖``.
        probes: ``(M, D)`` probe identity embeddings (normalised here).

    Returns:
        ``x`` in [-1, 1].
    """
    c = _unit(np.asarray(gallery, dtype=np.float64).sum(0))  # (D,)
    return float((_unit(np.asarray(probes, dtype=np.float64)) @ c).mean())


def robust_z(values: Any) -> tuple[np.ndarray, list[str]]:
    """Leave-one-out robust z-score of each value against the others (Algorithm 1, step 2).

    ``z̃_t = 0.6745 (x_t − median_{i≠t} x_i) / MAD_{i≠t}``; when ``MAD = 0`` the mean absolute
    deviation is used, ``z̃_t = (x_t − x̃)/(1.2533·MeanAD)``; when that is 0 as well, ``±inf``
    (or 0 if ``x_t = x̃``).

    Args:
        values: ``(K,)`` values, ``K >= 3``.

    Returns:
        ``(z (K,), scale)`` with ``scale[t]`` in ``{"mad", "meanad", "degenerate"}``.

    Raises:
        PfdError: If fewer than 3 values are given.
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size < 3:
        raise PfdError(f"the robust z-score needs at least 3 candidate datasets, got {x.size}; add candidates")
    z = np.empty_like(x)
    scale: list[str] = []
    for t in range(x.size):  # K is small (a handful of candidate datasets)
        others = np.delete(x, t)
        med = np.median(others)
        dev = np.abs(others - med)
        mad = np.median(dev)
        if mad > 0:
            z[t] = _MAD_TO_Z * (x[t] - med) / mad
            scale.append("mad")
        elif dev.mean() > 0:
            z[t] = (x[t] - med) / (_MEANAD_TO_SIGMA * dev.mean())
            scale.append("meanad")
        else:
            z[t] = 0.0 if x[t] == med else np.copysign(np.inf, x[t] - med)
            scale.append("degenerate")
    return z, scale


def _content_key(templates: np.ndarray) -> int:
    """A 32-bit key of a candidate's identity templates: the same data, the same key, whatever its name."""
    return zlib.crc32(np.ascontiguousarray(templates, dtype=np.float64).tobytes())


def _rng(seed: int, key: int) -> np.random.Generator:
    # Seeded per candidate by its content (not its name or position): a candidate's sample does not
    # depend on the others, and two byte-identical candidates draw the same sample (issue 27: a
    # copy of a folder under another name scored differently and was named the training set).
    return np.random.default_rng([seed, key])


def dataset_membership(
    candidates: Mapping[str, tuple[Any, Any]],
    *,
    n: int = 500,
    seed: int = 0,
    per_identity: Literal["mean", "sample"] = "mean",
) -> list[dict[str, Any]]:
    """Rank candidate datasets by how likely each trained the model (Algorithm 1).

    Args:
        candidates: ``{name: (emb (n_k, D), labels (n_k,))}``, embeddings of each candidate
            dataset by the model under audit.
        n: Requested gallery (= probe) identities per candidate; the paper uses 500. The value
            used is ``min(n, min_k ⌊C_k/2⌋)`` for every candidate.
        seed: Sampling seed.
        per_identity: How an identity becomes one embedding ``f(i)`` (see module docstring).

    Returns:
        Rows sorted by ascending ``z`` (rank 1 = most likely training set), each
        ``{"rank", "name", "z", "x", "median_others", "mad_others", "scale", "n", "identities"}``.

    Raises:
        PfdError: With fewer than 3 candidates, a candidate of fewer than 2 identities,
            mismatched shapes or embedding dimensions, or ``n < 1``.
    """
    if len(candidates) < 3:
        raise PfdError(f"dataset MIA needs at least 3 candidate datasets, got {len(candidates)}; add candidates")
    if n < 1:
        raise PfdError(f"n must be >= 1, got {n}")
    templates: dict[str, np.ndarray] = {}
    for name, (emb, labels) in candidates.items():
        try:
            key = _content_key(identity_templates(emb, labels))
            templates[name] = identity_templates(emb, labels, per_identity=per_identity, rng=_rng(seed + 1, key))
        except PfdError as err:
            raise PfdError(f"candidate {name!r}: {err}") from None
        if len(templates[name]) < 2:
            raise PfdError(f"candidate {name!r} has {len(templates[name])} identity; it needs >= 2 (gallery + probe)")
    dims = {t.shape[1] for t in templates.values()}
    if len(dims) > 1:
        raise PfdError(f"candidates have different embedding dimensions {sorted(dims)}; embed all with one model")
    n_used = min(n, min(len(t) // 2 for t in templates.values()))

    names = list(templates)
    keys = {name: _content_key(t) for name, t in templates.items()}
    x = np.empty(len(names))
    for k, name in enumerate(names):
        pick = _rng(seed, keys[name]).choice(len(templates[name]), size=2 * n_used, replace=False)
        gallery, probe = templates[name][pick[:n_used]], templates[name][pick[n_used:]]  # disjoint
        x[k] = probe_centroid_similarity(gallery, probe)
    z, scale = robust_z(x)

    rows = []
    for k, name in enumerate(names):
        others = np.delete(x, k)
        med = float(np.median(others))
        rows.append({
            "name": name,
            "z": float(z[k]),
            "x": float(x[k]),
            "median_others": med,
            "mad_others": float(np.median(np.abs(others - med))),
            "scale": scale[k],
            "n": n_used,
            "identities": len(templates[name]),
            # Another candidate with the very same embeddings: the z-score counts it as a second dataset.
            "duplicate_of": next((o for o in names if o != name and keys[o] == keys[name]
                                  and np.array_equal(templates[o], templates[name])), None),
        })
    rows.sort(key=lambda r: (r["z"], r["name"]))
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    return rows


def most_likely(rows: list[dict[str, Any]]) -> str:
    """Name of the candidate with the lowest robust z-score (the inferred training set).

    Args:
        rows: Output of :func:`dataset_membership`.

    Returns:
        The name of the rank-1 row.
    """
    return min(rows, key=lambda r: (r["z"], r["name"]))["name"]


#: Fewer candidates than this leave the robust z-score with too few "others" to read a low z as a finding.
FEW_CANDIDATES = 5


def dataset_caveats(rows: list[dict[str, Any]]) -> list[str]:
    """What a reader must know before naming rank 1 the training set (one sentence each).

    Args:
        rows: Output of :func:`dataset_membership`.

    Returns:
        Caveats: duplicate candidates (identical embeddings), and few candidates (``< 5``: the
        median and MAD of 2-3 other values; a model trained on none of them still has a rank 1).
    """
    out = []
    dups = sorted({tuple(sorted((r["name"], r["duplicate_of"]))) for r in rows if r.get("duplicate_of")})
    for a, b in dups:
        out.append(f"{a} and {b} hold identical embeddings (the same data twice): they score alike and the z-score "
                   "counts them as two datasets; list each dataset once")
    if len(rows) < FEW_CANDIDATES:
        out.append(f"only {len(rows)} candidates: each z-score rests on {len(rows) - 1} other values, and a model trained "
                   f"on none of them still has a rank 1; read the ranking as a hint, with {FEW_CANDIDATES} or more "
                   "candidates as evidence")
    return out
