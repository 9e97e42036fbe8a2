"""Attribute recovery as the attacker runs it: probe on auxiliary data, bootstrap intervals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import balanced_accuracy_score, f1_score

from pfd.attacks.attributes.probe import bootstrap_recovery, default_aux_spec, probe_attribute_recovery
from pfd.attackers.loading import load_attacker
from pfd.data.faceset import TensorFaces
from pfd.data.sources import open_faces
from pfd.errors import PfdError
from tests.attack_world import PRIVATE, build_world, render
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(str(tmp_path_factory.getbasetemp() / "attack-world"))


def test_bootstrap_replicate_equals_sklearn_and_perfect_prediction_is_a_point():
    rng = np.random.default_rng(3)
    t, p = rng.integers(0, 3, 50), rng.integers(0, 3, 50)
    ci = bootstrap_recovery(t, p, num_classes=3, resamples=1, seed=11)
    idx = np.random.default_rng(11).integers(0, 50, size=(1, 50))[0]  # the one replicate drawn
    f1 = f1_score(t[idx], p[idx], labels=[0, 1, 2], average="macro", zero_division=np.nan)
    assert ci["macro_f1"] == pytest.approx([f1, f1])
    assert ci["balanced_accuracy"] == pytest.approx([balanced_accuracy_score(t[idx], p[idx])] * 2)
    assert bootstrap_recovery(t, t, num_classes=3, resamples=50)["balanced_accuracy"] == [1.0, 1.0]
    wide = bootstrap_recovery(t, p, num_classes=3, resamples=400)["balanced_accuracy"]
    assert wide[0] < balanced_accuracy_score(t, p) < wide[1]


def test_default_auxiliary_set_is_the_public_split_of_the_same_kind():
    spec = default_aux_spec(open_faces("synthetic:private,ids=5,imgs=3,domain=lowres,seed=2,size=32"))
    assert spec == "synthetic:public,ids=40,imgs=4,domain=lowres,seed=2,size=32"
    aux = open_faces(spec)
    assert aux.num_classes == 40 and aux.attributes and not set(aux.identities) & set(open_faces(PRIVATE).identities)
    assert default_aux_spec(TensorFaces(torch.rand(2, 3, 8, 8), [0, 1])) is None


@pytest.mark.slow
def test_attributes_recovered_from_raw_images_and_not_from_noise(world, one_thread):
    """Acceptance: clearly above chance on raw synthetic images, at chance on noise."""
    att = load_attacker(world.lowres, role="public", device="cpu")  # trained on other (lowres) people
    aux = render(open_faces(default_aux_spec(open_faces(PRIVATE))))
    aux_emb, priv_emb = att.embed(aux), att.embed(world.private)
    raw_emb = att.embed(world.held_out)  # unseen photos of the private people, as proxies
    raw = probe_attribute_recovery(aux_emb, aux, raw_emb, world.held_out.labels, priv_emb, world.private.labels,
                                   permutations=300)
    noise_imgs = torch.rand(len(world.held_out), 3, 32, 32, generator=torch.Generator().manual_seed(4))
    noise = probe_attribute_recovery(aux_emb, aux, att.embed(noise_imgs), world.held_out.labels, priv_emb,
                                     world.private.labels, permutations=300)
    print({a: (round(r["balanced_accuracy"], 3), round(r["chance_balanced_accuracy"], 3), round(r["macro_f1"], 3),
               round(noise[a]["balanced_accuracy"], 3)) for a, r in raw.items()})
    assert set(raw) == {"tone", "hair", "age"}
    for name, r in raw.items():
        assert r["p_balanced_accuracy"] < 0.01 and r["p_macro_f1"] < 0.01, name
        assert r["ci95_balanced_accuracy"][0] > r["chance_balanced_accuracy"], name
        assert r["balanced_accuracy"] > r["chance_uniform"] + 0.15, name
        n = noise[name]
        lo, hi = n["ci95_balanced_accuracy"]
        # Three attributes are tested on noise: Bonferroni-correct the 5% level, or the test
        # fails by pure chance about one run in seven.
        assert lo <= n["chance_balanced_accuracy"] <= hi and n["p_balanced_accuracy"] > 0.05 / 3, name


def test_probe_needs_attributes():
    faces = TensorFaces(torch.rand(4, 3, 8, 8), [0, 0, 1, 1])
    with pytest.raises(PfdError, match="no attributes"):
        probe_attribute_recovery(np.zeros((4, 2)), faces, np.zeros((1, 2)), [0], np.zeros((4, 2)), [0, 0, 1, 1])
