"""Progress bars only on a terminal and only when asked; a log line otherwise."""

from __future__ import annotations

import io
import logging

from pfd.progress import PROGRESS_LOGGER, progress_bar, show_progress, stage_line


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_need_a_terminal_and_consent():
    assert show_progress(True, stream=_Tty()) is True
    assert show_progress(None, stream=_Tty()) is True
    assert show_progress(False, stream=_Tty()) is False  # --no-progress
    assert show_progress(True, stream=io.StringIO()) is False  # CI, nohup, a pipe
    assert show_progress(True, stream=object()) is False  # no isatty at all


def test_without_a_terminal_a_loop_leaves_one_log_line(caplog):
    """pytest's stderr is not a terminal: the bar is the silent stand-in."""
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        bar = progress_bar(range(5), enabled=True, desc="RTA")
        assert list(bar) == [0, 1, 2, 3, 4]
        with progress_bar(total=3, desc="train", enabled=True) as manual:
            for _ in range(3):
                manual.update(1)
                manual.set_postfix(loss="0.5")
        stage_line("adapt", 2.5)
        stage_line("public", 0.0, skipped=True)
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert len(lines) == 4
    assert lines[0].startswith("RTA: 5/5 done") and lines[1].startswith("train: 3/3 done") and "loss=0.5" in lines[1]
    assert lines[2] == "stage adapt: done in 2.5 s" and lines[3] == "stage public: skipped (already done)"
    assert "\r" not in "".join(lines)
