"""The release-level verdict (pfd/attacks/scorecard/family.py): at most 5 % false alarms under the
null, while each row alone at 5 % would fire in most audits; a real leak still fires."""

from __future__ import annotations

import numpy as np

from pfd.attacks.contract import verdict
from pfd.attacks.metrics import clopper_pearson
from pfd.attacks.scorecard.family import family_leaks
from pfd.attacks.scorecard.html import privacy_verdict


def _audit(rng, *, rates=20, tests=10, n=240, chance=1 / 24, signal=0.0):
    rows = []
    for i in range(rates):
        k = int(rng.binomial(n, min(chance * (1 + signal * (i == 0)), 1.0)))
        ci = clopper_pearson(k, n)
        rows.append({"attack": f"r{i}", "attacker": "a", "kind": "rate", "value": k / n, "chance": chance, "ci95": list(ci),
                     "count": k, "n": n, "n_eff": float(n), "verdict": verdict(ci, chance)})
    for j in range(tests):
        p = float(rng.uniform())
        rows.append({"attack": f"t{j}", "attacker": "a", "kind": "score", "value": 0.5, "chance": 0.5, "ci95": None,
                     "p": p, "verdict": verdict(None, 0.5, p=p)})
    return rows


def test_false_alarms_under_the_null_stay_below_five_percent():
    rng = np.random.default_rng(0)
    audits = 600
    family = per_row = 0
    for _ in range(audits):
        rows = _audit(rng)
        family += bool(family_leaks(rows))
        per_row += any(r["verdict"] == "LEAKS" for r in rows)
    rate = family / audits
    assert rate <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / audits), rate
    assert per_row / audits > 0.3  # "any row LEAKS" would refuse a third or more of the releases at chance


def test_a_strong_leak_still_fires_and_the_verdict_says_so():
    rng = np.random.default_rng(1)
    rows = _audit(rng, signal=4.0)  # one rate at 5x chance
    assert [r["attack"] for r in family_leaks(rows)] == ["r0"]
    v = privacy_verdict(rows)
    assert v["publishable"] is False and v["text"].startswith("not publishable: 1 of 30 figures leak")


def test_an_inconclusive_membership_row_never_counts():
    row = {"attack": "m", "attacker": "d", "kind": "auc", "value": 0.9, "chance": 0.5, "ci95": None, "p": 1e-6,
           "verdict": "inconclusive"}
    assert family_leaks([row]) == []
