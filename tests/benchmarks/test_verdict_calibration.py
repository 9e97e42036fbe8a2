"""The verdict-calibration benchmark (issue 57): its grid, its resumable records and its goals."""

from __future__ import annotations

import json

import pytest

from benchmarks import verdict_calibration as cal


def test_the_grid_has_every_cell_the_issue_asks_for_with_its_draws():
    g = cal.grid()
    keys = {(c["n_ids"], c["k"], c["sigma"], c["leak"]) for c in g}
    assert len(keys) == len(g) == 140
    for c in g:
        if c["leak"] == "null":
            need = 600 if c["n_ids"] <= 72 else 50 if c["n_ids"] == 300 else 20 if c["n_ids"] == 1000 else 5
            assert c["draws"] >= need, c
        assert c["k"] == 10 or c["n_ids"] <= 72
    assert {c["n_ids"] for c in g} == {24, 72, 300, 1000, 10_000}
    # At 10^4 (hours a cell) the goals' cells come first: every null, then the linked shares.
    big = [c["leak"].split("-")[0] for c in g if c["n_ids"] == 10_000]
    assert big == ["null"] * 4 + ["linked"] * 8 + ["times"] * 8
    assert cal.planted("linked-10", 72) == 0.1 and cal.planted("times-3", 72) == 2 / 72 and cal.planted("null", 9) == 0


def test_a_cell_is_recorded_once_and_the_summary_states_the_goals(tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "grid", lambda **kw: [{"n_ids": 12, "k": 3, "sigma": 0.05, "leak": "null", "draws": 3},
                                                   {"n_ids": 12, "k": 3, "sigma": 0.05, "leak": "linked-10", "draws": 2}])
    out = tmp_path / "cal"
    assert cal.main(["--out", str(out)]) == 0
    lines = out.with_suffix(".jsonl").read_text().splitlines()
    assert len(lines) == 2
    cal.main(["--out", str(out)])  # resumable: nothing runs again
    assert len(out.with_suffix(".jsonl").read_text().splitlines()) == 2
    doc = json.loads(out.with_suffix(".json").read_text())
    cells = {c["leak"]: c for c in doc["cells"]}
    assert {"n_ids", "k", "sigma", "leak", "draws", "refused"} <= set(cells["null"])
    assert cells["null"]["draws"] == 3 and 0 <= cells["null"]["refused"] <= 3
    md = out.with_suffix(".md").read_text()
    assert "| 12 | 3 | 0.05 |" in md and "null refusals" in md and out.with_suffix(".png").stat().st_size > 1000


def test_a_cell_recorded_with_fewer_draws_is_topped_up_with_draws_of_its_own(tmp_path, monkeypatch):
    cell = {"n_ids": 12, "k": 3, "sigma": 0.05, "leak": "null", "draws": 2}
    monkeypatch.setattr(cal, "grid", lambda **kw: [dict(cell)])
    out = tmp_path / "cal"
    cal.main(["--out", str(out)])
    monkeypatch.setattr(cal, "grid", lambda **kw: [{**cell, "draws": 5}])
    cal.main(["--out", str(out)])
    first, pooled = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert pooled["draws"] == 5 and len(pooled["seeds"]) == 2 and pooled["seeds"][0] == first["seed"] != pooled["seeds"][1]
    extra = cal.simulate(12, 3, draws=3, sigma=0.05, seed=pooled["seeds"][1])
    assert pooled["refused"] == first["refused"] + extra.refused
    assert cal.main(["--out", str(out)]) == 0 and len(out.with_suffix(".jsonl").read_text().splitlines()) == 2


def test_a_large_cell_is_recorded_draw_by_draw_and_pooled(tmp_path, monkeypatch):
    """A draw at N 10^4 takes minutes: each is recorded as it lands, so a kill loses one draw, not the cell."""
    cell = {"n_ids": 12, "k": 3, "sigma": 0.05, "leak": "null", "draws": 3}
    monkeypatch.setattr(cal, "grid", lambda **kw: [dict(cell)])
    monkeypatch.setattr(cal, "PART_FROM", 12)
    out = tmp_path / "cal"
    cal.main(["--out", str(out)])
    parts = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert [p["draws"] for p in parts] == [1, 2, 3] and len(set(parts[-1]["seeds"])) == 3
    singles = [cal.simulate(12, 3, draws=1, sigma=0.05, seed=s).refused for s in parts[-1]["seeds"]]
    assert parts[-1]["refused"] == sum(singles)
    assert cal.main(["--out", str(out)]) == 0 and len(out.with_suffix(".jsonl").read_text().splitlines()) == 3


def test_shards_split_the_grid_into_disjoint_parts_that_cover_it():
    g = cal.grid()
    parts = [cal.shard(g, f"{i}/3") for i in range(3)]
    keys = [cal._key(c) for part in parts for c in part]
    assert sorted(keys) == sorted(cal._key(c) for c in g) and len(set(keys)) == len(g)
    assert cal.shard(g, "0/1") == g


def test_a_real_release_is_placed_on_the_grid_by_its_measured_spread(tmp_path):
    """--real reads the class-level section an audit writes and lists each model's sigma beside the grid."""
    from types import SimpleNamespace

    import numpy as np
    import torch

    from pfd.attacks.linkability.attacks import ClassLinkAttack, ClassLinkConfig
    from pfd.attacks.null import _view
    from pfd.audit.contract import AuditInputs
    from pfd.io import jsonable

    n, k, imgs = 40, 5, 6
    models = [SimpleNamespace(role=r, distance="cosine") for r in ("public", "insider")]
    inputs = AuditInputs(cfg=SimpleNamespace(seed=0), state=None, sets=None, attackers=models,
                         source=np.repeat(np.arange(n), k), labels=np.repeat(np.arange(n), imgs),
                         private_spec="simulated", progress=False)
    gen = torch.Generator().manual_seed(0)
    for m, sigma in zip(models, (0.05, 0.5)):
        inputs._emb[m.role] = _view(gen, n, k, imgs, 64, sigma, 0.0, torch.zeros(n, dtype=torch.bool))
    report = tmp_path / "report.json"
    report.write_text(json.dumps(jsonable(ClassLinkAttack(ClassLinkConfig(permutations=200)).run(inputs).sections())))
    stem = tmp_path / "cal"
    assert cal.main(["--out", str(stem), "--real", f"sim={report}"]) == 0
    real = json.loads(cal.real_path(stem).read_text())["sim"]
    assert real["n_ids"] == n and [m["attacker"] for m in real["models"]] == ["public", "insider"]
    got = {m["attacker"]: m["proxies"]["sigma"] for m in real["models"]}
    assert abs(got["public"] - 0.05) < 0.01 and abs(got["insider"] - 0.5) < 0.1
    md = stem.with_suffix(".md").read_text()
    assert "| sim | 40 | public | sigma 0.0" in md and json.loads(stem.with_suffix(".json").read_text())["real"]["sim"]
    bad = tmp_path / "old.json"
    bad.write_text(json.dumps({"class_link": [{"attacker": "public", "identities": n}]}))
    with pytest.raises(SystemExit, match="no class spreads"):
        cal.main(["--out", str(stem), "--real", f"old={bad}"])
