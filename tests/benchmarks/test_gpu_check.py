"""benchmarks/gpu_check.py: the --tiny CPU path runs end to end, so the GPU script cannot rot."""

from __future__ import annotations

import json

import pytest

from tests.conftest import BENCH

@pytest.fixture(scope="module")
def gpu_check(bench):
    return bench("gpu_check")


def test_tiny_run_reports_every_figure(gpu_check, tmp_path, capsys):
    assert gpu_check.main(["--tiny", "--device", "cpu", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    for phase, per in (("ogp", "seconds_per_step"), ("rta", "seconds_per_iteration")):
        r = doc[phase]
        assert r["images_per_s"] > 0 and r[per] > 0
        assert r["images_per_s"] == pytest.approx(r["batch"] / r[per], rel=1e-6)
        # FLOPs counted for a step of the tiny backbone: forward alone is B x ~11 MFLOP per image.
        assert r["flops_per_step" if phase == "ogp" else "flops_per_iteration"] > r["batch"] * 1e6
        assert r["tflops"] > 0 and r["peak_gib"] is None  # no CUDA memory on a CPU
    ratio = doc["rta"]["ratio_vs_bare"]
    assert ratio["interval"][0] <= ratio["median"] <= ratio["interval"][1]
    rec = doc["recipe"]
    # Extrapolation from the recipe's budget: 1000 RTA iterations per batch, as in the paper.
    assert rec["rta_iterations"] == 1000
    assert rec["rta_seconds"] == pytest.approx(rec["rta_batches"] * 1000 * doc["rta"]["seconds_per_iteration"], rel=1e-6)
    assert rec["total_seconds"] == pytest.approx(rec["ogp_seconds"] + rec["rta_seconds"], rel=1e-9)
    assert "images/s" in out and "Full recipe" in out
    assert (tmp_path / "gpu_check.md").read_text().startswith("GPU check on cpu")


def test_recipe_shape_is_the_papers_cross_age_setting_and_peaks_are_known(gpu_check):
    shape = gpu_check.recipe_shape(BENCH.parent / "recipes" / "cross-age.toml")
    assert shape["arch"] == {"name": "ir50", "width": 1.0, "size": 112, "embedding_dim": 512}
    assert (shape["ids"], shape["ipc"], shape["rta_iterations"]) == (150, 10, 1000)
    assert gpu_check.bf16_peak("NVIDIA H200") == 989.0
    assert gpu_check.bf16_peak("NVIDIA H100 PCIe") == 756.0
    assert gpu_check.bf16_peak("NVIDIA A100-SXM4-80GB") == 312.0
    assert gpu_check.bf16_peak("Tesla V100-SXM2-16GB") is None  # no bf16 tensor cores
    assert gpu_check.bf16_peak("Some Future GPU") is None
