"""Issue 35's goals read off a target table (benchmarks.pu.goals)."""

from __future__ import annotations

import json

from benchmarks.pu.goals import goal_records, holm, method_goals


def _acc(diff, lo, hi, sd=0.01):
    return {"utility": {"all": {"accuracy": {"diff": diff, "ci95": [lo, hi], "ref_sd": sd}}}}


def _pfd(diff=0.0, lo=-0.01, hi=0.01, *, publishable=True, above=False, rank_p=(0.4, 0.03)):
    ci = [0.05, 0.2] if above else [0.0, 0.05]
    fig = {"chance": 0.036, "ci95_per_seed": [[0.0, 0.05], ci]}
    row = _acc(diff, lo, hi)
    row["linkability"] = {"proxies": {r: {"reid": fig, "vismatch": fig} for r in ("public", "insider", "judge")},
                          "rank_uniformity": {"proxies": {r: {"p_per_seed": list(rank_p)}
                                                          for r in ("public", "insider", "judge")}}}
    row["audit"] = {"publishable": 2 if publishable else 1, "of": 2,
                    "failed_per_seed": [[], [] if publishable else ["Rank-1 Re-ID (proxies) [public]"]]}
    return row


def _doc(**pfd_kw):
    surv = {"pfd": _pfd(0.047, 0.02, 0.07), "raw": _acc(0.05, 0.03, 0.07), "blur": _acc(0.04, 0.0, 0.06),
            "dp-pix": _acc(0.03, 0.0, 0.05), "ncfm": _acc(0.0, -0.02, 0.02), "rta-only": _acc(0.045, 0.02, 0.07),
            "sre2l": _acc(0.05, 0.02, 0.07)}
    return {"scenarios": {
        "celeba": {"rows": {"pfd": _pfd(**pfd_kw)}},
        "illumination": {"rows": {"pfd": _pfd(0.035, 0.005, 0.06)}},
        "surveillance": {"rows": surv, "paired": {"pfd - dp-pix": {"accuracy": {"diff": 0.017, "ci95": [0.001, 0.03]}}}},
    }}


def test_a_table_that_meets_every_goal_reads_met():
    g = method_goals(_doc(), screen={"variants": {"default": {"summary": {"seconds": 510.0, "peak_gb": 5.2}}}},
                     paper={"scenario": "illumination", "diff": -0.005, "reference": {"diff": -0.009, "ci95": [-0.03, 0.004]}},
                     card_s=480.0, plan=(600.0, 683.0))
    assert {k: s for k, (s, _) in g.items()} == dict.fromkeys("abcdef", "met"), g
    assert "94 % of raw's +5.0" in g["c"][1] and "paired pfd - dp-pix +1.7 (+0.1, +3.0)" in g["c"][1]


def test_each_goal_fails_on_its_own_evidence():
    g = method_goals(_doc(above=True))
    assert g["a"][0] == "MISSED" and "above: proxies public reid" in g["a"][1]
    assert method_goals(_doc(publishable=False))["a"][0] == "MISSED"
    d = method_goals(_doc(rank_p=(0.4, 1e-5)))["d"]
    assert d[0] == "MISSED" and "NOT uniform: celeba insider seed 1 p = 1e-05" in d[1]
    doc = _doc()
    doc["scenarios"]["illumination"]["rows"]["pfd"] = _pfd(0.029, 0.001, 0.05)  # +2.9 < +3.0
    assert method_goals(doc)["b"][0] == "MISSED"
    doc["scenarios"]["surveillance"]["rows"]["blur"] = _acc(0.048, 0.02, 0.07)  # blur ahead of pfd
    c = method_goals(doc)["c"]
    assert c[0] == "MISSED" and "NOT blur +4.8" in c[1]
    f = method_goals(_doc(), screen={"variants": {"default": {"summary": {"seconds": 510.0, "peak_gb": 6.9}}}},
                     card_s=480.0, plan=(600.0, 683.0))["f"]
    assert f[0] == "MISSED" and "peak 6.9 GB" in f[1]
    e = method_goals(_doc(), paper={"scenario": "illumination", "diff": 0.02, "reference": {"diff": -0.009, "ci95": [-0.03, 0.004]}})
    assert e["e"][0] == "MISSED"


def test_goals_wait_for_missing_rows_and_records_instead_of_judging_part_of_the_evidence():
    doc = _doc()
    del doc["scenarios"]["celeba"]
    del doc["scenarios"]["surveillance"]["rows"]["ncfm"]
    g = method_goals(doc)
    assert g["a"][0] == g["c"][0] == g["d"][0] == g["e"][0] == g["f"][0] == "pending"
    assert "ncfm" in g["c"][1] and "celeba" in g["d"][1]
    assert g["b"][0] == "met"


def test_goal_records_read_the_screen_its_paper_variant_and_the_timings(tmp_path):
    results = tmp_path / "target-v5"
    results.mkdir()
    (tmp_path / "privacy_utility_target.json").write_text(json.dumps(
        {"scenarios": {"illumination": {"rows": {"pfd": _acc(-0.009, -0.03, 0.004)}}}}))
    (results / "pu_ablation_target_illumination_screen.json").write_text(json.dumps({"variants": {
        "default": {"summary": {"seconds": 510.0, "peak_gb": 5.1, "accuracy": {"diff": 0.006}}},
        "paper": {"summary": {"seconds": 700.0, "accuracy": {"diff": -0.004}}}}}))
    (results / "timings.json").write_text(json.dumps({"card": {"seconds": 470}, "plan": {"planned_s": 600, "measured_s": 683}}))
    rec = goal_records(results)
    assert rec["screen"]["variants"]["default"]["summary"] == {"seconds": 510.0, "peak_gb": 5.1}
    assert rec["paper"] == {"scenario": "illumination", "diff": -0.004, "reference": {"diff": -0.009, "ci95": [-0.03, 0.004]}}
    assert rec["card_s"] == 470 and rec["plan"] == [600, 683]
    assert goal_records(tmp_path / "empty") == {}
    # A screen unit measured idle for its time and again for its memory: timings.json says so and wins.
    (results / "timings.json").write_text(json.dumps({"screen_unit": {"seconds": 509.7, "peak_gb": 5.97}}))
    assert goal_records(results)["screen"]["variants"]["default"]["summary"] == {"seconds": 509.7, "peak_gb": 5.97}


def test_goal_d_reads_the_source_ranks_family_wise():
    # p = 0.03 on one seed of every attacker: no single test is below 0.05 / 18, so Holm rejects none.
    d = method_goals(_doc())["d"]
    assert d[0] == "met" and "uniform (Holm, family-wise 5 % over 18 tests" in d[1] and "9 at p <= 0.05, 0.9 expected at chance" in d[1]


def test_holm_against_its_definition():
    assert holm([0.01, 0.04, 0.03, 0.2], level=0.05) == [True, False, False, False]
    assert holm([0.01, 0.016, 0.02], level=0.05) == [True, True, True]  # 0.01<=0.05/3, 0.016<=0.025, 0.02<=0.05
    assert holm([0.5, 0.001], level=0.05) == [False, True]
    assert holm([], level=0.05) == []
