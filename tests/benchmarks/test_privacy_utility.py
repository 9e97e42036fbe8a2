"""The benchmark scripts' cheap paths: the data-absent skip and the results table."""

from __future__ import annotations

import importlib

import pytest

from tests.conftest import BENCH


@pytest.fixture(scope="module")
def bench_modules():
    return importlib.import_module("benchmarks.privacy_utility"), importlib.import_module("benchmarks.pu.report")


def test_privacy_utility_skips_cleanly_without_the_photos(bench_modules, tmp_path, capsys):
    pu, _ = bench_modules
    assert pu.main(["--data-root", str(tmp_path / "nowhere"), "--results", str(tmp_path / "res")]) == 0
    assert "SKIP" in capsys.readouterr().out and not (tmp_path / "res").exists()


def test_results_table_shows_each_row_with_chance_and_intervals(bench_modules):
    _, report = bench_modules
    link = {"rate": 0.5, "ci95": [0.4, 0.6], "count": 70, "n": 140}
    row = {"utility": {"accuracy": 0.8, "tar@far=0.01": 0.3, "tar@far=0.001": None,
                       "moderate": {"accuracy": 0.9, "tar@far=0.01": 0.45}}, "times_s": {"total": 12.0},
           "membership": {"statistics": {"pair_cos": {"auc_a_priori": 0.61}}, "fusion": {"auc_mean": 0.7}},
           "load_start": [1.5, 1.0, 1.0]}
    doc = {"row_order": ["base", "raw"], "settings": {"eval": {"pairs": 5000, "moderate_pairs": 3000, "moderate_light": 50.0}},
           "data": {"private": {"identities": ["a"] * 28, "images": 1700}, "test": {"identities": ["b"] * 10}},
           "rows": {"raw": {**row, "row": "raw", "linkability": {r: {"vismatch": link, "reid": link} for r in ("public", "insider")},
                            "lint_findings": []},
                    "base": {**row, "row": "base"}}}
    text = report.markdown(doc)
    lines = text.splitlines()
    assert lines.index(next(ln for ln in lines if ln.startswith("| base"))) < lines.index(next(ln for ln in lines if ln.startswith("| raw")))
    assert "1/28 = 3.6 %" in text and "| raw | 90.0 | 45.0 | 80.0 | 30.0 | 50.0 |" in text and "0.61 | 0.70 | 12 |" in text
    assert "50.0 (40.0–60.0; 70/140)" in text and "| raw | – | – | – | pass |" in text


def test_light_angle_reads_yale_b_names_and_subsets_follow_it(bench_modules):
    import math

    yd = importlib.import_module("benchmarks.pu.yale")
    assert yd.light_angle("yaleB01/yaleB01_P00A+000E+00.pgm") == 0.0
    # acos(cos 35° · cos 15°) = 37.9°: subset 3; (+85°, +20°) = 85.3°: subset 5.
    assert abs(yd.light_angle("yaleB02_P00A+035E+15.pgm") - math.degrees(math.acos(math.cos(math.radians(35)) * math.cos(math.radians(15))))) < 1e-9
    assert 50 < yd.light_angle("yaleB02_P00A-085E+20.pgm") and yd.light_angle("yaleB02_P00_Ambient.pgm") == math.inf
    import torch

    names = ["a/x_P00A+000E+00.pgm", "a/x_P00A+060E+00.pgm", "b/y_P00A-010E-20.pgm", "b/y_P00_Ambient.pgm"]
    faces = importlib.import_module("pfd.data.faceset").TensorFaces(
        torch.arange(4.0).view(4, 1, 1, 1).expand(4, 3, 2, 2).contiguous(), [0, 0, 1, 1], identities=["a", "b"], names=names)
    lit = yd.moderate_light(faces)
    assert [lit.name(i) for i in range(len(lit))] == [names[0], names[2]]
    assert float(lit.load(1)[0, 0, 0]) == 2.0


def test_rescore_bounds_the_membership_p_exactly_and_widens_clustered_links(bench_modules):
    """The stored-row re-score: exact Mann-Whitney tail, and `base` (never saw the private people) not flagged."""
    import json

    import numpy as np
    from scipy.stats import mannwhitneyu

    _, report = bench_modules
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=28) + 0.4, rng.normal(size=10)
    auc = float((a[:, None] > b[None, :]).mean())
    assert report.mann_whitney_tail(auc, 28, 10) == pytest.approx(
        mannwhitneyu(a, b, alternative="greater", method="exact").pvalue, rel=1e-9)
    doc = json.loads((BENCH / "results" / "privacy_utility_v1.json").read_text())  # the v1 protocol's rows
    base = report.rescore_membership(doc["rows"]["base"]["membership"])
    # Its oriented AUC 0.71 was "LEAKS" under the old rule; a priori members are looser (AUC 0.29).
    assert doc["rows"]["base"]["membership"]["best_single"]["auc"] > 0.7
    assert base["verdict"] == "≈ chance" and base["p_lower_bound"] > 0.05
    # A planted member/non-member split far in the tail is not called chance.
    strong = {"counts": {"members": 28, "nonmembers": 10},
              "statistics": {"pair_cos": {"auc_a_priori": 0.95}}, "fusion": {}}
    assert report.rescore_membership(strong)["verdict"].startswith("undetermined")
    # Linkability: 0/140 with K = 5 is 0/28 effective trials, so no longer "below chance" 1/28.
    link = report.rescore_link({"rate": 0.0, "n": 140, "count": 0, "ci95": [0.0, 0.026], "chance": 1 / 28}, 5)
    assert link["n_eff"] == 28 and link["ci95"][1] == pytest.approx(1 - 0.025 ** (1 / 28)) and link["verdict"] == "≈ chance"


def test_ablation_variants_change_only_their_settings_and_the_table_counts_links(bench_modules):
    pu = importlib.import_module("benchmarks.pu.settings")
    abl = importlib.import_module("benchmarks.pu.ablation")
    base = abl.variant_settings("default")
    assert base["seeds"] == 1 and base["rta"] == pu.SETTINGS["rta"] and "method" not in base
    raw4 = abl.variant_settings("raw-ipc4")
    assert raw4["rta"]["ipc"] == 4 and raw4["method"] == "raw" and raw4["ogp"] == pu.SETTINGS["ogp"]
    assert pu.SETTINGS["rta"]["ipc"] != 4  # the merge copied, it did not write into the benchmark's settings
    assert len({pu.settings_hash(abl.variant_settings(n)) for n in abl.VARIANTS}) == len(abl.VARIANTS)
    diff = {"diff": 0.01, "ci95": [-0.005, 0.02]}
    links = {f"proxies/public/{a}": {"rate": 0.02, "chance": 1 / 72, "ci95": [0.0, 0.08], "above_chance": False}
             for a in ("vismatch", "reid")}
    links["reconstructions/insider/reid"] = {"rate": 0.3, "chance": 1 / 72, "ci95": [0.2, 0.4], "above_chance": True}
    summary = {"accuracy": diff, "tar@far=0.01": diff, "links": links, "below_margin": 0.97, "seconds": 12.0,
               "membership": {"pair_cos": {"diff": 0.02}, "proto_ce": {"diff": -0.01}}}
    row = next(ln for ln in abl.markdown({"variants": {"ipc1": {"summary": summary}}}).splitlines() if ln.startswith("| ipc1"))
    assert "+1.0 (-0.5, +2.0)" in row and "| 1 | 30.0 (1.4) reconstructions/insider/reid |" in row and "+0.020" in row


def test_target_ablation_variants_start_from_the_target_protocol(bench_modules):
    pu = importlib.import_module("benchmarks.pu.settings")
    abl = importlib.import_module("benchmarks.pu.ablation")
    base = abl.variant_settings("default", "target")
    assert base["public_model"] == pu.TARGET["public_model"] and base["rta"]["ipc"] == 10 and "row_seeds" not in base
    ds2 = abl.variant_settings("ds2-raw", "target")
    assert ds2["downstream"] == dict(pu.TARGET["downstream"], epochs=2) and ds2["reuse"] == "ds2"
    assert ds2["rta"] == pu.TARGET["rta"] and pu.TARGET["downstream"]["epochs"] == 1
    half = abl.variant_settings("half-pfd", "target")
    assert half["downstream"]["public_images"] == 1200 and half["method"] == "pfd"
    names = list(abl.TARGET_VARIANTS)
    assert len({pu.settings_hash(abl.variant_settings(n, "target")) for n in names}) == len(names)
    row = abl.markdown({"protocol": "target", "variants": {}}).splitlines()[0]
    assert "surveillance (target protocol" in row


def test_merge_joins_scenarios_run_in_parallel_and_refuses_other_settings(bench_modules, tmp_path):
    import json

    runner = importlib.import_module("benchmarks.pu.runner")
    key = "k" * 16
    a = {"version": 2, "settings_hash": key, "settings": {"seeds": 3}, "scenarios": {"celeba": {"units": {"base/seed0": {}}, "rows": {}}},
         "public_model": {"verification_curve": {"celeba": []}}}
    b = {"version": 2, "settings_hash": key, "settings": {"seeds": 3}, "last_run_s": 60.0,
         "scenarios": {"yaleb": {"units": {"base/seed0": {}, "raw/seed0": {}}, "rows": {}}},
         "public_model": {"verification_curve": {"yaleb": [{"step": 1, "accuracy": 0.5}]}}}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert runner.merge_results(tmp_path / "a.json", tmp_path / "b.json", key) == 0
    merged = json.loads((tmp_path / "a.json").read_text())
    assert set(merged["scenarios"]) == {"celeba", "yaleb"} and len(merged["scenarios"]["yaleb"]["units"]) == 2
    assert merged["public_model"]["verification_curve"]["yaleb"][0]["accuracy"] == 0.5
    assert "### yaleb" in (tmp_path / "a.md").read_text()
    b["settings_hash"] = "other"
    (tmp_path / "b.json").write_text(json.dumps(b))
    with pytest.raises(SystemExit, match="other settings"):
        runner.merge_results(tmp_path / "a.json", tmp_path / "b.json", key)


def test_cached_public_model_is_reused_from_a_moved_work_dir_but_not_with_other_settings(bench_modules, tmp_path, monkeypatch):
    from pfd.config import TrainConfig, build_config, config_to_dict

    runner = importlib.import_module("benchmarks.pu.runner")
    cfg = build_config(TrainConfig, {"epochs": 3, "out": str(tmp_path / "new" / "public-x")})
    stored = {"train": {**config_to_dict(cfg), "out": "/elsewhere/public-x"}}
    (tmp_path / "model.pt").write_bytes(b"x")
    monkeypatch.setattr(runner, "load_checkpoint", lambda path: {"config": stored})
    assert runner._same_training(tmp_path / "model.pt", cfg)
    stored["train"]["epochs"] = 4
    assert not runner._same_training(tmp_path / "model.pt", cfg)
    assert not runner._same_training(tmp_path / "absent.pt", cfg)


def test_units_group_by_scenario_and_seed_costliest_first(bench_modules):
    runner = importlib.import_module("benchmarks.pu.runner")
    todo = {"yaleb": [("base", 0), ("raw", 0), ("pfd", 0), ("raw", 1)], "celeba": [("raw", 0), ("pfd", 0), ("raw", 1), ("pfd", 1)]}
    groups = runner.unit_groups(todo, cost={"celeba": 3.0, "yaleb": 1.0})
    assert [(sc, seed) for sc, seed, _ in groups] == [("celeba", 0), ("celeba", 1), ("yaleb", 0), ("yaleb", 1)]
    assert groups[0][2] == ["raw", "pfd"] and groups[2][2] == ["base", "raw", "pfd"]  # row order kept in a group
    # Every unit lands in exactly one group.
    assert sorted((sc, n, s) for sc, s, names in groups for n in names) == sorted(
        (sc, n, s) for sc, units in todo.items() for n, s in units)
    # Without costs the group with more units starts first.
    assert runner.unit_groups(todo)[0][:2] == ("yaleb", 0)


def test_shards_of_an_interrupted_run_are_read_back_only_with_the_same_settings(bench_modules, tmp_path):
    import json

    runner = importlib.import_module("benchmarks.pu.runner")
    (tmp_path / "shards").mkdir()
    write = lambda name, doc: (tmp_path / "shards" / name).write_text(json.dumps(doc))  # noqa: E731
    write("celeba-seed0.json", {"settings_hash": "k", "scenario": "celeba", "units": {"raw/seed0": {"a": 1}},
                                "curve": [{"step": 1}], "data": {"private": {"images": 9}}})
    write("celeba-seed1.json", {"settings_hash": "k", "scenario": "celeba", "units": {"raw/seed1": {"a": 2}}, "curve": None})
    write("yaleb-seed0.json", {"settings_hash": "old", "scenario": "yaleb", "units": {"raw/seed0": {}}})
    (tmp_path / "shards" / "junk.json").write_text("{not json")
    got = runner.read_shards(tmp_path / "shards", "k")
    assert set(got) == {"celeba"} and set(got["celeba"]["units"]) == {"raw/seed0", "raw/seed1"}
    assert got["celeba"]["curve"] == [{"step": 1}] and got["celeba"]["data"] == {"private": {"images": 9}}
    assert runner.shard_path(tmp_path, "dp-pix ε=10", 2).name == "dp-pix-eps10-seed2.json"


# -- issue 27: the privacy-utility runner on a publisher's own data ---------------------------------


@pytest.mark.parametrize("private, message", [
    ("/nonexistent-private", "--private /nonexistent-private: /nonexistent-private: no such file or folder"),
    ("synthetic:private,ids=abc", "ids='abc' is not an integer"),
    ("synthetic:test,ids=4,imgs=3,size=32", "given as both the private and the test people"),
])
def test_a_bad_private_set_is_one_line_before_any_work(bench_modules, tmp_path, capsys, private, message):
    pu, _ = bench_modules
    argv = ["--quick", "--private", private, "--test", "synthetic:test,ids=4,imgs=3,size=32", "--work", str(tmp_path / "w")]
    assert pu.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "w").exists()


def test_seeds_caps_every_row_and_the_table_says_what_ran(bench_modules):
    settings = importlib.import_module("benchmarks.pu.settings")
    table = importlib.import_module("benchmarks.pu.table")
    s = settings.protocol_settings("target")
    capped = settings.apply_seeds(s, 1)
    assert all(len(settings.row_seeds(n, capped)) == 1 for n in ("public-ft", "raw", "pfd", "blur"))
    assert len(settings.row_seeds("raw", settings.apply_seeds(s, 5))) == 3  # the protocol's own count stays
    sdoc = {"units": {"base/seed0": {}, "pfd/seed0": {}, "pfd/seed1": {}, "raw/seed0": {}}}
    assert table._seeds_text(sdoc, ["base", "public-ft", "raw", "pfd"]) == "base 1, raw 1, pfd 2"
    assert table._pts({"diff": None, "ci95": [None, None]}) == "–"  # TAR@1e-2 of a test set too small to resolve it


def test_lint_findings_are_counted_by_kind(bench_modules):
    _, report = bench_modules
    assert report._lint_text({}) == "pass" and report._lint_text(["private-image"] * 3) == "private-image x3"
    assert report._lint_text({"link": 1, "private-image": 300}) == "link x1, private-image x300"


def test_a_screen_pairs_each_variant_with_the_pfd_default_and_leaves_out_membership_and_reconstructions(bench_modules):
    """Issue 35: --screen, utility and linkability only, paired against the pfd default of the same seed."""
    from types import SimpleNamespace

    import numpy as np

    from pfd.card.stats import identity_bootstrap_weights

    abl = importlib.import_module("benchmarks.pu.ablation")
    s = abl.variant_settings("delink", "target", screen=True)
    assert s["mia"]["enabled"] is False and s["recon"]["seeds"] == 0 and s["rta"]["lambda_delink"] == 10.0
    assert abl.variant_settings("delink", "target")["mia"].get("enabled", True)  # the full unit keeps them
    assert abl.variant_settings("paper", "target")["rta"]["lambda_delink"] == 0.0
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(40), 10)  # 400 pairs of 40 people
    y = np.tile([True, False], 200)
    left, right = ids, ids
    bench = SimpleNamespace(s={"eval": {"folds": 10}}, pairs={"all": SimpleNamespace(issame=y)},
                            weights={"all": identity_bootstrap_weights(left, right, replicates=200, seed=0)})
    default = np.where(y, 0.6, 0.4) + rng.normal(0, 0.15, 400)
    better = np.where(y, 0.7, 0.3) + rng.normal(0, 0.15, 400)
    unit = {"distill": {}, "times_s": {"total": 3.0}}
    ref = {"public_ft_scores": default, "default_scores": default}
    out = abl.summarise(bench, unit, ref, better)
    v = out["vs_default"]["accuracy"]
    assert v["diff"] > 0 and v["ci95"][0] > 0 and out["membership"] == {}
    same = abl.summarise(bench, unit, ref, default)["vs_default"]["accuracy"]
    assert same["diff"] == 0 and same["ci95"] == [0.0, 0.0]
    doc = {"protocol": "target", "screen": True, "variants": {"delink": {"summary": {**out, "links": {}, "seconds": 3.0}}}}
    row = next(ln for ln in abl.markdown(doc).splitlines() if ln.startswith("| delink"))
    assert f"{100 * v['diff']:+.1f} ({100 * v['ci95'][0]:+.1f}, {100 * v['ci95'][1]:+.1f})" in row and "a screen" in abl.markdown(doc)
    # The screen's verdict column is the one audit's (a screen has no membership audit to show).
    audited = {**unit, "audit": {"verdict": {"publishable": False, "leaks": ["VisMatch (proxies) by public"],
                                             "failed_checks": [], "version": 2, "largest_rate_over_chance": 9.4}}}
    out = abl.summarise(bench, audited, ref, better)
    assert out["audit"]["publishable"] is False and out["audit"]["leaks"] == ["VisMatch (proxies) by public"]
    doc["variants"]["delink"]["summary"] = {**out, "links": {}, "seconds": 3.0}
    text = abl.markdown(doc)
    assert "| audit |" in text and "ΔAUC" not in text and "refused: VisMatch (proxies) by public |" in text
    # A refusal through the rule-out alone names its rows too (it printed "refused: " and nothing).
    unresolved = {**unit, "audit": {"verdict": {"publishable": False, "leaks": [], "failed_checks": [], "version": 2,
                                                "unresolved": ["Rank-last Re-ID (proxies) by public"]}}}
    doc["variants"]["delink"]["summary"] = {**abl.summarise(bench, unresolved, ref, better), "links": {}, "seconds": 3.0}
    assert "refused: Rank-last Re-ID (proxies) by public (unresolved) |" in abl.markdown(doc)


def test_finished_units_and_their_scores_are_committed_so_a_fresh_machine_continues_without_rerunning(bench_modules, tmp_path, capsys):
    """Issue 35: the table accrues unit by unit under results/units/, and a fresh work dir needs no model to continue."""
    import json

    pu, _ = bench_modules
    res = tmp_path / "res"
    argv = ["--quick", "--private", "synthetic:private,ids=6,imgs=4,size=32", "--test", "synthetic:test,ids=6,imgs=4,size=32",
            "--rows", "base", "public-ft", "--seeds", "1", "--threads", "1", "--no-progress", "--results", str(res)]
    assert pu.main(argv + ["--work", str(tmp_path / "w1")]) == 0
    (units,) = (res / "units").iterdir()
    shard = json.loads((units / "synthetic-custom-seed0.json").read_text())
    assert set(shard["units"]) == {"base/seed0", "public-ft/seed0"}
    assert (units / "synthetic-custom" / "public-ft" / "seed0" / "all.npy").is_file()  # the paired bootstrap's input
    table = json.loads((res / "privacy_utility_target.json").read_text())
    row = table["scenarios"]["synthetic-custom"]["rows"]["public-ft"]
    capsys.readouterr()
    # A fresh machine: another work dir, and the table lost (a run killed before its merge): the
    # committed shards give every unit back and the scores its summary, without training a model.
    (res / "privacy_utility_target.json").unlink()
    fresh = tmp_path / "w2"
    assert pu.main(argv + ["--work", str(fresh)]) == 0
    assert not list(fresh.rglob("*.pt"))  # nothing trained or rebuilt
    again = json.loads((res / "privacy_utility_target.json").read_text())["scenarios"]["synthetic-custom"]
    assert set(again["units"]) == {"base/seed0", "public-ft/seed0"}
    assert again["rows"]["public-ft"]["utility"] == row["utility"]  # recomputed from the committed scores
    capsys.readouterr()
    assert pu.main(argv + ["--work", str(fresh), "--summarise"]) == 0  # re-summarised from a work dir with no model
    assert "| public-ft |" in capsys.readouterr().out and not list(fresh.rglob("*.pt"))
    summary = json.loads((res / "privacy_utility_target.json").read_text())["scenarios"]["synthetic-custom"]["rows"]
    assert summary["public-ft"]["utility"] == row["utility"]
    # A second seed that an earlier run finished stays in the summary of a later --seeds 1 run
    # (a copy of seed 0 as seed 1: both seeds' scores are equal, so the gain is unchanged).
    import shutil

    shard["units"]["public-ft/seed1"] = shard["units"]["public-ft/seed0"]
    (units / "synthetic-custom-seed0.json").write_text(json.dumps(shard))
    shutil.copytree(units / "synthetic-custom" / "public-ft" / "seed0", units / "synthetic-custom" / "public-ft" / "seed1")
    assert pu.main(argv + ["--work", str(fresh), "--summarise"]) == 0
    summary = json.loads((res / "privacy_utility_target.json").read_text())["scenarios"]["synthetic-custom"]["rows"]
    assert summary["public-ft"]["seeds"] == [0, 1]
