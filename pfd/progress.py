"""Progress bars that switch themselves off where nobody watches them.

Every tqdm bar in pfd is made by :func:`progress_bar`: it is shown only when the caller asks for
progress (``--no-progress`` says no) *and* stderr is a terminal. Under CI, ``nohup`` or a pipe a
bar would fill the log with thousands of carriage-return updates; there a finished loop logs one
line instead (logger ``pfd.progress``, which the CLI shows at INFO by default) and every stage
of ``pfd distill`` logs one line through :func:`stage_line`.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Iterable, Iterator

__all__ = ["show_progress", "progress_bar", "stage_line", "PROGRESS_LOGGER"]

PROGRESS_LOGGER = "pfd.progress"
log = logging.getLogger(PROGRESS_LOGGER)


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

    def __init__(self, iterable: Iterable[Any] | None, desc: str | None, total: int | None, initial: int) -> None:
        self.iterable = iterable
        self.desc = desc
        self.n = initial
        self.total = total
        self.t0 = time.perf_counter()
        self.postfix: dict[str, Any] = {}
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        for item in self.iterable if self.iterable is not None else ():
            yield item
            self.n += 1
        self.close()

    def __len__(self) -> int:
        return len(self.iterable) if self.iterable is not None else int(self.total or 0)  # type: ignore[arg-type]

    def __enter__(self) -> "_Quiet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n

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
                     time.perf_counter() - self.t0, f" ({extra})" if extra else "")


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
        return _Quiet(iterable, desc, total, initial)
    from tqdm.auto import tqdm

    kw.pop("disable", None)
    return tqdm(iterable, desc=desc, total=total, initial=initial, **kw)


def stage_line(stage: str, seconds: float, *, skipped: bool = False) -> None:
    """Log the one line a finished stage leaves in a log (INFO, logger ``pfd.progress``)."""
    if skipped:
        log.info("stage %s: skipped (already done)", stage)
    else:
        log.info("stage %s: done in %.1f s", stage, seconds)
