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
    doc = {"ids": 1000, "k": 10, "images": 20000, "proxies": 10000, "exit": 0, "invocations": 2, "invocations_timed": 1,
           "wall_s": 3600.0, "stages_s": {"adapt": 600.0, "rta": 2400.0}, "memory_gb": {"adapt": 1.5},
           "verdict": {"text": "publishable: no figure leaks", "version": 3}, "threads": 2, "cpu": "x", "cores": 2,
           "date": "today"}
    page = das.markdown(doc)
    assert "| adapt | 600 | 1.50 |" in page and "| rta | 2400 |  |" in page
    assert "publishable: no figure leaks (audit version 3)" in page and "1.00 h over 1 timed of 2 invocation" in page
    assert "fail (family-wise)" not in page
    rows = [{"attack": "Source rank uniform (proxies): mean rank", "attacker": "public", "value": 0.4512, "chance": 0.5,
             "ci95": [0.44, 0.46], "p": 5e-05, "family": "leaks"},
            {"attack": "Rank-1 Re-ID (proxies)", "attacker": "public", "value": 0.001, "chance": 0.001,
             "ci95": [0.0, 0.004], "p": 0.6, "family": "passed"}]
    page = das.markdown({**doc, "rows": rows})
    assert "| Source rank uniform (proxies): mean rank | public | 0.451 | 0.5 | 0.44 to 0.46 | 5e-05 |" in page
    assert "Rank-1 Re-ID (proxies) |" not in page  # only the figures that fail are listed


def test_stage_times_add_up_over_invocations_with_the_batches_of_one_that_ended_inside_rta(das):
    """A resumed pfd distill reports only its own stages (the skipped ones at 0 s): the page adds up
    every invocation's lines, counting the batches of an invocation killed inside RTA."""
    first = ("INFO pfd.progress: copy check of the initialisation pool (10000 photos against 20000 private ones): "
             "done in 2220.0 s\nINFO pfd.progress: stage public: done in 83.4 s\n"
             "INFO pfd.progress: stage adapt: done in 417.9 s\nINFO pfd.progress: RTA batch 0: 0/240 done in 105.4 s\n"
             "INFO pfd.progress: RTA batch 1: 0/240 done in 109.1 s\n")
    second = ("INFO pfd.progress: stage public: skipped (already done)\nINFO pfd.progress: RTA batch 2: 0/240 done in "
              "100.0 s\nINFO pfd.progress: stage rta: done in 130.0 s\nINFO pfd.progress: stage release: done in 50.0 s\n")
    t = das.stage_times([first, second])
    assert t == pytest.approx({"pool_check": 2220.0, "public": 83.4, "adapt": 417.9, "rta": 105.4 + 109.1 + 130.0,
                               "release": 50.0})
