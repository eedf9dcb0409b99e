"""A progress line on stderr, drawn by rich: redrawn in place on a terminal, silent elsewhere.

rich does what a hand-drawn ``\\r`` line did not: it cuts the line to the
terminal's width (a wrapped line cannot be redrawn in place), redraws it on its
own clock (so an elapsed time moves on while a long compile is silent, with no
thread of ours), and keeps what the command prints meanwhile above the line.
Imported only by the commands that show progress (``warm``, ``export``, ``import``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.text import Text

#: Redraws per second: often enough for a clock, rarely enough to cost nothing.
_REFRESH_PER_SECOND = 4


class StatusLine:
    """One line of progress on stderr while the block runs, when stderr is a terminal.

    The line shows `describe()`, asked at every redraw, or the last text given to
    :meth:`show`. In CI logs (no terminal) it draws nothing: commands print
    milestones there. Erased when the block ends.
    """

    def __init__(self, describe: Callable[[], str] | None = None, stream=None):
        self._describe = describe
        self._text = ""
        console = Console(file=stream or sys.stderr)
        self._live = (Live(self, console=console, transient=True, redirect_stdout=True,
                           refresh_per_second=_REFRESH_PER_SECOND)
                      if console.is_terminal else None)

    def show(self, text: str) -> None:
        self._text = text

    def __rich__(self) -> Text:
        text = self._describe() if self._describe is not None else self._text
        return Text(text, no_wrap=True, overflow="ellipsis")

    def __enter__(self) -> StatusLine:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._live is not None:
            self._live.stop()
