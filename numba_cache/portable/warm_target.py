"""Warm the cache with one target, in this process: ``python -m numba_cache.portable.warm_target TARGET``.

The child side of ``numba-cache warm`` (:mod:`numba_cache.portable.warm`). A target is

- a pytest selection (a directory, ``path::test``, or a ``test_*.py`` /
  ``*_test.py`` file), run in-process;
- a Python file, run as ``python FILE`` would;
- ``module:callable``, called without arguments; what it returns may be graphs to
  compile: a PyTensor function, an ``(inputs, outputs)`` pair, or a list or dict
  (name to graph) of them.

PyTensor's default mode is ``NUMBA_CACHE`` meanwhile. numba compiles a kernel at
its function's first call, so after the target ends every graph kernel it built
but never called is compiled here for C-contiguous arrays of its input types (the
usual call), without running it: that is what fills the store. Each graph fails on
its own: the others are still compiled.

Events go to the parent as JSON lines on the original stdout; everything the
target prints goes to stderr. ``{"event": "lookup", "kind", "decision"}`` per
kernel lookup, ``{"event": "failure", "graph", "error"}`` per failure (``graph``
null when the target itself failed; ``details``: the whole message), and last ``{"event": "done", "write_errors"}``.

With ``--verify N`` (``numba-cache verify --recompile``) the first N hits are
recompiled and compared with what the store served (:mod:`numba_cache.kernels.outcomes.collisions`);
``done`` then also holds ``verified`` (hits compared), ``unrecorded`` (hits stored
without an IR digest: nothing to compare) and ``collisions`` (``key``, ``summary``,
``made_under``, ``made_under_summary``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PYTEST_FILE_PREFIX, PYTEST_FILE_SUFFIX = "test_", "_test.py"


def is_pytest_selection(target: str) -> bool:
    """Whether `target` names tests for pytest rather than a file or callable to run."""
    path = Path(target.split("::", 1)[0])
    return (
        "::" in target
        or path.is_dir()
        or (path.suffix == ".py" and (path.name.startswith(PYTEST_FILE_PREFIX)
                                      or path.name.endswith(PYTEST_FILE_SUFFIX)))
    )


def main(target: str, verify: int | None = None) -> int:
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the target's own output must not mix with the events

    def emit(event: str, **fields) -> None:
        channel.write(json.dumps({"event": event, **fields}) + "\n")

    import pytensor

    import numba_cache
    from numba_cache.integration import linker
    from numba_cache.kernels.outcomes.report import observe_lookups

    pytensor.config.mode = numba_cache.numba_cache_mode()
    if verify is not None:
        from numba_cache import settings

        settings.configure(verify_hits=1, verify_hits_limit=verify)
    built: list[tuple[str | None, object, object, dict]] = []
    naming: list[str | None] = [None]
    linker.observe_graph_kernels(
        lambda fgraph, kernel, storage_map: built.append((naming[0], fgraph, kernel, storage_map))
    )

    def fail(graph: str | None, error: BaseException) -> None:
        emit("failure", graph=graph, error=describe_error(error), details=str(error)[:4000])

    held: list | None = None  # the lookups of a compile that may yet fail

    def report(lookup) -> None:
        emit("lookup", kind=lookup.key.kind, decision=lookup.decision)

    def on_lookup(lookup) -> None:
        if held is None:
            report(lookup)
        else:
            held.append(lookup)

    with observe_lookups(on_lookup):
        graphs = []
        try:
            graphs = _graphs(_run(target))
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                emit("failure", graph=None, error=f"it exited with status {exit_.code}", details="")
        except Exception as error:
            fail(None, error)
        for name, graph in graphs:
            naming[0] = name
            try:
                _function_of(graph)
            except Exception as error:
                fail(name, error)
        for name, fgraph, kernel, storage_map in built:
            if kernel.dispatcher.signatures:  # the target called it: compiled already
                continue
            held = []
            try:
                kernel.dispatcher.compile(_signature(fgraph, kernel, storage_map))
            except Exception as error:
                # The graph kernel missed and stored nothing: not "compiled". Its op
                # kernels compiled before the failure were stored, and count.
                held = [lookup for lookup in held if (lookup.key.kind, lookup.decision) != ("graph", "miss")]
                fail(name or _describe_graph(fgraph), error)
            for lookup in held:
                report(lookup)
            held = None
    stats = numba_cache.session_stats()
    verification = {} if verify is None else _verification(stats)
    emit("done", write_errors=stats.get("write_error", 0), **verification)
    channel.close()
    return 0


def _verification(stats) -> dict:
    from numba_cache.kernels.outcomes import collisions

    return {
        "verified": stats.get("verify.same", 0) + stats.get("collision", 0),
        "unrecorded": stats.get("verify.unrecorded", 0),
        "collisions": [
            {"key": found.key.digest, "summary": found.key.summary,
             "made_under": found.made_under.digest, "made_under_summary": found.made_under.summary}
            for found in collisions.found()
        ],
    }


def describe_error(error: BaseException) -> str:
    """The error's type and the first telling line of its message.

    numba opens its messages with one "Failed in nopython mode pipeline" line per
    nested compile; the cause is the first line after them.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    telling = [line for line in lines if not line.startswith("Failed in ")]
    first = (telling or lines or [""])[0]
    return f"{type(error).__name__}: {first[:300]}" if first else type(error).__name__


def _run(target: str):
    if is_pytest_selection(target):
        import pytest

        status = pytest.main([target, "-q", "-p", "no:cacheprovider"])
        if status not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            raise RuntimeError(f"pytest exited with status {int(status)} ({status.name})")
        return None
    from numba_cache.diagnostics.explain import resolve_target

    return resolve_target(target)()


def _graphs(returned) -> list[tuple[str, object]]:
    """The graphs a callable returned, named by their dict key or position."""
    if returned is None:
        return []
    if isinstance(returned, dict):
        return [(str(name), graph) for name, graph in returned.items()]
    if _is_single_graph(returned):
        return [("graph 0", returned)]
    if not isinstance(returned, (list, tuple)):
        raise TypeError(
            f"it returned a {type(returned).__name__}: return PyTensor functions, "
            "(inputs, outputs) pairs, or a list or dict of them (or nothing)"
        )
    return [(f"graph {n}", graph) for n, graph in enumerate(returned)]


def _is_single_graph(value) -> bool:
    from pytensor.compile.executor import Function

    return isinstance(value, Function) or (
        isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], (list, tuple))
    )


def _function_of(graph):
    """A PyTensor function of `graph`, compiled in the default mode (``NUMBA_CACHE``)."""
    import pytensor
    from pytensor.compile.executor import Function

    if isinstance(graph, Function):
        return graph
    if isinstance(graph, tuple) and len(graph) == 2:
        inputs, outputs = graph
        return pytensor.function(list(inputs), outputs)
    raise TypeError(
        f"cannot compile a {type(graph).__name__}: return PyTensor functions, "
        "(inputs, outputs) pairs, or a list or dict of them"
    )


def _signature(fgraph, kernel, storage_map: dict) -> tuple:
    """numba's argument types of a call of `kernel`: the inputs' values where the
    function holds them (shared variables), else C-contiguous arrays of their types."""
    import numba

    values = []
    for variable in fgraph.inputs:
        cell = storage_map.get(variable)
        values.append(cell[0] if cell is not None and cell[0] is not None else _sample(variable))
    return tuple(numba.typeof(value) for value in [*values, *kernel.hidden_values])


def _sample(variable):
    import numpy as np
    from pytensor.scalar import ScalarType
    from pytensor.tensor.type import TensorType

    kind = variable.type
    if isinstance(kind, TensorType):
        return np.zeros(tuple(1 if size is None else size for size in kind.shape), dtype=kind.dtype)
    if isinstance(kind, ScalarType):
        return np.dtype(kind.dtype).type(0)
    raise TypeError(
        f"cannot warm input {variable} of type {kind} without a value: "
        "call the function in the target instead"
    )


def _describe_graph(fgraph) -> str:
    outputs = ", ".join(str(output) for output in fgraph.outputs)
    return f"graph of {outputs[:80]}"


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if len(arguments) == 3 and arguments[0] == "--verify" and arguments[1].isdigit():
        sys.exit(main(arguments[2], verify=int(arguments[1])))
    if len(arguments) != 1:
        sys.exit("usage: python -m numba_cache.portable.warm_target [--verify N] TARGET")
    sys.exit(main(arguments[0]))
