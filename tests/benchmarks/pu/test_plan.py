"""--plan's cost model (benchmarks/pu/plan.py): every model the run trains is counted (issue 35)."""

from __future__ import annotations

from benchmarks.pu.plan import JUDGE_TRAIN_RATE, PUBLIC_TRAIN_RATE, print_plan


class _Set(list):
    num_classes = 3


def test_the_plan_counts_the_judge_and_the_public_model_unless_they_are_trained_already(capsys):
    """Issue 35: the plan said 2 minutes and the run first trained a judge for about 35."""
    sets = {"pub": _Set(range(600)), "jpub": _Set(range(1200)), "priv": _Set(range(30)), "test": _Set(range(20))}
    settings = {"public_model": {"train": {"data": ["pub"], "epochs": 2}},
                "judge_model": {"train": {"data": ["jpub"], "epochs": 3}},
                "ogp": {"epochs": 1}, "rta": {"ipc": 1, "iterations": 1}, "eval": {"flip": False},
                "downstream": {"epochs": 1, "public_images": 0}, "recon": {"seeds": 0, "per_identity": 0, "iterations": 0},
                "seeds": 1}
    from types import SimpleNamespace

    sc = SimpleNamespace(name="s", private="priv", test="test", public=["pub"], light_subsets=False)
    wall = print_plan(settings, [sc], sets.__getitem__, ["base"])
    public, judge = 2 * 600 / PUBLIC_TRAIN_RATE / 60, 3 * 1200 / JUDGE_TRAIN_RATE / 60
    out = capsys.readouterr().out
    assert "judge model: 3 epochs x 1200 images" in out and "public model: 2 epochs x 600 images" in out
    assert wall >= public + judge and wall - (public + judge) < 1.0  # the units of "base" cost under a minute
    cached = print_plan(settings, [sc], sets.__getitem__, ["base"], cached={"public": True, "judge": True})
    assert abs(cached - (wall - public - judge)) < 1e-9 and "trained already: 0" in capsys.readouterr().out
