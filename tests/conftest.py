"""Shared test setup: CPU only, few threads, deterministic seeds, a private cache dir."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

# One intra-op thread: the tests use tiny models, where OpenMP fan-out costs more than it gains,
# and on a loaded 2-core machine two spinning threads per process made training steps ~15x slower.
# PFD_TEST_THREADS=2 runs the suite with two, to find tests whose trained quantities sit on a knife
# edge that the thread count (and so the float summation order) decides.
torch.set_num_threads(int(os.environ.get("PFD_TEST_THREADS", "1")))


@pytest.fixture(autouse=True)
def _seed_and_cache(tmp_path_factory, monkeypatch):
    """Seed every RNG and point pfd's model cache at a per-session temp dir."""
    torch.manual_seed(0)
    np.random.seed(0)
    cache = tmp_path_factory.getbasetemp() / "pfd-cache"
    monkeypatch.setenv("PFD_CACHE_DIR", str(cache))
    yield


#: The repository (a checkout: tests start subprocesses with it on PYTHONPATH) and its benchmarks/ folder.
REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"


@pytest.fixture(scope="session")
def bench() -> Callable[[str], Any]:
    """``bench("scaling")`` imports ``benchmarks.scaling`` (the benchmarks are a package of the checkout)."""
    return lambda name: importlib.import_module(f"benchmarks.{name}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests of a module that share a module-scoped fixture on one xdist worker.

    ``--dist loadgroup`` (pyproject.toml) otherwise spreads a module's tests over both workers, and
    each worker builds the module's fixtures again: a module's finished distillation runs (the
    pipeline tests' ``runs``, ``folder_run``) were computed twice per suite. Tests already in a
    group keep it; runs before xdist's own hook, which turns the marks into node ids.
    """
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(d and d[-1].scope == "module" for d in defs.values()):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else item.nodeid))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--demo", action="store_true",
                     help="also run the README's quick start end to end (tests marked demo: about 6 min on 2 idle cores)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    # The full quick start is the acceptance check of the demo (issue 33), too long for CI's budget
    # (a reduced-size pipeline does not show the gain); it runs by hand with --demo.
    if item.get_closest_marker("demo") is not None and not item.config.getoption("--demo"):
        pytest.skip("the README's quick start end to end (about 6 min): run pytest --demo tests/cli/test_quickstart.py")
