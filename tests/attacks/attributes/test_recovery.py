"""Tests for pfd.attacks.attributes.recovery: majority vote, recovery metrics and chance, probe, csv."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, f1_score

from pfd.attacks.attributes.recovery import (
    LinearProbe,
    _confusions,
    _metrics_from_confusion,
    attribute_recovery,
    image_attribute_labels,
    majority_vote,
    read_attributes_csv,
)
from pfd.errors import PfdError


def test_majority_vote_with_ties_to_smallest_class():
    pred = np.array([1, 2, 2, 1, 0, 3, 3, 3, 2, 0])
    ids = np.array([5, 5, 5, 5, 9, 9, 9, 9, 2, 2])
    uniq, vote = majority_vote(pred, ids, num_classes=4)
    np.testing.assert_array_equal(uniq, [2, 5, 9])
    # id 2: {2, 0} tie -> 0; id 5: {1, 2, 2, 1} tie -> 1; id 9: 3 wins 3:1.
    np.testing.assert_array_equal(vote, [0, 1, 3])
    with pytest.raises(PfdError, match="outside 0..3"):
        majority_vote(np.array([4]), np.array([0]), num_classes=4)


def test_vectorised_metrics_match_sklearn_with_absent_classes():
    rng = np.random.default_rng(0)
    k = 6
    true = rng.choice([0, 2, 3], 200)  # classes 1, 4, 5 never true
    preds = np.stack([rng.choice([0, 1, 2, 3], 200) for _ in range(5)])  # class 1 predicted, 4/5 nowhere
    f1, ba = _metrics_from_confusion(_confusions(true, preds, k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p, f, b in zip(preds, f1, ba):
            assert f == pytest.approx(f1_score(true, p, labels=list(range(k)), average="macro", zero_division=np.nan))
            assert b == pytest.approx(balanced_accuracy_score(true, p))


def _attribute_world(rng, dirs, *, ids, imgs, signal):
    """Identities whose attribute is linearly encoded along ``dirs[attr]`` with strength ``signal``."""
    classes, dim = dirs.shape
    attr = rng.integers(0, classes, ids)
    centre = signal * dirs[attr] + rng.standard_normal((ids, dim))
    labels = np.repeat(np.arange(ids), imgs)
    emb = centre[labels] + 0.5 * rng.standard_normal((labels.size, dim))
    return emb, labels, attr, centre


def test_recovery_above_chance_when_attribute_is_encoded_and_at_chance_on_noise():
    rng = np.random.default_rng(1)
    k, dim = 4, 16
    dirs = rng.standard_normal((k, dim))
    # The attacker's labelled set (own identities) trains the probe.
    lab_emb, lab_ids, lab_attr, _ = _attribute_world(rng, dirs, ids=120, imgs=3, signal=1.5)
    probe = LinearProbe().fit(lab_emb, lab_attr[lab_ids])
    assert np.mean(probe(lab_emb) == lab_attr[lab_ids]) > 0.6
    # Private identities; leaky proxies sit near their source identity (5 per identity).
    priv_emb, priv_ids, _, centre = _attribute_world(rng, dirs, ids=80, imgs=4, signal=1.5)
    source = np.repeat(np.arange(80), 5)
    leaky = centre[source] + 0.5 * rng.standard_normal((source.size, dim))
    r = attribute_recovery(probe(leaky), source, probe(priv_emb), priv_ids, num_classes=k, permutations=500)
    assert r["balanced_accuracy"] > r["null95_balanced_accuracy"][1] + 0.2
    assert r["macro_f1"] > r["null95_macro_f1"][1] + 0.2
    assert r["p_balanced_accuracy"] < 0.01 and r["n"] == 400
    # Proxies of pure noise: the probe's labels carry nothing about the source.
    noise = 3 * rng.standard_normal((source.size, dim))
    r0 = attribute_recovery(probe(noise), source, probe(priv_emb), priv_ids, num_classes=k, permutations=500)
    lo, hi = r0["null95_balanced_accuracy"]
    assert lo <= r0["balanced_accuracy"] <= hi
    # 400 proxies: the null sd of either metric is ~0.025, so 0.08 is > 3 sd.
    assert abs(r0["balanced_accuracy"] - r0["chance_balanced_accuracy"]) < 0.08
    assert abs(r0["macro_f1"] - r0["chance_macro_f1"]) < 0.08


def test_chance_levels_and_permutation_mean():
    rng = np.random.default_rng(3)
    priv_pred = np.repeat([0, 1, 2, 0, 1, 2], 3)  # 6 identities, pseudo-labels 0,1,2,0,1,2
    priv_ids = np.repeat(np.arange(6), 3)
    source = rng.integers(0, 6, 300)
    proxy_pred = rng.choice([0, 1, 2, 4], 300, p=[0.4, 0.2, 0.2, 0.2])  # class 4 never a pseudo-label
    r = attribute_recovery(proxy_pred, source, priv_pred, priv_ids, num_classes=5, permutations=2000, seed=1)
    q = np.bincount(proxy_pred, minlength=5) / 300
    assert r["observed_classes"] == [0, 1, 2] and r["chance_uniform"] == pytest.approx(1 / 3)
    assert r["chance_balanced_accuracy"] == pytest.approx(q[[0, 1, 2]].mean())  # < 1/3: mass on class 4
    # The closed form is the permutation mean: check it against the Monte-Carlo draws' band.
    lo, hi = r["null95_balanced_accuracy"]
    assert lo < r["chance_balanced_accuracy"] < hi
    again = attribute_recovery(proxy_pred, source, priv_pred, priv_ids, num_classes=5, permutations=2000, seed=1)
    assert again == r


def test_recovery_errors():
    with pytest.raises(PfdError, match="no private image"):
        attribute_recovery([0, 1], [0, 7], [0, 1], [0, 1], num_classes=2)
    with pytest.raises(PfdError, match="one per proxy"):
        attribute_recovery([0, 1], [0], [0, 1], [0, 1], num_classes=2)
    with pytest.raises(PfdError, match="single attribute class"):
        LinearProbe().fit(np.ones((4, 2)), [1, 1, 1, 1])
    with pytest.raises(PfdError, match="before fit"):
        LinearProbe().predict(np.ones((1, 2)))


def test_read_attributes_csv_and_map(tmp_path):
    path = tmp_path / "attributes.csv"
    path.write_text("identity,tone,hair,age\nalice,0,1,5\nbob, 3 ,0,2\n\n")
    table = read_attributes_csv(path)
    assert table == {"alice": {"tone": 0, "hair": 1, "age": 5}, "bob": {"tone": 3, "hair": 0, "age": 2}}
    np.testing.assert_array_equal(image_attribute_labels([1, 0, 1], ["alice", "bob"], table, "tone"), [3, 0, 3])
    with pytest.raises(PfdError, match="'carol' has no row"):
        image_attribute_labels([2], ["alice", "bob", "carol"], table, "tone")
    with pytest.raises(PfdError, match="no 'eyes' attribute"):
        image_attribute_labels([0], ["alice"], table, "eyes")


@pytest.mark.parametrize(
    "text,match",
    [
        ("", "empty attributes csv"),
        ("name,tone\nalice,1\n", r":1: header must be"),
        ("identity,tone,tone\nalice,1,2\n", r":1: header must be"),
        ("identity,tone\nalice,1,2\n", r":2: expected 2 fields"),
        ("identity,tone\nalice,x\n", r":2: tone='x' for 'alice' is not an integer"),
        ("identity,tone\nalice,-1\n", r":2: tone=-1 .* negative"),
        ("identity,tone\nalice,1\nalice,2\n", r":3: duplicate identity 'alice'"),
        ("identity,tone\n,1\n", r":2: empty identity"),
    ],
)
def test_read_attributes_csv_errors(tmp_path, text, match):
    path = tmp_path / "attributes.csv"
    path.write_text(text)
    with pytest.raises(PfdError, match=match):
        read_attributes_csv(path)


def test_read_attributes_csv_missing_file(tmp_path):
    with pytest.raises(PfdError, match="cannot read"):
        read_attributes_csv(tmp_path / "nope.csv")
