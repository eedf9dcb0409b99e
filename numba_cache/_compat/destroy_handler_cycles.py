"""PyTensor's inplace cycle check, answered by a function of ours while a rewrite is watched.

``DestroyHandler.on_validate`` asks the module function
``pytensor.graph.destroyhandler._contains_cycle(fgraph, orderings)`` whether a graph
with the orderings its destroyers impose has a cycle. :func:`answered_by` puts a
function of the same signature in its place when the first watched rewrite begins and
puts PyTensor's back when the last one ends (rewrites nest and may run in several
threads), so that outside a watched rewrite PyTensor runs exactly as without
numba_cache. The function must give PyTensor's answer for every graph:
:func:`pytensor_answer` is PyTensor's own check, for the graphs it does not watch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from numba_cache import session
from numba_cache._compat import require, seam


def pytensor_answer(fgraph, orderings: dict) -> bool:
    """PyTensor's own ``_contains_cycle``, whatever is installed in its place."""
    from pytensor.graph import destroyhandler

    replaced = session.current().pytensor_cycle_check
    return (replaced or destroyhandler._contains_cycle)(fgraph, orderings)


@contextmanager
def answered_by(answer: Callable) -> Iterator[None]:
    """Have ``DestroyHandler`` ask ``answer(fgraph, orderings)`` meanwhile."""
    from pytensor.graph import destroyhandler

    state = session.current()
    with state.cycle_check_lock:
        if state.cycle_check_watches == 0:
            state.pytensor_cycle_check = destroyhandler._contains_cycle
            destroyhandler._contains_cycle = answer
        state.cycle_check_watches += 1
    try:
        yield
    finally:
        with state.cycle_check_lock:
            state.cycle_check_watches -= 1
            if state.cycle_check_watches == 0:
                destroyhandler._contains_cycle = state.pytensor_cycle_check
                state.pytensor_cycle_check = None


@seam("DestroyHandler's _contains_cycle", "pytensor", ("3.3",), "rewritten/cycle_check.py")
def check() -> None:
    from pytensor.graph import destroyhandler

    require(list(inspect.signature(destroyhandler._contains_cycle).parameters)
            == ["fgraph", "orderings"], "_contains_cycle no longer takes (fgraph, orderings)")
    source = inspect.getsource(destroyhandler.DestroyHandler.on_validate)
    require("_contains_cycle(fgraph, ords)" in source and "self.orderings(fgraph" in source,
            "DestroyHandler.on_validate no longer asks _contains_cycle of its orderings")
