"""Per-identity risk (pfd/attacks/scorecard/risk.py) and the privacy verdict of the pages (html.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from pfd.attacks.scorecard.html import privacy_verdict, report_html
from pfd.attacks.scorecard.risk import per_identity_risk


def test_counts_the_linked_proxies_of_each_identity_and_finds_the_hub():
    source = np.array([0, 0, 1, 1, 2, 2])
    gallery = np.array([0, 0, 1, 1, 2, 2, 2, 2])  # identity 2 holds half the gallery
    vis = SimpleNamespace(success=np.array([1, 1, 0, 0, 0, 1], bool), match_index=np.array([0, 1, 4, 5, 6, 7]))
    reid = SimpleNamespace(success=np.array([1, 0, 1, 0, 0, 0], bool), match_index=np.zeros(6, int))
    rows = per_identity_risk([{"target": "proxies", "attacker": "public", "vismatch": vis, "reid": reid}], source,
                             gallery, ["a", "b", "c"])
    assert [r["identity"] for r in rows] == ["a", "c", "b"]  # 2/2 linked, then 1/2 (c, hub), then 1/2 (b)
    a, c, b = rows
    assert a["hits"] == {"public/vismatch": 2, "public/reid": 1} and a["worst"] == 2 and a["worst_rate"] == 1.0
    assert c["nearest_for"] == 4 and c["chance_hits"] == 2 * 0.5  # 4 of 6 proxies' nearest photo is c's
    assert b["worst"] == 1 and b["worst_row"] == "public/reid"


def _row(verdict, value=0.05, chance=0.05, hi=0.1):
    return {"attack": "VisMatch (proxies)", "attacker": "public", "value": value, "chance": chance,
            "ci95": [0.0, hi], "kind": "rate", "verdict": verdict, "count": 1, "n": 20}


def test_privacy_verdict_names_the_worst_leak_or_what_is_ruled_out():
    ok = privacy_verdict([_row("≈ chance", hi=0.1), _row("≈ chance", hi=0.2)])
    assert ok["publishable"] and ok["rules_out"] == 4.0 and "rules out 4.0× chance" in ok["text"]
    leak = dict(_row("LEAKS", value=0.5, hi=0.7), count=10, n=20, n_eff=20.0)  # 10 of 20 at chance 5 %
    bad = privacy_verdict([_row("≈ chance"), leak])
    assert bad["publishable"] is False and "1 of 2 figures leak" in bad["text"] and "50.0%" in bad["text"]
    # 2 of 20 at chance 5 %: LEAKS at its own 5 % level, not family-wise over 2 rows
    edge = dict(_row("LEAKS", value=0.1, hi=0.3), count=2, n=20, n_eff=20.0)
    v = privacy_verdict([_row("≈ chance"), edge])
    assert v["publishable"] and v["flagged"] and "1 flagged at their own 5 % level" in v["text"]
    assert privacy_verdict([])["publishable"] is None


def test_report_page_is_self_contained():
    rows = [_row("≈ chance")]
    page = report_html({"release": {}, "private": {}, "attackers": []}, rows)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "http://" not in page and "https://" not in page
    assert page.count("<img") == 1  # the linkage bars
