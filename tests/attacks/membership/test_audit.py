"""Model audits (geometric MIA, dataset MIA) on the tiny trained models, through the CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pfd.attacks.membership.audit import HEAD_MARGINS, format_dataset_table, resolve_head
from pfd.cli import main
from pfd.errors import PfdError
from tests.attack_world import HOLDOUT, LOWRES, OTHER_CANDIDATES, PRIVATE, build_world
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(str(tmp_path_factory.getbasetemp() / "attack-world"))


def _run(*args: str) -> str:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.slow
def test_mia_separates_the_20_training_identities_from_20_held_out_ones(world, tmp_path):
    """Acceptance: PairCos AUC >= 0.8; the fused AUC matches the best single statistic within noise."""
    out = _run("attack", "mia", "--model", str(world.insider), "--members", PRIVATE, "--nonmembers", HOLDOUT,
               "--report", str(tmp_path / "mia"))
    rep = json.loads((tmp_path / "mia" / "membership.json").read_text())
    for name in ("membership_roc.png", "membership_density.png"):
        assert (tmp_path / "mia" / name).stat().st_size > 1000
    stats, fusion = rep["statistics"], rep["fusion"]
    print({k: round(v["auc"], 3) for k, v in stats.items()}, "fused", round(fusion["auc_mean"], 3),
          "best single (CV)", fusion["best_single"])
    assert rep["counts"]["members"] == 20 and rep["counts"]["nonmembers"] == 20
    assert rep["head_source"] == "checkpoint" and rep["config"]["head"] == "arcface"
    assert stats["pair_cos"]["auc"] >= 0.8 and stats["pair_cos"]["direction"] == "higher"
    best = fusion["best_single"]
    noise = 2 * max(fusion["auc_std"], best["auc_std"], 0.025)
    assert fusion["auc_mean"] >= best["auc_mean"] - noise
    assert "PairCos" not in out and "pair_cos" in out and "fused MLP" in out


def test_mia_with_a_reference_model_checks_the_groups_before_training(world, tmp_path):
    """The lowres model trained on neither group: its check is reported beside the verdict, and
    the verdict says LEAKS only when the reference does not already separate the groups."""
    out = _run("attack", "mia", "--model", str(world.insider), "--reference", str(world.lowres), "--members", PRIVATE,
               "--nonmembers", HOLDOUT, "--report", str(tmp_path / "mia"))
    rep = json.loads((tmp_path / "mia" / "membership.json").read_text())
    ref, v = rep["reference"], rep["verdict"]
    assert ref["model"]["path"].endswith(world.lowres.name) and 0 < ref["p"] <= 1
    assert set(ref["aucs_a_priori"]) == {"pair_cos", "vmf_kappa", "pen_logit", "proto_ce"}
    assert v["leaks"] == (v["p"] <= 0.05 and not ref["separates"])
    assert v.get("inconclusive", False) == (v["p"] <= 0.05 and ref["separates"])
    assert ("SEPARATES" if ref["separates"] else "does not separate") in out and "reference" in out
    # The same statistics as the audit without a reference: only the verdict's reading changes.
    plain = json.loads(json.dumps(rep))
    res = CliRunner().invoke(main, ["attack", "mia", "--model", str(world.insider), "--members", PRIVATE,
                                    "--nonmembers", HOLDOUT, "--report", str(tmp_path / "plain")])
    assert res.exit_code == 0, res.output
    alone = json.loads((tmp_path / "plain" / "membership.json").read_text())
    assert alone["verdict"]["p"] == plain["verdict"]["p"] and "reference" not in alone


@pytest.mark.slow
def test_dataset_mia_ranks_the_lowres_training_set_first(world, tmp_path):
    """Acceptance: among 5 synthetic candidate sets the training set has the lowest robust z."""
    cands = [OTHER_CANDIDATES[0], OTHER_CANDIDATES[1], LOWRES, *OTHER_CANDIDATES[2:]]
    out = _run("attack", "dataset", "--model", str(world.lowres), "--candidates", *cands,
               "--report", str(tmp_path / "ds"))
    rows = json.loads((tmp_path / "ds" / "dataset.json").read_text())["ranking"]
    print([(r["name"].split(",domain=")[-1], round(r["z"], 2)) for r in rows])
    assert rows[0]["name"] == LOWRES and rows[0]["rank"] == 1 and len(rows) == 5
    assert rows[0]["z"] < rows[1]["z"]
    assert f"{LOWRES}  <- most likely training set" in out


def test_head_resolution_and_errors(world, tmp_path):
    assert resolve_head(world.insider, None, None, None) == ("arcface", 64.0, 0.5, "checkpoint")
    assert resolve_head(world.insider, "cosface", None, None) == ("cosface", 64.0, HEAD_MARGINS["cosface"], "given")
    assert resolve_head(None, None, 32.0, 0.3) == ("arcface", 32.0, 0.3, "default")
    with pytest.raises(PfdError, match="unknown head"):
        resolve_head(None, "sphereface", None, None)
    res = CliRunner().invoke(main, ["attack", "dataset", "--model", str(world.lowres), "--candidates", PRIVATE, HOLDOUT])
    assert res.exit_code == 2 and "at least 3 candidate datasets" in res.output
    res = CliRunner().invoke(main, ["attack", "mia", "--model", str(tmp_path / "none.pt"), "--members", PRIVATE,
                                    "--nonmembers", HOLDOUT])
    assert res.exit_code == 2 and "none.pt: no such model file" in res.output
    single = "synthetic:test,ids=3,imgs=1,size=32"  # identities with one image: no cluster statistics
    res = CliRunner().invoke(main, ["attack", "mia", "--model", str(world.insider), "--members", PRIVATE,
                                    "--nonmembers", single])
    assert res.exit_code == 2 and "has 1 image(s)" in res.output and len(res.output.strip().splitlines()) == 1


def test_dataset_table_marks_the_most_likely_set():
    rows = [{"rank": 1, "name": "a", "z": -3.0, "x": 0.1, "n": 5}, {"rank": 2, "name": "bb", "z": 0.5, "x": 0.3, "n": 5}]
    lines = format_dataset_table(rows).splitlines()
    assert lines[1].split()[:2] == ["1", "-3.00"] and lines[1].endswith("<- most likely training set")
    assert lines[2].split()[-1] == "bb"
