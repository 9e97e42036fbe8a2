"""The README's quick start end to end, as a new user runs it (issue 33's acceptance check).

Opt in with ``pytest --demo tests/cli/test_quickstart.py`` (about 6 minutes on 2 idle cores, from an
empty model cache, with the default thread count). CI's suite does not run it: a pipeline small
enough for CI's budget (12 people, 120 RTA iterations, 100 test people) showed no gain, +0.1
(-1.0, +0.7), so the gain is checked at the demo's own size, here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.demo


def _pfd(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pfd", *args, "--no-progress"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=3600)


def test_the_quick_start_publishes_what_its_card_calls_publishable_and_is_worth_a_gain(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # the user's default threads
    env["PFD_CACHE_DIR"] = str(tmp_path / "cache")  # an empty cache: the public model and judge are trained here

    distill = _pfd("distill", cwd=tmp_path, env=env)
    assert distill.returncode == 0, distill.stderr[-3000:]
    gate = json.loads((tmp_path / "release" / "manifest.json").read_text())["audit"]
    assert gate["publishable"] is True

    card = _pfd("card", "--recipe", "demo", cwd=tmp_path, env=env)
    assert card.returncode == 0, card.stderr[-3000:]
    doc = json.loads((tmp_path / "card" / "card.json").read_text())
    verdict = doc["verdict"]["privacy"]
    # One audit: the card's verdict is the gate's, over the same figures at the same level.
    assert verdict["publishable"] is True and verdict["failed"] == 0 and not verdict["leaks"]
    assert (verdict["figures"], verdict["level"], verdict["version"]) == (gate["figures"], gate["level"], gate["version"])

    # With margin, so that another CPU's float order cannot flip it: every p at least 10x the
    # per-figure level, every linkage rate within 2.5x chance; the design rules out a share of the 24 people.
    ps = [f["p"] for f in doc["privacy"]["summary"] if f.get("p") is not None]
    assert ps and min(ps) >= 10 * verdict["per_figure"], min(ps)
    assert verdict["largest_rate_over_chance"] <= 2.5
    assert verdict["people"] == 24 and verdict["rules_out_share"] == pytest.approx(0.211, abs=0.002)

    # What pfd is for: the release is worth a gain on held-out people of the private domain.
    gain = doc["utility"]["gain"]["accuracy"]
    assert gain["ci95"][0] > 0, gain
    assert "publishable" in card.stdout and "worth +" in card.stdout
