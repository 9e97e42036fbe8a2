"""Adding an attack is one module and one registration (issue 52).

A toy attack registered here, and nowhere else, is run by the gate (``audit_in_memory``), by
``pfd attack`` (its row in report.json, its sections in report.md and report.html), by ``pfd card``
(its row and its page section on the card, its refusal), by the null simulation (its rows decide
simulated audits) and by the benchmarks' tables (``benchmarks.redecide``, the privacy-utility link columns); it gets a ``pfd attack``
option from its config. When it finds a leak, every one of them refuses for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from pfd.audit.contract import (CHECKS, AuditInputs, Check, CheckResult, check_options, load_checks, option,
                                register_check, summary_row)
from pfd.release.format import to_uint8
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)

pytestmark = [pytest.mark.usefixtures("one_thread")]

ROW = "Toy (proxies)"


@dataclass
class ToyConfig:
    """``toy``: a test whose p-value the test sets (1: at chance; tiny: a leak)."""

    p: float = option(1.0, help="The toy test's p-value.", flag="--toy-p")

    def check(self) -> None:
        if not 0 < self.p <= 1:
            raise ValueError("attack.toy.p must be in (0, 1]")


@dataclass
class ToyResult(CheckResult):
    tests: list[dict[str, Any]]

    def sections(self) -> dict[str, Any]:  # one figure per attacker, shaped as the link figures are
        return {"toy": [{**t, "toy": {"rate": t["mean_cos"], "chance": 0.0}} for t in self.tests]}

    def rows(self) -> list[dict[str, Any]]:
        return [summary_row(ROW, t["attacker"], t["mean_cos"], 0.0, None, "score", test_p=t["p"]) for t in self.tests]

    def markdown(self) -> list[str]:
        return ["", "## Toy attack", "", "The mean cosine of each proxy to its source's photos."]


class ToyAttack(Check):
    name, title, config, flag_prefix = "toy", "Toy attack", ToyConfig, "toy"
    embeddings_only, rows_per_attacker = True, 1
    calls = 0

    @classmethod
    def page(cls, data: dict[str, Any]) -> list[str]:
        return ["<h2>Toy attack</h2>", f"<p>{len(data.get('toy') or [])} toy tests</p>"]

    def applicable(self, inputs: AuditInputs) -> str | None:
        return None

    def run(self, inputs: AuditInputs) -> ToyResult:
        type(self).calls += 1
        tests = []
        for a in inputs.attackers:
            e = inputs.embeddings(a)
            first = np.array([np.flatnonzero(inputs.labels == c)[0] for c in inputs.source])
            own = e["private"][first]  # (q, D): one photo of each proxy's source
            tests.append({"attacker": a.role, "mean_cos": float((e["proxies"] * own).sum(1).mean()), "p": self.cfg.p})
        return ToyResult(tests)


@pytest.fixture
def toy():
    import pfd.audit.engine  # noqa: F401 - the pass/fail checks and (load_checks) the built-in attacks first

    load_checks()
    register_check(ToyAttack)
    ToyAttack.calls = 0
    try:
        yield ToyAttack
    finally:
        CHECKS.pop("toy")


def test_the_toy_gets_its_option_and_runs_after_the_built_in_attacks(toy):
    from pfd.audit.contract import ordered_checks

    names = [cls.name for cls in ordered_checks()]
    assert names[-1] == "toy" and names.index("integrity") < names.index("linkability")
    assert [o.flag for o in check_options() if o.attack == "toy"] == ["--toy-p"]


def test_the_null_simulation_runs_the_toy_and_its_rows_decide(toy, monkeypatch):
    from pfd.attacks.null import simulate

    calm = simulate(24, 5, draws=2, attackers=1, sigma=0.5, seed=1)
    assert toy.calls == 2 and calm.refused == 0
    monkeypatch.setattr(ToyConfig, "__init__", _with_p(ToyConfig.__init__, 1e-12))
    leak = simulate(24, 5, draws=2, attackers=1, sigma=0.5, seed=1)
    assert leak.refused == 2 and leak.by_row.get(f"{ROW} by insider") == 2


def _with_p(init, p):
    def patched(self, *a, **k):
        init(self, *a, **k)
        self.p = p
    return patched


@pytest.mark.slow
def test_the_gate_pfd_attack_the_card_and_a_benchmark_table_run_the_toy(toy, tmp_path):
    from benchmarks.pu.units import link_layout
    from benchmarks.redecide import redecide
    from pfd.audit.engine import audit_in_memory
    from pfd.card.build import make_card
    from pfd.cli import main
    from pfd.config import AttackConfig, build_config
    from tests.attack_world import PRIVATE, build_world
    from tests.audit.test_engine import NO_RECON_NO_ATTRS, _layout
    from tests.card.conftest import card_config

    world = build_world(str(tmp_path.parent / "attack-world"))
    idx = np.flatnonzero(np.arange(len(world.private)) % 10 < 1)
    images, source = world.private.images[idx], np.asarray(world.private.labels[idx])
    release, state = _layout(tmp_path, world, images, source)
    attacks = {**NO_RECON_NO_ATTRS, "toy": {"p": 1e-12}}

    gate = audit_in_memory(build_config(AttackConfig, {"attacks": attacks}, {"private": PRIVATE, "state_dir": str(state)}),
                           proxies=to_uint8(images).transpose(0, 3, 1, 2), source=source, private=world.private,
                           state_dir=state, method="raw", label_seed=0)
    assert {f"{ROW} by {role}" for role in ("public", "insider")} <= {r.label for r in gate.verdict.refusals}

    # Its [attack.toy] recipe table (its --toy-p flag exists only where the CLI was read after it registered).
    recipe = tmp_path / "toy.toml"
    recipe.write_text("[attack.toy]\np = 1e-12\n")
    res = CliRunner().invoke(main, ["attack", "--release", str(release), "--state-dir", str(state), "--no-reconstruct",
                                    "--no-attributes", "--recipe", str(recipe), "--report", str(tmp_path / "report")])
    assert res.exit_code == 3, res.output
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [t["attacker"] for t in report["toy"]] == ["public", "insider"]
    assert f"{ROW} by public" in report["verdict"]["text"] or any(r["attack"] == ROW and r["family"] == "leaks"
                                                                   for r in report["summary"])
    assert "## Toy attack" in (tmp_path / "report" / "report.md").read_text()
    assert "<h2>Toy attack</h2>\n<p>2 toy tests</p>" in (tmp_path / "report" / "report.html").read_text()

    card = make_card(card_config(release, state, tmp_path / "card", attack=attacks), progress=False)
    rows = card.data["privacy"]["summary"]  # JSON, as card.json holds it
    assert any(r["attack"] == ROW and r["family"] == "leaks" for r in rows)
    assert ROW in (tmp_path / "card" / "card.md").read_text()
    assert "<h2>Toy attack</h2>\n<p>2 toy tests</p>" in (tmp_path / "card" / "card.html").read_text()

    table = redecide(rows, people=20)  # the benchmark's table of re-decided releases
    assert f"{ROW} by public" in table["refusals"]
    figures = link_layout(report)["linkability"]["proxies"]  # the privacy-utility table's link columns
    assert figures["insider"]["toy"]["rate"] == report["toy"][1]["mean_cos"]
