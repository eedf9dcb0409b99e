"""The helper building linked graph kernels for one process (:mod:`.linked_build`).

A new interpreter, started by :mod:`.linked_build` (through :mod:`.interpreter`);
each line of its input names a job file, read and deleted. A job holds that process's settings and PyTensor flags, its
environment fingerprint, the graph (inputs and outputs), the numba signature and
the linked key to build. The helper compiles the graph as that process would
under ``link_op_kernels`` (its op kernels loaded from the store, linked in) and
stores it only if it computes the same fingerprint and key: a graph that pickled
to something else, a numba setting changed in Python that the helper does not
have, cost only its time. Each build's end releases its claim in the store,
with the reason if it failed. Its lookups are not counted in the store (they are
not the user's); what it did is, as ``linking:built`` and ``linking:failed``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

#: How much lower than the helped process's the helper's priority is (``nice``).
_NICENESS = 10


def main(argv: list[str], lines) -> None:
    """Build the job of each file named by `lines` (the helper's input, :mod:`.interpreter`),
    until it ends."""
    from numba_cache import session

    with contextlib.suppress(OSError, AttributeError):  # no os.nice off POSIX
        os.nice(_NICENESS)
    session.current().become_helper()
    for line in lines:
        if line.strip():
            with contextlib.suppress(Exception):  # one job's fault is not the next one's
                _build_job(Path(line.strip().decode()))


def _build_job(path: Path) -> None:
    import cloudpickle

    from numba_cache.kernels.outcomes import report
    from numba_cache.kernels.context import adopt_state

    try:
        job = cloudpickle.loads(path.read_bytes())
    finally:
        path.unlink(missing_ok=True)
    context = adopt_state(job, link_op_kernels=True, link_in_background=False,
                          compile_ahead=False)
    fingerprint, key = job["fingerprint"], job["key"]
    try:
        failure = _build(context, job)
    except Exception as exc:  # told in the claim, for `numba-cache` to show
        failure = f"the build raised {exc!r}"
    context.store.release_linking(fingerprint, key, failure)
    counter = "linking:built" if failure is None else "linking:failed"
    context.store.count(fingerprint, counter, 1)
    if failure is not None:
        report.logger.debug("linked build of %s failed: %s", key[:12], failure)


def _build(context, job: dict) -> str | None:
    """Compile and store the job's linked graph kernel; why not, if it was not."""
    from pytensor.graph.fg import FunctionGraph

    from numba_cache._compat import numba_internals
    from numba_cache.kernels.assembly.graph_kernel import graph_kernel
    from numba_cache.keys.order import restored_order

    if not context.enabled:
        return "the cache is off in the helper"
    if context.fingerprint.digest != job["fingerprint"]:
        return "the helper's environment fingerprint differs from its process's"
    fgraph = FunctionGraph(job["inputs"], job["outputs"], clone=False)
    kernel = graph_kernel(fgraph, context, order=restored_order(fgraph, job["order"]))
    cache = numba_internals.dispatcher_cache(kernel.dispatcher)
    if cache.key.digest != job["key"]:
        return "the graph has another key in the helper"
    kernel.dispatcher.compile(job["signature"])
    if cache.verdict is not None:
        return f"uncacheable: {cache.verdict.reason}"
    if not context.store.has(job["fingerprint"], job["key"]):
        return "compiled, but not stored"
    return None
