"""Human forms of sizes, times and tables."""

from __future__ import annotations

import time
from collections.abc import Sequence

_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_size(size: int) -> str:
    """``512 B``, ``56.8 KiB``, ``2.0 GiB``: powers of 1024."""
    value = float(size)
    for unit in _SIZE_UNITS:
        if value < 1024 or unit == _SIZE_UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_age(moment: float, now: float | None = None) -> str:
    """How long ago `moment` (a time.time() value) was: ``12s ago``, ``5m ago``, ``3d ago``."""
    seconds = max(0.0, (time.time() if now is None else now) - moment)
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds // length:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def human_time(moment: float) -> str:
    """A local date and time, and how long ago it was."""
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(moment))} ({human_age(moment)})"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[str] = ()) -> str:
    """Rows aligned in columns under `headers`; the columns named in `right` align right.

    The last column is not padded, so that a long summary does not widen the table.
    """
    widths = [max(len(str(row[n])) for row in [headers, *rows]) for n in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = []
        for n, (header, cell) in enumerate(zip(headers, row)):
            if n == len(headers) - 1:
                cells.append(str(cell))
            elif header in right:
                cells.append(str(cell).rjust(widths[n]))
            else:
                cells.append(str(cell).ljust(widths[n]))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def plural(count: int, noun: str) -> str:
    """``1 entry``, ``2 entries``, ``0 hits``."""
    if count == 1:
        return f"{count} {noun}"
    if noun.endswith("y") and not noun.endswith(("ay", "ey", "oy", "uy")):
        return f"{count} {noun[:-1]}ies"
    if noun.endswith(("s", "sh", "ch", "x")):
        return f"{count} {noun}es"
    return f"{count} {noun}s"


def elapsed(seconds: float) -> str:
    """``0:07``, ``12:34``, ``1:02:03``."""
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
