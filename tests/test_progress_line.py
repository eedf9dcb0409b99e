"""The progress line of ``warm``/``export``/``import``: drawn on a terminal only, within its width."""

from __future__ import annotations

import io
import re
import time

from numba_cache.cli.progress import StatusLine


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_redrawn_on_its_own_clock_cut_to_width_then_erased(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    terminal, calls = Terminal(), []

    def describe() -> str:
        calls.append(time.monotonic())
        return f"[{len(calls)}] " + "x" * 100

    with StatusLine(describe, stream=terminal):
        time.sleep(2.0)  # 8 redraws due at 4 a second; 3 is enough, under load too
    drawn = terminal.getvalue()
    assert len(calls) >= 3  # redrawn while nothing was reported
    visible = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line)
               for line in drawn.replace("\r", "\n").split("\n")]
    drawn_lines = [line for line in visible if line.startswith("[")]
    assert len(drawn_lines) >= 3 and all(len(line) <= 40 for line in drawn_lines), drawn_lines
    assert visible[-1] == "" and drawn.endswith("\x1b[2K")  # erased when the block ends


def test_elsewhere_it_draws_nothing():
    log = io.StringIO()
    with StatusLine(lambda: "progress", stream=log) as status:
        status.show("more progress")
        time.sleep(0.3)
    assert log.getvalue() == ""
