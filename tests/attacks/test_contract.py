"""The attack contract, checked on every registered attack (scikit-learn's ``test_common`` pattern).

A new attack that registers itself is run by these tests without any edit here: its config builds
from defaults and checks itself, its options reach ``pfd attack``, and on a small world it either
says why it cannot run or returns a result whose rows carry a chance level, an interval or a
p-value and a verdict, whose report sections are strict JSON and whose markdown is text.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

import pfd.audit.engine  # noqa: F401 - registers the pass/fail checks; the attacks come through load_checks
from pfd.audit.contract import CHECKS, CheckResult, check_options, load_checks, ordered_checks
from pfd.audit.rows import AuditRow
from pfd.audit.engine import attack_configs, run_scorecard
from pfd.cli import main
from pfd.config import AttackConfig, build_config
from pfd.errors import PfdError
from pfd.io import jsonable
from tests.attack_world import HOLDOUT, PRIVATE, SIZE, build_world, make_release
from tests.distill_stubs import one_thread  # noqa: F401 (fixture)

pytestmark = [pytest.mark.usefixtures("one_thread")]

VERDICTS = {"LEAKS", "≈ chance", "below chance", "inconclusive", "unresolved", "passed", "FAILED"}


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    """One scorecard with every registered attack switched on, on cheap settings."""
    world = build_world(str(tmp_path_factory.getbasetemp() / "attack-world"))
    root = tmp_path_factory.mktemp("contract")
    idx = np.flatnonzero(np.arange(len(world.private)) % 10 < 2)  # a raw release: K = 2 photos per person
    release, state = root / "release", root / "state"
    make_release(release, state, world.private.images[idx], world.private.labels[idx], world.private.identities)
    shutil.copy(world.lowres, state / "public_model.pt")
    shutil.copy(world.insider, state / "adapted.pt")
    (state / "config.toml").write_text(f'[distill]\nprivate = "{PRIVATE}"\nmethod = "raw"\n')
    cfg = build_config(AttackConfig, {
        "release": str(release), "state_dir": str(state), "report": str(root / "report"),
        "reconstruction": {"iterations": 3, "batch_size": 20, "limit": 10},
        "attributes": {"permutations": 5000}, "source_rank": {"permutations": 5000},
        "membership": {"public": f"synthetic:public,ids=10,imgs=4,size={SIZE}", "holdout": HOLDOUT, "permutations": 5000,
                       "downstream": {"max_steps": 4, "batch_size": 16, "width": 0.125}},
    })
    return run_scorecard(cfg, progress=False)


@pytest.mark.parametrize("name", list(load_checks()))
def test_config_builds_from_defaults_and_checks_itself(name):
    cls = CHECKS[name]
    assert cls.name == name and cls.title and dataclasses.is_dataclass(cls.config)
    cfg = build_config(cls.config, {})  # every field has a default, and the defaults pass the checks
    for f in dataclasses.fields(cls.config):
        assert f.metadata.get("help"), f"{name}.{f.name} has no help text"
    with pytest.raises(PfdError, match="unknown setting"):
        build_config(cls.config, {"no_such_setting": 1})
    assert cls(cfg).cfg is cfg


def test_every_option_reaches_pfd_attack_once():
    flags = [o.flag for o in check_options()]
    assert len(flags) == len(set(flags))
    help_text = CliRunner().invoke(main, ["attack", "--help"], terminal_width=200).output
    for o in check_options():
        assert o.flag in help_text, o.flag
    with pytest.raises(PfdError, match=r"\[attack.no_such_attack\]: no such attack"):
        attack_configs(AttackConfig(attacks={"no_such_attack": {}}))


@pytest.mark.parametrize("name", list(load_checks()))
def test_each_attack_ran_or_said_why_and_its_result_renders_itself(card, name):
    if name not in card.results:
        why = card.data["skipped"][name]
        assert isinstance(why, str) and why, name
        return
    result = card.results[name]
    assert isinstance(result, CheckResult)
    rows = result.rows()
    assert rows, f"{name} ran but reports no row"
    for r in rows:
        assert isinstance(r, AuditRow) and r.verdict in VERDICTS and 0.0 <= r.chance <= 1.0
        if r.kind == "check":  # a pass/fail check: what it found, in one line
            assert isinstance(r.passed, bool) and r.detail and r.check == name, r
            continue
        assert r.ci95 is not None or r.p is not None, r  # an interval, or a test's p-value
        if r.ci95 is not None:
            assert r.ci95[0] <= r.ci95[1]
        assert AuditRow.from_dict(json.loads(json.dumps(jsonable(r.as_dict())))) == r  # the JSON round trip
    json.dumps(jsonable(result.sections()), allow_nan=False)
    assert all(isinstance(line, str) for line in result.markdown())
    assert set(result.sections()) <= set(card.data)  # its sections are in the report


def test_the_summary_is_every_result_in_registry_order(card):
    order = [cls.name for cls in ordered_checks() if cls.name in card.results]  # the checks, then the attacks
    key = lambda r: (r.attack, r.attacker, r.value)  # noqa: E731 - the rows' verdicts are the audit's
    assert [key(r) for r in card.rows] == [key(row) for name in order for row in card.results[name].rows()]
    # On these inputs every attack applies; only the checks of a run these inputs lack (no OGP, no judge) skip.
    assert set(card.data["skipped"]) <= {"ogp_margin", "judge_competence"}, card.data["skipped"]
    assert all(r.family in ("passed", "failed", "leaks", "unresolved") for r in card.rows if r.gates
               and r.verdict != "inconclusive")


def test_the_class_level_section_says_how_tight_the_classes_are(card):
    """Each attacker's class-level entry carries the spread of the released classes and of the private photos."""
    entries = card.data["class_link"]
    assert entries and {e["attacker"] for e in entries} >= {"public", "insider"}
    for e in entries:
        for part in ("proxies", "private"):
            s = e["spread"][part]
            assert 0.0 < s["excess"] <= 1.0 and s["sigma"] >= 0.0 and s["classes"] > 1
    assert "sigma" in "\n".join(card.results["class_link"].markdown())
