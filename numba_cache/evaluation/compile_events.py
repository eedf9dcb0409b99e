"""Counting numba compilations with numba's event API (for tests, demo, benchmarks, and the
summary of a test run: :mod:`numba_cache.pytest_plugin`)."""

from __future__ import annotations

import contextlib
import threading
import time

from numba.core import event


class _CompileCounter(event.Listener):
    def __init__(self):
        self.names: list[str] = []

    def on_start(self, ev):
        self.names.append(ev.data["dispatcher"].py_func.__qualname__)

    def on_end(self, ev):
        pass


@contextlib.contextmanager
def count_numba_compiles():
    """Yield a list that collects the names of the functions numba compiles meanwhile."""
    counter = _CompileCounter()
    with event.install_listener("numba:compile", counter):
        yield counter.names


class CompileTimer(event.Listener):
    """Counts numba's compiles in this process, and the time spent in the outermost ones.

    A compile compiles what it calls inside its own event: timing only the outermost
    counts each second once. numba compiles under its global lock, so one thread at a
    time is inside; the depth is per thread all the same, in case that ever changes.
    """

    def __init__(self):
        self.compiles = 0
        self.seconds = 0.0
        self._local = threading.local()

    def on_start(self, ev):
        self.compiles += 1
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._local.started = time.perf_counter()
        self._local.depth = depth + 1

    def on_end(self, ev):
        self._local.depth -= 1
        if self._local.depth == 0:
            self.seconds += time.perf_counter() - self._local.started

    def start(self) -> None:
        event.register("numba:compile", self)

    def stop(self) -> None:
        event.unregister("numba:compile", self)
