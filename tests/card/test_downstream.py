"""The card's per-model verification figures (pfd/card/downstream.py)."""

import numpy as np

from pfd.card.downstream import verification
from pfd.verify import tar_at_far, verification_metrics


def test_verification_names_each_far_once_and_keeps_the_other_figures():
    rng = np.random.default_rng(0)
    issame = np.tile([True, False], 200)  # 200 impostors: 1e-2 resolvable, 1e-3 not
    scores = np.where(issame, rng.normal(0.6, 0.2, 400), rng.normal(0.1, 0.2, 400))
    m = verification(scores, issame, folds=10, fars=[1e-2, 1e-3])
    assert sorted(k for k in m if k.startswith("tar@far=")) == ["tar@far=0.001", "tar@far=0.01"]
    assert m["tar@far=0.01"] == tar_at_far(scores, issame, 1e-2)[0] > 0
    assert m["tar@far=0.001"] is None  # fewer than 1,000 impostors: not resolvable, never a number
    ref = verification_metrics(scores, issame, folds=10)
    assert {k: m[k] for k in ("accuracy", "eer", "auc", "num_impostor")} == {
        k: ref[k] for k in ("accuracy", "eer", "auc", "num_impostor")}
