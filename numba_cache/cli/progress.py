"""A progress line on stderr: redrawn in place on a terminal, silent elsewhere."""

from __future__ import annotations

import sys
import time

#: Redraws per second at most: a fast loop must not spend its time printing.
_RATE = 10


class StatusLine:
    """One line of progress on stderr, when stderr is a terminal.

    In CI logs (no terminal) it prints nothing: commands print milestones there.
    """

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self._shown = 0
        self._last = 0.0

    def show(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if not self.live or (not force and now - self._last < 1 / _RATE):
            return
        self._last = now
        self.stream.write("\r" + text.ljust(self._shown))
        self.stream.flush()
        self._shown = len(text)

    def clear(self) -> None:
        """Erase the line, so that the next output starts on a clean line."""
        if self.live and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0


def elapsed(seconds: float) -> str:
    """``0:07``, ``12:34``, ``1:02:03``."""
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
