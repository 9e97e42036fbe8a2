"""benchmarks/audit_scaling.py: the fit, the goals and the section of scaling.md, on made-up points
(the sweep itself runs by hand), and one real point at a tiny size through a fresh process."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def audit_scaling(bench):
    return bench("audit_scaling")


def _points(mod, sizes, seconds):
    return [{"n_ids": n, "k": 10, "dim": 128, "imgs": 20, "check": c, "wall_s": seconds(n) / len(mod.CHECK_NAMES),
             "peak_mib": 1000.0 + n / 100, "extra_mib": 100.0 + n / 100} for n in sizes for c in mod.CHECK_NAMES]


def test_quadratic_checks_are_fitted_as_such_and_extrapolated(audit_scaling):
    doc = audit_scaling.summary(_points(audit_scaling, [300, 1000, 3000, 10_000], lambda n: 1e-5 * n * n))
    fits = {f["check"]: f for f in doc["fits"]}
    assert fits["audit"]["time_exponent"] == pytest.approx(2.0)
    assert fits["audit"]["time_tail_exponent"] == pytest.approx(2.0)
    assert fits["audit"]["time_at_1e5_s"] == pytest.approx(1e-5 * 1e10)
    totals = {t["n_ids"]: t for t in doc["totals"]}
    assert totals[1000]["wall_s"] == pytest.approx(10.0) and totals[1000]["met"] is True
    assert totals[10_000]["wall_s"] == pytest.approx(1000.0) and totals[10_000]["met"] is True
    assert totals[300]["met"] is None  # no goal at that size


def test_a_missed_goal_is_said(audit_scaling):
    doc = audit_scaling.summary(_points(audit_scaling, [1000, 10_000], lambda n: 0.2 * n))  # 2000 s at 10^4
    totals = {t["n_ids"]: t for t in doc["totals"]}
    assert totals[1000]["met"] is False and totals[10_000]["met"] is False
    assert "MISSED" in audit_scaling.markdown(doc)


def test_a_size_with_a_check_missing_has_no_total(audit_scaling):
    pts = [p for p in _points(audit_scaling, [300, 1000], lambda n: n / 100) if not (p["n_ids"] == 1000 and p["check"] == "hubness")]
    doc = audit_scaling.summary(pts)
    assert [t["n_ids"] for t in doc["totals"]] == [300]


def test_the_section_is_spliced_into_scaling_md_and_replaced_not_repeated(audit_scaling):
    page = "## pfd distill\n\n| a |\n\n## Fitted exponents (y)\n\n| b |\n"
    doc = audit_scaling.summary(_points(audit_scaling, [300, 1000], lambda n: n / 100))
    section = audit_scaling.markdown(doc)
    once = audit_scaling.splice(page, section)
    assert once.index(audit_scaling.HEADER) < once.index("## Fitted exponents")
    twice = audit_scaling.splice(once, section)
    assert twice == once and twice.count(audit_scaling.HEADER) == 1
    assert audit_scaling.splice(once, "") == page


def test_one_real_point_runs_the_registered_check_in_a_fresh_process(audit_scaling, tmp_path):
    out = tmp_path / "as"
    assert audit_scaling.main(["--sizes", "12", "--checks", "judge_competence", "linkability", "--k", "2", "--imgs", "3",
                               "--dim", "8", "--out", str(out)]) == 0
    pts = audit_scaling.load(out.with_suffix(".jsonl"))
    assert sorted(p["check"] for p in pts) == ["judge_competence", "linkability"]
    assert all(p["figures"] > 0 and p["wall_s"] > 0 and p["peak_mib"] >= p["base_mib"] for p in pts)
    # Resumable: a finished point is not run again.
    audit_scaling.main(["--sizes", "12", "--checks", "linkability", "--k", "2", "--imgs", "3", "--dim", "8", "--out", str(out)])
    assert len(audit_scaling.load(out.with_suffix(".jsonl"))) == 2
