"""Progress bars that switch themselves off where nobody watches them.

Every tqdm bar in pfd is made by :func:`progress_bar`: it is shown only when the caller asks for
progress (``--no-progress`` says no) *and* stderr is a terminal. Under CI, ``nohup`` or a pipe a
bar would fill the log with thousands of carriage-return updates; there a loop logs a line
(logger ``pfd.progress``, which the CLI shows at INFO by default) at every tenth of its length but
at most one per :data:`MIN_GAP` seconds, at least one per :data:`HEARTBEAT` seconds while it moves
(``RTA: 96/240 (40%), 1.9 it/s, ETA 1m15s``), and one when it ends; every stage of ``pfd distill``
logs one line through :func:`stage_line`.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Iterable, Iterator

__all__ = ["show_progress", "progress_bar", "stage_line", "step_line", "PROGRESS_LOGGER"]

PROGRESS_LOGGER = "pfd.progress"
log = logging.getLogger(PROGRESS_LOGGER)
#: A silent bar logs at least one line per this many seconds while it moves ...
HEARTBEAT = 30.0
#: ... and a line at a tenth of its length only when this many seconds passed since the last one.
MIN_GAP = 10.0
_now = time.perf_counter  # the clock (tests replace it)


def _duration(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``12s``."""
    s = int(round(max(seconds, 0.0)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def show_progress(requested: bool | None = True, *, stream: Any = None) -> bool:
    """Whether to draw a bar: asked for (``None`` counts as yes) and ``stream`` (stderr) is a terminal."""
    if requested is not None and not requested:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced stream
        return False


class _Quiet:
    """tqdm's interface, drawing nothing; logs one line when closed (if it had a description)."""

    def __init__(self, iterable: Iterable[Any] | None, desc: str | None, total: int | None, initial: int,
                 unit: str = "it") -> None:
        self.iterable = iterable
        self.unit = unit
        self.desc = desc
        self.n = initial
        self.total = total
        self.initial = initial
        self.t0 = self.last = _now()
        self.next_tenth = 1
        self.postfix: dict[str, Any] = {}
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        for item in self.iterable if self.iterable is not None else ():
            yield item
            self.update(1)
        self.close()

    def _tick(self) -> None:
        """Log a progress line when a tenth is crossed (not too soon after the last) or the heartbeat is due."""
        if not self.desc:
            return
        t = _now()
        tenth = self.total and self.n * 10 >= self.next_tenth * self.total
        if self.total and self.n >= self.total:
            return  # close() says it
        if (tenth and t - self.last >= MIN_GAP) or t - self.last >= HEARTBEAT:
            self.last = t
            done = self.n - self.initial
            rate = done / max(t - self.t0, 1e-9)
            pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
            eta = f", ETA {_duration((self.total - self.n) / rate)}" if self.total and rate > 0 else ""
            log.info("%s: %d%s%s, %.3g %s/s%s", self.desc, self.n, f"/{self.total}" if self.total else "", pct, rate,
                     self.unit, eta)
        if self.total:
            while self.n * 10 >= self.next_tenth * self.total:
                self.next_tenth += 1

    def __len__(self) -> int:
        return len(self.iterable) if self.iterable is not None else int(self.total or 0)  # type: ignore[arg-type]

    def __enter__(self) -> "_Quiet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._tick()

    def set_postfix(self, *args: Any, **kw: Any) -> None:
        if args and isinstance(args[0], dict):
            kw = {**args[0], **kw}
        self.postfix = kw

    def set_postfix_str(self, s: str = "", *args: Any, **kw: Any) -> None:
        self.postfix = {"": s} if s else {}

    def set_description(self, desc: str | None = None, *args: Any, **kw: Any) -> None:
        self.desc = desc

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.desc:
            extra = " ".join(f"{k}={v}" if k else str(v) for k, v in self.postfix.items())
            log.info("%s: %d%s done in %.1f s%s", self.desc, self.n, f"/{self.total}" if self.total else "",
                     _now() - self.t0, f" ({extra})" if extra else "")


def progress_bar(iterable: Iterable[Any] | None = None, *, enabled: bool | None = True, desc: str | None = None,
                 total: int | None = None, initial: int = 0, **kw: Any) -> Any:
    """A tqdm bar when :func:`show_progress` allows it, else a silent stand-in with the same methods.

    Args:
        iterable: What to iterate (or ``None`` and ``total`` for a manual bar).
        enabled: The caller's wish (``--progress/--no-progress``, main process only).
        desc: Label; a silent bar logs ``"<desc>: n/total done in t s"`` at INFO when closed.
        total: Number of steps of a manual bar.
        initial: Steps already done (resume).
        **kw: More tqdm options (``unit``, ``leave``, ``dynamic_ncols``...).

    Returns:
        A ``tqdm`` instance or the stand-in; both iterate, ``update``, ``set_postfix`` and ``close``.
    """
    if not show_progress(enabled):
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        return _Quiet(iterable, desc, total, initial, unit=str(kw.get("unit", "it")))
    from tqdm.auto import tqdm

    kw.pop("disable", None)
    return tqdm(iterable, desc=desc, total=total, initial=initial, **kw)


def step_line(step: str, seconds: float) -> None:
    """Log the one line a finished step outside the stages leaves in a log (INFO, logger ``pfd.progress``)."""
    log.info("%s: done in %.1f s", step, seconds)


def stage_line(stage: str, seconds: float, *, skipped: bool = False) -> None:
    """Log the one line a finished stage leaves in a log (INFO, logger ``pfd.progress``)."""
    if skipped:
        log.info("stage %s: skipped (already done)", stage)
    else:
        log.info("stage %s: done in %.1f s", stage, seconds)
