"""The peak memory of a process's descendants, sampled from another process.

numba_cache's cold compile forks a helper; the C modes run a C compiler. Their
resident sets count the pages a forked child shares with its parent, so the
figure here is the memory they add: the pages only they map (``Private_Clean`` +
``Private_Dirty`` of ``/proc/<pid>/smaps_rollup``), summed over the descendants
alive at each sample, at its largest. A sampler thread in the measured process
would stop the helper from being forked (numba_cache forks only beside one Python
thread): the sampling runs in a process of its own.

Usage (by :func:`watch`): python descendants_memory.py PID; stops at end of input
and prints the peak in bytes. Linux only: elsewhere :func:`watch` gives None.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
from pathlib import Path

#: Seconds between samples: a helper lives for seconds and grows as it compiles.
INTERVAL = 0.02


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return [int(child) for task in tasks
                for child in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return []


def _descendants(pid: int, exclude: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        for child in _children(pending.pop()):
            if child != exclude:
                found.append(child)
                pending.append(child)
    return found


def _private_bytes(pid: int) -> int:
    total = 0
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            field, *value = line.split()
            if field in ("Private_Clean:", "Private_Dirty:"):
                total += int(value[0]) * 1024
    return total


def _sample(pid: int) -> int:
    peak, me = 0, os.getpid()
    while not select.select([sys.stdin], [], [], INTERVAL)[0]:
        peak = max(peak, sum(_private_bytes(child) for child in _descendants(pid, me)))
    return peak


@contextlib.contextmanager
def watch():
    """Sample this process's descendants while the block runs; yields a dict whose
    ``peak_bytes`` is set at the end (None where ``/proc`` has no such figures)."""
    result = {"peak_bytes": None}
    if not Path(f"/proc/{os.getpid()}/smaps_rollup").exists():
        yield result
        return
    sampler = subprocess.Popen([sys.executable, __file__, str(os.getpid())],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield result
    finally:
        output, _ = sampler.communicate("")
        with contextlib.suppress(ValueError):
            result["peak_bytes"] = int(output)


if __name__ == "__main__":
    print(_sample(int(sys.argv[1])), flush=True)
