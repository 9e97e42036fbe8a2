"""Face-verification metrics over pair scores: k-fold accuracy, TAR@FAR, EER, ROC, AUC.

Every metric here is a pure function of two aligned arrays: ``scores`` (one cosine similarity per
pair, higher = more alike) and ``issame`` (``True`` for a genuine pair, ``False`` for an impostor).

Decision rule, used everywhere: a pair is **accepted** (predicted "same person") iff
``score > threshold`` (strictly). This is insightface's rule ``dist < t`` on squared L2 distances
of unit vectors rewritten for cosines: ``||a-b||² = 2 - 2cos`` so ``dist < t`` ⇔ ``cos > 1 - t/2``.

k-fold accuracy follows insightface's ``calculate_roc`` (arcface_torch ``eval/verification.py``):
the pairs are cut into ``folds`` *contiguous* folds in file order (``KFold(n_splits, shuffle=False)``:
the first ``n % folds`` folds get one extra pair), the threshold with the best accuracy on the other
folds is chosen and applied to the held-out fold; reported are the mean and the population
standard deviation (``np.std``) of the held-out accuracies. Threshold candidates default to all
midpoints between consecutive distinct *training-fold* scores plus one below and one at the
maximum (accept-all / accept-none), so the choice is exact (no grid resolution) and depends on the
training folds only; :func:`insightface_thresholds` gives insightface's own grid for bit-compatible
figures. Ties in training accuracy go to the largest (strictest) threshold, as ``np.argmax`` over
insightface's ascending distance grid does.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from pfd.config import EvalConfig, validate_config
from pfd.data.shape import canonical_size
from pfd.errors import PfdError
from pathlib import Path
from pfd.data.pair_sampling import generate_pairs
from pfd.data.pairs import read_bin, read_pairs_txt
from pfd.data.sources import open_faces
from pfd.embed import Embedder
from pfd.io import atomic_write_json
from pfd.nn.checkpoints import load_backbone

__all__ = [
    "insightface_thresholds",
    "kfold_accuracy",
    "roc_curve_points",
    "tar_at_far",
    "tar_key",
    "eer",
    "roc_auc",
    "verification_metrics",
    "evaluate_pairs",
    "format_metrics_table",
    "evaluate",
]

#: FAR targets reported by :func:`verification_metrics` by default.
FAR_TARGETS = (1e-3, 1e-4)


def tar_key(far: float) -> str:
    """The one name of a TAR at a false-accept rate, in every figure pfd writes: ``tar@far=0.001``."""
    return f"tar@far={float(far):g}"


def _check(scores: Any, issame: Any, *, need_both: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert to ``(float64 (n,), bool (n,))``; one-line PfdError on bad input."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(issame).reshape(-1)
    if y.dtype != np.bool_:
        if not np.isin(y, (0, 1)).all():
            raise PfdError("verification pairs: issame must be boolean (or 0/1); fix the pairs file")
        y = y.astype(bool)
    if s.shape != y.shape:
        raise PfdError(f"verification pairs: {s.size} scores but {y.size} issame labels; they must align")
    if not np.isfinite(s).all():
        raise PfdError(
            f"verification pairs: {int((~np.isfinite(s)).sum())} scores are NaN/inf "
            "(diverged or broken model?); check the checkpoint"
        )
    if need_both and (y.all() or not y.any()):
        kind = "impostor" if y.all() else "genuine"
        raise PfdError(f"verification pairs: no {kind} pairs among {y.size}; metrics need both kinds")
    return s, y


def insightface_thresholds() -> np.ndarray:
    """insightface's accuracy grid ``np.arange(0, 4, 0.01)`` on squared L2 distance, as cosines.

    Returns:
        ``1 - np.arange(0, 4, 0.01) / 2`` (400 values from 1 down to -0.995): with
        ``kfold_accuracy(..., thresholds=insightface_thresholds())`` the accepted pairs are the
        same as insightface's at every grid point.
    """
    return 1.0 - np.arange(0, 4, 0.01) / 2.0


def _accuracies(s: np.ndarray, y: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Accuracy of ``accept iff s > t`` for every ``t`` in ``thresholds``; O((n+m) log n)."""
    gen = np.sort(s[y])
    imp = np.sort(s[~y])
    # genuine accepted: #gen > t ; impostor rejected: #imp <= t
    tp = gen.size - np.searchsorted(gen, thresholds, side="right")
    tn = np.searchsorted(imp, thresholds, side="right")
    return (tp + tn) / max(s.size, 1)


def _candidates(s: np.ndarray) -> np.ndarray:
    """Midpoints of consecutive distinct scores plus accept-all and accept-none thresholds."""
    u = np.unique(s)
    if u.size == 0:
        return np.zeros(1)
    return np.concatenate([[u[0] - 1.0], (u[:-1] + u[1:]) / 2.0, [u[-1]]])


def _fold_bounds(n: int, folds: int) -> list[tuple[int, int]]:
    """Contiguous folds exactly as ``sklearn.model_selection.KFold(folds, shuffle=False)``."""
    sizes = np.full(folds, n // folds, dtype=np.int64)
    sizes[: n % folds] += 1
    ends = np.cumsum(sizes)
    return [(int(e - z), int(e)) for z, e in zip(sizes, ends)]


def kfold_accuracy(
    scores: Any,
    issame: Any,
    *,
    folds: int = 10,
    thresholds: np.ndarray | None = None,
) -> tuple[float, float, float]:
    """Verification accuracy under the insightface / LFW k-fold protocol.

    For each contiguous fold, the threshold maximising accuracy on the *other* folds is applied
    to it; ties go to the largest threshold. ``folds=1`` tunes and tests on all pairs (optimistic).

    Args:
        scores: Cosine similarity per pair, shape ``(n,)``.
        issame: Genuine (True) / impostor (False) per pair, shape ``(n,)``, in file order.
        folds: Number of contiguous folds.
        thresholds: Candidate thresholds (cosine); default: midpoints of the training-fold scores
            (exact), or e.g. :func:`insightface_thresholds` to reproduce insightface.

    Returns:
        ``(mean accuracy, std of the fold accuracies, mean chosen threshold)``.

    Raises:
        PfdError: Misaligned/NaN input, a single kind of pair, or fewer pairs than folds.
    """
    s, y = _check(scores, issame)
    if folds < 1 or folds > s.size:
        raise PfdError(f"verification pairs: cannot make {folds} folds from {s.size} pairs; use --folds 1..{s.size}")
    grid = None if thresholds is None else np.sort(np.asarray(thresholds, dtype=np.float64).reshape(-1))
    accs, chosen = [], []
    for lo, hi in _fold_bounds(s.size, folds):
        test = np.zeros(s.size, dtype=bool)
        test[lo:hi] = True
        train = ~test if folds > 1 else test
        cand = _candidates(s[train]) if grid is None else grid
        acc_train = _accuracies(s[train], y[train], cand)
        # ascending candidates: the LAST maximiser is the strictest (largest) threshold
        best = cand[cand.size - 1 - int(np.argmax(acc_train[::-1]))]
        chosen.append(best)
        accs.append(float(_accuracies(s[test], y[test], np.array([best]))[0]))
    return float(np.mean(accs)), float(np.std(accs)), float(np.mean(chosen))


def roc_curve_points(scores: Any, issame: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every operating point of the empirical ROC.

    Args:
        scores: Cosine similarity per pair, shape ``(n,)``.
        issame: Genuine / impostor per pair, shape ``(n,)``.

    Returns:
        ``(fpr, tpr, thresholds)``, each of length ``#distinct scores + 1``: the thresholds are the
        distinct scores in descending order followed by ``-inf``; point ``j`` accepts the pairs
        with ``score > thresholds[j]``, from ``(0, 0)`` (accept none) to ``(1, 1)`` (accept all).
        The ``fpr``/``tpr`` arrays equal ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``
        (whose thresholds label the same points with ``>=``).

    Raises:
        PfdError: Misaligned/NaN input or a single kind of pair.
    """
    s, y = _check(scores, issame)
    thr = np.concatenate([np.unique(s)[::-1], [-np.inf]])
    gen = np.sort(s[y])
    imp = np.sort(s[~y])
    tpr = (gen.size - np.searchsorted(gen, thr, side="right")) / gen.size
    fpr = (imp.size - np.searchsorted(imp, thr, side="right")) / imp.size
    return fpr, tpr, thr


def tar_at_far(scores: Any, issame: Any, far: float) -> tuple[float, float]:
    """True accept rate at a false accept rate of at most ``far`` (on all pairs, no folds).

    With ``N`` impostor pairs at most ``k = floor(far * N)`` of them may be accepted. Sorting the
    impostor scores in descending order, the threshold is the ``(k+1)``-th largest impostor score
    ``t``: accepting ``score > t`` admits at most ``k`` impostors (fewer when ``t`` is tied with
    higher impostor scores), and any lower threshold admits at least ``k+1``. The TAR is the
    fraction of genuine scores ``> t``; this is the largest TAR reachable at FAR <= ``far``.

    When ``far * N < 1`` the only admissible operating point is "no impostor accepted", whose
    true FAR the data cannot bound below ~``1/N``: the target is **not resolvable** and both
    values are ``nan`` (never a number the data cannot support).

    Args:
        scores: Cosine similarity per pair, shape ``(n,)``.
        issame: Genuine / impostor per pair, shape ``(n,)``.
        far: Target false accept rate in ``(0, 1]``.

    Returns:
        ``(tar, threshold)``; ``(nan, nan)`` when ``far < 1 / #impostors``.

    Raises:
        PfdError: Misaligned/NaN input, a single kind of pair, or ``far`` outside ``(0, 1]``.
    """
    s, y = _check(scores, issame)
    if not 0.0 < far <= 1.0:
        raise PfdError(f"tar_at_far: far must lie in (0, 1], got {far}")
    imp = np.sort(s[~y])[::-1]  # descending
    # tolerance so that e.g. 1e-3 * 3000 = 3.0000000000000004 counts as 3, not 2.999...
    k = int(math.floor(far * imp.size + 1e-9))
    if k < 1:
        return float("nan"), float("nan")
    if k >= imp.size:  # every impostor may be accepted
        return 1.0, float("-inf")
    t = float(imp[k])
    return float(np.mean(s[y] > t)), t


def eer(scores: Any, issame: Any) -> float:
    """Equal error rate: where the false accept rate equals the false reject rate.

    Found on the piecewise-linear empirical ROC (:func:`roc_curve_points`): on the segment where
    ``fpr - fnr`` changes sign (``fnr = 1 - tpr``), the crossing is interpolated linearly.

    Args:
        scores: Cosine similarity per pair, shape ``(n,)``.
        issame: Genuine / impostor per pair, shape ``(n,)``.

    Returns:
        The EER in ``[0, 1]`` (0 for separable scores).

    Raises:
        PfdError: Misaligned/NaN input or a single kind of pair.
    """
    fpr, tpr, _ = roc_curve_points(scores, issame)
    d = fpr - (1.0 - tpr)  # goes from -1 (accept none) to +1 (accept all), non-decreasing
    j = int(np.argmax(d >= 0))  # first point at or past the crossing (d[0] = -1 < 0)
    if d[j] == 0:
        return float(fpr[j])
    lam = -d[j - 1] / (d[j] - d[j - 1])
    return float(fpr[j - 1] + lam * (fpr[j] - fpr[j - 1]))


def roc_auc(scores: Any, issame: Any) -> float:
    """Area under the ROC curve: P(genuine score > impostor score) + ½ P(tie).

    Computed from average ranks (Mann-Whitney U), so ties count one half, exactly like
    ``sklearn.metrics.roc_auc_score``.

    Args:
        scores: Cosine similarity per pair, shape ``(n,)``.
        issame: Genuine / impostor per pair, shape ``(n,)``.

    Returns:
        The AUC in ``[0, 1]``.

    Raises:
        PfdError: Misaligned/NaN input or a single kind of pair.
    """
    s, y = _check(scores, issame)
    _, inv, counts = np.unique(s, return_inverse=True, return_counts=True)
    # average 1-based rank of each distinct value: (first + last) / 2
    last = np.cumsum(counts)
    avg_rank = last - (counts - 1) / 2.0
    ranks = avg_rank[inv]
    n_gen, n_imp = int(y.sum()), int((~y).sum())
    u = ranks[y].sum() - n_gen * (n_gen + 1) / 2.0
    return float(u / (n_gen * n_imp))


def verification_metrics(scores: Any, issame: Any, *, folds: int = 10,
                         fars: Sequence[float] = FAR_TARGETS) -> dict[str, Any]:
    """All verification figures for one set of pairs.

    Args:
        scores: Cosine similarity per pair, shape ``(n,)``, in file order (folds are contiguous).
        issame: Genuine / impostor per pair, shape ``(n,)``.
        folds: Folds for :func:`kfold_accuracy`.
        fars: The false-accept rates whose TAR is reported (default :data:`FAR_TARGETS`).

    Returns:
        JSON-ready dict: ``accuracy``, ``accuracy_std``, ``threshold`` (mean k-fold cosine
        threshold), a TAR per FAR named by :func:`tar_key` (``tar@far=0.001``, ``tar@far=0.0001``;
        ``None`` when the pairs hold fewer than ``1/far`` impostors, see :func:`tar_at_far`), ``eer``,
        ``auc``, ``num_pairs``, ``num_genuine``, ``num_impostor``, ``min_resolvable_far``
        (``1 / num_impostor``).

    Raises:
        PfdError: As :func:`kfold_accuracy`.
    """
    s, y = _check(scores, issame)
    acc, std, thr = kfold_accuracy(s, y, folds=folds)
    out: dict[str, Any] = {"accuracy": acc, "accuracy_std": std, "threshold": thr}
    for far in fars:
        tar, _ = tar_at_far(s, y, far)
        out[tar_key(far)] = None if math.isnan(tar) else tar
    n_imp = int((~y).sum())
    out.update(
        eer=eer(s, y),
        auc=roc_auc(s, y),
        num_pairs=int(s.size),
        num_genuine=int(y.sum()),
        num_impostor=n_imp,
        min_resolvable_far=1.0 / n_imp,
    )
    return out


def evaluate_pairs(
    embedder: Callable[[Any], torch.Tensor], pairs: Any, *, folds: int = 10
) -> dict[str, Any]:
    """Embed the images of a set of verification pairs once and compute :func:`verification_metrics`.

    Args:
        embedder: Maps a FaceSet to L2-normalised embeddings ``(n, D)``, e.g. a
            :class:`pfd.embed.Embedder`.
        pairs: A ``pfd.data.pairs.VerificationPairs`` (``faces`` FaceSet, ``left``/``right``
            sample indices, ``issame`` bool), all arrays of shape ``(P,)``.
        folds: Folds for the accuracy.

    Returns:
        The metrics dict of :func:`verification_metrics`.

    Raises:
        PfdError: Pair indices outside the face set, or as :func:`verification_metrics`.
    """
    left = np.asarray(pairs.left, dtype=np.int64).reshape(-1)
    right = np.asarray(pairs.right, dtype=np.int64).reshape(-1)
    n = len(pairs.faces)
    if left.shape != right.shape:
        raise PfdError(f"verification pairs: {left.size} left but {right.size} right indices; they must align")
    both = np.concatenate([left, right])
    if both.size and (both.min() < 0 or both.max() >= n):
        raise PfdError(f"verification pairs: image index {int(both.max())} outside the {n} images; regenerate the pairs")
    # Embed each referenced image once (pairs reuse images heavily).
    used, inv = np.unique(both, return_inverse=True)
    faces = pairs.faces if used.size == n else pairs.faces.subset(used, relabel=False)
    emb = embedder(faces).float()  # (U, D), unit rows
    if emb.shape[0] != used.size:
        raise PfdError(f"embedder returned {emb.shape[0]} embeddings for {used.size} images")
    idx = torch.from_numpy(inv)
    e_left, e_right = emb[idx[: left.size]], emb[idx[left.size :]]  # (P, D) each
    scores = (e_left * e_right).sum(dim=1).double().numpy()
    return verification_metrics(scores, pairs.issame, folds=folds)


def format_metrics_table(metrics: Mapping[str, Any]) -> str:
    """A short aligned two-column table of a metrics dict for the terminal.

    Args:
        metrics: As returned by :func:`verification_metrics` (extra keys are listed too).

    Returns:
        Lines ``name  value``; rates with 4 decimals, accuracy as ``mean ± std``, unresolvable
        TAR@FAR as ``n/a (FAR < 1/#impostors)``.
    """
    rows: list[tuple[str, str]] = []
    m = dict(metrics)
    if "accuracy" in m:
        acc = f"{m.pop('accuracy'):.4f}"
        if "accuracy_std" in m:
            acc += f" ± {m.pop('accuracy_std'):.4f}"
        rows.append(("accuracy", acc))
    for key, val in m.items():
        if val is None and key.startswith("tar@far"):
            text = "n/a (FAR < 1/#impostors)"
        elif isinstance(val, bool) or isinstance(val, (int, np.integer)):
            text = str(val)
        elif isinstance(val, (float, np.floating)):
            text = f"{val:.3g}" if key == "min_resolvable_far" else f"{val:.4f}"
        else:
            text = str(val)
        rows.append((key, text))
    width = max(len(k) for k, _ in rows) if rows else 0
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def evaluate(cfg: EvalConfig, *, model: Any | None = None, progress: bool = False) -> dict[str, Any]:
    """``pfd eval``: verification metrics of a model on a pairs file, a ``.bin`` or generated pairs.

    Args:
        cfg: Evaluation configuration. ``cfg.model`` is a checkpoint (pfd, insightface or AdaFace
            format); ``cfg.pairs`` a ``pairs.txt`` (images under ``cfg.data``) or a ``.bin``; when
            ``cfg.pairs`` is empty, ``cfg.num_pairs`` genuine and as many impostor pairs are drawn
            from ``cfg.data`` with ``cfg.seed``.
        model: An already loaded backbone (skips loading ``cfg.model``).
        progress: Show an embedding progress bar (on a terminal only).

    Returns:
        The metrics of :func:`verification_metrics` plus ``model``, ``pairs`` and ``data``; also
        written as JSON to ``cfg.out`` (default ``<model dir>/eval.json``).

    Raises:
        PfdError: Missing model or pairs, or bad data.
    """

    validate_config(cfg)
    if model is None:
        if not cfg.model:
            raise PfdError("no model given; pass --model PATH (a pfd, insightface or AdaFace checkpoint)")
        model = load_backbone(cfg.model)
    size = canonical_size(getattr(model, "arch", {}).get("size", 112))  # S or (H, W): the model's input
    if cfg.pairs:
        p = Path(cfg.pairs)
        if p.suffix.lower() == ".bin":
            pairs = read_bin(p, size=size)
        else:
            if not cfg.data or cfg.data.startswith("synthetic"):
                raise PfdError(f"{p}: a pairs.txt needs its image folder; pass --data ROOT")
            pairs = read_pairs_txt(p, root=cfg.data, size=size)
    else:
        faces = open_faces(cfg.data, size=size, min_images=2, skip_bad=cfg.skip_bad)
        pairs = generate_pairs(faces, num_pairs=cfg.num_pairs, seed=cfg.seed)
    embedder = Embedder(model, batch_size=cfg.batch_size, flip=cfg.flip, progress=progress)
    metrics = evaluate_pairs(embedder, pairs, folds=cfg.folds)
    metrics.update(model=str(cfg.model), pairs=str(cfg.pairs or f"generated:{cfg.num_pairs}:seed{cfg.seed}"),
                   data=str(cfg.data), flip=bool(cfg.flip))
    out = cfg.out or (str(Path(cfg.model).with_name("eval.json")) if cfg.model else "")
    if out:
        atomic_write_json(out, metrics)
        metrics["written_to"] = out
    return metrics
