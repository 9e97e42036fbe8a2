"""The utility half of a card: downstream fine-tunes with and without the release, and what they
gain on the test people, with identity-bootstrap intervals.

The protocol (the privacy-utility benchmark's, one implementation for both):

1. **Downstream model** (:func:`finetune`): the public model fine-tuned on the public images (a
   fixed seeded sample when ``public_images`` > 0, :func:`sample_images`) — *public-ft* — and on
   the same images plus the release — *with release* —, same seeds and schedule. The release's
   arbitrary labels are new classes beside the public ones (disjoint label spaces).
2. **Scores** (:func:`pair_scores`): cosine similarity of each verification pair of the held-out
   test people (:func:`pfd.data.pair_sampling.adaptive_pairs`).
3. **Gain** (:func:`utility_gain`): accuracy (k-fold) and TAR at each FAR, with-release minus
   public-ft, averaged over seeds, with the 95 % identity-bootstrap interval of
   :func:`pfd.card.stats.paired_difference` (test people resampled, seeds drawn per replicate);
   :func:`roc_curve` gives the curves the card draws.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pfd.card.config import DownstreamConfig
from pfd.card.stats import paired_difference, weighted_kfold_accuracy, weighted_tar_at_far
from pfd.config import TrainConfig, build_config
from pfd.data.faceset import ConcatFaces, FaceSet
from pfd.data.pairs import VerificationPairs
from pfd.verify import roc_curve_points, tar_key, verification_metrics
from pfd.train import train
import torch

__all__ = ["sample_images", "downstream_config", "finetune", "pair_scores", "verification", "utility_gain",
           "roc_curve"]


def sample_images(faces: FaceSet, n: int, *, seed: int = 0) -> FaceSet:
    """``n`` images of ``faces`` drawn without replacement (seeded; sample order kept).

    Args:
        faces: The public images.
        n: How many; all when ``n <= 0`` or ``n >= len(faces)``.
        seed: Seed of the draw.

    Returns:
        The sample (a subset view).
    """
    if n <= 0 or n >= len(faces):
        return faces
    return faces.subset(np.sort(np.random.default_rng(seed).choice(len(faces), size=n, replace=False)))


def downstream_config(settings: DownstreamConfig | Mapping[str, Any], *, public_model: str | Path, data: Sequence[str],
                      size: Any, out: str | Path, seed: int, release: bool, model: Mapping[str, Any] | None = None,
                      ) -> TrainConfig:
    """The :class:`~pfd.config.TrainConfig` of one downstream fine-tune.

    Args:
        settings: The protocol (:class:`~pfd.card.config.DownstreamConfig` or its dict).
        public_model: The checkpoint it starts from (its architecture is read from it).
        data: The public data's specs (recorded in the run's config.toml).
        size: Input size of the public model.
        out: The run's folder.
        seed: Seed of initialisation and shuffling.
        release: Whether the release joins the data (recorded as ``release``).
        model: Architecture keys (``backbone``, ``width``, ``embedding_dim``) of a public model
            trained in the same run (empty for a checkpoint, which names its own).

    Returns:
        The training configuration.
    """
    s = settings if isinstance(settings, Mapping) else vars(settings)
    keys = ("head", "scale", "margin", "head_init", "epochs", "batch_size", "lr", "warmup_epochs")
    return build_config(TrainConfig, dict(model or {}), {k: s[k] for k in keys if k in s}, {
        "data": list(data) + (["release"] if release else []), "size": size, "out": str(out), "init": str(public_model),
        "seed": seed, "checkpoint_every": 0, "min_images": 1, "mixed_precision": "no", "threads": 0,
    })  # fmt: skip


def finetune(cfg: TrainConfig, public: FaceSet, release: FaceSet | None, *, progress: bool = True,
             resume: bool = False) -> Path:
    """Fine-tune the public model on the public images (+ the release): one downstream model.

    Args:
        cfg: From :func:`downstream_config`.
        public: The public images (already sampled).
        release: The release's images (in memory), or ``None`` for public-ft.
        progress: Progress bars / lines.
        resume: Keep a finished run (``model.pt``) and continue an interrupted one.

    Returns:
        The model checkpoint.
    """
    sources: list[FaceSet] = [public] + ([release] if release is not None else [])
    return train(cfg, faces=ConcatFaces(sources), progress=progress, resume=resume)


def pair_scores(embeddings: Any, pairs: VerificationPairs) -> np.ndarray:
    """Cosine similarity of each pair.

    Args:
        embeddings: ``(n, D)`` unit embeddings of ``pairs.faces`` (tensor or array).
        pairs: The verification pairs.

    Returns:
        ``float64 (P,)`` scores in pair order.
    """
    e = torch.as_tensor(embeddings)  # (n, D), the embedder's float32: the benchmark's stored scores
    return (e[pairs.left] * e[pairs.right]).sum(1).double().numpy()  # (P,)


def verification(scores: np.ndarray, issame: np.ndarray, *, folds: int, fars: Sequence[float]) -> dict[str, Any]:
    """Accuracy, AUC, EER and TAR at each of the card's FARs of one model's pair scores (no interval).

    :func:`~pfd.verify.verification_metrics` at the card's FARs (``tar@far=0.01`` for ``fars=[0.01]``;
    ``None`` where the pairs cannot resolve the FAR): one figure per FAR, under the name
    :func:`~pfd.verify.tar_key` gives it everywhere.
    """
    return verification_metrics(scores, issame, folds=folds, fars=fars)


def utility_gain(row_scores: Sequence[np.ndarray], ref_scores: Sequence[np.ndarray], issame: np.ndarray,
                 weights: np.ndarray, *, folds: int, fars: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """With-release minus public-ft: accuracy and TAR at each FAR, with 95 % identity-bootstrap intervals.

    Args:
        row_scores: One ``(P,)`` score vector per seed of the downstream model with the release.
        ref_scores: One per seed of public-ft.
        issame: ``(P,)`` genuine flags.
        weights: ``(B, P)`` identity-bootstrap pair weights (:func:`pfd.card.stats.identity_bootstrap_weights`).
        folds: Folds of the accuracy.
        fars: False-accept rates.
        seed: Seed of the per-replicate seed draw.

    Returns:
        ``{"accuracy": {...}, "tar@far=0.01": {...}, ...}``, each :func:`pfd.card.stats.paired_difference`'s dict.
    """
    y = np.asarray(issame, dtype=bool)
    out = {"accuracy": paired_difference(lambda s, w: weighted_kfold_accuracy(s, y, w, folds=folds),
                                         row_scores, ref_scores, weights, seed=seed)}
    for far in fars:
        out[tar_key(far)] = paired_difference(lambda s, w, far=far: weighted_tar_at_far(s, y, w, far),
                                              row_scores, ref_scores, weights, seed=seed)
    return out


def roc_curve(scores: np.ndarray, issame: np.ndarray, *, points: int = 200) -> dict[str, list[float]]:
    """A verification ROC thinned to about ``points`` points, log-spaced in FAR (the card's curves).

    Returns:
        ``{"far": [...], "tar": [...]}`` ascending in FAR, from the smallest resolvable FAR.
    """
    fpr, tpr, _ = roc_curve_points(scores, issame)
    fpr, tpr = np.asarray(fpr, dtype=np.float64), np.asarray(tpr, dtype=np.float64)
    keep = fpr > 0
    if not keep.any():
        return {"far": [], "tar": []}
    fpr, tpr = fpr[keep], tpr[keep]
    grid = np.geomspace(fpr.min(), 1.0, points)
    idx = np.unique(np.clip(np.searchsorted(fpr, grid, side="right") - 1, 0, len(fpr) - 1))
    return {"far": fpr[idx].tolist(), "tar": tpr[idx].tolist()}
