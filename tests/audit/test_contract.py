"""The audit contract's small parts: the per-stage clock every check times its work with."""

from __future__ import annotations

import time

import pytest

from pfd.audit.contract import Clock
from pfd.errors import PfdError


def test_a_stage_adds_the_seconds_of_each_block_also_when_it_raises():
    clock = Clock()
    with clock.stage("load"):
        time.sleep(0.02)
    first = clock.seconds["load"]
    assert first >= 0.02
    with pytest.raises(PfdError):  # a check that refuses still shows where its time went
        with clock.stage("load"):
            time.sleep(0.02)
            raise PfdError("bad input")
    assert clock.seconds["load"] >= first + 0.02
    with clock.stage("embed"):
        pass
    assert set(clock.seconds) == {"load", "embed"} and clock.seconds["embed"] < clock.seconds["load"]
