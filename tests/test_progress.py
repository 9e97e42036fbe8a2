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


def test_without_a_terminal_a_long_loop_logs_its_progress_every_half_minute(caplog, monkeypatch):
    """A stage of minutes under nohup or CI says how far it is (issue 27): every 10 % when at least
    10 s passed, and at least every 30 s while it moves, with the rate and the time left."""
    import pfd.progress as progress

    clock = [0.0]
    monkeypatch.setattr(progress, "_now", lambda: clock[0])
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        bar = progress_bar(total=200, desc="RTA", enabled=True, unit="it")
        for _ in range(200):
            clock[0] += 1.0  # one iteration a second: 200 s in all
            bar.update(1)
        bar.close()
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert lines[0] == "RTA: 20/200 (10%), 1 it/s, ETA 3m00s"
    assert lines[-1].startswith("RTA: 200/200 done in 200.0 s")
    assert len(lines) == 10  # 9 tenths (each >= 10 s after the last line) and the final one

    # Slow steps: no tenth is crossed for minutes, the heartbeat still speaks every 30 s.
    caplog.clear()
    clock[0] = 0.0
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        bar = progress_bar(total=1000, desc="OGP", enabled=True)
        for _ in range(12):
            clock[0] += 15.0
            bar.update(1)
    beats = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert len(beats) == 6 and beats[0] == "OGP: 2/1000 (0%), 0.0667 it/s, ETA 4h09m"

    # Short loops stay quiet until they end: a tenth within 10 s of the start is not logged.
    caplog.clear()
    clock[0] = 0.0
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        for _ in progress_bar(range(50), desc="embed", enabled=True):
            clock[0] += 0.01
    assert [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER][0].startswith("embed: 50/50 done")
