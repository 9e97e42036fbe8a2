"""Peak resident memory per stage (pfd.memory)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pfd import memory
from pfd.memory import StagePeaks, peak_rss_bytes


def _touch(nbytes: int) -> np.ndarray:
    return np.ones(nbytes // 8)  # written, so resident


def test_a_stage_peak_is_its_own_not_the_lifetime_peak():
    peaks = StagePeaks()
    if not peaks.resettable:
        pytest.skip("this kernel does not let a process reset its high-water mark (/proc/self/clear_refs)")
    big = _touch(300_000_000)
    del big  # freed (mmap-sized): the peak stays, the resident set drops
    big_gb = peaks.end("big")
    small = _touch(10_000_000)
    small_gb = peaks.end("small")
    del small
    assert big_gb is not None and small_gb is not None
    assert big_gb - small_gb > 0.2, (big_gb, small_gb)
    assert peaks.peaks_gb == {"big": big_gb, "small": small_gb}


def test_without_the_kernel_interface_peaks_are_lifetime_and_say_so(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "_CLEAR_REFS", tmp_path / "missing" / "clear_refs")
    peaks = StagePeaks()
    assert not peaks.resettable
    first = peaks.end("a")
    second = peaks.end("b")
    assert first is not None and second is not None and second >= first  # never reset: it only grows
    assert peak_rss_bytes() >= int(second * 1e9) - 10_000_000


def test_unreadable_status_falls_back_to_getrusage(monkeypatch):
    monkeypatch.setattr(memory, "_STATUS", Path("/nonexistent/status"))
    peak = peak_rss_bytes()
    assert peak is not None and peak > 10_000_000  # a Python process with numpy holds more than 10 MB


def _rss() -> float:
    import re

    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024


def test_release_free_memory_hands_back_what_the_tuned_heap_keeps():
    from pfd.allocator import release_free_memory, tune_allocator

    if not tune_allocator().startswith("glibc") or not Path("/proc/self/status").is_file():
        pytest.skip("glibc on Linux only")
    blocks = [_touch(4_000_000) for _ in range(150)]  # 600 MB in 4 MB blocks: below the mmap threshold, on the heap
    del blocks
    kept = _rss()  # freed, but under the 1 GiB trim threshold: still resident
    assert release_free_memory()
    assert kept - _rss() > 0.3e9, (kept, _rss())
