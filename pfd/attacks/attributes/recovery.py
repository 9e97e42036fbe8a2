"""Source-attribute recoverability of released proxies (PFD paper, Tab. 4).

A fixed attribute predictor (the paper: FairFace for race, gender, age) labels every proxy and
every private image. A proxy's *source pseudo-label* is the predictor's majority label over its
source identity's private images; recoverability compares the proxy's own predicted label with
that pseudo-label, by Macro-F1 and balanced accuracy ("to account for class imbalance").

Definitions (sklearn, made explicit):

* **Balanced accuracy** = mean recall over the classes that occur among the pseudo-labels
  (``sklearn.metrics.balanced_accuracy_score``). Classes no source carries have no recall and
  do not enter — which is why the paper's age chance is 1/6 for "six observed age ranges".
* **Macro-F1** = ``f1_score(..., labels=range(num_classes), average="macro",
  zero_division=nan)``: a class predicted for some proxy but carried by no source counts with
  F1 = 0 (a genuine error); a class absent from both is 0/0 and is left out of the average.
* **Chance.** The null hypothesis is "the proxy's label is independent of its source". The
  ``K`` proxies of one source share it (and, distilled from the same prototypes, usually their
  label), so the exchangeable unit is the *source identity*: the null distribution is that of
  the metric when the source pseudo-labels are permuted among the source identities (each
  identity's proxies stay together). We report its mean as ``chance_*`` (seeded Monte Carlo,
  ``permutations`` draws), a 95 % band and a one-sided p-value, which decides the scorecard
  verdict (LEAKS iff p <= 0.05; a proxy-level permutation would be too narrow by up to ``√K``).
  For balanced accuracy with equal ``K`` the mean is
  known in closed form, ``E[BA] = |O|^{-1} Σ_{c∈O} q̂_c`` (``O`` observed pseudo-label classes,
  ``q̂_c`` the share of proxies predicted ``c``), which equals ``1/|O|`` whenever the predictor
  only outputs observed classes; both are reported (``chance_uniform = 1/|O|``). Macro-F1 has no
  such simple form (it depends on both marginals), hence the permutation estimate.
* **Majority-vote ties** go to the smallest class index.

A predictor is any callable mapping images or embeddings to integer labels; :class:`LinearProbe`
is the built-in one: a standardised logistic regression on attacker embeddings, fitted on a
labelled set whose per-identity attributes come from :func:`read_attributes_csv`.
"""

from __future__ import annotations

import csv
import os
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score, f1_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from pfd.errors import PfdError

__all__ = [
    "Predictor",
    "majority_vote",
    "attribute_recovery",
    "LinearProbe",
    "read_attributes_csv",
    "image_attribute_labels",
]

#: Anything that maps a batch of images or embeddings to ``(n,)`` integer labels.
Predictor = Callable[[Any], Any]


def _labels(x: Any, what: str, num_classes: int | None = None) -> np.ndarray:
    a = np.asarray(x.detach().cpu() if torch.is_tensor(x) else x).ravel()
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if not np.all(np.equal(np.mod(a, 1), 0)):
            raise PfdError(f"{what} must be integer class labels, got dtype {a.dtype}")
        a = a.astype(np.int64)
    if num_classes is not None and a.size and (a.min() < 0 or a.max() >= num_classes):
        raise PfdError(f"{what} contain label {int(a.max() if a.max() >= num_classes else a.min())} "
                       f"outside 0..{num_classes - 1}; check num_classes")
    return a.astype(np.int64)


def majority_vote(pred: Any, labels: Any, *, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-identity majority of predicted labels; ties go to the smallest class index.

    Args:
        pred: ``(n,)`` predicted class of each image, in ``0..num_classes-1``.
        labels: ``(n,)`` identity label of each image.
        num_classes: Number of attribute classes.

    Returns:
        ``(identities (C,), vote (C,))`` with identities in ``np.unique(labels)`` order.

    Raises:
        PfdError: For mismatched lengths or labels out of range.
    """
    p = _labels(pred, "predicted labels", num_classes)
    lab = np.asarray(labels).ravel()
    if p.size != lab.size:
        raise PfdError(f"{p.size} predictions for {lab.size} labelled images; pass one per image")
    uniq, inv = np.unique(lab, return_inverse=True)
    counts = np.zeros((uniq.size, num_classes), dtype=np.int64)  # (C, K) votes
    np.add.at(counts, (inv, p), 1)
    return uniq, counts.argmax(1)  # argmax returns the first (smallest) maximal class


def _confusions(true: np.ndarray, pred: np.ndarray, k: int) -> np.ndarray:
    """``(P, K, K)`` confusion matrices of one truth against ``P`` prediction rows ``pred (P, n)``."""
    p = pred.shape[0]
    codes = true[None, :] * k + pred + (np.arange(p) * k * k)[:, None]
    return np.bincount(codes.ravel(), minlength=p * k * k).reshape(p, k, k)


def _metrics_from_confusion(cm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Macro-F1 and balanced accuracy of ``(P, K, K)`` confusions, with the sklearn conventions above."""
    tp = np.diagonal(cm, axis1=1, axis2=2).astype(np.float64)  # (P, K)
    support = cm.sum(2)  # true count per class
    predicted = cm.sum(1)
    denom = support + predicted
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(denom > 0, 2 * tp / denom, np.nan)
        recall = np.where(support > 0, tp / support, np.nan)
    return np.nanmean(f1, axis=1), np.nanmean(recall, axis=1)


def attribute_recovery(
    pred_on_proxies: Any,
    proxy_source: Any,
    pred_on_private_images: Any,
    private_labels: Any,
    *,
    num_classes: int,
    permutations: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Macro-F1 and balanced accuracy of proxy labels against their sources' pseudo-labels.

    Args:
        pred_on_proxies: ``(q,)`` predictor label of each proxy.
        proxy_source: ``(q,)`` source identity of each proxy (scoring only).
        pred_on_private_images: ``(g,)`` predictor label of each private image.
        private_labels: ``(g,)`` identity of each private image.
        num_classes: Number of attribute classes (labels in ``0..num_classes-1``).
        permutations: Monte-Carlo draws of the independence null.
        seed: Seed of the permutations.

    Returns:
        ``{"macro_f1", "balanced_accuracy", "chance_macro_f1", "chance_balanced_accuracy",
        "chance_uniform", "null95_macro_f1", "null95_balanced_accuracy", "p_macro_f1",
        "p_balanced_accuracy", "n", "num_classes", "observed_classes", "permutations", "seed"}``.

    Raises:
        PfdError: For mismatched lengths, labels out of range, no proxies, or a proxy source
            without private images.
    """
    y_pred = _labels(pred_on_proxies, "proxy predictions", num_classes)
    src = np.asarray(proxy_source).ravel()
    if y_pred.size != src.size or y_pred.size == 0:
        raise PfdError(f"{y_pred.size} proxy predictions for {src.size} proxy sources; need one per proxy (and >= 1)")
    ids, vote = majority_vote(pred_on_private_images, private_labels, num_classes=num_classes)
    pos = np.searchsorted(ids, src)
    bad = (pos >= ids.size) | (ids[np.minimum(pos, ids.size - 1)] != src)
    if bad.any():
        raise PfdError(f"proxy source identity {src[bad][:1].tolist()[0]!r} has no private image to vote on; "
                       "the state dir does not match these private images")
    y_true = vote[pos]  # (q,) source pseudo-labels

    macro_f1 = float(f1_score(y_true, y_pred, labels=list(range(num_classes)), average="macro", zero_division=np.nan))
    with warnings.catch_warnings():  # "y_pred contains classes not in y_true" is expected here
        warnings.simplefilter("ignore")
        bal_acc = float(balanced_accuracy_score(y_true, y_pred))

    if permutations < 1:
        raise PfdError(f"permutations must be >= 1, got {permutations}")
    rng = np.random.default_rng(seed)
    # Identity-level null: the K proxies of one source share it (and usually their label), so
    # the unit that is exchangeable under "labels independent of the source" is the source
    # identity, not the proxy. Permute the pseudo-labels among source identities; each draw
    # keeps every identity's proxies together.
    src_ids, src_inv = np.unique(src, return_inverse=True)
    id_true = vote[np.searchsorted(ids, src_ids)]  # (S,) pseudo-label per source identity
    block = max(1, 4_000_000 // y_pred.size)  # bound the (block, q) permutation matrix
    nulls = []
    for lo in range(0, permutations, block):
        b = min(block, permutations - lo)
        order = np.argsort(rng.random((b, src_ids.size)), axis=1)  # (b, S) a permutation per draw
        truths = id_true[order][:, src_inv]  # (b, q) permuted pseudo-label of each proxy
        cm = _confusions(y_pred, truths, num_classes).transpose(0, 2, 1)  # rows = truth
        nulls.append(_metrics_from_confusion(cm))
    null_f1 = np.concatenate([f for f, _ in nulls])
    null_ba = np.concatenate([b for _, b in nulls])
    observed = np.unique(y_true)
    q_hat = np.bincount(y_pred, minlength=num_classes) / y_pred.size

    def band(v: np.ndarray) -> list[float]:
        return [float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975))]

    def p_value(null: np.ndarray, obs: float) -> float:
        return float((1 + np.sum(null >= obs - 1e-12)) / (1 + null.size))

    return {
        "macro_f1": macro_f1,
        "balanced_accuracy": bal_acc,
        "chance_macro_f1": float(null_f1.mean()),
        "chance_balanced_accuracy": float(q_hat[observed].mean()),
        "chance_uniform": 1.0 / observed.size,
        "null95_macro_f1": band(null_f1),
        "null95_balanced_accuracy": band(null_ba),
        "p_macro_f1": p_value(null_f1, macro_f1),
        "p_balanced_accuracy": p_value(null_ba, bal_acc),
        "n": int(y_pred.size),
        "num_classes": int(num_classes),
        "observed_classes": observed.tolist(),
        "permutations": int(permutations),
        "seed": int(seed),
    }


class LinearProbe:
    """Attribute predictor: standardised multinomial logistic regression on embeddings.

    Args:
        c: Inverse L2 regularisation strength of the logistic regression.
        max_iter: Solver iterations.
        seed: Solver seed.
    """

    def __init__(self, *, c: float = 1.0, max_iter: int = 2000, seed: int = 0) -> None:
        self.model = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=max_iter, random_state=seed))
        self.classes_: np.ndarray | None = None

    def fit(self, emb: Any, labels: Any) -> "LinearProbe":
        """Fit on ``emb (n, D)`` with per-image attribute ``labels (n,)``; returns self.

        Raises:
            PfdError: For mismatched lengths or fewer than two distinct classes.
        """
        x = _matrix(emb)
        y = _labels(labels, "probe training labels")
        if x.shape[0] != y.size:
            raise PfdError(f"{x.shape[0]} embeddings but {y.size} attribute labels; pass one per image")
        if np.unique(y).size < 2:
            raise PfdError("the probe's labelled set has a single attribute class; it needs >= 2 to learn anything")
        self.model.fit(x, y)
        self.classes_ = self.model.classes_
        return self

    def predict(self, emb: Any) -> np.ndarray:
        """``(n,)`` int64 predicted labels of ``emb (n, D)``.

        Raises:
            PfdError: If called before :meth:`fit`.
        """
        if self.classes_ is None:
            raise PfdError("LinearProbe.predict called before fit; fit it on a labelled set first")
        return self.model.predict(_matrix(emb)).astype(np.int64)

    __call__ = predict


def _matrix(x: Any) -> np.ndarray:
    a = np.asarray(x.detach().cpu() if torch.is_tensor(x) else x, dtype=np.float64)
    if a.ndim != 2:
        raise PfdError(f"embeddings must be a (n, D) matrix, got shape {a.shape}")
    return a


def read_attributes_csv(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """Read per-identity attribute labels, e.g. ``identity,tone,hair,age`` then one row per identity.

    Args:
        path: CSV file with a header whose first column is ``identity`` and whose other columns
            are attributes holding non-negative integer classes.

    Returns:
        ``{identity: {attribute: class}}``.

    Raises:
        PfdError: For a missing file, a bad header, a row of the wrong width, an empty identity, a
            non-integer or negative value, or a duplicate identity (message names file and line).
    """
    p = os.fspath(path)
    try:
        with open(p, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except OSError as err:
        raise PfdError(f"{p}: cannot read attributes csv ({err.strerror}); pass an existing file") from None
    rows = [(i, r) for i, r in enumerate(rows, 1) if any(cell.strip() for cell in r)]
    if not rows:
        raise PfdError(f"{p}: empty attributes csv; expected a header 'identity,<attr>,...' and one row per identity")
    _, header = rows[0]
    header = [h.strip() for h in header]
    if header[0] != "identity" or len(header) < 2 or len(set(header)) != len(header) or not all(header):
        raise PfdError(f"{p}:1: header must be 'identity,<attr>[,<attr>...]' with distinct names, got {','.join(header)!r}")
    out: dict[str, dict[str, int]] = {}
    for line, row in rows[1:]:
        if len(row) != len(header):
            raise PfdError(f"{p}:{line}: expected {len(header)} fields ({','.join(header)}), got {len(row)}")
        ident = row[0].strip()
        if not ident:
            raise PfdError(f"{p}:{line}: empty identity name")
        if ident in out:
            raise PfdError(f"{p}:{line}: duplicate identity {ident!r}; keep one row per identity")
        values: dict[str, int] = {}
        for name, cell in zip(header[1:], row[1:]):
            try:
                v = int(cell.strip())
            except ValueError:
                raise PfdError(f"{p}:{line}: {name}={cell.strip()!r} for {ident!r} is not an integer class") from None
            if v < 0:
                raise PfdError(f"{p}:{line}: {name}={v} for {ident!r} is negative; classes are 0, 1, 2, ...")
            values[name] = v
        out[ident] = values
    return out


def image_attribute_labels(
    labels: Any, identities: Sequence[str], attributes: Mapping[str, Mapping[str, int]], attribute: str
) -> np.ndarray:
    """Per-image class of one attribute, looked up through each image's identity.

    Args:
        labels: ``(n,)`` integer identity label per image (index into ``identities``).
        identities: Label -> identity name (e.g. ``FaceSet.identities``).
        attributes: ``{identity: {attribute: class}}`` (e.g. :func:`read_attributes_csv`).
        attribute: Attribute name.

    Returns:
        ``(n,)`` int64 classes.

    Raises:
        PfdError: If an identity has no row, or its row lacks the attribute.
    """
    lab = np.asarray(labels).ravel().astype(np.int64)
    table = np.empty(len(identities), dtype=np.int64)
    needed = np.unique(lab)
    for i in needed:  # one lookup per identity, then a vectorised gather
        name = identities[int(i)]
        if name not in attributes:
            raise PfdError(f"identity {name!r} has no row in the attributes table; add it or drop its images")
        if attribute not in attributes[name]:
            raise PfdError(f"identity {name!r} has no {attribute!r} attribute; known: {', '.join(attributes[name])}")
        table[i] = attributes[name][attribute]
    return table[lab]
