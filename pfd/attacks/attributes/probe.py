"""Attribute recovery as an attacker runs it: fit a probe on auxiliary data, label proxies and sources.

The PFD paper (Tab. 4) labels proxies and private images with a fixed off-the-shelf attribute
predictor (FairFace). pfd has no such predictor, so the attacker builds one: a
:class:`~pfd.attacks.attributes.recovery.LinearProbe` on *their public model's* embeddings, fitted on an
**auxiliary labelled set** they own. The private set's own attributes are never used to fit it
(the attacker does not have them); the probe then labels every proxy and every private image,
and :func:`~pfd.attacks.attributes.recovery.attribute_recovery` compares each proxy's label with the
majority label of its source identity.

Default auxiliary set: for a synthetic private set, the ``public`` split of the same domain,
seed and image size (disjoint people, same kind of images, ground-truth attributes); for any
other private set the user passes one (``--attr-data SPEC``: an identity folder with an
``attributes.csv``, or a synthetic spec). Without one, attribute recovery is skipped with a note.

Each figure also gets a 95 % cluster-bootstrap interval (percentile method, resampling *source
identities* with replacement and keeping all their proxies, since the proxies of one source are
not independent), so the scorecard can show "figure, chance, interval" as for the other attacks;
the chance level and the one-sided p-value that decides the verdict come from the identity-level
permutation null of :func:`~pfd.attacks.attributes.recovery.attribute_recovery`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pfd.attacks.attributes.recovery import (
    LinearProbe,
    _metrics_from_confusion,
    attribute_recovery,
    image_attribute_labels,
    majority_vote,
)
from pfd.data.faceset import FaceSet
from pfd.errors import PfdError
from pfd.data.synthetic import SyntheticFaces

__all__ = ["default_aux_spec", "bootstrap_recovery", "probe_attribute_recovery"]

#: Bootstrap resamples of the per-attribute intervals.
BOOTSTRAP = 1000


def default_aux_spec(private: FaceSet, *, identities: int | None = None, images: int = 4) -> str | None:
    """The attacker's default auxiliary labelled set for ``private``, or ``None`` if there is none.

    For a synthetic private set: ``synthetic:public`` with the same domain, seed and image size,
    ``max(2·N, 40)`` identities (N = private identities) of ``images`` images each.

    Args:
        private: The private set.
        identities: Override the number of identities.
        images: Images per identity.

    Returns:
        A dataset spec, or ``None`` for non-synthetic private sets.
    """
    base = private
    while not isinstance(base, SyntheticFaces) and hasattr(base, "parent"):
        base = base.parent  # a subset of a synthetic set
    if not isinstance(base, SyntheticFaces):
        return None
    n = identities if identities is not None else max(2 * private.num_classes, 40)
    return (f"synthetic:public,ids={n},imgs={images},domain={base.domain},seed={base.seed},"
            f"size={base.render_size}")


def bootstrap_recovery(
    y_true: np.ndarray, y_pred: np.ndarray, *, num_classes: int, cluster: np.ndarray | None = None,
    resamples: int = BOOTSTRAP, seed: int = 0
) -> dict[str, list[float]]:
    """95 % percentile-bootstrap intervals of Macro-F1 and balanced accuracy.

    Args:
        y_true: ``(q,)`` source pseudo-labels.
        y_pred: ``(q,)`` proxy labels.
        num_classes: Number of classes.
        cluster: ``(q,)`` source identity of each proxy: resample identities (cluster
            bootstrap) and keep all their proxies; ``None`` resamples proxies.
        resamples: Bootstrap draws.
        seed: Seed.

    Returns:
        ``{"macro_f1": [lo, hi], "balanced_accuracy": [lo, hi]}``.
    """
    t, p = np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)
    rng = np.random.default_rng(seed)
    k = int(num_classes)
    _, inv = np.unique(np.arange(t.size) if cluster is None else np.asarray(cluster).ravel(), return_inverse=True)
    n_c = int(inv.max()) + 1 if inv.size else 0
    # Per-cluster confusion counts (C, K*K): a resample's confusion is the sum over drawn clusters.
    per = np.zeros((n_c, k * k), dtype=np.int64)
    np.add.at(per, (inv, t * k + p), 1)
    f1s, bas = [], []
    block = max(1, 2_000_000 // max(n_c, 1))  # bound the (block, C) draw matrix
    for lo in range(0, resamples, block):
        b = min(block, resamples - lo)
        draws = np.stack([np.bincount(d, minlength=n_c) for d in rng.integers(0, n_c, size=(b, n_c))])  # (b, C)
        cm = (draws @ per).reshape(b, k, k)
        f1, ba = _metrics_from_confusion(cm)
        f1s.append(f1)
        bas.append(ba)
    f1_all, ba_all = np.concatenate(f1s), np.concatenate(bas)

    def band(v: np.ndarray) -> list[float]:
        return [float(np.nanquantile(v, 0.025)), float(np.nanquantile(v, 0.975))]

    return {"macro_f1": band(f1_all), "balanced_accuracy": band(ba_all)}


def probe_attribute_recovery(
    aux_emb: Any,
    aux: FaceSet,
    proxy_emb: Any,
    proxy_source: Any,
    private_emb: Any,
    private_labels: Any,
    *,
    attributes: list[str] | None = None,
    permutations: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Fit a probe per attribute on the auxiliary set and score recovery on the proxies.

    Args:
        aux_emb: ``(a, D)`` attacker embeddings of the auxiliary set.
        aux: The auxiliary set (with ``attributes``).
        proxy_emb: ``(q, D)`` attacker embeddings of the proxies.
        proxy_source: ``(q,)`` source identity (private label) of each proxy (scoring only).
        private_emb: ``(g, D)`` attacker embeddings of the private images.
        private_labels: ``(g,)`` their identities.
        attributes: Which attributes (default: every attribute of the auxiliary set).
        permutations: Permutation draws of the chance level.
        seed: Seed of the permutations and bootstrap.

    Returns:
        ``{attribute: attribute_recovery(...) + {"ci95_macro_f1", "ci95_balanced_accuracy",
        "probe_train_accuracy", "aux_images"}}``.

    Raises:
        PfdError: If the auxiliary set has no attributes, or an attribute is missing for some identity.
    """
    if not aux.attributes:
        raise PfdError("the auxiliary attribute set has no attributes; pass --attr-data with an attributes.csv")
    names = attributes or sorted({a for v in aux.attributes.values() for a in v})
    src = np.asarray(proxy_source).ravel()
    out: dict[str, Any] = {}
    for name in names:
        y_aux = image_attribute_labels(aux.labels, aux.identities, aux.attributes, name)  # (a,)
        k = int(y_aux.max()) + 1
        probe = LinearProbe(seed=seed).fit(aux_emb, y_aux)
        pred_proxy = probe(proxy_emb)  # classes of y_aux, so within 0..k-1
        pred_private = probe(private_emb)
        res = attribute_recovery(pred_proxy, src, pred_private, private_labels, num_classes=k,
                                 permutations=permutations, seed=seed)
        ids, vote = majority_vote(pred_private, private_labels, num_classes=k)
        y_true = vote[np.searchsorted(ids, src)]  # source pseudo-labels (attribute_recovery checked them)
        ci = bootstrap_recovery(y_true, pred_proxy, num_classes=k, cluster=src, seed=seed)
        res.update(ci95_macro_f1=ci["macro_f1"], ci95_balanced_accuracy=ci["balanced_accuracy"],
                   probe_train_accuracy=float((probe(aux_emb) == y_aux).mean()), aux_images=int(len(y_aux)))
        out[name] = res
    return out
