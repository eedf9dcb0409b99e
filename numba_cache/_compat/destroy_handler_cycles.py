"""PyTensor's inplace cycle check, answered by a function of ours while a rewrite is watched.

``DestroyHandler.on_validate`` asks the module function
``pytensor.graph.destroyhandler._contains_cycle(fgraph, orderings)`` whether a graph
with the orderings its destroyers impose has a cycle. :func:`answered_by` puts a
function of the same signature in its place while a watched rewrite runs
(:mod:`.counted_patch`). The function must give PyTensor's answer for every graph:
:func:`pytensor_answer` is PyTensor's own check, for the graphs it does not watch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from numba_cache import session
from numba_cache._compat import require, seam


def pytensor_answer(fgraph, orderings: dict) -> bool:
    """PyTensor's own ``_contains_cycle``, whatever is installed in its place."""
    from pytensor.graph import destroyhandler

    return (session.current().cycle_check_patch.saved or destroyhandler._contains_cycle)(
        fgraph, orderings)


def answered_by(answer: Callable):
    """Have ``DestroyHandler`` ask ``answer(fgraph, orderings)`` meanwhile (a context manager)."""
    from pytensor.graph import destroyhandler

    def install():
        original, destroyhandler._contains_cycle = destroyhandler._contains_cycle, answer
        return original

    def remove(original) -> None:
        destroyhandler._contains_cycle = original

    return session.current().cycle_check_patch.applied(install, remove)


@seam("DestroyHandler's _contains_cycle", "pytensor", ("3.3",), "rewritten/cycle_check.py")
def check() -> None:
    from pytensor.graph import destroyhandler

    require(list(inspect.signature(destroyhandler._contains_cycle).parameters)
            == ["fgraph", "orderings"], "_contains_cycle no longer takes (fgraph, orderings)")
    source = inspect.getsource(destroyhandler.DestroyHandler.on_validate)
    require("_contains_cycle(fgraph, ords)" in source and "self.orderings(fgraph" in source,
            "DestroyHandler.on_validate no longer asks _contains_cycle of its orderings")
