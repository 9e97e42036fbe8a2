"""Peak resident memory per stage: what a run needs, reported next to its time.

A laptop user deciding whether a run fits, and a benchmark holding a unit to a memory target,
both need the peak of each stage, not the process's lifetime peak (``ru_maxrss`` only grows).
Linux resets the high-water mark of a process's resident set when ``5`` is written to
``/proc/self/clear_refs`` (since Linux 4.0) and reports it as ``VmHWM`` in ``/proc/self/status``;
:class:`StagePeaks` reads it at the end of each stage and resets it for the next. Where either file
is missing or not writable (another OS, a locked-down container) it falls back to the lifetime
peak from :func:`resource.getrusage`, and says so (``resettable`` is ``False``): a stage's figure is
then an upper bound that includes every earlier stage.

With :func:`pfd.allocator.tune_allocator` freed memory stays mapped for reuse; :meth:`StagePeaks.end`
hands it back (:func:`pfd.allocator.release_free_memory`) before the next stage starts, so that a
stage's peak is not stacked on what an earlier one freed (the gate's audit after RTA: 7.0 GB
before, measured on the benchmark's illumination unit).

A side effect to know: the kernel's reset also resets the figure ``getrusage`` and GNU ``time -v``
report as the *maximum* resident size, so after a run that used :class:`StagePeaks` they show the
last stage's peak; read the run's own figures (``memory_gb`` in ``summary.json``) instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pfd.allocator import release_free_memory

__all__ = ["peak_rss_bytes", "reset_peak", "StagePeaks"]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def peak_rss_bytes() -> int | None:
    """The process's resident-set high-water mark in bytes (since the last :func:`reset_peak`).

    Returns:
        ``VmHWM`` on Linux, else the lifetime peak of :func:`resource.getrusage`; ``None`` when
        neither is available (Windows).
    """
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, kB elsewhere


def reset_peak() -> bool:
    """Reset the high-water mark to the current resident size (Linux ``clear_refs``).

    Returns:
        Whether it was reset; ``False`` where the kernel interface is missing or not writable.
    """
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


class StagePeaks:
    """Peak resident memory of consecutive stages of one process.

    Usage: construct at the start of the first stage, call :meth:`end` as each stage finishes.

    Attributes:
        peaks_gb: Peak of each finished stage in GB (10⁹ bytes), in order; a stage whose peak
            could not be read is absent.
        resettable: Whether each peak is the stage's own (``False``: lifetime peaks so far).
    """

    def __init__(self) -> None:
        self.peaks_gb: dict[str, float] = {}
        self.resettable = reset_peak()

    def end(self, stage: str) -> float | None:
        """Record ``stage``'s peak, return the heap's free memory to the kernel, and start the next stage's.

        Args:
            stage: The stage that just finished (a later call with the same name keeps the larger).

        Returns:
            Its peak in GB, or ``None`` when it cannot be read.
        """
        peak = peak_rss_bytes()
        if peak is None:
            return None
        gb = round(peak / 1e9, 2)
        if not self.resettable and self.peaks_gb:
            # A lifetime peak only grows; VmHWM read through the kernel's batched per-CPU counters can come
            # back a few MB lower than a reading before it (seen: 1.58 then 1.57 GB), which is noise.
            gb = max(gb, *self.peaks_gb.values())
        self.peaks_gb[stage] = max(gb, self.peaks_gb.get(stage, 0.0))
        release_free_memory()  # what this stage freed is not the next stage's
        self.resettable = reset_peak() and self.resettable
        return gb
