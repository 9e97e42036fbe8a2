"""benchmarks/distill_at_scale.py: its command line scales the demo with N, and its page reports what it ran
(the run itself takes hours and runs by hand)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def das(bench):
    return bench("distill_at_scale")


def test_the_command_is_the_demo_at_n_identities_with_one_starting_person_per_class(das):
    cmd = das.command(1000, 10, resume=False, threads=2)
    assert cmd[cmd.index("--recipe") + 1] == "demo" and cmd[cmd.index("--ipc") + 1] == "10"
    assert "ids=1000" in cmd[cmd.index("--private") + 1] and "domain=lowres" in cmd[cmd.index("--private") + 1]
    assert "ids=1000" in cmd[cmd.index("--init-data") + 1]
    assert "--resume" not in cmd and "--resume" in das.command(1000, 10, resume=True, threads=2)


def test_the_page_gives_each_stage_and_the_gates_verdict(das):
    doc = {"ids": 1000, "k": 10, "images": 20000, "proxies": 10000, "exit": 0, "invocations": [{"wall_s": 3600.0}],
           "wall_s": 3600.0, "stages_s": {"adapt": 600.0, "rta": 2400.0}, "memory_gb": {"adapt": 1.5},
           "verdict": {"text": "publishable: no figure leaks", "version": 3}, "threads": 2, "cpu": "x", "cores": 2,
           "date": "today"}
    page = das.markdown(doc)
    assert "| adapt | 600 | 1.50 |" in page and "| rta | 2400 |  |" in page
    assert "publishable: no figure leaks (audit version 3)" in page and "1.00 h over 1 invocation" in page
