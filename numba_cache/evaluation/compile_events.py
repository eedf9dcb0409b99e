"""Counting numba compilations with numba's event API (for tests, demo, benchmarks)."""

from __future__ import annotations

import contextlib

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
