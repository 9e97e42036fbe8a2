"""Per-identity risk (pfd/audit/risk.py) and the privacy verdict of the pages (html.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from pfd.attacks.linkability.matching import LinkFigures
from pfd.audit.rows import AuditRow
from pfd.attacks.scorecard.html import privacy_verdict, report_html
from pfd.audit.risk import per_identity_risk


def test_counts_the_linked_proxies_of_each_identity_and_finds_the_hub():
    source = np.array([0, 0, 1, 1, 2, 2])
    gallery = np.array([0, 0, 1, 1, 2, 2, 2, 2])  # identity 2 holds half the gallery
    vis = SimpleNamespace(success=np.array([1, 1, 0, 0, 0, 1], bool), match_index=np.array([0, 1, 4, 5, 6, 7]))
    reid = SimpleNamespace(success=np.array([1, 0, 1, 0, 0, 0], bool), match_index=np.zeros(6, int))
    rows = per_identity_risk([LinkFigures("proxies", "public", {"vismatch": vis, "reid": reid})], source,
                             gallery, ["a", "b", "c"])
    assert [r["identity"] for r in rows] == ["a", "c", "b"]  # 2/2 linked, then 1/2 (c, hub), then 1/2 (b)
    a, c, b = rows
    assert a["hits"] == {"public/vismatch": 2, "public/reid": 1} and a["worst"] == 2 and a["worst_rate"] == 1.0
    assert c["nearest_for"] == 4 and c["chance_hits"] == 2 * 0.5  # 4 of 6 proxies' nearest photo is c's
    assert b["worst"] == 1 and b["worst_row"] == "public/reid"


def test_a_hub_of_the_judge_counts_as_much_as_one_of_the_public_model():
    """Issue 34: the nearest-photo count came from the public model only; the judge's hub, the
    nearest photo of every proxy, read "1 proxies"."""
    source = np.array([0, 0, 1, 1, 2, 2])
    gallery = np.array([0, 0, 1, 1, 2, 2])
    none = np.zeros(6, bool)
    public = SimpleNamespace(success=none, match_index=np.array([2, 3, 0, 1, 0, 4]))  # no hub
    judge = SimpleNamespace(success=none, match_index=np.array([5, 5, 4, 4, 5, 4]))  # c's photos for all six
    rows = per_identity_risk([LinkFigures("proxies", "public", {"vismatch": public}),
                              LinkFigures("proxies", "judge", {"vismatch": judge})], source, gallery, ["a", "b", "c"])
    c = next(r for r in rows if r["identity"] == "c")
    assert c["nearest"] == {"public": 1, "judge": 6} and c["nearest_for"] == 6 and c["nearest_by"] == "judge"
    page = report_html({"release": {}, "private": {}, "attackers": [], "per_identity": rows}, [])
    assert "6 proxies (judge)" in page


def _row(verdict, value=0.05, chance=0.05, hi=0.1):
    return AuditRow.from_dict({"attack": "VisMatch (proxies)", "attacker": "public", "value": value, "chance": chance,
                               "ci95": [0.0, hi], "kind": "rate", "verdict": verdict, "count": 1, "n": 20})


def test_privacy_verdict_is_the_audits_own():
    v = {"publishable": False, "text": "not publishable: 1 of 3 fail", "level": 0.01}
    assert privacy_verdict(v) == v and privacy_verdict(v) is not v
    assert privacy_verdict(None)["publishable"] is None


def test_report_page_is_self_contained():
    rows = [_row("≈ chance")]
    page = report_html({"release": {}, "private": {}, "attackers": []}, rows)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "http://" not in page and "https://" not in page
    assert page.count("<img") == 1  # the linkage bars
