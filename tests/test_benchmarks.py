"""The benchmark scripts' cheap paths: the data-absent skip and the results table."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench_modules():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("privacy_utility"), importlib.import_module("pu_report")
    finally:
        sys.path.remove(str(BENCH))


def test_privacy_utility_skips_cleanly_without_the_photos(bench_modules, tmp_path, capsys):
    pu, _ = bench_modules
    assert pu.main(["--data-root", str(tmp_path / "nowhere"), "--results", str(tmp_path / "res")]) == 0
    assert "SKIP" in capsys.readouterr().out and not (tmp_path / "res").exists()


def test_results_table_shows_each_row_with_chance_and_intervals(bench_modules):
    _, report = bench_modules
    link = {"rate": 0.5, "ci95": [0.4, 0.6], "count": 70, "n": 140}
    row = {"utility": {"accuracy": 0.8, "tar@far=0.01": 0.3, "tar@far=0.001": None}, "times_s": {"total": 12.0},
           "membership": {"statistics": {"pair_cos": {"auc_a_priori": 0.61}}, "fusion": {"auc_mean": 0.7}},
           "load_start": [1.5, 1.0, 1.0]}
    doc = {"row_order": ["base", "raw"], "settings": {"eval": {"pairs": 5000}},
           "data": {"private": {"identities": ["a"] * 28, "images": 1700}, "test": {"identities": ["b"] * 10}},
           "rows": {"raw": {**row, "row": "raw", "linkability": {r: {"vismatch": link, "reid": link} for r in ("public", "insider")},
                            "lint_findings": []},
                    "base": {**row, "row": "base"}}}
    text = report.markdown(doc)
    lines = text.splitlines()
    assert lines.index(next(ln for ln in lines if ln.startswith("| base"))) < lines.index(next(ln for ln in lines if ln.startswith("| raw")))
    assert "1/28 = 3.6 %" in text and "| raw | 80.0 | 30.0 | – | 50.0 |" in text and "0.61 | 0.70 | 12 |" in text
    assert "50.0 (40.0–60.0; 70/140)" in text and "| raw | – | – | – | pass |" in text
