"""What a refusing row means (pfd/audit/advice.py): the attacker's gain in the row's counts, the remedy by role."""

from __future__ import annotations

import dataclasses

from pfd.audit.advice import CHECK_REMEDIES, REMEDIES, advice, refusal_advice
from pfd.audit.contract import check_row, summary_row
from pfd.audit.verdict import decide


def _rate(attacker: str, k: int, n: int, chance: float = 0.05):
    from pfd.audit.intervals import clopper_pearson

    return summary_row("VisMatch (proxies)", attacker, k / n, chance, clopper_pearson(k, n, alpha=0.05), "rate",
                       count=k, n=n, n_eff=n, rule_out=True)


def test_each_refusal_says_what_an_attacker_gains_and_what_to_do_by_who_attacks():
    rows = [_rate("public", 2, 240), _rate("insider", 120, 240), _rate("judge", 60, 240),
            check_row("No private photo in the release", False, "0007/003.png is a copy of alice/2.png", check="private_copies")]
    decide(rows)
    hints = refusal_advice(rows)
    assert [h["row"] for h in hints] == ["No private photo in the release", "VisMatch (proxies) by insider",
                                         "VisMatch (proxies) by judge"]  # failed checks first; the public row passed
    check, insider, judge = hints
    assert "alice/2.png" in check["gain"]
    assert "names the source person of 120 of 240 proxies (50.0 %, 10.0× chance)" in insider["gain"]
    assert insider["remedy"] == REMEDIES["insider"] and judge["remedy"] == REMEDIES["judge"]
    assert check["remedy"] == CHECK_REMEDIES["private_copies"]
    assert "--attacker" in advice(dataclasses.replace(rows[1], attacker="arcface-r100"))["remedy"]  # an outside model


def test_a_test_and_an_unresolved_rate_get_their_own_words():
    t = summary_row("Source rank uniform (proxies): mean rank", "insider", 0.7, 0.5, (0.66, 0.74), "score", test_p=1e-5)
    wide = dataclasses.replace(_rate("public", 1, 80, chance=1 / 8), people=8)  # 8 people: at chance 1 of 8 named, CP+ 53 %
    decide([t, wide], bound=0.3, rule_out=0)
    assert "not placed at random (p = 1e-05)" in advice(t)["gain"]
    assert wide.family == "unresolved" and "names 53 % of the 8 people" in advice(wide)["gain"]
    assert "--ipc" not in advice(wide)["remedy"] and "at least 17 private identities" in advice(wide)["remedy"]
    assert refusal_advice([_rate("public", 2, 400)]) == []  # nothing refuses: nothing to explain


def test_a_class_level_refusal_counts_classes_and_names_the_attack():
    row = summary_row("Class-level linking, best of 7 (classes)", "insider", 20 / 24, 1 / 24, None, "score",
                      test_p=5e-5, p_floor=1 / 20001, count=20, n=24, best="spread_most_cos", null95=0.125)
    decide([row])
    gain = advice(row)["gain"]
    assert "names the source person of 20 of 24 classes (spread most cos; chance 1 in 24, p = 5e-05)" in gain


def test_the_gate_and_the_pages_give_one_remedy_for_one_refusal(tmp_path):
    """Issue 52: for the same refusal the gate said "longer OGP schedule" and the card "fewer RTA iterations"."""
    from types import SimpleNamespace

    from pfd.distill.gate import refusal_message

    cfg = SimpleNamespace(method="pfd")
    for rows in ([_rate("insider", 120, 240)], [_rate("public", 120, 240)], [_rate("judge", 120, 240)],
                 [check_row("OGP margin (eq. 3)", False, "0.54 of the private embeddings below the margin", check="ogp_margin")]):
        v = decide(rows)
        message = refusal_message(v, cfg, tmp_path)
        assert advice(v.refusals[0])["remedy"] in message and "\n" not in message
    rta_only = refusal_message(decide([_rate("insider", 120, 240)]), SimpleNamespace(method="rta-only"), tmp_path)
    assert "does not decouple the proxies" in rta_only
