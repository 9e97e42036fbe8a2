from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score, roc_curve
from sklearn.model_selection import KFold

from pfd.data.faceset import TensorFaces
from pfd.errors import PfdError
from pfd.verify import (
    eer,
    evaluate_pairs,
    format_metrics_table,
    insightface_thresholds,
    kfold_accuracy,
    roc_auc,
    roc_curve_points,
    tar_at_far,
    verification_metrics,
)


def _gaussian_pairs(n: int, sep: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    issame = rng.random(n) < 0.5
    scores = rng.normal(size=n) + sep * issame
    return scores, issame


# -- AUC / ROC --------------------------------------------------------------------------------


@pytest.mark.parametrize("decimals", [1, 2, None])
def test_auc_equals_sklearn_with_ties(decimals):
    scores, issame = _gaussian_pairs(2000, 0.7, seed=1)
    if decimals is not None:  # heavy ties, also across genuine/impostor
        scores = np.round(scores, decimals)
    assert roc_auc(scores, issame) == pytest.approx(roc_auc_score(issame, scores), abs=1e-12)


def test_roc_points_equal_sklearn():
    scores, issame = _gaussian_pairs(500, 1.0, seed=2)
    scores = np.round(scores, 1)
    fpr, tpr, thr = roc_curve_points(scores, issame)
    ref_fpr, ref_tpr, ref_thr = roc_curve(issame, scores, drop_intermediate=False)
    np.testing.assert_allclose(fpr, ref_fpr)
    np.testing.assert_allclose(tpr, ref_tpr)
    # same points, labelled with '>' here vs '>=' in sklearn: ours are shifted by one distinct score
    np.testing.assert_allclose(thr[:-1], ref_thr[1:])
    assert thr[-1] == -np.inf and (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1)


# -- EER --------------------------------------------------------------------------------------


def test_eer_constructed_exact():
    # threshold in (0.6, 0.65): rejects genuine 0.6 (FRR 1/4), accepts impostor 0.65 (FAR 1/4)
    scores = np.array([0.6, 0.7, 0.8, 0.9, 0.1, 0.2, 0.3, 0.65])
    issame = np.array([True] * 4 + [False] * 4)
    assert eer(scores, issame) == pytest.approx(0.25)


def test_eer_interpolates_on_tied_step():
    # one genuine and one impostor share the score 0.5; elsewhere separable: the ROC jumps
    # diagonally from (0, 1/2) to (1/2, 1), crossing fpr = fnr at 1/4
    scores = np.array([0.9, 0.5, 0.5, 0.1])
    issame = np.array([True, True, False, False])
    assert eer(scores, issame) == pytest.approx(0.25)


def test_eer_separable_is_zero_and_gaussian_matches_formula():
    assert eer([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 0.0
    rng = np.random.default_rng(3)
    n = 100_000
    scores = np.concatenate([rng.normal(1, 1, n), rng.normal(-1, 1, n)])
    issame = np.repeat([True, False], n)
    # equal-variance Gaussians at +-1: crossing at 0, EER = Phi(-1)
    assert eer(scores, issame) == pytest.approx(0.5 * math.erfc(1 / math.sqrt(2)), abs=4e-3)


# -- TAR@FAR ----------------------------------------------------------------------------------


def _tar_direct(scores, issame, far):
    """Brute force: over every candidate threshold, best TAR with #accepted impostors <= far*N."""
    gen, imp = scores[issame], scores[~issame]
    best = 0.0
    for t in np.concatenate([np.unique(scores), [-np.inf]]):
        if np.sum(imp > t) <= far * imp.size + 1e-9:
            best = max(best, float(np.mean(gen > t)))
    return best


@pytest.mark.parametrize("far", [1e-3, 1e-2, 0.1, 0.37])
def test_tar_at_far_matches_direct_computation(far):
    scores, issame = _gaussian_pairs(4000, 2.0, seed=4)
    scores = np.round(scores, 2)  # ties among impostors at the threshold
    tar, thr = tar_at_far(scores, issame, far)
    assert tar == pytest.approx(_tar_direct(scores, issame, far))
    imp = scores[~issame]
    assert np.sum(imp > thr) <= far * imp.size + 1e-9  # FAR constraint met
    assert np.sum(imp >= thr) > far * imp.size  # and the threshold is the lowest one that does
    # quantile convention: the (k+1)-th largest impostor score
    k = int(math.floor(far * imp.size + 1e-9))
    assert thr == np.sort(imp)[::-1][k]


def test_tar_at_far_float_rounding_of_k():
    # 1e-3 * 3000 = 3.0000000000000004 in floating point: must allow exactly 3 false accepts
    imp = -np.arange(3000, dtype=float)  # distinct impostor scores 0, -1, ..., -2999
    gen = np.array([-2.5, -1.5, -0.5, 10.0])
    scores = np.concatenate([gen, imp])
    issame = np.arange(scores.size) < gen.size
    tar, thr = tar_at_far(scores, issame, 1e-3)
    assert thr == -3.0 and tar == 1.0  # accepts impostors 0, -1, -2 and all genuine pairs


def test_tar_at_far_unresolvable_is_nan():
    scores, issame = _gaussian_pairs(400, 2.0)
    n_imp = int((~issame).sum())
    tar, thr = tar_at_far(scores, issame, 0.99 / n_imp)
    assert math.isnan(tar) and math.isnan(thr)
    assert not math.isnan(tar_at_far(scores, issame, 1.0 / n_imp)[0])
    m = verification_metrics(scores, issame)
    assert m["tar@far=0.001"] is None and m["tar@far=0.0001"] is None
    assert "n/a" in format_metrics_table(m)
    json.dumps(m, allow_nan=False)  # JSON-ready: no NaN


# -- k-fold accuracy --------------------------------------------------------------------------


def test_kfold_perfect_on_separable_and_chance_on_random():
    rng = np.random.default_rng(5)
    issame = rng.random(600) < 0.5
    scores = np.where(issame, rng.uniform(0.4, 1.0, 600), rng.uniform(-1.0, 0.3, 600))
    acc, std, thr = kfold_accuracy(scores, issame)
    assert (acc, std) == (1.0, 0.0) and 0.3 < thr < 0.4
    acc, _, _ = kfold_accuracy(rng.uniform(-1, 1, 4000), rng.random(4000) < 0.5)
    assert abs(acc - 0.5) < 0.04


def test_kfold_threshold_tuned_on_training_folds_only():
    # fold 0: genuine 0.8 / impostor 0.6; fold 1: genuine 0.4 / impostor 0.2. Each fold is
    # separable on its own, but the threshold learnt on one fold (0.3 or 0.7) misclassifies
    # half of the other: a protocol that tuned on the test fold would report 1.0.
    scores = np.array([0.8, 0.6, 0.8, 0.6, 0.4, 0.2, 0.4, 0.2])
    issame = np.array([True, False] * 4)
    acc, std, thr = kfold_accuracy(scores, issame, folds=2)
    assert acc == 0.5 and std == 0.0 and thr == pytest.approx(0.5)
    assert kfold_accuracy(scores, issame, folds=1)[0] == 0.75  # tuned on all: best single threshold


def test_kfold_matches_bruteforce_insightface_protocol():
    # Independent brute-force reference of the insightface protocol on squared L2 distances of
    # unit vectors, with sklearn's KFold and the distance grid np.arange(0, 4, 0.01).
    rng = np.random.default_rng(6)
    n = 303  # not a multiple of 10: uneven folds
    a = rng.normal(size=(n, 8))
    b = a + rng.normal(scale=1.3, size=(n, 8))
    issame = rng.random(n) < 0.5
    b[~issame] = rng.normal(size=(int((~issame).sum()), 8))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    dist = np.sum((a - b) ** 2, axis=1)
    grid = np.arange(0, 4, 0.01)
    accs, thrs = [], []
    for train, test in KFold(n_splits=10, shuffle=False).split(np.arange(n)):
        acc_train = [np.mean((dist[train] < t) == issame[train]) for t in grid]
        t = grid[int(np.argmax(acc_train))]
        thrs.append(1 - t / 2)
        accs.append(np.mean((dist[test] < t) == issame[test]))
    acc, std, thr = kfold_accuracy(np.sum(a * b, axis=1), issame, thresholds=insightface_thresholds())
    assert acc == pytest.approx(np.mean(accs), abs=1e-12)
    assert std == pytest.approx(np.std(accs), abs=1e-12)
    assert thr == pytest.approx(np.mean(thrs), abs=1e-9)
    # exact midpoints can only do at least as well on the training folds; on test, close
    assert abs(kfold_accuracy(np.sum(a * b, axis=1), issame)[0] - acc) < 0.03


# -- verification_metrics / bad input -----------------------------------------------------------


def test_verification_metrics_keys_and_values():
    scores, issame = _gaussian_pairs(30_000, 3.0, seed=7)
    m = verification_metrics(scores, issame)
    assert m["num_pairs"] == 30_000 and m["num_genuine"] + m["num_impostor"] == 30_000
    assert m["auc"] == pytest.approx(roc_auc_score(issame, scores))
    assert m["tar@far=0.001"] == tar_at_far(scores, issame, 1e-3)[0]
    assert m["tar@far=0.0001"] == tar_at_far(scores, issame, 1e-4)[0] < m["tar@far=0.001"]
    assert m["eer"] == eer(scores, issame)
    assert m["min_resolvable_far"] == 1 / m["num_impostor"]
    # Other FARs (the card's): one TAR each, under the one name every pfd figure uses.
    card = verification_metrics(scores, issame, fars=[0.01, 2e-5])
    assert sorted(k for k in card if k.startswith("tar@")) == ["tar@far=0.01", "tar@far=2e-05"]
    assert card["tar@far=0.01"] == tar_at_far(scores, issame, 0.01)[0] and card["tar@far=2e-05"] is None
    # balanced Gaussians at distance 3: Bayes accuracy Phi(1.5) ~ 0.933
    assert m["accuracy"] == pytest.approx(0.5 * math.erfc(-1.5 / math.sqrt(2)), abs=0.01)
    table = format_metrics_table(m)
    assert table.splitlines()[0].startswith("accuracy") and "±" in table
    starts = {len(re.match(r"\S+\s+", line).group(0)) for line in table.splitlines()}
    assert len(starts) == 1  # values aligned in one column


@pytest.mark.parametrize(
    "scores, issame, match",
    [
        ([0.1, 0.2], [True], "align"),
        ([0.1, float("nan")], [True, False], "NaN"),
        ([0.1, 0.2], [True, True], "no impostor"),
        ([0.1, 0.2], [False, False], "no genuine"),
        ([0.1, 0.2], [2, 0], "boolean"),
    ],
)
def test_bad_input_raises_one_line(scores, issame, match):
    with pytest.raises(PfdError, match=match) as e:
        verification_metrics(scores, issame)
    assert "\n" not in str(e.value)


def test_bad_folds_and_far():
    with pytest.raises(PfdError, match="folds"):
        kfold_accuracy([0.1, 0.9], [False, True], folds=3)
    with pytest.raises(PfdError, match="far"):
        tar_at_far([0.1, 0.9], [False, True], 0.0)


# -- evaluate_pairs ---------------------------------------------------------------------------


class _CountingEmbedder:
    """Stand-in embedder: the image's mean colour, normalised; records what it was given."""

    def __init__(self):
        self.calls = []

    def __call__(self, faces):
        x = torch.stack([faces.load(i) for i in range(len(faces))])  # (n, 3, S, S)
        self.calls.append(len(faces))
        return torch.nn.functional.normalize(x.mean(dim=(2, 3)), dim=1)


def test_evaluate_pairs_embeds_used_images_once():
    g = torch.Generator().manual_seed(0)
    colours = torch.rand(6, 3, generator=g)  # 6 identities, 3 images each, 2 never used
    labels = np.repeat(np.arange(6), 3)
    images = colours[labels][:, :, None, None].expand(-1, -1, 4, 4) + 0.01 * torch.rand(18, 3, 4, 4, generator=g)
    faces = TensorFaces(images.clamp(0, 1), labels)
    left = np.array([0, 3, 6, 9, 0, 3, 6, 9])
    right = np.array([1, 4, 7, 10, 3, 6, 9, 12])
    pairs = SimpleNamespace(faces=faces, left=left, right=right, issame=labels[left] == labels[right])
    emb = _CountingEmbedder()
    m = evaluate_pairs(emb, pairs, folds=2)
    assert emb.calls == [len(np.unique(np.concatenate([left, right])))]
    # scores computed here directly from all images must give the same metrics
    full = _CountingEmbedder()(faces)
    scores = (full[left] * full[right]).sum(1).numpy()
    assert m == verification_metrics(scores, pairs.issame, folds=2)
    bad = SimpleNamespace(faces=faces, left=left, right=right + 10, issame=pairs.issame)
    with pytest.raises(PfdError, match="outside"):
        evaluate_pairs(emb, bad)
