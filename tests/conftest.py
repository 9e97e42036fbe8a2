"""Shared test setup: CPU only, few threads, deterministic seeds, a private cache dir."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

# Two cores on CI: keep intra-op threads at 2 so parallel test processes do not thrash.
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def _seed_and_cache(tmp_path_factory, monkeypatch):
    """Seed every RNG and point pfd's model cache at a per-session temp dir."""
    torch.manual_seed(0)
    np.random.seed(0)
    cache = tmp_path_factory.getbasetemp() / "pfd-cache"
    monkeypatch.setenv("PFD_CACHE_DIR", str(cache))
    yield
