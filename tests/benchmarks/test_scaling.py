"""benchmarks/scaling.py: the exponent fit and the verdicts, on made-up curves (the sweeps run by hand)."""

from __future__ import annotations


import numpy as np
import pytest

@pytest.fixture(scope="module")
def scaling(bench):
    return bench("scaling")


def test_fit_exponent_recovers_power_laws(scaling):
    x = [12, 24, 48, 96, 192]
    for b in (0.0, 1.0, 2.0, 0.5):
        assert scaling.fit_exponent(x, [3.0 * v**b for v in x]) == pytest.approx(b, abs=1e-9)
    assert np.isnan(scaling.fit_exponent([10], [1.0]))


def test_curves_flag_superlinear_stages_and_growing_memory(scaling, tmp_path):
    ids = [12, 24, 48, 96]
    doc = {
        "distill_ids": [{"ids": n, "k": 5, "images": 20 * n, "proxies": 5 * n, "wall_s": 10 + n, "cpu_s": 5 + n, "peak_rss_mib": 900.0,
                         "stages_s": {"adapt": 0.1 * n, "rta": 1e-3 * n * n}} for n in ids],
        "attack_gallery": [{"gallery": g, "queries": 1000, "vismatch_s": 1e-6 * g, "reid_s": 2e-6 * g, "input_mib": g / 4096,
                            "rss_before_mib": 300.0, "peak_rss_mib": 310.0, "extra_mib": 8.0} for g in (10**3, 10**4, 10**5)],
    }
    curves = {(c["sweep"], c["y"]): c for c in scaling.curves(doc)}
    assert curves[("distill_ids", "adapt time")]["exponent"] == pytest.approx(1.0)
    assert curves[("distill_ids", "adapt time")]["verdict"] == "linear or better"
    assert curves[("distill_ids", "rta time")]["exponent"] == pytest.approx(2.0)
    assert curves[("distill_ids", "rta time")]["verdict"] == "super-linear"
    # Fixed start-up cost: flat at the small end, the tail slope shows the growth.
    wall = curves[("distill_ids", "process wall time")]
    assert wall["exponent"] < wall["tail_exponent"] < 1.0
    assert curves[("attack_gallery", "VisMatch memory beyond the gallery")]["verdict"] == "flat"
    assert curves[("attack_gallery", "VisMatch time")]["exponent"] == pytest.approx(1.0)
    doc.update(curves=list(curves.values()), stages=["adapt", "rta"], mode="test", cpu="x", load_start=[0], load_end=[0],
               date="today", seconds=1.0)
    text = scaling.markdown(doc)
    assert "| distill_ids | rta time | ids | 2.00 | 2.00 | super-linear |" in text
    scaling.plot(doc, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000
