"""Report writing: verdicts, summary rows with chance and intervals, strict JSON, plots."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from pfd.attacks.linkability.matching import LinkFigures, visual_matching
from pfd.audit.grid import MatchGrid
from pfd.attacks.membership.statistics import STATISTICS, membership_report
from pfd.attacks.plots import kde, plot_densities, plot_match_grid, plot_roc
from pfd.attacks.attributes.attack import AttributesResult
from pfd.audit.contract import verdict
from pfd.attacks.linkability.attacks import LinkRows
from pfd.attacks.membership.attack import MembershipResult, membership_row
from pfd.attacks.scorecard.report import format_markdown, jsonable, write_report
from pfd.audit.engine import Scorecard
from pfd.audit.rows import rows_to_json


def _clusters(n_ids, k, spread, rng, d=16):
    centres = rng.normal(size=(n_ids, d))
    emb = np.repeat(centres, k, 0) + spread * rng.normal(size=(n_ids * k, d))
    return emb, np.repeat(np.arange(n_ids), k)


@pytest.fixture(scope="module")
def membership():
    rng = np.random.default_rng(0)
    m, lm = _clusters(12, 4, 0.3, rng)
    n, ln = _clusters(12, 4, 0.6, rng)
    return membership_report(m, lm, n, ln, folds=3)


def test_verdict_compares_the_interval_with_chance():
    assert verdict((0.2, 0.4), 0.05) == "LEAKS"
    assert verdict((0.01, 0.2), 0.05) == "≈ chance"
    assert verdict((0.0, 0.03), 0.05) == "below chance"


def test_kde_integrates_to_one_and_peaks_at_the_data():
    grid = np.linspace(-5, 5, 2001)
    dens = kde(np.random.default_rng(1).normal(size=300), grid)
    assert np.trapezoid(dens, grid) == pytest.approx(1.0, abs=0.01)
    assert abs(grid[np.argmax(dens)]) < 0.5
    assert np.isfinite(kde(np.ones(5), grid)).all()  # degenerate sample: tiny bandwidth, no NaN


def test_summary_rows_carry_chance_interval_and_verdict(membership):
    rng = np.random.default_rng(2)
    gallery = rng.normal(size=(40, 8))
    labels = np.repeat(np.arange(10), 4)
    vis = visual_matching(gallery[::4] + 0.01, labels[::4], gallery, labels)  # every proxy links
    attr = {"balanced_accuracy": 0.3, "chance_balanced_accuracy": 0.25, "ci95_balanced_accuracy": [0.2, 0.4],
            "p_balanced_accuracy": 0.2, "macro_f1": 0.9, "chance_macro_f1": 0.24, "ci95_macro_f1": [0.8, 0.95],
            "p_macro_f1": 0.001}
    results = [LinkRows("linkability", [LinkFigures("proxies", "public", {"vismatch": vis, "reid": vis})],
                        ("vismatch", "reid")), AttributesResult("x", {"tone": attr}), MembershipResult(membership)]
    rows = [row for r in results for row in r.rows()]  # each result renders its rows
    assert [r.attack for r in rows][:2] == ["VisMatch (proxies)", "Rank-1 Re-ID (proxies)"]
    assert rows[0].value == 1.0 and rows[0].chance == pytest.approx(0.1) and rows[0].verdict == "LEAKS"
    tone = [r for r in rows if r.attack.startswith("Attribute tone")]
    assert [r.verdict for r in tone] == ["≈ chance", "LEAKS"]
    mia = [r for r in rows if r.attacker == "downstream"]
    # One membership row: the permutation test (members clearly tighter here, so it leaks).
    v = membership["verdict"]
    assert len(mia) == 1 and mia[0].value == pytest.approx(v["auc"]) and mia[0].chance == 0.5
    assert mia[0].p == v["p"] < 0.05 and mia[0].verdict == "LEAKS" and mia[0].ci95 is None
    assert v["auc"] == pytest.approx(max(membership["statistics"][s]["auc_a_priori"] for s in STATISTICS + ()) if
                                     "fusion" not in v["aucs"] else max(v["aucs"].values()))
    assert verdict(None, 0.5, p=0.06) == "≈ chance" and verdict((0.9, 1.0), 0.5, p=0.2) == "≈ chance"
    for r in rows:
        assert r.ci95 is None or (r.ci95[0] <= r.ci95[1] and 0 <= r.chance <= 1)


def test_membership_row_is_inconclusive_when_the_reference_already_separates_the_groups():
    rng = np.random.default_rng(0)
    m, lm = _clusters(12, 4, 0.3, rng)
    n, ln = _clusters(12, 4, 0.6, rng)
    # The same tightness gap before training: the reference (here the same geometry) separates them.
    rep = membership_report(m, lm, n, ln, folds=3, reference_member_emb=m, reference_nonmember_emb=n)
    assert rep["reference"]["separates"] and rep["verdict"]["unadjusted_leaks"]
    row = membership_row(rep)
    assert row.verdict == "inconclusive" and row.extra["reference_p"] == rep["reference"]["p"] <= 0.05
    # A reference in which the groups look alike keeps the LEAKS verdict.
    same = _clusters(24, 4, 0.45, rng)[0]
    rep = membership_report(m, lm, n, ln, folds=3, reference_member_emb=same[:48], reference_nonmember_emb=same[48:])
    assert not rep["reference"]["separates"] and membership_row(rep).verdict == "LEAKS"


def test_write_report_is_strict_json_and_markdown_lists_skips(tmp_path, membership):
    assert jsonable({"a": np.float32(1.5), "b": [np.inf, np.int64(3)], "c": np.arange(2)}) == \
        {"a": 1.5, "b": [None, 3], "c": [0, 1]}
    data = {"release": {"path": "r", "method": "pfd", "num_classes": 2, "num_images": 4, "image_size": 16},
            "private": {"spec": "p", "identities": 2, "images": 4, "source_identities": 2},
            "attackers": [], "linkability": [], "membership": membership, "skipped": {"attributes": "no aux"},
            "timings": {"load": 0.5}}
    grid = MatchGrid(proxies=torch.rand(2, 3, 16, 16), matches=torch.rand(2, 3, 16, 16),
                     sources=torch.rand(2, 3, 16, 16), success=[True, False])
    result = MembershipResult(membership)
    data["summary"] = rows_to_json(result.rows())  # as the engine writes it
    paths = write_report(Scorecard(data=data, grid=grid, results={"membership": result}, rows=result.rows()), tmp_path)
    doc = json.loads(paths["json"].read_text())  # strict JSON: inf thresholds became null
    assert doc["summary"] and doc["plots"]["matches"] == "matches.png"
    assert all(p.is_file() for p in paths.values())
    md = paths["markdown"].read_text()
    assert "- attributes: no aux" in md and "| Membership:" in md and "0.500" in md and "## Membership of the release" in md
    assert doc["plots"]["membership_roc"] == "membership_roc.png"  # the result drew its own plots
    # Issue 20: "4 images (2 of them are sources of proxies)" read as if images were the sources.
    assert "2 identities (2 of them sources of proxies), 4 images" in md and "16 px" in md
    assert format_markdown({**data, "membership": {}}, [], {}).count("No attack could run") == 1


def test_plots_write_pngs(tmp_path, membership):
    plot_roc(membership, tmp_path / "roc.png")
    plot_densities(membership, tmp_path / "dens.png")
    plot_match_grid([("a", torch.rand(3, 3, 8, 8)), ("b", torch.rand(3, 3, 16, 16))], tmp_path / "grid.png")
    for name in ("roc.png", "dens.png", "grid.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert not math.isnan(membership["fusion"]["auc_mean"])
